// Per-request measurements and the statistics computed from them.
//
// Times are nanoseconds on the steady clock, relative to the run's start.
// Metric definitions (each one is what a user of the server would see):
//   TTFT         first message carrying a token - send time.
//   inter-token  gap between consecutive token arrivals of one request, pooled over
//                all successful requests. A message that carries k tokens counts as k
//                arrivals at the same instant: one gap from the previous message and
//                k-1 zero gaps (so batching tokens into messages is not hidden).
//   e2e          end of stream - send time.
//   output tok/s output tokens of successful requests / wall time of the run (first
//                send to last end); req/s likewise.
// Percentiles interpolate linearly between closest ranks (numpy's default).
// Failed requests are counted and listed by error, never dropped silently; latency
// percentiles cover successful requests only.
// Thread-safety: plain values and free functions.
#ifndef WEFT_TOOLS_BENCH_STATS_H_
#define WEFT_TOOLS_BENCH_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace weft {
namespace bench {

struct TokenArrival {
  int64_t t_ns = 0;
  int32_t num_tokens = 0;  // tokens this message carried (>= 1)
};

struct RequestRecord {
  int32_t index = -1;  // position in the trace
  int32_t prompt_tokens = 0;
  int32_t max_tokens = 0;
  int64_t scheduled_ns = 0;  // intended arrival (open loop); the send time when closed
  int64_t send_ns = -1;
  int64_t end_ns = -1;
  int32_t output_tokens = 0;  // sum of arrivals' num_tokens
  std::vector<TokenArrival> arrivals;
  // What the server reported (gRPC usage / llama.cpp tokens_predicted); -1: not given.
  int32_t server_output_tokens = -1;
  int32_t cached_prompt_tokens = -1;
  absl::Status status;

  bool ok() const { return status.ok(); }
  int64_t first_token_ns() const { return arrivals.empty() ? -1 : arrivals[0].t_ns; }
  // Appends one message's tokens (k >= 1) at time t.
  void AddTokens(int64_t t_ns, int32_t k) {
    arrivals.push_back({t_ns, k});
    output_tokens += k;
  }
};

// Linear interpolation between closest ranks; `sorted` ascending, q in [0, 1].
// Returns NaN for an empty input.
double Percentile(absl::Span<const double> sorted, double q);

struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when count == 0
};
Distribution Describe(absl::Span<const double> sorted);

// Seconds, sorted ascending, over successful requests.
struct LatencySamples {
  std::vector<double> ttft_s;
  std::vector<double> itl_s;
  std::vector<double> e2e_s;
};

struct RunSummary {
  int32_t num_requests = 0;
  int32_t num_ok = 0;
  int32_t num_failed = 0;
  // Successful requests that returned fewer tokens than max_tokens (ignore_eos is set,
  // so this means the server stopped early, e.g. at its context limit).
  int32_t num_short = 0;
  // Requests whose server-reported output count differs from the tokens counted.
  int32_t num_count_mismatch = 0;
  int64_t output_tokens = 0;  // successful requests
  int64_t prompt_tokens = 0;  // successful requests
  int64_t cached_prompt_tokens = 0;  // as reported by the server (gRPC usage)
  double wall_s = 0;
  double output_tok_s = 0;
  double total_tok_s = 0;  // (prompt + output) / wall
  double req_s = 0;
  double max_dispatch_lag_s = 0;  // open loop: latest send behind its scheduled time
  Distribution ttft_s, itl_s, e2e_s;
  std::map<std::string, int32_t> errors;  // "CODE: message" (truncated) -> count
};

// Computes the latency samples and the summary of one run.
void Summarize(absl::Span<const RequestRecord> records, RunSummary* summary,
               LatencySamples* samples);

// Median of `values` (mean of the middle two for an even count); NaN when empty.
double Median(std::vector<double> values);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_STATS_H_
