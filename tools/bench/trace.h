// Benchmark traces: seeded, replayable lists of requests (prompt token ids, output
// length, optional arrival time), as BENCHMARKS.md defines the workloads.
//
//   fixed          prompt 128, output 128
//   sharegpt-like  lognormal prompt (median 96, sigma 0.9, clipped 8..1024) and output
//                  (median 48, sigma 1.0, clipped 4..512)
//   short          Alpaca-like: prompt median 20 (sigma 0.5, 4..128), output median 40
//                  (sigma 0.6, 4..256)
//   long-prompt    prompt uniform 1024..2048, output uniform 16..64
//
// Prompt ids are uniform in [min_token_id, max_token_id] (300..40,000 by default).
// Request i is drawn from its own stream Rng(MixSeed(seed, kind, i)), so it is the
// same whatever num_requests is, and the same on every machine (see rng.h).
//
// Trace files are JSON lines, one request per line:
//   {"prompt": [ids...], "max_tokens": 64, "arrival_s": 0.25}
// ("arrival_s", seconds from the start of the run, is optional).
// Thread-safety: free functions over values.
#ifndef WEFT_TOOLS_BENCH_TRACE_H_
#define WEFT_TOOLS_BENCH_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {
namespace bench {

enum class TraceKind { kFixed, kShareGptLike, kShort, kLongPrompt };

absl::StatusOr<TraceKind> ParseTraceKind(absl::string_view name);
absl::string_view TraceKindName(TraceKind kind);

struct TraceRequest {
  std::vector<int32_t> prompt;  // token ids
  int32_t max_tokens = 0;       // output length (sent with ignore_eos)
  double arrival_s = -1;        // seconds from the run's start; < 0: not set
};

struct TraceOptions {
  TraceKind kind = TraceKind::kShareGptLike;
  int32_t num_requests = 128;
  uint64_t seed = 1;
  int32_t min_token_id = 300;     // inclusive
  int32_t max_token_id = 40000;   // inclusive

  absl::Status Validate() const;
};

// Builds the trace (no arrival times). Options must be valid.
std::vector<TraceRequest> GenerateTrace(const TraceOptions& options);

// Sets arrival_s of every request to a Poisson process of `rate` requests/s starting
// at 0 (the first request arrives at 0), drawn from `seed`.
void AssignPoissonArrivals(double rate, uint64_t seed, std::vector<TraceRequest>* trace);

// Replaces each prompt's first token with one derived from (salt, index) in
// [min_token_id, max_token_id], so that a server's prefix cache cannot reuse the
// prompts of an earlier run of the same trace. Lengths are unchanged.
void SaltPrompts(uint64_t salt, int32_t min_token_id, int32_t max_token_id,
                 std::vector<TraceRequest>* trace);

absl::StatusOr<std::vector<TraceRequest>> ReadTraceFile(const std::string& path);
absl::Status WriteTraceFile(const std::string& path, absl::Span<const TraceRequest> trace);

// Parses one line of a trace file.
absl::StatusOr<TraceRequest> ParseTraceLine(absl::string_view line);
std::string FormatTraceLine(const TraceRequest& request);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_TRACE_H_
