// Test doubles for the scheduler core:
//
// FakeModel: a deterministic stand-in for the model. The "KV" of position p is
//   kv(p) = Mix(kv(p-1), token(p), p)        (kv(-1) = 0),
// and the token sampled for output index i of sample j is a function of
// (seed, j, i, kv of the last position). Reference(...) generates a sequence's
// expected tokens, finish reason and text directly, with no scheduler involved.
//
// FakeWorker: applies StepPlans exactly as the worker contract in step_plan.h says
// (diffs, block tables, copies after the forward pass, sampling order) and runs the
// fake model, reading kv(p-1) back through the block table. A wrong block id, a bad
// prefix-cache hit, a missing copy or a lost diff changes the tokens, so comparing
// outputs with FakeModel::Reference catches it; protocol violations (unknown ids,
// gaps in step ids, sampling before the end) are errors.
//
// FakeTokenText: token id → a few bytes (including split UTF-8 characters).
//
// Thread-safety: thread-compatible. Test-only.
#ifndef WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_
#define WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/step_plan.h"
#include "scheduler/token_text_source.h"
#include "scheduler/types.h"

namespace weft {

class FakeTokenText : public TokenTextSource {
 public:
  absl::string_view TokenBytes(int32_t token_id) const override;
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
                            int32_t sample_index, const StoppingParams& stop,
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
  absl::Status Execute(const StepPlan& plan, std::vector<SampledToken>* out);

  int32_t num_sequences() const { return static_cast<int32_t>(seqs_.size()); }
  int64_t num_tokens_computed() const { return num_tokens_computed_; }

 private:
  struct SeqState {
    std::vector<int32_t> tokens;
    int32_t num_prompt_tokens = 0;
    std::vector<BlockId> blocks;
    int32_t num_computed = 0;
    uint64_t seed = 0;
  };

  absl::Status AddNew(const NewSequenceData& e);
  absl::Status Forward(SequenceRef ref, SeqState& s, int32_t n);
  absl::StatusOr<size_t> Slot(const SeqState& s, int32_t pos) const;
  absl::StatusOr<int32_t> SampleFor(SequenceRef ref, SeqState& s, int32_t fork_parent);

  int32_t num_blocks_;
  int32_t block_size_;
  const FakeModel* model_;
  absl::flat_hash_map<SequenceRef, SeqState> seqs_;
  std::vector<uint64_t> kv_;
  int64_t last_step_ = 0;
  int64_t num_tokens_computed_ = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_TESTING_FAKE_WORKER_H_
