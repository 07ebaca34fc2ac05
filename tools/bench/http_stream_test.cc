// HTTP response framing (chunked, Content-Length, until close) and SSE line framing on
// canned byte streams, fed whole, byte by byte, and split at every position.
#include "tools/bench/http_stream.h"
#include "common/testing/status_matchers.h"

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace bench {
namespace {

using ::weft::testing::StatusIs;

struct Parsed {
  absl::Status status;
  int code = 0;
  bool done = false;
  std::string body;
  std::vector<std::string> events;  // "event|data|error"
};

// Feeds `pieces` into an HTTP parser whose body goes through an SSE parser.
Parsed Parse(const std::vector<std::string>& pieces, bool eof) {
  Parsed p;
  SseParser sse([&](const SseEvent& e) {
    p.events.push_back(e.event + "|" + e.data + "|" + e.error);
  });
  HttpResponseParser http([&](absl::string_view b) {
    p.body.append(b.data(), b.size());
    sse.Feed(b);
  });
  for (const std::string& piece : pieces) {
    p.status = http.Feed(piece);
    if (!p.status.ok()) break;
  }
  if (p.status.ok() && eof) p.status = http.OnEof();
  if (p.status.ok()) sse.Finish();
  p.code = http.status_code();
  p.done = http.done();
  return p;
}

// All the ways of cutting `bytes`: whole, every single cut, every pair of cuts within
// a window, and one byte at a time. Each must parse identically.
void ExpectSameEverySplit(const std::string& bytes, bool eof, const Parsed& want) {
  auto check = [&](const std::vector<std::string>& pieces, const std::string& how) {
    const Parsed got = Parse(pieces, eof);
    ASSERT_EQ(got.status.ok(), want.status.ok()) << how << ": " << got.status;
    EXPECT_EQ(got.code, want.code) << how;
    EXPECT_EQ(got.body, want.body) << how;
    EXPECT_EQ(got.events, want.events) << how;
  };
  check({bytes}, "whole");
  for (size_t i = 0; i <= bytes.size(); ++i) {
    check({bytes.substr(0, i), bytes.substr(i)}, "cut at " + std::to_string(i));
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (size_t j = i; j < std::min(bytes.size(), i + 9); ++j) {
      check({bytes.substr(0, i), bytes.substr(i, j - i), bytes.substr(j)},
            "cuts at " + std::to_string(i) + "," + std::to_string(j));
    }
  }
  std::vector<std::string> bytewise;
  for (char c : bytes) bytewise.push_back(std::string(1, c));
  check(bytewise, "bytewise");
}

std::string Chunk(const std::string& data, const std::string& ext = "") {
  char size[16];
  std::snprintf(size, sizeof(size), "%zX", data.size());
  return size + ext + "\r\n" + data + "\r\n";
}

// A llama-server-like response: chunk boundaries fall inside SSE lines and between
// the two newlines that end an event.
const std::string kChunkedSse = std::string(
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream\r\n"
    "Transfer-Encoding: chunked\r\n"
    "Keep-Alive: timeout=5\r\n"
    "\r\n") +
    Chunk("data: {\"a\":1}\n") + Chunk("\ndat", ";ext=1") +
    Chunk("a: {\"b\":2}\n\ndata: {\"c\":3}") + Chunk("\n\n:") +
    "0\r\nX-Trailer: 1\r\n\r\n";

TEST(HttpStreamTest, ChunkedSseAtEveryBoundary) {
  Parsed want;
  want.code = 200;
  want.body = "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: {\"c\":3}\n\n:";
  want.events = {"|{\"a\":1}|", "|{\"b\":2}|", "|{\"c\":3}|"};
  const Parsed whole = Parse({kChunkedSse}, /*eof=*/false);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  EXPECT_TRUE(whole.done);
  ExpectSameEverySplit(kChunkedSse, /*eof=*/false, want);
}

TEST(HttpStreamTest, ContentLengthBody) {
  const std::string r =
      "HTTP/1.1 400 Bad Request\r\ncontent-length: 26\r\n\r\n{\"error\":{\"message\":\"x\"}}\n"
      "garbage after the body";
  Parsed want;
  want.code = 400;
  want.body = "{\"error\":{\"message\":\"x\"}}\n";
  // The JSON line is an unknown SSE field: no events.
  ExpectSameEverySplit(r, /*eof=*/false, want);
  EXPECT_TRUE(Parse({r}, false).done);
}

TEST(HttpStreamTest, BodyUntilClose) {
  const std::string r = "HTTP/1.0 200 OK\r\n\r\ndata: x\n\ndata: y";
  Parsed want;
  want.code = 200;
  want.body = "data: x\n\ndata: y";
  want.events = {"|x|", "|y|"};  // the last event has no blank line: Finish() sends it
  ExpectSameEverySplit(r, /*eof=*/true, want);
}

TEST(HttpStreamTest, InterimResponseIsSkipped) {
  const Parsed p = Parse({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
                       false);
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.code, 200);
  EXPECT_EQ(p.body, "ok");
  EXPECT_TRUE(p.done);
}

TEST(HttpStreamTest, TruncatedAndMalformedAreErrors) {
  // Closed in the middle of a chunk.
  Parsed p = Parse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort"}, true);
  EXPECT_THAT(p.status, StatusIs(absl::StatusCode::kUnavailable));
  // Closed before any response.
  p = Parse({"HTTP/1.1 2"}, true);
  EXPECT_THAT(p.status, StatusIs(absl::StatusCode::kUnavailable));
  // Bad chunk size.
  p = Parse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, false);
  EXPECT_THAT(p.status, StatusIs(absl::StatusCode::kDataLoss));
  // Chunk longer than announced.
  p = Parse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"}, false);
  EXPECT_THAT(p.status, StatusIs(absl::StatusCode::kDataLoss));
  // Not HTTP.
  p = Parse({"SSH-2.0-OpenSSH\r\n"}, false);
  EXPECT_THAT(p.status, StatusIs(absl::StatusCode::kDataLoss));
}

std::vector<std::string> SseEvents(const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  SseParser sse([&](const SseEvent& e) { out.push_back(e.event + "|" + e.data + "|" + e.error); });
  for (const std::string& p : pieces) sse.Feed(p);
  sse.Finish();
  return out;
}

TEST(SseParserTest, LineEndingsCommentsFieldsAndMultilineData) {
  const std::string s =
      ": comment\r\n"
      "event: token\r"
      "data: one\r\n"
      "data:two\n"
      "id: 7\n"
      "\r"
      "retry: 10\n\n"  // no event: only fields that do not make one
      "error: {\"code\":500,\"message\":\"boom\"}\n\n"
      "data\n\n";  // a bare "data" field is an empty data line
  const std::vector<std::string> want = {"token|one\ntwo|",
                                         "||{\"code\":500,\"message\":\"boom\"}", "||"};
  EXPECT_EQ(SseEvents({s}), want);
  for (size_t i = 0; i <= s.size(); ++i) {
    EXPECT_EQ(SseEvents({s.substr(0, i), s.substr(i)}), want) << "cut at " << i;
  }
  std::vector<std::string> bytewise;
  for (char c : s) bytewise.push_back(std::string(1, c));
  EXPECT_EQ(SseEvents(bytewise), want);
}

TEST(SseParserTest, CrAtTheEndOfAPieceThenLf) {
  // "\r" then "\n" in the next piece is one line end, not two (which would dispatch).
  EXPECT_EQ(SseEvents({"data: a\r", "\ndata: b\r", "\n\r", "\n"}),
            (std::vector<std::string>{"|a\nb|"}));
}

}  // namespace
}  // namespace bench
}  // namespace weft
