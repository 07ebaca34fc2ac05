#include "tools/bench/http_stream.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace weft {
namespace bench {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // status, header, chunk-size and trailer lines

// Parses a hexadecimal chunk size, ignoring chunk extensions (";name=value").
bool ParseChunkSize(absl::string_view line, int64_t* size) {
  line = line.substr(0, std::min(line.find(';'), line.size()));
  line = absl::StripAsciiWhitespace(line);
  if (line.empty() || line.size() > 15) return false;
  int64_t v = 0;
  for (char c : line) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = v * 16 + d;
  }
  *size = v;
  return true;
}

}  // namespace

absl::Status HttpResponseParser::Fail(absl::string_view why) {
  state_ = State::kFailed;
  return absl::DataLossError(absl::StrCat("malformed HTTP response: ", why));
}

bool HttpResponseParser::TakeLine(absl::string_view* bytes) {
  const size_t nl = bytes->find('\n');
  const size_t take = nl == absl::string_view::npos ? bytes->size() : nl + 1;
  line_.append(bytes->data(), take);
  bytes->remove_prefix(take);
  return nl != absl::string_view::npos;
}

absl::Status HttpResponseParser::Feed(absl::string_view bytes) {
  while (!bytes.empty()) {
    switch (state_) {
      case State::kFailed:
        return absl::DataLossError("HTTP parser already failed");
      case State::kDone:
        return absl::OkStatus();  // bytes after the response (none with Connection: close)
      case State::kBodyEof:
        sink_(bytes);
        return absl::OkStatus();
      case State::kBodyLength:
      case State::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<int64_t>(remaining_, bytes.size()));
        sink_(bytes.substr(0, n));
        bytes.remove_prefix(n);
        remaining_ -= static_cast<int64_t>(n);
        if (remaining_ == 0) {
          state_ = state_ == State::kBodyLength ? State::kDone : State::kChunkDataEnd;
        }
        break;
      }
      default: {  // line-oriented states
        if (!TakeLine(&bytes)) {
          if (line_.size() > kMaxLine) return Fail("line too long");
          return absl::OkStatus();
        }
        absl::string_view line = line_;
        line = absl::StripSuffix(line, "\n");
        line = absl::StripSuffix(line, "\r");
        absl::Status s = OnLine(line);
        line_.clear();
        if (!s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HttpResponseParser::OnLine(absl::string_view line) {
  switch (state_) {
    case State::kStatusLine: {
      // "HTTP/1.1 200 OK"
      if (!absl::StartsWith(line, "HTTP/1.")) return Fail("bad status line");
      const size_t sp = line.find(' ');
      if (sp == absl::string_view::npos || line.size() < sp + 4 ||
          !absl::SimpleAtoi(line.substr(sp + 1, 3), &status_code_)) {
        return Fail("bad status line");
      }
      state_ = State::kHeaders;
      return absl::OkStatus();
    }
    case State::kHeaders:
      if (line.empty()) return StartBody();
      return OnHeader(line);
    case State::kChunkSize:
      if (!ParseChunkSize(line, &remaining_)) return Fail("bad chunk size");
      state_ = remaining_ == 0 ? State::kTrailers : State::kChunkData;
      return absl::OkStatus();
    case State::kChunkDataEnd:
      if (!line.empty()) return Fail("chunk data longer than its size");
      state_ = State::kChunkSize;
      return absl::OkStatus();
    case State::kTrailers:
      if (line.empty()) state_ = State::kDone;
      return absl::OkStatus();
    default:
      return Fail("internal state");
  }
}

absl::Status HttpResponseParser::OnHeader(absl::string_view line) {
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return Fail("header without ':'");
  const absl::string_view name = line.substr(0, colon);
  const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
    if (absl::StrContains(absl::AsciiStrToLower(value), "chunked")) chunked_ = true;
  } else if (absl::EqualsIgnoreCase(name, "content-length")) {
    if (!absl::SimpleAtoi(value, &content_length_) || content_length_ < 0) {
      return Fail("bad Content-Length");
    }
  } else if (absl::EqualsIgnoreCase(name, "content-type")) {
    content_type_ = std::string(value);
  }
  return absl::OkStatus();
}

absl::Status HttpResponseParser::StartBody() {
  if (status_code_ >= 100 && status_code_ < 200) {  // interim response: another follows
    state_ = State::kStatusLine;
    return absl::OkStatus();
  }
  if (status_code_ == 204 || status_code_ == 304) {
    state_ = State::kDone;
  } else if (chunked_) {  // chunked wins over Content-Length (RFC 9112 6.3)
    state_ = State::kChunkSize;
  } else if (content_length_ >= 0) {
    remaining_ = content_length_;
    state_ = remaining_ == 0 ? State::kDone : State::kBodyLength;
  } else {
    state_ = State::kBodyEof;
  }
  return absl::OkStatus();
}

absl::Status HttpResponseParser::OnEof() {
  if (state_ == State::kBodyEof) {
    state_ = State::kDone;
    return absl::OkStatus();
  }
  if (state_ == State::kDone) return absl::OkStatus();
  if (state_ == State::kFailed) return absl::DataLossError("HTTP parser already failed");
  state_ = State::kFailed;
  return absl::UnavailableError(headers_done() ? "connection closed in the middle of the body"
                                               : "connection closed before a response");
}

void SseParser::Feed(absl::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes[i] == '\n') {
        ++i;
        continue;
      }
    }
    // Copy the run up to the next line end in one go.
    size_t j = i;
    while (j < bytes.size() && bytes[j] != '\n' && bytes[j] != '\r') ++j;
    line_.append(bytes.data() + i, j - i);
    if (j == bytes.size()) break;
    after_cr_ = bytes[j] == '\r';
    OnLine(line_);
    line_.clear();
    i = j + 1;
  }
}

void SseParser::Finish() {
  if (!line_.empty()) {
    OnLine(line_);
    line_.clear();
  }
  if (has_fields_) Dispatch();
}

void SseParser::OnLine(absl::string_view line) {
  if (line.empty()) {
    if (has_fields_) Dispatch();
    return;
  }
  if (line[0] == ':') return;  // comment
  const size_t colon = line.find(':');
  absl::string_view name = line.substr(0, colon);
  absl::string_view value;
  if (colon != absl::string_view::npos) {
    value = line.substr(colon + 1);
    absl::ConsumePrefix(&value, " ");
  }
  if (name == "data") {
    if (has_data_line_) event_.data += '\n';
    event_.data.append(value.data(), value.size());
    has_data_line_ = true;
  } else if (name == "event") {
    event_.event = std::string(value);
  } else if (name == "error") {
    event_.error = std::string(value);
  } else {
    return;  // "id", "retry" and unknown fields do not make an event
  }
  has_fields_ = true;
}

void SseParser::Dispatch() {
  sink_(event_);
  event_.event.clear();
  event_.data.clear();
  event_.error.clear();
  has_fields_ = false;
  has_data_line_ = false;
}

}  // namespace bench
}  // namespace weft
