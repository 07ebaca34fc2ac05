// The --plot_out PNG, drawn by gnuplot run as a subprocess on a generated script with
// inline data blocks (no temporary data files): four panels
//   output tok/s vs load level (median over pairs, each pair as a point), one line
//   per target; and the CDFs of TTFT, inter-token latency and e2e latency (log time
//   axis) per target and level, pooled over pairs.
// Uses the pngcairo terminal when gnuplot has it, else png.
// Thread-safety: free functions; RenderPlot blocks until gnuplot exits.
#ifndef WEFT_TOOLS_BENCH_PLOT_H_
#define WEFT_TOOLS_BENCH_PLOT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tools/bench/report.h"

namespace weft {
namespace bench {

// The gnuplot script drawing `runs` into `png_path`.
std::string BuildGnuplotScript(absl::Span<const RunResult> runs,
                               absl::Span<const std::string> targets,
                               absl::Span<const LoadLevel> levels, const std::string& title,
                               const std::string& png_path);

// Full path of `program` on $PATH, or "" when it is not there.
std::string FindOnPath(const std::string& program);

// Writes the script next to the PNG (png_path + ".gp") and runs gnuplot on it.
// NOT_FOUND when gnuplot is not installed (callers warn and go on).
absl::Status RenderPlot(absl::Span<const RunResult> runs, absl::Span<const std::string> targets,
                        absl::Span<const LoadLevel> levels, const std::string& title,
                        const std::string& png_path);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_PLOT_H_
