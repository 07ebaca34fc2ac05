// Request and Sequence: the scheduler's state for one client request and for each of
// its n samples. A sample is its own sequence (its own tokens, block table, stop
// state); samples 1..n-1 of a fresh request wait "awaiting fork" and are forked from
// sample 0 when its prompt is computed, sharing the prompt's blocks.
//
// Token accounting (vLLM v1 style; there is no prefill or decode phase):
//   token_ids             prompt then the outputs whose values are known;
//   num_pending_samples   tokens sampled by steps still in flight (values unknown);
//   logical length L      = token_ids.size() + num_pending_samples;
//   num_computed_tokens   positions whose KV is computed or planned (advanced when a
//                         step is planned, not when it returns);
//   uncomputed            = L - num_computed_tokens: ≥ 2 prefill (or recompute), 1 a
//                         decode (or the last prompt token), for a running sequence.
// A step samples for a sequence when it schedules up to L; the worker then feeds its
// own sampled token as the next decode's input, so a decode may be planned before the
// previous token came back (pipelining).
//
// Ownership: a Request owns its Sequences (stable addresses: other structures hold
// Sequence*); the Scheduler owns Requests. Thread-safety: thread-compatible.
#ifndef WEFT_SCHEDULER_SEQUENCE_H_
#define WEFT_SCHEDULER_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/strong_id.h"
#include "scheduler/grammar/async_grammar.h"
#include "scheduler/grammar/sequence_grammar.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/request_spec.h"
#include "scheduler/stop_checker.h"
#include "scheduler/token_text_source.h"
#include "scheduler/types.h"

namespace weft {

class Replica;
struct Request;

enum class SequenceState : uint8_t {
  kWaiting,    // in a replica's waiting queue, never ran there (or awaiting fork)
  kRunning,    // holds blocks on its replica; in the running set
  kPreempted,  // in the waiting queue after preemption; recomputes when resumed
  kFinished,
};

// Queue order: higher priority first, then earlier arrival, then request id, then
// sample. The running set uses the same order; its last element is the preemption
// victim (lowest priority, latest arrival).
struct SeqKey {
  int64_t neg_priority = 0;  // 64 bits: -INT32_MIN must not wrap to the top priority
  absl::Time arrival;
  int64_t request_id = 0;
  int32_t sample_index = 0;

  friend bool operator<(const SeqKey& a, const SeqKey& b) {
    return std::tie(a.neg_priority, a.arrival, a.request_id, a.sample_index) <
           std::tie(b.neg_priority, b.arrival, b.request_id, b.sample_index);
  }
};

struct Sequence {
  // `request`'s id, prompt and stopping parameters must be set already.
  Sequence(Request* request, int32_t sample_index, const std::vector<std::string>* stops);
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  Request* const request;
  const int32_t sample_index;
  // Copies of request fields read on every step (saves a pointer chase per token).
  const RequestId request_id;
  const int32_t prompt_len;
  const int32_t max_tokens;
  SequenceState state = SequenceState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;

  std::vector<int32_t> token_ids;
  int32_t num_computed_tokens = 0;
  int32_t num_pending_samples = 0;
  std::vector<BlockHash> block_hashes;  // of the full blocks of token_ids

  // Placement. `replica` is set while waiting in a queue or running.
  Replica* replica = nullptr;
  BlockTable blocks;
  int32_t num_blocks_sent = 0;   // leading block ids the worker has
  bool known_to_worker = false;  // the worker holds state for it (sent as new)
  bool ever_sent = false;        // sent as new at least once (anywhere)
  bool awaiting_fork = false;    // sample > 0 of a fresh request: not queued
  bool counted_prefilling = false;  // counted in its replica's num_prefilling
  int32_t queued_demand_blocks = 0;  // its share of the replica's waiting demand
  int64_t last_scheduled_step = 0;   // step id (on its replica) that last scheduled it
  int32_t num_preemptions = 0;

  StopChecker stop_checker;
  // Structured output: the sequence's grammar state (null: free text). It has accepted
  // every token of token_ids past the prompt; never pipelined (sequence_grammar.h); its
  // next mask is computed on the scheduler's mask threads (async_grammar.h).
  std::unique_ptr<AsyncGrammar> grammar;

  int32_t num_prompt_tokens() const { return prompt_len; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens(); }
  // What the client gets (and usage counts): every output but an ending EOS.
  int32_t num_completion_tokens() const {
    return num_output_tokens() - (finish_reason == FinishReason::kStopEos ? 1 : 0);
  }
  int32_t logical_length() const { return num_tokens() + num_pending_samples; }
  int32_t num_uncomputed() const { return logical_length() - num_computed_tokens; }
  bool finished() const { return state == SequenceState::kFinished; }
  SequenceRef ref() const { return SequenceRef{request_id, sample_index}; }
  SeqKey key() const;
};

struct Request {
  RequestId id;
  int32_t num_prompt_tokens = 0;
  SamplingConfig sampling;  // seed always set
  StopConditions stopping;
  int32_t priority = 0;
  absl::Time arrival;
  absl::Time deadline = absl::InfiniteFuture();
  std::vector<std::unique_ptr<Sequence>> seqs;
  int32_t num_unfinished = 0;
  int32_t num_awaiting_fork = 0;  // samples still waiting for their fork from sample 0
  int32_t num_retries = 0;
  bool cached_prompt_recorded = false;
  RequestUsage usage;
  // Structured output: makes each sequence's grammar (null: free text).
  std::shared_ptr<const SequenceGrammarFactory> grammar;
  // Generated under a tool-call grammar (IsToolCallGrammar): its text is built from
  // TokenTextSource::ToolCallBytes, so the tool-call markers the model wrote as control
  // tokens reach the tool-call parser (which keeps them out of the visible text).
  bool tool_call_text = false;

  // True when every sequence finished and no step in flight still references one.
  bool Quiescent() const;
};

// What decides when a sequence stops, besides its request's own parameters.
struct StopContext {
  absl::Span<const int32_t> eos_token_ids;
  const TokenTextSource* text = nullptr;  // null: no text (stop strings rejected)
};

// Appends a sampled token to `seq`'s outputs, appends the text that may be streamed
// now to `*delta`, and returns why the sequence must finish (kNone to go on). Order
// of checks: EOS (unless ignore_eos), stop token ids, stop strings, max_tokens.
// The token's text is ctx.text->TokenBytes, or ToolCallBytes for a request with
// tool_call_text. EOS and stop tokens are kept in the token ids but add no text; a stop token is
// returned to the client, EOS is not (generate.proto). The caller finishes the sequence
// and, unless the reason is kStopString, flushes its held text.
FinishReason AppendTokenAndCheckStop(Sequence* seq, int32_t token, const StopContext& ctx,
                                     std::string* delta);

}  // namespace weft

#endif  // WEFT_SCHEDULER_SEQUENCE_H_
