// Results of a benchmark: one RunResult per (level, pair, target), A/B comparisons,
// the per-level table printed to stdout, and the JSON document written by --json_out.
//
// Comparisons follow BENCHMARKS.md: with several targets run interleaved (A B A B ...),
// each metric's ratio first-target / other-target is taken per pair and the median of
// those per-pair ratios is reported (output tok/s > 1 and latencies < 1 favour the
// first target).
// Thread-safety: plain values and free functions.
#ifndef WEFT_TOOLS_BENCH_REPORT_H_
#define WEFT_TOOLS_BENCH_REPORT_H_

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/types/span.h"
#include "tools/bench/runner.h"
#include "tools/bench/stats.h"

namespace weft {
namespace bench {

struct RunResult {
  std::string target;  // label
  int32_t target_index = 0;
  int32_t level_index = 0;
  LoadLevel level;
  int32_t pair = 0;
  RunSummary summary;
  LatencySamples samples;
  std::vector<RequestRecord> records;  // kept only for --per_request
};

struct MetricRatio {
  std::string metric;  // "output_tok_s", "ttft_p99_s", ...
  std::vector<double> per_pair;
  double median = 0;
};

struct Comparison {
  int32_t level_index = 0;
  LoadLevel level;
  std::string numerator;    // the first target
  std::string denominator;  // another target
  std::vector<MetricRatio> ratios;
};

// Compares the first target with each other one at `level_index`, pairing runs by
// their pair number.
std::vector<Comparison> CompareLevel(absl::Span<const RunResult> runs, int32_t level_index,
                                     absl::Span<const std::string> targets);

// Formats seconds for tables: "420us", "12.3ms", "1.25s"; "-" for NaN.
std::string FormatSeconds(double s);
// Formats a ratio with 3 significant digits; "-" when undefined (0/0, x/0).
std::string FormatRatio(double r);

// Prints the table for one level: a row per run (and per-target medians when there
// are several pairs), warnings about failed/short requests, and the comparisons.
void PrintLevelTable(std::ostream& out, absl::string_view title,
                     absl::Span<const RunResult> runs, int32_t level_index,
                     absl::Span<const Comparison> comparisons);

nlohmann::json SummaryToJson(const RunSummary& s);
nlohmann::json RecordToJson(const RequestRecord& r);
// The --json_out document: {"config", "runs": [...], "comparisons": [...]}.
nlohmann::json ReportToJson(const nlohmann::json& config, absl::Span<const RunResult> runs,
                            absl::Span<const Comparison> comparisons, bool per_request);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_REPORT_H_
