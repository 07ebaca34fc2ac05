// SchedulerOptions: every knob of the scheduler core, with defaults and Validate();
// ReplicaOptions: what a replica brings (its KV block count); SchedulerCounters: the
// monotonically increasing counters the services layer exports.
// Thread-safety: value types.
#ifndef WEFT_SCHEDULER_SCHEDULER_OPTIONS_H_
#define WEFT_SCHEDULER_SCHEDULER_OPTIONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/policy.h"
#include "scheduler/request_spec.h"

namespace weft {

struct SchedulerOptions {
  PolicyKind policy = PolicyKind::kDecodeFirst;
  // Tokens per KV block; every replica must use the same (prefix hashes depend on it).
  int32_t block_size = 16;
  // Token budget of one iteration (all sequences of a replica together).
  int32_t max_num_batched_tokens = 2048;
  // Sequences running at once on one replica.
  int32_t max_num_seqs = 256;
  bool enable_prefix_caching = true;
  // Admission keeps this fraction of a replica's blocks free (anti-thrashing), unless
  // the replica runs nothing.
  double admission_watermark = 0.01;
  // A sequence preempted this many times is no longer chosen as a victim (it waits
  // for blocks instead), so no request is preempted forever.
  int32_t max_preemptions_per_sequence = 4;
  // Steps a replica may have in flight (1 = synchronous; 2 = plan t+1 while t runs).
  int32_t max_steps_in_flight = 1;
  // Waiting queue bound (sequences, all replicas); beyond it AddRequest fails with
  // RESOURCE_EXHAUSTED.
  int32_t max_waiting = 4096;
  // Re-queues after a replica is removed before a request ends "unavailable".
  int32_t max_retries = 2;
  // What a request may ask for (request_spec.h); limits.max_n <= max_num_seqs.
  RequestLimits limits;
  // The model's end-of-sequence token ids.
  std::vector<int32_t> eos_token_ids;
  // Structured output: threads computing constrained sequences' next-token masks as
  // their tokens come back (0: on the planning thread, inline), and how long one plan
  // waits for masks not ready yet before leaving those rows for a later step.
  int32_t grammar_mask_threads = 0;
  absl::Duration grammar_mask_wait = absl::Milliseconds(1);

  absl::Status Validate() const;
};

struct ReplicaOptions {
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // must equal SchedulerOptions::block_size
  // Steps this replica may have in flight; 0: SchedulerOptions::max_steps_in_flight.
  int32_t max_steps_in_flight = 0;

  absl::Status Validate() const;
};

struct SchedulerCounters {
  int64_t requests_added_total = 0;
  int64_t requests_finished_total = 0;
  int64_t preemptions_total = 0;
  int64_t prefix_cache_query_tokens_total = 0;  // prompt tokens looked up at admission
  int64_t prefix_cache_hit_tokens_total = 0;
  int64_t steps_total = 0;
  int64_t scheduled_tokens_total = 0;
  int64_t discarded_tokens_total = 0;  // sampled after the sequence had finished
  int64_t retries_total = 0;
  // Structured output: token masks filled into plans, the time filling them, and
  // sampled tokens a grammar refused (a worker ignored its mask).
  int64_t grammar_masks_total = 0;
  double grammar_mask_seconds_total = 0.0;  // the fills' own time, on whichever thread
  // Constrained rows left for a later step because their mask was not ready in time.
  int64_t grammar_mask_waits_total = 0;
  int64_t grammar_violations_total = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SCHEDULER_OPTIONS_H_
