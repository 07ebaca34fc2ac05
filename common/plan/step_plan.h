// The plan contract between weft-scheduler and weft-worker: the one StepPlan type (the
// worker protocol's message, proto/weft/v1/worker.proto — plain protobuf, no gRPC), the
// sequence ids it uses, and the rules a worker follows to apply it. The scheduler core
// writes plans in this type directly; the worker applies them with StateCache
// (state_cache.h, the only implementation of these rules — the scheduler's test worker
// runs it too). A plan is what one replica's workers execute in one iteration, as a diff
// against the per-sequence state they already hold (vLLM v1's SchedulerOutput); the
// same plan goes to every rank of the replica.
//
// How a worker applies plan `step_id`:
//  0. Plans of a replica are numbered 1, 2, 3, ...; a worker that sees a gap missed a
//     plan: it drops all state and re-syncs, never guesses.
//  1. finished_seq_ids, preempted_seq_ids: drop that sequence's state (the KV blocks are
//     the scheduler's: nothing to free). A sequence in either list never appears in the
//     same plan's new_sequences or cached_sequences.
//  2. new_sequences: create the sequence's state — or replace it when `resumed` (sent
//     before: after a preemption or on another replica; treat exactly like new):
//       tokens        = token_ids (prompt, then any outputs already generated),
//       block table   = block_ids,
//       num_computed  = num_computed_tokens: KV of positions [0, num_computed_tokens)
//                       is already in the cache (prefix-cache hit, or a fork's shared
//                       prompt) and is never rewritten.
//     Every entry computes at least one token, except a fork (below), which computes
//     none; its sampling settings pass SamplingConfig::Check.
//  3. cached_sequences: append new_block_ids to its block table; num_computed_tokens
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
//  5. Sampling: every entry with do_sample (exactly those whose step reaches the end of
//     their known tokens) samples one token from the logits of its last scheduled
//     position, with the request's seed and counter (sample_index, output index). A new
//     entry with fork_parent_seq_id != 0 (a forked sample of an n > 1 request) has
//     num_scheduled_tokens 0 and samples from the logits of that sibling's last position
//     in this same step (the sibling is a new or cached entry of the plan that computes
//     and samples: a prompt chunked over several steps forks when it is cached). The
//     worker appends each sampled token to that sequence's tokens (the next decode's
//     input).
//  6. block_copies run after this step's forward pass, before the next step: copy all
//     KV slots of `src` into `dst` (every layer). Forks produce them: dst is a child's
//     fresh block, src its parent's partial prompt block written in this step.
//  7. Results: the sampled tokens, for the do_sample entries of new_sequences in order,
//     then those of cached_sequences in order (num_sampled in all); one result per
//     plan, even an empty one.
//
// Thread-safety: value types and pure functions.
#ifndef WEFT_COMMON_PLAN_STEP_PLAN_H_
#define WEFT_COMMON_PLAN_STEP_PLAN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "common/sampling/sampling_config.h"
#include "common/strong_id.h"
#include "weft/v1/worker.pb.h"

namespace weft {

using StepPlan = weft::v1::StepPlan;

// One sequence of a request: sample `sample_index` (0 .. n-1) of request `request_id`.
// On the wire it is one id, seq_id = request_id * kMaxSamplesPerRequest + sample_index,
// unique for the scheduler's lifetime and never 0 (request ids start at 1).
struct SequenceRef {
  static constexpr int32_t kMaxSamplesPerRequest = 256;

  RequestId request_id;
  int32_t sample_index = 0;

  int64_t seq_id() const { return request_id.value() * kMaxSamplesPerRequest + sample_index; }
  static SequenceRef FromSeqId(int64_t id) {
    return SequenceRef{RequestId(id / kMaxSamplesPerRequest),
                       static_cast<int32_t>(id % kMaxSamplesPerRequest)};
  }

  friend bool operator==(const SequenceRef& a, const SequenceRef& b) {
    return a.request_id == b.request_id && a.sample_index == b.sample_index;
  }
  friend bool operator!=(const SequenceRef& a, const SequenceRef& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const SequenceRef& r) {
    return H::combine(std::move(h), r.request_id, r.sample_index);
  }
};

// Nothing to send: no sequence scheduled or created, nothing to drop or copy.
bool PlanIsEmpty(const StepPlan& plan);

// The sequences the plan's result carries a token for, in result order (rule 7).
void SampledSequences(const StepPlan& plan, std::vector<SequenceRef>* out);

// A new sequence's sampling settings on the wire (weft.v1.SamplingSpec): its request's,
// plus `sample_index`, the sequence's sample of its request (the Philox counter word 0).
void ToSpec(const SamplingConfig& config, int32_t sample_index, weft::v1::SamplingSpec* out);
SamplingConfig FromSpec(const weft::v1::SamplingSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_PLAN_STEP_PLAN_H_
