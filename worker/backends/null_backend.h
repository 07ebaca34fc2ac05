// NullBackend: a Backend that does no model arithmetic, so that the whole CPU path of a
// step — client → scheduler → plan → worker (StateCache, ModelExecutor, sampling
// dispatch, result) → scheduler → client — can be measured and profiled on machines
// without a GPU (`weft-worker --backend=null`, tools/bench/step_overhead.sh).
//
// What it does, per Backend contract:
//   * Step() (the worker's step path) computes each sampled entry's token by the rule
//     below straight from the StepBatch: no ForwardBatch, no logits, no second
//     validation (StateCache::Apply was the step's one). An entry that wants logprobs,
//     and every entry when device_sampling = false, is sampled by the host Sampler from a
//     one-hot logits row (the same result Forward + the host Sampler give). Block copies
//     are checked and counted as CopyBlock does; the step time is slept as Forward does.
//   * Forward() validates the batch exactly as the CPU model does (non-empty chunks
//     inside the context, token ids inside the vocabulary, a block table that covers
//     the chunk, block ids inside the pool) and produces, for each logits row, one
//     token by the rule below, as logits that are 0 for that token and -inf everywhere
//     else (so the host Sampler, under any parameters, picks exactly it). The logits
//     buffer is kept one-hot incrementally: only the entries that change are written
//     (O(rows) per step, not O(rows × vocab)); a ForwardOutput it did not fill last is
//     filled whole once. The caller must not write into ForwardOutput::logits (no
//     caller does: the sampler only reads them).
//   * SampleOnDevice() returns the same tokens without touching the logits (the GPU
//     backends' path; ModelExecutor falls back to the host Sampler when a sequence wants
//     logprobs, and gets the same tokens from the one-hot logits). With
//     device_sampling = false every step samples on the host (O(vocab) per row, the CPU
//     backend's cost).
//   * CopyBlock() checks the ids and copies nothing (there is no KV).
//   * Tensor parallelism: no collectives; every rank computes the same tokens, so the
//     scheduler's rank-agreement check passes.
//   * The KV pool is sized as the CPU backend would size it (num_kv_blocks, else
//     kv_memory_bytes over the model's bytes per block at kv_dtype) but nothing is
//     allocated: the scheduler does all block bookkeeping.
//
// The token rule (deterministic, from the plan alone; documented for tests and tools):
//   the token that follows a sequence whose last known token is `last` at position
//   `pos` (0-based) is  h = Mix64((uint32(last) << 32) | uint32(pos)),
//     EOS      eog_token_ids[0]  when eos_probability > 0 and (h >> 11) / 2^53 <
//                                eos_probability,
//     else     t = Mix64(h) mod vocab_size, moved up (mod vocab_size) past every
//              end-of-generation id — so by default a stream never ends on EOS and runs
//              to max_tokens.
//   Mix64 is SplitMix64's finalizer. A sequence's tokens depend only on its own tokens
//   (never on the batch, the step, chunking, preemption or the rank); the n samples of
//   one request (forks) get the same tokens.
//
// Step time: with step_time > 0, Forward() returns no earlier than step_time after it
// started, by *sleeping* (clock_nanosleep to an absolute time): a GPU's forward runs on
// the device while the host thread waits, so the host CPU stays free for the scheduler
// and the client; spinning would take one of the cores being measured.
//
// Ownership: owns nothing but small scratch vectors; borrows the GgufFile only in
// Create. Thread-safety: as Backend (one step thread).
#ifndef WEFT_WORKER_BACKENDS_NULL_BACKEND_H_
#define WEFT_WORKER_BACKENDS_NULL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/gguf.h"
#include "worker/backends/backend.h"
#include "worker/kv_cache.h"
#include "common/model_config.h"

namespace weft {

struct NullBackendOptions {
  int32_t block_size = 16;
  // KV pool size: num_kv_blocks if > 0, else as many blocks of kv_dtype as
  // kv_memory_bytes would hold for this model (nothing is allocated).
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = kDefaultHostKvMemoryBytes;
  KvDtype kv_dtype = kDefaultKvDtype;
  // Tensor-parallel shape (the KV heads per rank size the pool, as on the CPU).
  int32_t rank = 0;
  int32_t world_size = 1;
  // Least time one Forward() takes (0: as fast as it goes).
  absl::Duration step_time = absl::ZeroDuration();
  // Chance that a token is an end-of-generation token (see the rule above).
  double eos_probability = 0;
  // The end-of-generation ids; nullopt: the GGUF tokenizer's set (llama.cpp's EOG
  // tokens, as the scheduler stops on), or none when the file has no vocabulary.
  std::optional<std::vector<int32_t>> eog_token_ids;
  // false: SampleOnDevice is Unimplemented and every step samples on the host.
  bool device_sampling = true;

  absl::Status Validate() const;
};

class NullBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<NullBackend>> Create(const GgufFile& file,
                                                             const NullBackendOptions& options);

  const char* name() const override { return "null"; }
  std::string kernels() const override;
  const ModelConfig& config() const override { return config_; }
  int32_t block_size() const override { return options_.block_size; }
  int32_t num_kv_blocks() const override { return num_kv_blocks_; }
  int64_t kv_pool_bytes() const override { return 0; }

  absl::Status Step(const StepBatch& batch, StepOutput* out) override;
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override;
  absl::Status CopyBlock(int32_t src, int32_t dst) override;
  absl::Status SampleOnDevice(absl::Span<const SampleRequest> requests,
                              std::vector<int32_t>* tokens) override;

  // The token that follows `last_token` at `position` (the rule above).
  int32_t NextToken(int32_t last_token, int32_t position) const;

  const std::vector<int32_t>& eog_token_ids() const { return eog_; }
  // Counts, for tests: forward passes, logits rows produced, block copies checked.
  int64_t num_forwards() const { return num_forwards_; }
  int64_t num_rows() const { return num_rows_; }
  int64_t num_block_copies() const { return num_block_copies_; }
  // Rows SampleOnDevice sampled (ForwardStepper's device path).
  int64_t num_device_samples() const { return num_device_samples_; }

 private:
  NullBackend(const NullBackendOptions& options, const ModelConfig& config,
              int32_t num_kv_blocks, std::vector<int32_t> eog);
  // Makes out->logits rows [0, row_tokens_.size()) one-hot at row_tokens_.
  void WriteLogits(ForwardOutput* out);
  // The host Sampler on a one-hot row at `token` (Step's logprobs / host-sampling path).
  absl::Status SampleOneHot(const WorkerSequence& seq, int32_t token, SampleResult* out);

  const NullBackendOptions options_;
  const ModelConfig config_;
  const int32_t num_kv_blocks_;
  const std::vector<int32_t> eog_;
  std::vector<bool> is_eog_;  // by token id
  // This step's token per logits row.
  std::vector<int32_t> row_tokens_;
  // The logits buffer filled last (identity and size) and the hot (0) entry of each of
  // its rows (-1: none, the row is all -inf).
  const float* filled_ = nullptr;
  size_t filled_size_ = 0;
  std::vector<int32_t> hot_;
  // Step: each entry's token (-1: not sampled); the host path's sampler and its one-hot
  // row (all -inf between calls).
  std::vector<int32_t> entry_tokens_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<float> one_hot_;
  int64_t num_forwards_ = 0;
  int64_t num_rows_ = 0;
  int64_t num_block_copies_ = 0;
  int64_t num_device_samples_ = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_NULL_BACKEND_H_
