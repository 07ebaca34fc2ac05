// weft-bench: drives running servers with a seeded trace and reports throughput and
// latency (see bench.h; metric definitions in stats.h).
//
//   weft-bench --target=weft=grpc://127.0.0.1:50051 [--target=llama=http://127.0.0.1:8080]
//              [--trace=fixed|sharegpt-like|short|long-prompt | --trace_file=t.jsonl]
//              [--num_requests=128 --seed=1] [--concurrency=1,4,16,64 | --rate=2,4
//              | --replay_arrivals] [--pairs=N] [--warmup_requests=N]
//              [--json_out=r.json [--per_request]] [--plot_out=r.png] [--dump_trace=t.jsonl]
//
// --target may be repeated or comma-separated; with several targets the runs at each
// level are interleaved A B A B for --pairs repetitions and the table shows the first
// target's per-pair ratios over each other target and their median.
// Tables go to stdout; progress, notes and warnings to stderr.
// Exit status: 0 ok; 1 the benchmark could not run; 2 bad flags; 3 some measured
// requests failed (they are in the table and the JSON).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flags.h"
#include "tools/bench/bench.h"

ABSL_FLAG(std::vector<std::string>, target, {},
          "[label=]grpc://host:port (Weft) or [label=]http://host:port (llama-server); "
          "repeat or comma-separate for an interleaved comparison");
ABSL_FLAG(std::string, trace, "sharegpt-like", "fixed, sharegpt-like, short or long-prompt");
ABSL_FLAG(std::string, trace_file, "", "JSONL trace ({\"prompt\":[ids],\"max_tokens\":N,"
                                       "\"arrival_s\":t} per line) instead of --trace");
ABSL_FLAG(std::string, dump_trace, "", "write the trace as JSONL here (alone: and exit)");
ABSL_FLAG(int32_t, num_requests, 128,
          "requests per run (with --trace_file: its first N lines; 0 = all)");
ABSL_FLAG(uint64_t, seed, 1, "trace seed (lengths, token ids, Poisson arrivals)");
ABSL_FLAG(int32_t, min_token_id, 300, "smallest prompt token id");
ABSL_FLAG(int32_t, max_token_id, 40000, "largest prompt token id");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "4", "16", "64"}),
          "closed-loop concurrency levels");
ABSL_FLAG(std::vector<std::string>, rate, {},
          "Poisson arrival rates in requests/s (replaces --concurrency)");
ABSL_FLAG(bool, replay_arrivals, false, "send at the trace file's arrival_s times");
ABSL_FLAG(int32_t, pairs, 0, "repetitions per level (0: 1 for one target, 3 for several)");
ABSL_FLAG(int32_t, warmup_requests, 0, "unmeasured requests per target before the runs");
ABSL_FLAG(bool, salt_prompts, true,
          "vary each prompt's first token per (level, pair) so prefix caches cannot hit");
ABSL_FLAG(std::string, model, "", "gRPC model name (empty: the only one)");
ABSL_FLAG(double, temperature, 0, "sampling temperature (0 = greedy)");
ABSL_FLAG(int32_t, grpc_streams_per_connection, 64,
          "gRPC targets: streams per HTTP/2 connection; more open another connection (the "
          "server's per-connection limit, weft-scheduler's --grpc_max_concurrent_streams "
          "100 by default, would otherwise hold the excess in the client)");
ABSL_FLAG(double, constrained_fraction, 0,
          "gRPC: share of requests with structured output (constraint_json_schema)");
ABSL_FLAG(std::string, constraint_json_schema,
          R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},)"
          R"("items":{"type":"array","items":{"type":"integer"},"maxItems":64}},)"
          R"("required":["name","items"]})",
          "the JSON schema of --constrained_fraction's requests");
ABSL_FLAG(double, timeout_s, 600, "per-request deadline in seconds");
ABSL_FLAG(std::string, json_out, "", "write the JSON report here");
ABSL_FLAG(bool, per_request, false, "include per-request records in the JSON");
ABSL_FLAG(std::string, plot_out, "", "write a PNG plot here (needs gnuplot)");
ABSL_FLAG(std::string, progress, "auto", "auto, bar, lines or off (on stderr)");

namespace {

// absl keeps only the last --target; collect every occurrence from argv.
std::vector<std::string> AllTargets(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    std::string value;
    if (absl::ConsumePrefix(&a, "--target=") || absl::ConsumePrefix(&a, "-target=")) {
      value = std::string(a);
    } else if ((a == "--target" || a == "-target") && i + 1 < argc) {
      value = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view t : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      out.emplace_back(absl::StripAsciiWhitespace(t));
    }
  }
  return out;
}

bool ParseOptions(const std::vector<std::string>& targets, weft::bench::BenchOptions* o) {
  o->targets = targets;
  absl::StatusOr<weft::bench::TraceKind> kind =
      weft::bench::ParseTraceKind(absl::GetFlag(FLAGS_trace));
  if (!kind.ok()) {
    std::cerr << "weft-bench: " << kind.status().message() << "\n";
    return false;
  }
  o->trace.kind = *kind;
  o->trace.num_requests = absl::GetFlag(FLAGS_num_requests);
  o->trace.seed = absl::GetFlag(FLAGS_seed);
  o->trace.min_token_id = absl::GetFlag(FLAGS_min_token_id);
  o->trace.max_token_id = absl::GetFlag(FLAGS_max_token_id);
  o->trace_file = absl::GetFlag(FLAGS_trace_file);
  o->dump_trace = absl::GetFlag(FLAGS_dump_trace);
  o->concurrency.clear();
  for (const std::string& c : absl::GetFlag(FLAGS_concurrency)) {
    int32_t v;
    if (!absl::SimpleAtoi(c, &v)) {
      std::cerr << "weft-bench: bad --concurrency value '" << c << "'\n";
      return false;
    }
    o->concurrency.push_back(v);
  }
  for (const std::string& r : absl::GetFlag(FLAGS_rate)) {
    double v;
    if (!absl::SimpleAtod(r, &v)) {
      std::cerr << "weft-bench: bad --rate value '" << r << "'\n";
      return false;
    }
    o->rates.push_back(v);
  }
  o->replay_arrivals = absl::GetFlag(FLAGS_replay_arrivals);
  o->pairs = absl::GetFlag(FLAGS_pairs);
  o->warmup_requests = absl::GetFlag(FLAGS_warmup_requests);
  o->salt_prompts = absl::GetFlag(FLAGS_salt_prompts);
  o->request.model = absl::GetFlag(FLAGS_model);
  o->request.temperature = absl::GetFlag(FLAGS_temperature);
  o->request.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o->request.constrained_fraction = absl::GetFlag(FLAGS_constrained_fraction);
  o->request.grpc_streams_per_connection = absl::GetFlag(FLAGS_grpc_streams_per_connection);
  o->request.constraint_json_schema = absl::GetFlag(FLAGS_constraint_json_schema);
  o->json_out = absl::GetFlag(FLAGS_json_out);
  o->per_request = absl::GetFlag(FLAGS_per_request);
  o->plot_out = absl::GetFlag(FLAGS_plot_out);
  const std::string p = absl::GetFlag(FLAGS_progress);
  using weft::bench::ProgressMode;
  if (p == "auto") {
    o->progress.mode = ProgressMode::kAuto;
  } else if (p == "bar") {
    o->progress.mode = ProgressMode::kBar;
  } else if (p == "lines") {
    o->progress.mode = ProgressMode::kLines;
  } else if (p == "off") {
    o->progress.mode = ProgressMode::kOff;
  } else {
    std::cerr << "weft-bench: --progress must be auto, bar, lines or off\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> targets = AllTargets(argc, argv);
  weft::ParseFlags(
      argc, argv,
      "weft-bench --target=[label=]grpc://host:port [--target=http://host:port] "
      "[--trace=sharegpt-like] [--concurrency=1,4,16,64 | --rate=R] [--json_out --plot_out]");
  weft::bench::BenchOptions options;
  if (!ParseOptions(targets, &options)) return 2;
  if (absl::Status s = options.Validate(); !s.ok()) {
    std::cerr << "weft-bench: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<weft::bench::BenchResult> result =
      weft::bench::RunBench(options, std::cout, std::cerr);
  if (!result.ok()) {
    std::cerr << "weft-bench: " << result.status() << "\n";
    return result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return result->num_failed > 0 ? 3 : 0;
}
