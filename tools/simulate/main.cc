// weft-simulate: replays a seeded trace through the real scheduler core with a worker
// cost model on a virtual clock, once per policy, and prints one table row per policy
// (optionally JSON). Example — continuous vs static batching, GPU-like cost model:
//
//   weft-simulate --trace=sharegpt --num_requests=10000 --concurrency=64
//       --policies=decode-first,prefill-first,static --cost=gpu
//
// Output: the table on stdout; errors on stderr.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "tools/simulate/simulator.h"

ABSL_FLAG(std::string, trace, "sharegpt", "trace preset: sharegpt, lowvar or fixed");
ABSL_FLAG(int32_t, num_requests, 2000, "requests in the trace");
ABSL_FLAG(uint64_t, seed, 1, "trace seed");
ABSL_FLAG(double, output_sigma, -1, "override the output-length sigma (lognormal); <0 keeps");
ABSL_FLAG(double, output_median, -1, "override the output-length median; <0 keeps");
ABSL_FLAG(int32_t, concurrency, 64, "closed-loop concurrency; 0 = open loop at --rate");
ABSL_FLAG(double, rate, 0, "Poisson arrival rate (requests/s) for the open loop");
ABSL_FLAG(std::string, policies, "decode-first,prefill-first,static", "policies to compare");
ABSL_FLAG(std::string, cost, "gpu", "cost model preset: gpu, gpu-mha or cpu");
ABSL_FLAG(double, step_ms, -1, "override a: fixed ms per step");
ABSL_FLAG(double, ms_per_token, -1, "override b: ms per scheduled token above the knee");
ABSL_FLAG(double, ms_per_context_token, -1, "override c: ms per attended context token");
ABSL_FLAG(int32_t, knee_tokens, -1, "override the knee (tokens per step at flat cost)");
ABSL_FLAG(int32_t, num_blocks, 65536, "KV blocks of the replica");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV block");
ABSL_FLAG(int32_t, max_num_seqs, 256, "sequence cap per step");
ABSL_FLAG(int32_t, max_num_batched_tokens, 2048, "token budget per step");
ABSL_FLAG(std::string, json, "", "also write the results as JSON to this file");

namespace weft::sim {
namespace {

absl::StatusOr<CostModel> CostFromFlags() {
  absl::StatusOr<CostModel> cost = CostModelPreset(absl::GetFlag(FLAGS_cost));
  if (!cost.ok()) return cost;
  if (absl::GetFlag(FLAGS_step_ms) >= 0) cost->step_ms = absl::GetFlag(FLAGS_step_ms);
  if (absl::GetFlag(FLAGS_ms_per_token) >= 0) cost->ms_per_token = absl::GetFlag(FLAGS_ms_per_token);
  if (absl::GetFlag(FLAGS_ms_per_context_token) >= 0) {
    cost->ms_per_context_token = absl::GetFlag(FLAGS_ms_per_context_token);
  }
  if (absl::GetFlag(FLAGS_knee_tokens) >= 0) cost->knee_tokens = absl::GetFlag(FLAGS_knee_tokens);
  return cost;
}

absl::StatusOr<TraceOptions> TraceFromFlags() {
  absl::StatusOr<TraceOptions> t = TracePreset(absl::GetFlag(FLAGS_trace));
  if (!t.ok()) return t;
  t->num_requests = absl::GetFlag(FLAGS_num_requests);
  t->seed = absl::GetFlag(FLAGS_seed);
  t->arrival_rate = absl::GetFlag(FLAGS_concurrency) == 0 ? absl::GetFlag(FLAGS_rate) : 0;
  if (absl::GetFlag(FLAGS_output_sigma) >= 0) t->output.sigma = absl::GetFlag(FLAGS_output_sigma);
  if (absl::GetFlag(FLAGS_output_median) >= 0) {
    t->output.median = absl::GetFlag(FLAGS_output_median);
  }
  if (absl::Status s = t->Validate(); !s.ok()) return s;
  return t;
}

void PrintHeader(const TraceOptions& t, const std::vector<TraceRequest>& trace,
                 const CostModel& cost) {
  double prompt = 0, output = 0;
  for (const TraceRequest& r : trace) {
    prompt += r.prompt_token_ids.size();
    output += r.output_len;
  }
  const int32_t concurrency = absl::GetFlag(FLAGS_concurrency);
  std::printf("trace %s: %d requests (seed %llu), prompt median %.0f sigma %.2f (mean %.1f), "
              "output median %.0f sigma %.2f (mean %.1f)\n",
              absl::GetFlag(FLAGS_trace).c_str(), t.num_requests,
              static_cast<unsigned long long>(t.seed), t.prompt.median, t.prompt.sigma,
              prompt / trace.size(), t.output.median, t.output.sigma, output / trace.size());
  std::printf("load: %s; KV pool %d blocks x %d tokens; max_num_seqs %d; token budget %d\n",
              concurrency > 0 ? absl::StrFormat("closed loop, concurrency %d", concurrency).c_str()
                              : absl::StrFormat("open loop, %.2f req/s", t.arrival_rate).c_str(),
              absl::GetFlag(FLAGS_num_blocks), absl::GetFlag(FLAGS_block_size),
              absl::GetFlag(FLAGS_max_num_seqs), absl::GetFlag(FLAGS_max_num_batched_tokens));
  std::printf("cost model: %s\n\n", cost.Describe().c_str());
  std::printf("%-14s %10s %8s %9s %9s %8s %8s %9s %7s %7s %8s %8s\n", "policy", "out tok/s",
              "req/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "e2e p50", "steps", "batch",
              "preempt", "peak KV");
}

void PrintRow(const SimResult& r) {
  std::printf("%-14s %10.1f %8.2f %8.3fs %8.3fs %6.1fms %6.1fms %8.2fs %7lld %7.1f %8lld %8d\n",
              r.policy.c_str(), r.output_tokens_per_s, r.requests_per_s, r.ttft.p50_s,
              r.ttft.p99_s, r.itl.p50_s * 1e3, r.itl.p99_s * 1e3, r.e2e.p50_s,
              static_cast<long long>(r.steps), r.mean_seqs_per_step,
              static_cast<long long>(r.preemptions), r.peak_kv_blocks_used);
}

int Main() {
  absl::StatusOr<CostModel> cost = CostFromFlags();
  absl::StatusOr<TraceOptions> trace_options = TraceFromFlags();
  for (const absl::Status& s : {cost.status(), trace_options.status()}) {
    if (!s.ok()) {
      std::cerr << "weft-simulate: " << s << "\n";
      return 2;
    }
  }
  const std::vector<TraceRequest> trace = GenerateTrace(*trace_options);
  PrintHeader(*trace_options, trace, *cost);
  std::vector<SimResult> results;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_policies), ',')) {
    absl::StatusOr<PolicyKind> policy = ParsePolicyKind(name);
    if (!policy.ok()) {
      std::cerr << "weft-simulate: " << policy.status() << "\n";
      return 2;
    }
    SimulatorOptions o;
    o.scheduler.policy = *policy;
    o.scheduler.block_size = absl::GetFlag(FLAGS_block_size);
    o.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
    o.scheduler.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
    o.scheduler.limits.max_model_len = 1 << 16;
    o.scheduler.limits.max_n = std::min(o.scheduler.limits.max_n, o.scheduler.max_num_seqs);
    o.scheduler.max_waiting = trace_options->num_requests + 1;
    o.num_blocks = absl::GetFlag(FLAGS_num_blocks);
    o.cost = *cost;
    o.concurrency = absl::GetFlag(FLAGS_concurrency);
    absl::StatusOr<SimResult> r = Simulate(trace, o);
    if (!r.ok()) {
      std::cerr << "weft-simulate: " << name << ": " << r.status() << "\n";
      return 1;
    }
    PrintRow(*r);
    std::fflush(stdout);
    results.push_back(*r);
  }
  const SimResult* static_result = nullptr;
  for (const SimResult& r : results) static_result = r.policy == "static" ? &r : static_result;
  if (static_result != nullptr) {
    std::printf("\noutput tok/s vs static:");
    for (const SimResult& r : results) {
      if (&r != static_result) {
        std::printf("  %s %.2fx", r.policy.c_str(),
                    r.output_tokens_per_s / static_result->output_tokens_per_s);
      }
    }
    std::printf("\n");
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    std::vector<std::string> rows;
    for (const SimResult& r : results) rows.push_back(r.ToJson());
    out << "[\n  " << absl::StrJoin(rows, ",\n  ") << "\n]\n";
    if (!out) {
      std::cerr << "weft-simulate: cannot write " << path << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace weft::sim

int main(int argc, char** argv) {
  weft::ParseFlags(argc, argv, "Replays a trace through the Weft scheduler on a virtual clock.");
  return weft::sim::Main();
}
