// Backend: what a worker rank needs from the hardware that runs the model — one forward
// pass over a flattened batch into the rank's own paged KV cache, and the block copies
// of copy-on-write. Implementations: CpuBackend (worker/backends/cpu_backend.h, the
// default, tested everywhere) and CudaBackend (worker/backends/cuda, built with
// --config=cuda). Everything above it — plan diffs (StateCache), sampling, the Attach
// protocol — is written once, in worker/service/model_executor.
//
// Contract (every backend):
//   * Forward() writes the KV of each chunk's tokens to the slots its block table names
//     and returns the logits of the sequences with want_logits, in batch order, on the
//     host (ForwardOutput). Block ids are the scheduler's: 0 <= id < num_kv_blocks().
//   * A sequence's logits do not depend on the rest of the batch (batch invariance) and
//     do not depend on how its prompt was chunked, beyond the backend's documented
//     tolerance (bitwise on the CPU backend).
//   * Under tensor parallelism every rank of a replica returns the same logits bits
//     (the LM head is gathered, not computed per rank).
//   * A malformed batch is InvalidArgument before anything is written.
// Ownership: a backend owns its model weights view, KV cache and device resources; it
// borrows the GgufFile it was made from (which must outlive it).
// Thread-safety: one step thread calls Forward()/CopyBlock().
#ifndef WEFT_WORKER_BACKENDS_BACKEND_H_
#define WEFT_WORKER_BACKENDS_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/model/forward_batch.h"
#include "common/model_config.h"
#include "common/plan/state_cache.h"
#include "common/sampling/sampler.h"

namespace weft {

// The KV pool and rank rules the CPU and null backends' options share (messages name the
// worker's flags): block size 1..1024, a pool from --num_kv_blocks or a positive
// --kv_memory_bytes, 0 <= rank < world_size.
inline absl::Status ValidatePoolAndRank(int32_t block_size, int32_t num_kv_blocks,
                                        int64_t kv_memory_bytes, int32_t world_size,
                                        int32_t rank) {
  if (block_size < 1 || block_size > 1024) {
    return absl::InvalidArgumentError("block size must be in 1..1024");
  }
  if (num_kv_blocks < 0) return absl::InvalidArgumentError("--num_kv_blocks must be >= 0");
  if (num_kv_blocks == 0 && kv_memory_bytes <= 0) {
    return absl::InvalidArgumentError("set --num_kv_blocks or a positive --kv_memory_bytes");
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  return absl::OkStatus();
}

// One step's results (Backend::Step): a SampleResult per sampled entry of the StepBatch
// (ScheduledSequence::sample), in batch order, in samples[0, num_samples); an entry whose
// sampling asks for logprobs (num_logprobs >= 0) has its logprob and top_logprobs, the
// others leave them empty. Reuse one StepOutput across steps: Clear keeps the entries'
// buffers.
struct StepOutput {
  std::vector<SampleResult> samples;
  int32_t num_samples = 0;
  double forward_seconds = 0;  // the forward pass's share of the step (0: none ran)

  void Clear() {
    num_samples = 0;
    forward_seconds = 0;
  }
  // The next entry, emptied (its buffers kept).
  SampleResult* Add() {
    if (static_cast<size_t>(num_samples) == samples.size()) samples.emplace_back();
    SampleResult* r = &samples[num_samples++];
    r->token = -1;
    r->logprob = 0;
    r->top_logprobs.clear();
    return r;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda" (the hello's backend field).
  virtual const char* name() const = 0;
  // The kernels in use, e.g. "avx512vnni" or "cublas-bf16" (logged, sent in the hello).
  virtual std::string kernels() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int32_t num_kv_blocks() const = 0;
  virtual int64_t kv_pool_bytes() const = 0;

  // One step of the worker: the forward pass over the batch's chunks (entries with
  // num_tokens > 0), then its block copies, then a token for every sampled entry (a fork,
  // logits_from >= 0, from its parent's last position) into `out`. The batch comes from
  // StateCache::Apply given this backend's block size, pool, vocabulary and context
  // length: that is the step's one validation, Step checks none of it again. A row with no
  // finite logit is INVALID_ARGUMENT. The worker's step path calls only this (and the
  // group calls); Forward stays for whole-logits callers (perplexity, tests).
  virtual absl::Status Step(const StepBatch& batch, StepOutput* out) = 0;

  virtual absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) = 0;
  // Copies every layer's K and V of block `src` into `dst`.
  virtual absl::Status CopyBlock(int32_t src, int32_t dst) = 0;

  // Tensor parallelism (world size > 1; no-ops otherwise). A rank's collectives only
  // work between JoinGroup and LeaveGroup.
  //   CommInit(): opaque bytes this rank sends in its hello (e.g. an NCCL unique id made
  //     by rank 0); the scheduler relays rank 0's to every rank of the replica.
  //   JoinGroup(): the scheduler admitted the replica under `epoch`: form the group with
  //     the other ranks (blocks until they are all there, or fails). Called again after
  //     a re-admission with a new epoch; a group of another epoch is never joined.
  //   LeaveGroup(): the replica was fenced or the scheduler is gone: drop the group.
  virtual std::string CommInit() { return ""; }
  virtual absl::Status JoinGroup(absl::string_view replica, int64_t epoch,
                                 absl::string_view comm_init) {
    return absl::OkStatus();
  }
  virtual void LeaveGroup() {}
  // Seconds spent inside collectives so far (tensor parallelism; 0 otherwise).
  virtual double collective_seconds() const { return 0; }
  // Bytes copied between the host and an accelerator so far (0 without one).
  virtual int64_t device_to_host_bytes() const { return 0; }
  virtual int64_t host_to_device_bytes() const { return 0; }
  // Forward passes so far by how they ran (weft_worker_graph_steps_total{kind}): as one
  // CUDA graph (decode steps), as piecewise graphs around eager attention, or eagerly.
  // Backends without graphs report zeros.
  struct GraphStepCounts {
    int64_t decode_graph = 0, piecewise = 0, eager = 0;
  };
  virtual GraphStepCounts graph_steps() const { return {}; }

  // Optional device sampling of the last Forward()'s logits rows, with the algorithm of
  // common/sampling/sampler.h (tokens only, no logprobs). request.row is a row of that
  // ForwardOutput; tokens[i] is -1 when request i's row has no finite logit. The default,
  // Unimplemented, means "sample on the host" (ModelExecutor's fallback).
  struct SampleRequest {
    int32_t row = 0;
    const SamplerParams* params = nullptr;
    absl::Span<const int32_t> prompt;
    absl::Span<const int32_t> output;
    // Structured output's token mask (common/sampling/sampling_math.h), or empty. A
    // backend that cannot apply one returns Unimplemented (the step samples on the host).
    absl::string_view allowed_tokens;
  };
  virtual absl::Status SampleOnDevice(absl::Span<const SampleRequest> requests,
                                      std::vector<int32_t>* tokens) {
    return absl::UnimplementedError("this backend samples on the host");
  }
};

}  // namespace weft

#endif  // WEFT_WORKER_BACKENDS_BACKEND_H_
