// Seeded, replayable request traces for the simulator (BENCHMARKS.md "Workloads"):
// prompt and output lengths drawn from clipped lognormal distributions, prompt token
// ids uniform in [300, 40000), and optional Poisson arrival times.
//
//   sharegpt  prompt median 96, σ 0.9, 8…1024; output median 48, σ 1.0, 4…512
//             (high output-length variance: where static batching collapses)
//   lowvar    same prompts; output median 48, σ 0.1, 4…512 (low variance)
//   fixed     prompt 128, output 128
//
// Thread-safety: pure functions.
#ifndef WEFT_TOOLS_SIMULATE_TRACE_H_
#define WEFT_TOOLS_SIMULATE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft::sim {

struct LengthDistribution {
  double median = 96;
  double sigma = 0.9;  // of the underlying normal; 0 = always the median
  int32_t min = 8;
  int32_t max = 1024;
};

struct TraceOptions {
  int32_t num_requests = 1000;
  LengthDistribution prompt;
  LengthDistribution output;
  // Poisson arrivals at this rate (requests/s); 0 = all at t=0 (closed-loop replay).
  double arrival_rate = 0;
  uint64_t seed = 1;

  absl::Status Validate() const;
};

// Preset options: "sharegpt", "lowvar" or "fixed".
absl::StatusOr<TraceOptions> TracePreset(absl::string_view name);

struct TraceRequest {
  double arrival_s = 0;  // offset from the start (open loop only)
  std::vector<int32_t> prompt_token_ids;
  int32_t output_len = 0;  // generated with ignore_eos
};

std::vector<TraceRequest> GenerateTrace(const TraceOptions& options);

}  // namespace weft::sim

#endif  // WEFT_TOOLS_SIMULATE_TRACE_H_
