// Incremental parsers for a streamed HTTP/1.1 response and the Server-Sent Events in
// its body. Bytes may arrive split anywhere (inside a header, a chunk-size line, a CRLF
// or an SSE line); each parser keeps only the partial line it has not finished.
//
//   HttpResponseParser  status line, headers, then a body framed by
//                       Transfer-Encoding: chunked, Content-Length, or the end of the
//                       connection; decoded body bytes go to a callback.
//   SseParser           splits a body into events (WHATWG rules: lines end in LF, CRLF
//                       or CR; "field: value"; ':' comments; a blank line dispatches).
//                       Besides "event" and "data" it keeps llama.cpp's non-standard
//                       "error:" field.
// Thread-safety: none; one parser per stream.
#ifndef WEFT_TOOLS_BENCH_HTTP_STREAM_H_
#define WEFT_TOOLS_BENCH_HTTP_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {
namespace bench {

class HttpResponseParser {
 public:
  // Called with each piece of decoded body; the view is valid during the call only.
  using BodySink = std::function<void(absl::string_view)>;

  explicit HttpResponseParser(BodySink sink) : sink_(std::move(sink)) {}

  // Consumes bytes; an error means the response is malformed (the parser stays failed).
  absl::Status Feed(absl::string_view bytes);
  // The connection was closed by the peer. OK only if the body was complete or is
  // delimited by the close.
  absl::Status OnEof();

  bool headers_done() const { return state_ > State::kHeaders; }
  bool done() const { return state_ == State::kDone; }
  int status_code() const { return status_code_; }
  bool chunked() const { return chunked_; }
  int64_t content_length() const { return content_length_; }  // -1: not given
  const std::string& content_type() const { return content_type_; }

 private:
  enum class State {
    kStatusLine, kHeaders, kBodyLength, kBodyEof, kChunkSize, kChunkData,
    kChunkDataEnd, kTrailers, kDone, kFailed
  };
  // Appends to line_ up to and including '\n'; returns true when a line is complete.
  bool TakeLine(absl::string_view* bytes);
  absl::Status OnLine(absl::string_view line);
  absl::Status OnHeader(absl::string_view line);
  absl::Status StartBody();
  absl::Status Fail(absl::string_view why);

  BodySink sink_;
  State state_ = State::kStatusLine;
  std::string line_;
  int status_code_ = 0;
  bool chunked_ = false;
  int64_t content_length_ = -1;
  int64_t remaining_ = 0;  // bytes left in this chunk or body
  std::string content_type_;
};

struct SseEvent {
  std::string event;  // "event:" field ("" = message)
  std::string data;   // "data:" lines joined with '\n'
  std::string error;  // llama.cpp's "error:" line, when present
};

class SseParser {
 public:
  // Called once per event; the event is reused afterwards.
  using EventSink = std::function<void(const SseEvent&)>;

  explicit SseParser(EventSink sink) : sink_(std::move(sink)) {}

  void Feed(absl::string_view bytes);
  // End of stream: dispatches an event that had no terminating blank line.
  void Finish();

 private:
  void OnLine(absl::string_view line);
  void Dispatch();

  EventSink sink_;
  std::string line_;
  bool after_cr_ = false;  // the last byte was CR: a following LF belongs to it
  bool has_fields_ = false;
  bool has_data_line_ = false;
  SseEvent event_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_HTTP_STREAM_H_
