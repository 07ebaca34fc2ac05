// Paged attention on the GPU: the decode kernels (one query token per sequence,
// flash-decoding split-K) and the prefill kernels (causal, many query tokens per
// sequence, variable lengths in one launch, chunked-prefill aware; on CUDA cores, and on
// tensor cores for long chunks). CPU twin: kernels/cpu/paged_attention.h (same math:
// softmax(q.K * scale) V over keys 0..p of the query at position p — or, with a
// sliding window W > 0, keys max(0, p - W + 1)..p — read through the block table). Each kernel's design, layout and preconditions are at the top of its
// .cu file: decode_attention_pipelined.cu, decode_attention.cu, prefill_attention.cu,
// prefill_attention_tc.cu, decode_attention_grouped.cu. Besides the GPU test
// (paged_attention_test), every decode kernel and the tensor-core prefill run on the CPU
// under the host emulation (emulated_*_test, testing/host_emulation.h).
//
// KV: one layer's PagedKvView (kernels/cuda/paged_kv.h), fp16, bf16 or int8 groups;
// head_dim 64, 128 or 256; num_heads / num_kv_heads <= MaxAttentionGroup(head_dim) (32,
// or 16 at head_dim 256).
// Sliding windows (`window` in the arguments, 0 = none): every kernel starts a row's keys
// at max(0, p - window + 1) — the decode kernels split [lo, context) instead of
// [0, context), the prefill kernels start at the tile's first row's lo and mask the keys
// before each row's — so blocks before a window are never read (the scheduler still
// allocates them).
// GQA: a thread block owns one KV head and the query heads that share it, so each K/V
// block is read from memory once per (sequence, KV head, split) whatever the group size.
// Activations: q is fp32 (the QKV GEMM output after RoPE), rows of num_heads*head_dim
// with head h at h*head_dim; out rows likewise, written as ActDtype. q and its row
// stride must be 16-byte aligned (float4 loads).
// Arithmetic: the CUDA-core kernels use fp32 dot products, softmax and accumulation; not
// bitwise equal to the CPU (different summation order), within ~1e-5 relative for
// fp32-exact inputs. The tensor-core prefill rounds q and the softmax weights to
// bf16/fp16 (see PagedPrefillAttentionTc). A row's result depends only on its own
// sequence (batch invariant for a fixed split size).
// Thread-safety: launches on the caller's stream.
#ifndef WEFT_KERNELS_CUDA_PAGED_ATTENTION_H_
#define WEFT_KERNELS_CUDA_PAGED_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_kv.h"

namespace weft::kernels::cuda {

inline constexpr int32_t kMaxGroupSize = 32;  // query heads per KV head

// Raises the shared memory limits of the kernels that need more than 48 KB (on the
// current device). Call once per device before capturing a CUDA graph: the launchers
// skip that host call while their stream is being captured.
cudaError_t PrepareAttentionKernels();

inline bool AttentionHeadDimSupported(int32_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
// Query heads per KV head the kernels take at this head_dim (the pipelined decode kernel
// runs head_dim / 8 x group threads, at most 512).
inline int32_t MaxAttentionGroup(int32_t head_dim) {
  return head_dim > 128 ? kMaxGroupSize / 2 : kMaxGroupSize;
}

// ---- Decode ----------------------------------------------------------------------------
// Item i (a sequence with one query token) attends to keys [lo, context_lens[i]) through
// its block table (block_tables + block_table_offsets[i]); lo = 0, or
// max(0, context_lens[i] - window) with a window. The splits below cut [lo, context). The context is cut into
// splits of partition_size tokens; grid.z = max_splits must cover the longest context
// (max_splits * partition_size >= every context_len). With one split the result is
// written directly; otherwise each split writes its normalized partial output and
// log-sum-exp to the workspace and the splits are combined (kSplitV1: by a reduction
// kernel; kPipelined: by the last split CTA of each (item, KV head) to finish).
// Splits past an item's context exit at once, so a CUDA graph captured with max_splits
// for the model's context length serves every shorter context.
// An item with context_len 0 (graph padding) gets zero output.
//
// The kernels (same arguments, same results up to fp32 rounding; kept side by side so a
// GPU session can A/B them):
//   kPipelined (default; decode_attention_pipelined.cu): one CTA per (KV head, item,
//     split); 32-token K/V tiles stream through a 3-stage cp.async pipeline (16-byte
//     copies of whole rows) into shared memory; thread (d-chunk, query head, token lane)
//     holds 8 dims of one head's q, so every query head of the group reads the same
//     shared tile (GQA: K/V leave HBM once); flash-decoding online softmax per thread,
//     merged across token lanes at the end; no limit on partition_size. Requires 16-byte
//     aligned K/V (and int8 scale) rows: true for the backend's pool.
//   kSplitV1 (decode_attention.cu): the first kernel — three passes over the split with
//     scores in shared memory (partition_size * group <= 4096), plus the reduction kernel.
//   kGrouped (decode_attention_grouped.cu): kPipelined's grid, pipeline and last-CTA
//     combination, but every K/V element is converted (int8: dequantized, scale applied)
//     once per tile for all query heads of the group instead of once per head: groups
//     < 4 on CUDA cores (a thread owns 8 dims of a token row and the q of every head),
//     groups >= 4 on tensor cores (mma.sync m16n8k16, query heads as the rows, padded to
//     16; q and the softmax weights rounded to bf16 for bf16 KV, else fp16 — the
//     tensor-core prefill's precision). The backend's default for groups >= 2 since the
//     H200 A/B of 2026-11-28 (worker/backends/cuda/cuda_backend.h DefaultDecodeKernel).
//     Same alignment requirements as kPipelined, plus an even q_stride.
enum class DecodeKernel : int32_t {
  kSplitV1 = 0,
  kPipelined = 1,
  kGrouped = 2,
};
inline const char* DecodeKernelName(DecodeKernel kernel) {
  switch (kernel) {
    case DecodeKernel::kSplitV1: return "split_v1";
    case DecodeKernel::kPipelined: return "pipelined";
    case DecodeKernel::kGrouped: return "grouped";
  }
  return "?";
}
// The kGrouped kernel rounds q and the softmax weights to the MMA type for groups >= this.
inline constexpr int32_t kGroupedDecodeTensorCoreMinGroup = 4;
// Tokens per K/V tile of the kPipelined kernel (its partitions are multiples of it).
inline constexpr int32_t kPipelinedDecodeTileTokens = 32;

struct DecodeAttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  const int32_t* q_rows = nullptr;  // optional: item i's q/out row (default i)
  void* out = nullptr;
  int64_t out_stride = 0;
  ActDtype out_dtype = ActDtype::kBf16;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* block_table_offsets = nullptr;
  int32_t num_items = 0;
  int32_t num_heads = 0;
  float scale = 1.0f;
  int32_t window = 0;  // > 0: sliding window (keys context - window .. context - 1)
  int32_t partition_size = 0;
  int32_t max_splits = 1;
  // Split lengths from the real contexts (kPipelined and kGrouped; 0: off, kSplitV1
  // refuses it). When > 0 the kernel ignores partition_size and cuts item i's keys
  // [lo, context) into splits of max(device_min_partition, ceil(span / max_splits))
  // tokens rounded up to its tile (span = context - lo), so every split of the grid takes
  // a share of the item's real keys: a CUDA graph captured with a context bucket's
  // max_splits spreads a shorter real context over all its splits instead of leaving the
  // splits past it idle. A row's result then depends on its own context and max_splits.
  int32_t device_min_partition = 0;
  // DecodeWorkspaceFloats(...) floats of partial outputs and log-sum-exps (unused with 1
  // split), written and read within the launch: no state between launches, so plans of
  // any shape may share one workspace.
  float* workspace = nullptr;
  // kPipelined / kGrouped with max_splits > 1: DecodeSplitCounters(num_items, num_kv_heads) int32
  // counters in a buffer of their own, zero before the first launch; the counter of
  // (item i, KV head h) is split_counters[i * num_kv_heads + h] whatever the plan. Each
  // launch leaves every counter zero (the CTA that combines an (item, KV head) resets its
  // counter), so one buffer serves every later launch of any shape — eager, captured or
  // replayed — on the same stream. Two launches may not count in one buffer at the same
  // time (concurrent streams need a buffer each, as they need a workspace each).
  // Why not counters after the plan's partials, zeroed by the caller or a reset node:
  // the plan's layout moves with the batch and context bucket, so a larger plan's
  // partials land on a smaller plan's counters (issue 24), and a reset per launch is a
  // rule every launch site (eager steps, each graph, benchmarks, tests) has to keep.
  int32_t* split_counters = nullptr;
  DecodeKernel kernel = DecodeKernel::kPipelined;
};

// kSplitV1's split length for a batch: the largest multiple of 32 <= 512 whose scores fit
// the kernel's shared memory for this group size, halved (not below 256 tokens) while
// the grid (items x kv heads x splits of max_context) would leave SMs idle.
int32_t ChooseDecodePartition(int32_t num_items, int32_t num_kv_heads, int32_t group_size,
                              int32_t block_size, int32_t max_context, int32_t num_sms);
inline int32_t DecodeNumSplits(int32_t max_context, int32_t partition_size) {
  return max_context <= 0 ? 1 : (max_context + partition_size - 1) / partition_size;
}
// Partial outputs [item][head][split][head_dim], then their log-sum-exps
// [item][head][split].
inline int64_t DecodeWorkspaceFloats(int32_t num_items, int32_t num_heads, int32_t head_dim,
                                     int32_t max_splits) {
  return int64_t{num_items} * num_heads * max_splits * (int64_t{head_dim} + 1);
}
// The kPipelined / kGrouped kernels' split counters: one int32 per (item, KV head).
inline int64_t DecodeSplitCounters(int32_t num_items, int32_t num_kv_heads) {
  return int64_t{num_items} * num_kv_heads;
}

// A decode batch as the split planner sees it.
struct DecodeShape {
  int32_t num_items = 0;
  int32_t num_kv_heads = 0;
  int32_t group_size = 1;  // query heads per KV head
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int32_t max_context = 0;
  int32_t num_sms = 132;
  KvDtype dtype = KvDtype::kBf16;
};
struct DecodePlan {
  int32_t partition_size = 0;
  int32_t max_splits = 1;
  // Split lengths from the real contexts (kPipelined and kGrouped; 0: off, kSplitV1
  // refuses it). When > 0 the kernel ignores partition_size and cuts item i's keys
  // [lo, context) into splits of max(device_min_partition, ceil(span / max_splits))
  // tokens rounded up to its tile (span = context - lo), so every split of the grid takes
  // a share of the item's real keys: a CUDA graph captured with a context bucket's
  // max_splits spreads a shorter real context over all its splits instead of leaving the
  // splits past it idle. A row's result then depends on its own context and max_splits.
  int32_t device_min_partition = 0;
  int64_t workspace_floats = 0;
};
// The split plan of `kernel` for a batch. kSplitV1: ChooseDecodePartition. kPipelined:
// the fewest splits whose CTAs fill the GPU's resident CTA slots (num_sms x CTAs per SM
// by shared memory and threads) to >= 85 % in the last wave, partitions a multiple of 32
// tokens and not below 64 (one split when the batch alone fills the GPU, e.g. 64 items
// x 8 KV heads on 132 SMs). kGrouped: likewise with its own occupancy and tile
// (partitions a multiple of GroupedDecodeTileTokens).
DecodePlan PlanDecode(DecodeKernel kernel, const DecodeShape& shape);

// Resident CTAs per SM of the kPipelined kernel (shared memory and thread limits; the
// kernel needs few registers), for the planner and the benchmark.
int32_t PipelinedDecodeCtasPerSm(KvDtype dtype, int32_t head_dim, int32_t group_size);
// Likewise for the kGrouped kernel, and its K/V tile (tokens) at a head_dim: 64, or 32
// at head_dim 256 (its device-derived splits are multiples of it).
int32_t GroupedDecodeCtasPerSm(KvDtype dtype, int32_t head_dim, int32_t group_size);
inline int32_t GroupedDecodeTileTokens(int32_t head_dim) { return head_dim > 128 ? 32 : 64; }
// The split length the backend passes as device_min_partition.
inline constexpr int32_t kDecodeDeviceMinPartition = 64;

cudaError_t PagedDecodeAttention(const DecodeAttentionArgs& args, const PagedKvView& kv,
                                 cudaStream_t stream);

// ---- Prefill ---------------------------------------------------------------------------
// Sequence s's chunk has seq_num_tokens[s] query tokens at flattened rows
// seq_q_start[s] + i and positions seq_start_pos[s] + i (num_computed_tokens + i); query
// i attends to keys [lo, seq_start_pos[s] + i] (lo = 0, or with a window W,
// max(0, seq_start_pos[s] + i - W + 1)) through the sequence's block table, whose
// K/V (this chunk's included) must already be written. The work is a list of tiles, each
// PrefillTileTokens(group, head_dim) query tokens of one sequence starting at
// tile_q_begin[j] (relative to the chunk); the host builds it (BuildPrefillTiles below).
struct PrefillAttentionArgs {
  const float* q = nullptr;
  int64_t q_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  ActDtype out_dtype = ActDtype::kBf16;
  const int32_t* seq_q_start = nullptr;
  const int32_t* seq_start_pos = nullptr;
  const int32_t* seq_num_tokens = nullptr;
  const int32_t* block_tables = nullptr;
  const int32_t* block_table_offsets = nullptr;
  const int32_t* tile_seq = nullptr;
  const int32_t* tile_q_begin = nullptr;
  int32_t num_tiles = 0;
  int32_t num_heads = 0;
  float scale = 1.0f;
  int32_t window = 0;  // > 0: sliding window (as DecodeAttentionArgs::window)
};

// Query tokens per prefill tile (all query heads of a KV head's group ride along).
int32_t PrefillTileTokens(int32_t group_size, int32_t head_dim);

// Appends the tiles of sequences [0, num_seqs) (tile_tokens query tokens each, the last
// one of a chunk possibly shorter) in sequence order; sequences with no tokens get none.
inline void BuildPrefillTiles(const int32_t* seq_num_tokens, int32_t num_seqs,
                              int32_t tile_tokens, std::vector<int32_t>* tile_seq,
                              std::vector<int32_t>* tile_q_begin) {
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t q = 0; q < seq_num_tokens[s]; q += tile_tokens) {
      tile_seq->push_back(s);
      tile_q_begin->push_back(q);
    }
  }
}

cudaError_t PagedPrefillAttention(const PrefillAttentionArgs& args, const PagedKvView& kv,
                                  cudaStream_t stream);

// The tensor-core prefill kernel (prefill_attention_tc.cu): the same arguments and
// semantics, on mma.sync m16n8k16 (bf16 operands for bf16 KV, fp16 for fp16 and int8 KV;
// q and the softmax weights are rounded to that type, accumulation is fp32 —
// FlashAttention's precision, not the CUDA-core kernel's fp32 throughout). Its tiles are
// PrefillTcTileTokens(group) query tokens (kPrefillTcRows query rows = tokens x group).
// The backend uses it for chunks of at least kTensorCorePrefillMinTokens tokens and the
// CUDA-core kernel for shorter ones. Requires group <= kPrefillTcRows and an even q_stride.
inline constexpr int32_t kPrefillTcRows = 64;
inline constexpr int32_t kTensorCorePrefillMinTokens = 128;
int32_t PrefillTcTileTokens(int32_t group_size);
cudaError_t PagedPrefillAttentionTc(const PrefillAttentionArgs& args, const PagedKvView& kv,
                                    cudaStream_t stream);

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_PAGED_ATTENTION_H_
