// weft-bench's driver: builds the trace, runs every load level against every target
// (interleaved A B A B ... for `pairs` repetitions at each level), prints a table per
// level, and writes the JSON report and the plot.
//
// Order of runs: for each level, for each pair, for each target. Each (level, pair)
// gets its own prompt salt (trace.h SaltPrompts) so no run can hit a prefix cache
// filled by an earlier one, while the targets of one pair see identical prompts.
// Warmup (--warmup_requests) runs once per target before anything is measured, on
// requests drawn from a different seed, closed loop at min(N, 8).
// Ownership: RunBench owns the targets it creates. Thread-safety: one call at a time.
#ifndef WEFT_TOOLS_BENCH_BENCH_H_
#define WEFT_TOOLS_BENCH_BENCH_H_

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/bench/progress.h"
#include "tools/bench/report.h"
#include "tools/bench/runner.h"
#include "tools/bench/target.h"
#include "tools/bench/trace.h"

namespace weft {
namespace bench {

struct BenchOptions {
  // "[label=]grpc://host:port" or "[label=]http://host:port"; the first is the
  // numerator of every comparison. May be empty only with dump_trace.
  std::vector<std::string> targets;
  TraceOptions trace;       // seeded trace (when trace_file is empty)
  std::string trace_file;   // JSONL trace; its first trace.num_requests lines (0 = all)
  std::string dump_trace;   // write the (first run's) trace here as JSONL
  int32_t warmup_requests = 0;
  // Load levels: Poisson `rates` when non-empty, else trace-file arrivals when
  // replay_arrivals, else closed loop at each `concurrency`.
  std::vector<int32_t> concurrency = {1, 4, 16, 64};
  std::vector<double> rates;
  bool replay_arrivals = false;
  int32_t pairs = 0;  // repetitions per level; 0: 1 for one target, 3 for several
  bool salt_prompts = true;
  RequestOptions request;
  std::string json_out;
  std::string plot_out;
  bool per_request = false;  // per-request records in the JSON
  ProgressOptions progress;

  absl::Status Validate() const;
};

struct BenchResult {
  std::vector<std::string> targets;  // labels
  std::vector<LoadLevel> levels;
  std::vector<RunResult> runs;
  std::vector<Comparison> comparisons;
  nlohmann::json config;
  int32_t num_failed = 0;  // measured requests that failed, over all runs
};

// Runs the benchmark; tables go to `out`, warnings and notes to `log`.
absl::StatusOr<BenchResult> RunBench(const BenchOptions& options, std::ostream& out,
                                     std::ostream& log);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_BENCH_H_
