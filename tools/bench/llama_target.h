// LlamaHttpTarget: drives llama.cpp's llama-server through its native /completion
// endpoint over plain HTTP/1.1 (http_client.h), one connection per request:
//   {"prompt": [ids], "n_predict": N, "ignore_eos": true, "stream": true,
//    "temperature": T, "cache_prompt": false}
// The answer is SSE: one "data: {json}" event per partial result, then a final event
// with "stop": true, "tokens_predicted" and "timings" ({"predicted_n", "cache_n"...}).
//
// Token counting (LlamaStreamAccumulator): each partial event normally carries one
// token. llama-server holds back a token that ends in an incomplete UTF-8 sequence and
// sends it with the next one, so when an event has "tokens_predicted" (the running
// count) the new tokens are the increase since the previous event; otherwise they are
// the event's "tokens" array size, or 1. The final event's count (tokens_predicted or
// timings.predicted_n) cross-checks: tokens it reports beyond those seen are recorded
// as arriving with it, and RequestRecord::server_output_tokens keeps the reported value.
// Errors: a non-200 status, an "error:" SSE line or a {"error": ...} event, or a stream
// that ends without its final event, fail the request.
// Ownership: owns nothing but the parsed endpoint. Thread-safety: Run() is thread-safe;
// an accumulator is per request.
#ifndef WEFT_TOOLS_BENCH_LLAMA_TARGET_H_
#define WEFT_TOOLS_BENCH_LLAMA_TARGET_H_

#include <atomic>
#include <string>

#include "tools/bench/http_client.h"
#include "tools/bench/http_stream.h"
#include "tools/bench/target.h"

namespace weft {
namespace bench {

class LlamaStreamAccumulator {
 public:
  // `live_tokens` may be null.
  LlamaStreamAccumulator(RequestRecord* record, std::atomic<int64_t>* live_tokens)
      : record_(record), live_tokens_(live_tokens) {}

  void OnEvent(const SseEvent& event, int64_t t_ns);
  // The request's outcome once the stream has ended.
  absl::Status Finish() const;
  bool saw_final() const { return saw_final_; }

 private:
  void Add(int64_t t_ns, int32_t k);

  RequestRecord* const record_;
  std::atomic<int64_t>* const live_tokens_;
  bool saw_final_ = false;
  absl::Status error_;
};

class LlamaHttpTarget : public Target {
 public:
  LlamaHttpTarget(std::string label, HttpEndpoint endpoint, const RequestOptions& options);

  void Run(const TraceRequest& request, const RunClock& clock,
           std::atomic<int64_t>* live_tokens, RequestRecord* record) override;

  // The JSON body sent for `request` (exposed for tests).
  std::string BuildBody(const TraceRequest& request) const;

 private:
  const HttpEndpoint endpoint_;
  const std::string path_;
  const RequestOptions options_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_LLAMA_TARGET_H_
