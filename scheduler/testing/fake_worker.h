// Test doubles for the scheduler core:
//
// FakeModel: a deterministic stand-in for the model. The "KV" of position p is
//   kv(p) = Mix(kv(p-1), token(p), p)        (kv(-1) = 0),
// and the token sampled for output index i of sample j is a function of
// (seed, j, i, kv of the last position). Reference(...) generates a sequence's
// expected tokens, finish reason and text directly, with no scheduler involved.
//
// FakeWorker: the real worker's plan application plus the fake model. Each StepPlan is
// applied by common/plan's StateCache — the same rules, checks and StepBatch that every
// real backend executes — and the fake model then runs over that batch like a backend:
// it writes kv(p) through the block table, reading kv(p-1) back from it, samples the
// do_sample entries (a fork from its parent's last position), and copies blocks after
// the forward pass. A wrong block id, a bad prefix-cache hit, a missing copy or a lost
// diff changes the tokens, so comparing outputs with FakeModel::Reference catches it;
// a plan the real worker would refuse (unknown ids, gaps in step ids, sampling before
// the end, an entry that computes nothing) is an error here too.
//
// Structured output: a sample with a token mask takes the first allowed token at or after
// the model's choice (wrapping around the vocabulary).
//
// FakeTokenText: token id → a few bytes (including split UTF-8 characters).
//
// Thread-safety: thread-compatible. Test-only.
#ifndef WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_
#define WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/plan/state_cache.h"
#include "common/plan/step_plan.h"
#include "scheduler/token_text_source.h"
#include "scheduler/request_spec.h"
#include "scheduler/types.h"

namespace weft {

class FakeTokenText : public TokenTextSource {
 public:
  // A control-token tool-call marker: renders as nothing, "<M>" in tool-call text.
  static constexpr int32_t kMarkerToken = 28;
  absl::string_view TokenBytes(int32_t token_id) const override;
  absl::string_view ToolCallBytes(int32_t token_id) const override {
    return token_id == kMarkerToken ? "<M>" : TokenBytes(token_id);
  }
};

struct ReferenceOutput {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
};

class FakeModel {
 public:
  FakeModel(int32_t vocab_size, std::vector<int32_t> eos_token_ids)
      : vocab_size_(vocab_size), eos_(std::move(eos_token_ids)) {}

  static uint64_t KvAt(uint64_t prev, int32_t token, int32_t pos);
  int32_t Sample(uint64_t seed, int32_t sample_index, int32_t output_index,
                 uint64_t hidden) const;

  // What sample `sample_index` of a request must produce, run alone.
  ReferenceOutput Reference(absl::Span<const int32_t> prompt, uint64_t seed,
                            int32_t sample_index, const StopConditions& stop,
                            const TokenTextSource* text) const;

  int32_t vocab_size() const { return vocab_size_; }

 private:
  int32_t vocab_size_;
  std::vector<int32_t> eos_;
};

class FakeWorker {
 public:
  FakeWorker(int32_t num_blocks, int32_t block_size, const FakeModel* model);

  // Applies `plan` and returns its results (in contract order) in *out.
  absl::Status Execute(const StepPlan& plan, std::vector<StepToken>* out);

  int32_t num_sequences() const { return static_cast<int32_t>(cache_.num_sequences()); }
  int64_t num_tokens_computed() const { return num_tokens_computed_; }

 private:
  // KV slot of position `pos` of `seq` (StateCache checked that its blocks cover it).
  size_t Slot(const WorkerSequence& seq, int32_t pos) const;
  // The fake forward pass over one entry of the batch.
  void Forward(const ScheduledSequence& sc);

  const int32_t block_size_;
  const FakeModel* model_;
  StateCache cache_;
  StepBatch batch_;
  std::vector<uint64_t> kv_;
  int64_t num_tokens_computed_ = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_
