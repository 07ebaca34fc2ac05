#include "tools/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "tools/bench/plot.h"
#include "tools/bench/rng.h"

namespace weft {
namespace bench {
namespace {

constexpr uint64_t kWarmupSeedSalt = 0x5761726D7570;  // "Warmup"

// "model name" plus the model number and AMX support, which tell the CPUs of these
// machines apart (BENCHMARKS.md: Ice Lake is family 6 model 106; Sapphire Rapids has AMX).
std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown", model = "?";
  bool amx = false;
  auto value = [](const std::string& l) {
    const size_t colon = l.find(':');
    return colon == std::string::npos
               ? std::string()
               : std::string(absl::StripAsciiWhitespace(l.substr(colon + 1)));
  };
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      name = value(line);
    } else if (absl::StartsWith(line, "model\t") || absl::StartsWith(line, "model :")) {
      model = value(line);
    } else if (absl::StartsWith(line, "flags")) {
      amx = absl::StrContains(line, " amx_tile");
      break;  // the first processor is enough
    }
  }
  return absl::StrCat(name, " (model ", model, amx ? ", AMX" : ", no AMX", ")");
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const BenchOptions& o) {
  if (o.trace_file.empty()) return GenerateTrace(o.trace);
  WEFT_ASSIGN_OR_RETURN(std::vector<TraceRequest> trace, ReadTraceFile(o.trace_file));
  if (o.trace.num_requests > 0 && o.trace.num_requests < static_cast<int32_t>(trace.size())) {
    trace.resize(o.trace.num_requests);
  }
  if (o.replay_arrivals) {
    for (const TraceRequest& r : trace) {
      if (r.arrival_s < 0) {
        return absl::InvalidArgumentError("--replay_arrivals needs arrival_s on every line");
      }
    }
  }
  return trace;
}

std::vector<LoadLevel> MakeLevels(const BenchOptions& o) {
  std::vector<LoadLevel> levels;
  if (!o.rates.empty()) {
    for (double r : o.rates) levels.push_back({LoadMode::kPoisson, r});
  } else if (o.replay_arrivals) {
    levels.push_back({LoadMode::kReplay, 0});
  } else {
    for (int32_t c : o.concurrency) levels.push_back({LoadMode::kClosed, static_cast<double>(c)});
  }
  return levels;
}

int32_t NumPairs(const BenchOptions& o) {
  if (o.pairs > 0) return o.pairs;
  return o.targets.size() > 1 ? 3 : 1;
}

// The trace of one (level, pair): salted prompts, and Poisson arrivals for rate levels.
std::vector<TraceRequest> TraceForRun(const BenchOptions& o, const std::vector<TraceRequest>& base,
                                      const LoadLevel& level, uint64_t run_number) {
  std::vector<TraceRequest> t = base;
  if (o.salt_prompts) {
    SaltPrompts(MixSeed(o.trace.seed, run_number), o.trace.min_token_id, o.trace.max_token_id,
                &t);
  }
  if (level.mode == LoadMode::kPoisson) AssignPoissonArrivals(level.value, o.trace.seed, &t);
  return t;
}

nlohmann::json TraceStats(const std::vector<TraceRequest>& trace) {
  std::vector<double> prompt, output;
  for (const TraceRequest& r : trace) {
    prompt.push_back(static_cast<double>(r.prompt.size()));
    output.push_back(r.max_tokens);
  }
  std::sort(prompt.begin(), prompt.end());
  std::sort(output.begin(), output.end());
  auto desc = [](const std::vector<double>& v) {
    const Distribution d = Describe(v);
    return nlohmann::json{{"mean", d.mean}, {"p50", d.p50}, {"min", v.front()}, {"max", d.max}};
  };
  return {{"num_requests", trace.size()}, {"prompt_tokens", desc(prompt)},
          {"output_tokens", desc(output)}};
}

nlohmann::json ConfigJson(const BenchOptions& o, const std::vector<std::string>& labels,
                          const std::vector<LoadLevel>& levels,
                          const std::vector<TraceRequest>& trace) {
  nlohmann::json jlevels = nlohmann::json::array();
  for (const LoadLevel& l : levels) jlevels.push_back(l.Label());
  return {{"targets", o.targets},
          {"target_labels", labels},
          {"trace", o.trace_file.empty() ? std::string(TraceKindName(o.trace.kind)) : "file"},
          {"trace_file", o.trace_file},
          {"seed", o.trace.seed},
          {"num_requests", trace.size()},
          {"token_id_range", {o.trace.min_token_id, o.trace.max_token_id}},
          {"levels", jlevels},
          {"pairs", NumPairs(o)},
          {"warmup_requests", o.warmup_requests},
          {"salt_prompts", o.salt_prompts},
          {"temperature", o.request.temperature},
          {"timeout_s", o.request.timeout_s},
          {"model", o.request.model},
          {"trace_stats", TraceStats(trace)},
          {"cpu_model", CpuModel()},
          {"hostname", Hostname()},
          {"started_at", absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone())}};
}

void Warmup(Target& target, const BenchOptions& o, std::ostream& log) {
  TraceOptions t = o.trace;
  t.seed = MixSeed(o.trace.seed, kWarmupSeedSalt);
  t.num_requests = o.warmup_requests;
  const std::vector<TraceRequest> trace = GenerateTrace(t);
  Progress progress(o.progress, absl::StrCat("warmup ", target.label()), t.num_requests);
  const std::vector<RequestRecord> recs =
      RunLoad(target, trace, {LoadMode::kClosed, static_cast<double>(std::min(8, t.num_requests))},
              &progress);
  progress.Stop();
  int32_t failed = 0;
  for (const RequestRecord& r : recs) failed += r.ok() ? 0 : 1;
  if (failed > 0) {
    log << "weft-bench: warning: " << failed << " of " << recs.size() << " warmup requests to "
        << target.label() << " failed: " << recs[0].status << "\n";
  }
}

RunResult MeasureRun(Target& target, const BenchOptions& o,
                     const std::vector<TraceRequest>& trace, const LoadLevel& level, int32_t li,
                     int32_t ti, int32_t pair, int32_t pairs) {
  RunResult run;
  run.target = target.label();
  run.target_index = ti;
  run.level_index = li;
  run.level = level;
  run.pair = pair;
  Progress progress(o.progress,
                    absl::StrFormat("%s %s pair %d/%d", target.label(), level.Label(), pair + 1,
                                    pairs),
                    static_cast<int32_t>(trace.size()));
  run.records = RunLoad(target, trace, level, &progress);
  progress.Stop();
  Summarize(run.records, &run.summary, &run.samples);
  if (!o.per_request) run.records = {};
  return run;
}

absl::Status WriteOutputs(const BenchOptions& o, const BenchResult& result,
                          const std::string& title, std::ostream& log) {
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << ReportToJson(result.config, result.runs, result.comparisons, o.per_request).dump(1)
      << "\n";
    f.close();
    if (!f) return absl::DataLossError(absl::StrCat("cannot write ", o.json_out));
    log << "weft-bench: wrote " << o.json_out << "\n";
  }
  if (!o.plot_out.empty()) {
    absl::Status s = RenderPlot(result.runs, result.targets, result.levels, title, o.plot_out);
    if (s.ok()) {
      log << "weft-bench: wrote " << o.plot_out << "\n";
    } else {
      log << "weft-bench: warning: no plot: " << s << "\n";
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BenchOptions::Validate() const {
  if (targets.empty() && dump_trace.empty()) {
    return absl::InvalidArgumentError("give at least one --target (or --dump_trace)");
  }
  if (trace_file.empty()) WEFT_RETURN_IF_ERROR(trace.Validate());
  WEFT_RETURN_IF_ERROR(request.Validate());
  if (warmup_requests < 0) return absl::InvalidArgumentError("warmup_requests must be >= 0");
  if (pairs < 0) return absl::InvalidArgumentError("pairs must be >= 0");
  if (replay_arrivals && trace_file.empty()) {
    return absl::InvalidArgumentError("--replay_arrivals needs --trace_file");
  }
  if (replay_arrivals && !rates.empty()) {
    return absl::InvalidArgumentError("--replay_arrivals and --rate are exclusive");
  }
  for (double r : rates) {
    if (!(r > 0) || !std::isfinite(r)) return absl::InvalidArgumentError("rates must be > 0");
  }
  if (rates.empty() && !replay_arrivals) {
    if (concurrency.empty()) return absl::InvalidArgumentError("no --concurrency levels");
    for (int32_t c : concurrency) {
      if (c < 1) return absl::InvalidArgumentError("concurrency levels must be >= 1");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BenchResult> RunBench(const BenchOptions& o, std::ostream& out,
                                     std::ostream& log) {
  WEFT_RETURN_IF_ERROR(o.Validate());
  WEFT_ASSIGN_OR_RETURN(const std::vector<TraceRequest> base, LoadTrace(o));
  BenchResult result;
  result.levels = MakeLevels(o);
  if (!o.dump_trace.empty()) {
    // Unsalted, with the first rate's Poisson arrivals when there is one.
    std::vector<TraceRequest> dump = base;
    if (result.levels[0].mode == LoadMode::kPoisson) {
      AssignPoissonArrivals(result.levels[0].value, o.trace.seed, &dump);
    }
    WEFT_RETURN_IF_ERROR(WriteTraceFile(o.dump_trace, dump));
    log << "weft-bench: wrote " << base.size() << " requests to " << o.dump_trace << "\n";
  }
  if (o.targets.empty()) return result;

  std::vector<std::unique_ptr<Target>> targets;
  for (const std::string& spec : o.targets) {
    WEFT_ASSIGN_OR_RETURN(std::unique_ptr<Target> t, MakeTarget(spec, o.request));
    result.targets.push_back(t->label());
    targets.push_back(std::move(t));
  }
  result.config = ConfigJson(o, result.targets, result.levels, base);
  const int32_t pairs = NumPairs(o);
  const std::string trace_name =
      o.trace_file.empty() ? std::string(TraceKindName(o.trace.kind))
                           : o.trace_file.substr(o.trace_file.rfind('/') + 1);
  out << absl::StrFormat("weft-bench: trace %s, %d requests, seed %d; %d pair(s) per level; %s\n",
                         trace_name, base.size(), o.trace.seed, pairs,
                         result.config["cpu_model"].get<std::string>());
  if (o.warmup_requests > 0) {
    for (auto& t : targets) Warmup(*t, o, log);
  }

  for (int32_t li = 0; li < static_cast<int32_t>(result.levels.size()); ++li) {
    const LoadLevel& level = result.levels[li];
    for (int32_t p = 0; p < pairs; ++p) {
      const std::vector<TraceRequest> trace =
          TraceForRun(o, base, level, static_cast<uint64_t>(li) * pairs + p + 1);
      for (int32_t ti = 0; ti < static_cast<int32_t>(targets.size()); ++ti) {
        RunResult run = MeasureRun(*targets[ti], o, trace, level, li, ti, p, pairs);
        result.num_failed += run.summary.num_failed;
        result.runs.push_back(std::move(run));
      }
    }
    std::vector<Comparison> cmp = CompareLevel(result.runs, li, result.targets);
    PrintLevelTable(out, absl::StrCat(level.Label(), " | ", trace_name, " | ", base.size(),
                                      " requests"),
                    result.runs, li, cmp);
    out.flush();
    for (Comparison& c : cmp) result.comparisons.push_back(std::move(c));
  }

  const std::string title =
      absl::StrFormat("weft-bench: %s, %d requests (%s)", trace_name, base.size(),
                      result.config["cpu_model"].get<std::string>());
  WEFT_RETURN_IF_ERROR(WriteOutputs(o, result, title, log));
  if (result.num_failed > 0) {
    log << "weft-bench: warning: " << result.num_failed << " measured requests failed\n";
  }
  return result;
}

}  // namespace bench
}  // namespace weft
