// Decode-attention test cases shared by the emulated tests of the decode kernels
// (emulated_decode_attention_test: kPipelined; emulated_decode_attention_v1_test:
// kSplitV1; emulated_decode_grouped_test: kGrouped): a batch of sequences in a shuffled
// paged KV pool with the CPU reference's output (kernels/cpu/paged_attention.h), a runner
// that launches a kernel (through the caller's emulated launch) and compares every
// element, sequences of batches of different shapes run on ONE decode workspace kept as
// the CUDA backend's ModelRunner keeps it (grown and zeroed only when a plan needs more),
// and split lengths derived on the device.
// Thread-safety: none (one test thread).
#ifndef WEFT_KERNELS_CUDA_TESTING_DECODE_CASE_H_
#define WEFT_KERNELS_CUDA_TESTING_DECODE_CASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cuda/dtypes.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/testing/kv_reference.h"

namespace weft::kernels::cuda::testing {

struct CaseShape {
  int32_t num_kv_heads, group, head_dim, block_size;
  KvDtype dtype;
  int32_t window = 0;  // sliding window (0: none), for the kernel and the reference
};

// The decode workspace and split counters as the ModelRunner keeps them: one of each for
// every plan, grown only when a plan needs more than they hold (the workspace then
// filled with NaNs, the counters zeroed), never cleared otherwise.
struct SharedWorkspace {
  std::vector<float> ws;
  std::vector<int32_t> counters;
  void Reserve(int64_t floats, int64_t num_counters);
};

// One decode batch: item i decodes at context contexts[i] (0: graph padding) over a
// sequence of lengths[i] tokens; `want` is the CPU reference's output.
struct DecodeCase {
  CaseShape shape;
  std::vector<int32_t> contexts, tables, offsets;
  std::unique_ptr<HostPagedKv> host;
  std::vector<float> q;  // 16-byte aligned rows at q0, q_stride apart
  float* q0 = nullptr;
  int32_t q_stride = 0, items = 0, heads = 0, qw = 0;
  float scale = 1.0f;
  std::vector<float> want;
};

// round_q: the reference sees q * scale * log2 e rounded to the tensor cores' type (bf16
// for bf16 KV, else fp16) and mapped back, as the kernel rounds it; the kernel gets q.
std::unique_ptr<DecodeCase> MakeDecodeCase(const CaseShape& shape,
                                           const std::vector<int32_t>& lengths,
                                           const std::vector<int32_t>& contexts, uint32_t seed,
                                           bool round_q = false);

// The kernel under test: which one (args.kernel), and its emulated launch for `a`
// over `kv`.
struct DecodeKernelUnderTest {
  DecodeKernel kernel;
  std::function<void(const DecodeAttentionArgs& a, const PagedKvView& kv)> launch;
  // Whether the kernel rounds q for this shape (see MakeDecodeCase; nullptr: never), and
  // its tolerance: |out - want| <= tol + 2 tol |want| (nullptr: 2e-5 + 2e-4 |want|).
  std::function<bool(const CaseShape&)> rounds_q;
  std::function<double(const CaseShape&)> tolerance;
};

// Runs kernel `k` on `c` with splits of `partition` tokens and a grid of `max_splits` (the
// plan) on the workspace `shared` reserves, `runs` times (odd runs through q_rows, item i
// at q / out row items - 1 - i); every run's output (pre-filled with 7) must match the
// reference, and every split counter be zero after it.
// device_min_partition > 0: the kernel derives the split lengths from the contexts
// (DecodeAttentionArgs::device_min_partition) and `partition` is what the host passes
// (ignored by the kernel).
void RunDecodeCase(const DecodeCase& c, int32_t partition, int32_t max_splits,
                   SharedWorkspace* shared, int runs, const DecodeKernelUnderTest& k,
                   int32_t device_min_partition = 0);

// Split lengths derived on the device: a grid of max_splits splits (a graph bucket's)
// over contexts much shorter than the bucket, on a fresh workspace of NaNs, twice. The
// output must match the reference, the counters be zero, and every head of item i must
// have written exactly want_splits[i] log-sum-exps (splits that got keys; 0 when the item
// needed one split, which writes the output directly).
void CheckDeviceSplits(const CaseShape& shape, const std::vector<int32_t>& contexts,
                       int32_t max_splits, int32_t min_partition,
                       const std::vector<int32_t>& want_splits, uint32_t seed,
                       const DecodeKernelUnderTest& k);

// A fresh zeroed workspace for one case, launched twice (the second time through q_rows)
// with a spare split.
void CheckDecodeFresh(const CaseShape& shape, const std::vector<int32_t>& lengths,
                      const std::vector<int32_t>& contexts, int32_t partition, uint32_t seed,
                      const DecodeKernelUnderTest& k);

// One step of a serving sequence: a decode batch and its plan, whose grid covers
// plan_context tokens (a CUDA graph's context bucket, or the batch's longest context
// when run eagerly).
struct DecodeStep {
  CaseShape shape;
  std::vector<int32_t> contexts;  // 0: graph padding
  int32_t partition;
  int32_t plan_context;
};

// Runs the steps in order on ONE SharedWorkspace; each step's output is checked.
void RunDecodeSequence(const std::vector<DecodeStep>& steps, const DecodeKernelUnderTest& k);

// The sequences both kernels are held to: the default model's shape (3 KV heads, group
// 3, head_dim 64) in `dtype`, batches growing and shrinking, eager and graph-bucket
// plans, one split and many; and other group sizes, head sizes and KV types mixed on one
// workspace (larger, then smaller, and back).
std::vector<DecodeStep> DefaultModelSteps(KvDtype dtype);
std::vector<DecodeStep> MixedShapeSteps();

}  // namespace weft::kernels::cuda::testing

#endif  // WEFT_KERNELS_CUDA_TESTING_DECODE_CASE_H_
