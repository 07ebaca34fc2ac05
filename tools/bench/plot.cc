#include "tools/bench/plot.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace weft {
namespace bench {
namespace {

constexpr int kCdfPoints = 200;
constexpr double kMinLogSeconds = 1e-6;  // zero gaps are drawn at 1 us on the log axis

// A gnuplot single-quoted string.
std::string Quote(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}, {"\n", " "}}), "'");
}

// Appends "$name << EOD ... EOD" with the CDF of `sorted`, down-sampled.
void AppendCdf(const std::string& name, absl::Span<const double> sorted, std::string* out) {
  absl::StrAppend(out, "$", name, " << EOD\n");
  const size_t n = sorted.size();
  if (n <= kCdfPoints) {
    for (size_t i = 0; i < n; ++i) {
      absl::StrAppendFormat(out, "%.6g %.6g\n", std::max(sorted[i], kMinLogSeconds),
                            static_cast<double>(i + 1) / static_cast<double>(n));
    }
  } else {
    for (int k = 0; k < kCdfPoints; ++k) {
      const double q = static_cast<double>(k) / (kCdfPoints - 1);
      absl::StrAppendFormat(out, "%.6g %.6g\n", std::max(Percentile(sorted, q), kMinLogSeconds),
                            q);
    }
  }
  absl::StrAppend(out, "EOD\n");
}

double LevelX(const LoadLevel& l) { return l.mode == LoadMode::kReplay ? 1.0 : l.value; }

// Throughput panel: a line per target through the per-level medians, plus pair points.
std::string ThroughputPanel(absl::Span<const RunResult> runs,
                            absl::Span<const std::string> targets,
                            absl::Span<const LoadLevel> levels, std::string* data) {
  std::vector<std::string> plots;
  for (size_t t = 0; t < targets.size(); ++t) {
    std::string med = absl::StrCat("$tput", t, " << EOD\n");
    std::string pts = absl::StrCat("$tpairs", t, " << EOD\n");
    for (size_t li = 0; li < levels.size(); ++li) {
      std::vector<double> ys;
      for (const RunResult& r : runs) {
        if (r.target_index != static_cast<int32_t>(t) || r.level_index != static_cast<int32_t>(li))
          continue;
        ys.push_back(r.summary.output_tok_s);
        absl::StrAppendFormat(&pts, "%.6g %.6g\n", LevelX(levels[li]), r.summary.output_tok_s);
      }
      if (!ys.empty()) absl::StrAppendFormat(&med, "%.6g %.6g\n", LevelX(levels[li]), Median(ys));
    }
    absl::StrAppend(data, med, "EOD\n", pts, "EOD\n");
    plots.push_back(absl::StrFormat("$tput%d with linespoints lw 2 pt 7 lc %d title %s", t, t + 1,
                                    Quote(targets[t])));
    plots.push_back(absl::StrFormat("$tpairs%d with points pt 6 ps 0.8 lc %d notitle", t, t + 1));
  }
  const bool closed = !levels.empty() && levels[0].mode == LoadMode::kClosed;
  const bool poisson = !levels.empty() && levels[0].mode == LoadMode::kPoisson;
  std::string s = "set title 'Output tokens/s (median over pairs; circles: each pair)'\n";
  absl::StrAppend(&s, "set xlabel ",
                  closed ? "'concurrency (closed loop)'"
                         : poisson ? "'offered load (requests/s, Poisson)'" : "'trace replay'",
                  "\n");
  absl::StrAppend(&s, closed || poisson ? "set logscale x 2\n" : "unset logscale x\n",
                  "set format x '%g'\nset ylabel 'output tok/s'\nset yrange [0:*]\n",
                  "set xrange [*:*]\n",
                  "set key top left\n");
  absl::StrAppend(&s, "plot ", absl::StrJoin(plots, ", \\\n     "), "\n");
  return s;
}

// A CDF panel for one metric (0 = TTFT, 1 = ITL, 2 = e2e).
std::string CdfPanel(int metric, absl::Span<const RunResult> runs,
                     absl::Span<const std::string> targets,
                     absl::Span<const LoadLevel> levels, std::string* data) {
  static const char* const kNames[] = {"ttft", "itl", "e2e"};
  static const char* const kTitles[] = {"Time to first token, CDF", "Inter-token latency, CDF",
                                        "End-to-end latency, CDF"};
  std::vector<std::string> plots;
  for (size_t t = 0; t < targets.size(); ++t) {
    for (size_t li = 0; li < levels.size(); ++li) {
      std::vector<double> pooled;
      for (const RunResult& r : runs) {
        if (r.target_index != static_cast<int32_t>(t) || r.level_index != static_cast<int32_t>(li))
          continue;
        const std::vector<double>& v =
            metric == 0 ? r.samples.ttft_s : metric == 1 ? r.samples.itl_s : r.samples.e2e_s;
        pooled.insert(pooled.end(), v.begin(), v.end());
      }
      if (pooled.empty()) continue;
      std::sort(pooled.begin(), pooled.end());
      const std::string name = absl::StrCat("cdf_", kNames[metric], "_", t, "_", li);
      AppendCdf(name, pooled, data);
      plots.push_back(absl::StrFormat("$%s with lines lw 2 lc %d dt %d title %s", name, t + 1,
                                      li % 5 + 1,
                                      Quote(absl::StrCat(targets[t], " ", levels[li].Label()))));
    }
  }
  std::string s = absl::StrFormat("set title '%s'\n", kTitles[metric]);
  absl::StrAppend(&s,
                  "set xlabel 'seconds'\nset logscale x 10\nset format x '%g'\n"
                  "set ylabel 'fraction'\n"
                  "set yrange [0:1]\nset xrange [*:*]\nset key bottom right\n");
  if (plots.empty()) return s + "set multiplot next\n";
  absl::StrAppend(&s, "plot ", absl::StrJoin(plots, ", \\\n     "), "\n");
  return s;
}

}  // namespace

std::string BuildGnuplotScript(absl::Span<const RunResult> runs,
                               absl::Span<const std::string> targets,
                               absl::Span<const LoadLevel> levels, const std::string& title,
                               const std::string& png_path) {
  std::string data;
  std::string panels = ThroughputPanel(runs, targets, levels, &data);
  for (int m = 0; m < 3; ++m) panels += CdfPanel(m, runs, targets, levels, &data);
  std::string s = "# Generated by weft-bench; re-render with: gnuplot <this file>\n";
  absl::StrAppend(&s,
                  "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                  "  set terminal pngcairo size 1600,1100 font ',10'\n"
                  "} else {\n  set terminal png size 1600,1100\n}\n",
                  "set output ", Quote(png_path), "\n", data, "set grid\n",
                  "set multiplot layout 2,2 title ", Quote(title), "\n", panels,
                  "unset multiplot\nset output\n");
  return s;
}

std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    const std::string full = absl::StrCat(dir, "/", program);
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

absl::Status RenderPlot(absl::Span<const RunResult> runs, absl::Span<const std::string> targets,
                        absl::Span<const LoadLevel> levels, const std::string& title,
                        const std::string& png_path) {
  const std::string gnuplot = FindOnPath("gnuplot");
  if (gnuplot.empty()) return absl::NotFoundError("gnuplot is not installed (not on $PATH)");
  const std::string script_path = png_path + ".gp";
  {
    std::ofstream f(script_path);
    f << BuildGnuplotScript(runs, targets, levels, title, png_path);
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", script_path));
  }
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()),
                             const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, gnuplot.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot run gnuplot: ", strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError("waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", script_path));
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace weft
