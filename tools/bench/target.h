// A benchmark target: one server that can run a trace request and stream its tokens
// back, timed on a shared clock.
//
//   grpc://host:port   Weft's weft.v1.Generation/Generate (GrpcTarget)
//   http://host:port   llama.cpp's llama-server, native /completion with SSE
//                      (LlamaHttpTarget); a path in the URL replaces /completion
// A spec may carry a label for tables and plots: "weft=grpc://127.0.0.1:50051".
//
// Every request is sent as token ids with ignore_eos, max_tokens = the trace's output
// length, and the configured temperature (0 = greedy by default).
// Ownership: a Target owns its channel/endpoint; records belong to the caller.
// Thread-safety: Run() is called concurrently from many threads (one per stream).
#ifndef WEFT_TOOLS_BENCH_TARGET_H_
#define WEFT_TOOLS_BENCH_TARGET_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/bench/stats.h"
#include "tools/bench/trace.h"

namespace weft {
namespace bench {

// The run's time origin; all record times are nanoseconds since t0.
struct RunClock {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  int64_t NowNs() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now() - t0)
        .count();
  }
};

struct RequestOptions {
  std::string model;         // gRPC model name ("" = the only one)
  double temperature = 0;    // 0 = greedy
  double timeout_s = 600;    // per-request deadline
  // Structured output (gRPC targets): this share of the requests, chosen by a hash of
  // the prompt (the same ones every run), carries constraint.json_schema =
  // constraint_json_schema and stops at its end (no ignore_eos); the rest run as usual.
  double constrained_fraction = 0;
  std::string constraint_json_schema;
  // gRPC targets: streams per HTTP/2 connection before another is opened (GrpcTarget).
  int32_t grpc_streams_per_connection = 64;

  absl::Status Validate() const;
};

class Target {
 public:
  explicit Target(std::string label) : label_(std::move(label)) {}
  virtual ~Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  const std::string& label() const { return label_; }

  // Sends `request`, blocks until its stream ends, and fills `record`: send_ns,
  // arrivals (via AddTokens), end_ns, status, and what the server reported.
  // `live_tokens` (may be null) is incremented as tokens arrive, for progress display.
  virtual void Run(const TraceRequest& request, const RunClock& clock,
                   std::atomic<int64_t>* live_tokens, RequestRecord* record) = 0;

 private:
  const std::string label_;
};

// Builds a target from "[label=]grpc://host:port" or "[label=]http://host:port[/path]".
absl::StatusOr<std::unique_ptr<Target>> MakeTarget(absl::string_view spec,
                                                   const RequestOptions& options);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_TARGET_H_
