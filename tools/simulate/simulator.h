// Simulator: replays a trace through the real scheduler core (one replica) on a
// virtual clock. Each planned step advances the clock by the cost model's step time;
// "workers" return random token ids (requests use ignore_eos, so lengths follow the
// trace). Load is either a closed loop (`concurrency` requests in the system; a new one
// arrives when one finishes) or open (the trace's Poisson arrival times).
//
// Reports throughput, TTFT, inter-token latency and end-to-end latency percentiles,
// step counts and KV usage. Deterministic for a given trace, options and seed.
// Thread-safety: Simulate is reentrant (no shared state).
#ifndef WEFT_TOOLS_SIMULATE_SIMULATOR_H_
#define WEFT_TOOLS_SIMULATE_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/scheduler_options.h"
#include "tools/simulate/cost_model.h"
#include "tools/simulate/trace.h"

namespace weft::sim {

// The trace's token ids (trace.cc) and the sampled ones are below this.
inline constexpr int32_t kSimulatedVocab = 40000;

struct SimulatorOptions {
  SimulatorOptions() { scheduler.limits.vocab_size = kSimulatedVocab; }

  SchedulerOptions scheduler;  // includes the policy
  int32_t num_blocks = 65536;  // the replica's KV pool (× block_size tokens)
  CostModel cost;
  // Closed loop with this many requests in the system; 0 = open loop (trace arrivals).
  int32_t concurrency = 64;
  uint64_t seed = 7;  // for the sampled token ids

  absl::Status Validate() const;
};

struct LatencyStats {
  double mean_s = 0;
  double p50_s = 0;
  double p90_s = 0;
  double p99_s = 0;
};

struct SimResult {
  std::string policy;
  int32_t num_requests = 0;
  double duration_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;  // prompt + output
  double requests_per_s = 0;
  LatencyStats ttft;
  LatencyStats itl;
  LatencyStats e2e;
  int64_t steps = 0;
  double mean_seqs_per_step = 0;
  double mean_tokens_per_step = 0;
  int64_t preemptions = 0;
  int32_t peak_kv_blocks_used = 0;

  std::string ToJson() const;
};

absl::StatusOr<SimResult> Simulate(const std::vector<TraceRequest>& trace,
                                   const SimulatorOptions& options);

// Nearest-rank percentile statistics (sorts `samples`).
LatencyStats Summarize(std::vector<double>* samples);

}  // namespace weft::sim

#endif  // WEFT_TOOLS_SIMULATE_SIMULATOR_H_
