// StepPlan: what one replica's workers execute in one iteration, as a diff against the
// per-sequence state they already hold (vLLM v1's SchedulerOutput). Plain data; the
// services layer maps it 1:1 onto the worker protocol's message. The same plan goes to
// every rank of the replica.
//
// Worker contract — how a worker's state cache applies plan `step_id`:
//  0. Plans of a replica are numbered 1, 2, 3, ...; a worker that sees a gap missed a
//     plan: it drops all state and re-syncs, never guesses.
//  1. finished_ids, preempted_ids: drop that sequence's state (the KV blocks are the
//     scheduler's: nothing to free). A sequence in either list never appears in the
//     same plan's new_requests or cached_requests.
//  2. new_requests: create the sequence's state — or replace it when `resumed` (sent
//     before: after a preemption or on another replica; treat exactly like new):
//       tokens        = token_ids (prompt, then any outputs already generated),
//       block table   = block_ids,
//       num_computed  = num_computed_tokens: KV of positions [0, num_computed_tokens)
//                       is already in the cache (prefix-cache hit, or a fork's shared
//                       prompt) and is never rewritten.
//  3. cached_requests: append new_block_ids to its block table; num_computed_tokens
//     equals the worker's own count (a check, not an update).
//  4. Forward pass over the flattened scheduled tokens of all sequences. Token i
//     (0 ≤ i < num_scheduled_tokens) of a sequence is position
//        pos = num_computed + i,  its input id tokens[pos],
//     its K/V written to slot  block_ids[pos / block_size] * block_size
//                              + pos % block_size,
//     and its attention reads positions [0, pos] through the block table. For a
//     decode, tokens[pos] is the token the worker itself sampled last (the scheduler
//     may not have it yet). No slot is written by two sequences in one step. Then
//     num_computed += num_scheduled_tokens.
//  5. Sampling: every entry with do_sample samples one token from the logits of its
//     last scheduled position, with the request's seed and counter (sample_index,
//     output index). A new entry with fork_parent_sample_index ≥ 0 (a forked sample of
//     an n > 1 request) has num_scheduled_tokens 0 and samples from the logits of that
//     sibling's last position in this same step. The worker appends each sampled
//     token to that sequence's tokens (the next decode's input).
//  6. block_copies run after this step's forward pass, before the next step: copy all
//     KV slots of `src` into `dst` (every layer). Forks produce them: dst is a child's
//     fresh block, src its parent's partial prompt block written in this step.
//  7. Results: the sampled tokens, for the do_sample entries of new_requests in order,
//     then those of cached_requests in order (num_sampled in all); one result per
//     plan, even an empty one.
//
// Thread-safety: a value type.
#ifndef WEFT_SCHEDULER_STEP_PLAN_H_
#define WEFT_SCHEDULER_STEP_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "common/strong_id.h"
#include "scheduler/types.h"

namespace weft {

// A sequence the worker does not hold yet (full data, sent once per placement).
struct NewSequenceData {
  SequenceRef seq;
  std::vector<int32_t> token_ids;
  int32_t num_prompt_tokens = 0;
  SamplingParams sampling;
  std::vector<BlockId> block_ids;
  int32_t num_computed_tokens = 0;
  int32_t num_scheduled_tokens = 0;
  bool do_sample = false;
  int32_t fork_parent_sample_index = -1;
  bool resumed = false;
};

// A sequence the worker already holds: only what changed.
struct CachedSequenceData {
  SequenceRef seq;
  absl::InlinedVector<BlockId, 4> new_block_ids;
  int32_t num_computed_tokens = 0;
  int32_t num_scheduled_tokens = 0;
  bool do_sample = false;
};

struct StepPlan {
  ReplicaId replica;
  StepId step_id;  // 0 when the plan is empty (nothing to send)
  std::vector<NewSequenceData> new_requests;
  std::vector<CachedSequenceData> cached_requests;
  std::vector<SequenceRef> finished_ids;
  std::vector<SequenceRef> preempted_ids;
  std::vector<BlockCopy> block_copies;
  int32_t total_num_scheduled_tokens = 0;
  int32_t num_sampled = 0;  // results the worker returns

  // Nothing to send: no sequence scheduled or created, nothing to drop or copy.
  bool empty() const {
    return new_requests.empty() && cached_requests.empty() && finished_ids.empty() &&
           preempted_ids.empty() && block_copies.empty();
  }
  // Empties every list, keeping capacity (plans are reused across steps).
  void Clear();
  // One line per entry, for logs and test failures.
  std::string DebugString() const;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_STEP_PLAN_H_
