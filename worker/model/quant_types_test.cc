// Files that mix tensor types, as llama-quantize writes them (Q4_K_M: Q4_K, Q5_K, Q6_K,
// Q5_0, Q5_1, Q8_0 side by side): every tensor loads in its own type and computes with
// the kernels named by kernel_name(); a type without kernels is refused at load, naming
// the tensor and the type; tensor-parallel slices of K-quants fall on 256-weight
// super-blocks or are refused.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gguf.h"
#include "gtest/gtest.h"
#include "worker/kv_cache.h"
#include "worker/model/linear.h"
#include "worker/model/llama_model.h"
#include "worker/model/llama_weights.h"
#include "worker/model/testing/tiny_llama.h"

namespace weft {
namespace {

// K-quant rows need 256 weights: hidden 256, FFN 512.
testing::TinyLlamaSpec MixedSpec() {
  testing::TinyLlamaSpec spec;
  spec.hidden = 256;
  spec.ffn = 512;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.matrix_type = GgmlType::kQ8_0;
  spec.tensor_types = {
      {"token_embd.weight", GgmlType::kQ5_1}, {"output.weight", GgmlType::kQ6_K},
      {"attn_q.weight", GgmlType::kQ4_K},     {"attn_k.weight", GgmlType::kQ5_K},
      {"attn_v.weight", GgmlType::kQ6_K},     {"attn_output.weight", GgmlType::kQ5_0},
      {"ffn_gate.weight", GgmlType::kQ4_K},   {"ffn_up.weight", GgmlType::kQ5_1},
      {"ffn_down.weight", GgmlType::kQ6_K},
  };
  return spec;
}

struct Loaded {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Loaded Build(const testing::TinyLlamaSpec& spec) {
  Loaded l;
  l.bytes = testing::BuildTinyLlama(spec);
  auto file = GgufFile::FromBuffer(l.bytes.data(), l.bytes.size());
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) l.file = std::move(*file);
  return l;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> Model(const GgufFile& file, KernelChoice kernels) {
  LlamaModelOptions o;
  o.kernels = kernels;
  o.num_threads = 2;
  return LlamaModel::Create(file, o);
}

// Logits of the last of 12 prompt tokens, prefilled in chunks of 5.
std::vector<float> Prefill(LlamaModel* model) {
  const std::vector<int32_t> prompt = {3, 17, 42, 5, 79, 0, 11, 23, 64, 8, 31, 2};
  const std::vector<int32_t> table = {4, 1};
  auto cache = KvCache::Create(model->KvOptions(16, 8));
  EXPECT_TRUE(cache.ok()) << cache.status();
  ForwardOutput out;
  for (int32_t start = 0; start < static_cast<int32_t>(prompt.size()); start += 5) {
    const int32_t n = std::min<int32_t>(5, prompt.size() - start);
    ForwardBatch batch;
    batch.sequences.push_back({absl::MakeConstSpan(prompt).subspan(start, n), start,
                               absl::MakeConstSpan(table), start + n == int32_t(prompt.size())});
    const absl::Status s = model->Forward(batch, cache->get(), &out);
    EXPECT_TRUE(s.ok()) << s;
  }
  return std::vector<float>(out.Row(0), out.Row(0) + out.vocab_size);
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The reference kernels use exactly dequantized weights: the mixed file gives the bits
// of its F32 twin (every matrix stored as F32 holding the same values).
TEST(QuantTypesTest, MixedFileMatchesItsF32TwinBitwise) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    testing::TinyLlamaSpec spec = MixedSpec();
    spec.tied = tied;
    Loaded typed = Build(spec);
    spec.f32_twin = true;
    Loaded twin = Build(spec);
    ASSERT_TRUE(typed.file && twin.file);
    auto a = Model(*typed.file, KernelChoice::kReference);
    auto b = Model(*twin.file, KernelChoice::kReference);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    const std::vector<float> la = Prefill(a->get()), lb = Prefill(b->get());
    EXPECT_EQ(la, lb);
    EXPECT_GT(MaxAbs(la), 0.1f);
  }
}

// What kernel_name() must say for a matrix of `type` under `choice` (kAuto resolved).
std::string ExpectedKernel(KernelChoice choice, GgmlType type) {
  const bool kformat = kernels::IsInt8KFormat(type);
  switch (ResolveKernelChoice(choice)) {
    case KernelChoice::kAvx2:
      return "avx2";
    case KernelChoice::kAvx512Vnni:
      if (kformat) return "avx2";  // no AVX-512 code reads the K formats
      return kernels::Int8IsaSupported(kernels::Int8Isa::kAmx) ? "amx_int8" : "avx512vnni";
    case KernelChoice::kAmx:
      return kformat ? "avx2" : "amx_bf16";
    case KernelChoice::kAvx512:
      return kformat ? "reference" : "avx512";
    case KernelChoice::kPacked:
      return kformat ? "reference" : "packed";
    default:
      return "reference";
  }
}

// Every kernel path this CPU runs loads the mixed file, says which kernels each matrix
// runs, and agrees with the reference (int8 / bf16 activations: ~1 % per matmul).
TEST(QuantTypesTest, EveryKernelPathRunsTheMixedFile) {
  Loaded l = Build(MixedSpec());
  ASSERT_TRUE(l.file);
  auto ref = Model(*l.file, KernelChoice::kReference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::vector<float> want = Prefill(ref->get());
  for (KernelChoice k : SupportedKernelChoices()) {
    SCOPED_TRACE(KernelChoiceName(k));
    auto model = Model(*l.file, k);
    ASSERT_TRUE(model.ok()) << model.status();
    const LlamaLayerWeights& w = (*model)->weights().layers()[1];
    for (const Linear* lin : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
      EXPECT_EQ(lin->kernel_name(), ExpectedKernel(k, lin->type()))
          << GgmlTypeName(static_cast<uint32_t>(lin->type()));
    }
    EXPECT_EQ(w.wk.type(), GgmlType::kQ5_K);
    EXPECT_EQ(w.wo.type(), GgmlType::kQ5_0);
    const std::vector<float> got = Prefill(model->get());
    float diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
    const bool rounded = RoundsActivations(k);
    EXPECT_LE(diff, (rounded ? 5e-2f : 1e-4f) * MaxAbs(want));
  }
}

// A tensor of a type with no kernels is refused when the model loads, by name and type.
TEST(QuantTypesTest, UnsupportedTypeIsRefusedNamingTensorAndType) {
  const struct {
    std::string tensor;
    GgmlType type;
  } cases[] = {
      {"blk.1.ffn_up.weight", GgmlType::kQ2_K},
      {"blk.0.attn_k.weight", GgmlType::kIQ4_NL},
      {"blk.0.attn_q.weight", GgmlType::kQ3_K},
      {"token_embd.weight", GgmlType::kIQ2_XS},
  };
  for (const auto& c : cases) {
    const std::string type_name = GgmlTypeName(static_cast<uint32_t>(c.type));
    SCOPED_TRACE(c.tensor + " " + type_name);
    testing::TinyLlamaSpec spec = MixedSpec();
    spec.tensor_types.insert(spec.tensor_types.begin(), {c.tensor, c.type});
    Loaded l = Build(spec);
    ASSERT_TRUE(l.file);  // the file itself is well formed
    for (KernelChoice k : {KernelChoice::kReference, KernelChoice::kAuto}) {
      auto model = Model(*l.file, k);
      ASSERT_FALSE(model.ok());
      EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
      EXPECT_NE(model.status().message().find(c.tensor), std::string::npos) << model.status();
      EXPECT_NE(model.status().message().find(type_name), std::string::npos) << model.status();
    }
  }
}

// Tensor parallelism cuts input features (ColSlice) only on whole blocks: 256 weights
// for K-quants, 32 for Q5_0 / Q5_1.
TEST(QuantTypesTest, ColumnSlicesOfKQuantsFallOnSuperBlocks) {
  testing::TinyLlamaSpec spec = MixedSpec();
  spec.hidden = 512;
  spec.num_heads = 8;
  spec.num_kv_heads = 4;
  Loaded l = Build(spec);
  ASSERT_TRUE(l.file);
  const GgufTensor* q = l.file->FindTensor("blk.0.attn_q.weight");  // Q4_K, k = 512
  const GgufTensor* o = l.file->FindTensor("blk.0.attn_output.weight");  // Q5_0, k = 512
  ASSERT_TRUE(q && o);
  for (KernelChoice k : SupportedKernelChoices()) {
    SCOPED_TRACE(KernelChoiceName(k));
    auto wq = Linear::FromTensor(*q, 512, 512, k);
    auto wo = Linear::FromTensor(*o, 512, 512, k);
    ASSERT_TRUE(wq.ok() && wo.ok());
    EXPECT_TRUE(wq->ColSlice(256, 512).ok());
    auto bad = wq->ColSlice(0, 128);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("blk.0.attn_q.weight"), std::string::npos);
    EXPECT_NE(bad.status().message().find("Q4_K blocks of 256"), std::string::npos)
        << bad.status();
    EXPECT_TRUE(wo->ColSlice(0, 128).ok());
    EXPECT_FALSE(wo->ColSlice(0, 144).ok());
  }
  // The model: TP = 2 splits attn_output's input (4 of 8 heads of 64: 256 columns) and
  // ffn_down's (FFN 512: 256 columns) on super-blocks, so a K-quant O loads...
  const auto config = LlamaConfig::FromGguf(*l.file);
  ASSERT_TRUE(config.ok()) << config.status();
  const auto shard = ShardSpec::Compute(*config, 2, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  spec.tensor_types.insert(spec.tensor_types.begin(), {"attn_output.weight", GgmlType::kQ4_K});
  Loaded ok = Build(spec);
  EXPECT_TRUE(LlamaWeights::Load(*ok.file, *config, *shard, KernelChoice::kReference).ok());
  // ... and 4 ranks (128 columns each) are refused, naming the tensor and its blocks.
  const auto shard4 = ShardSpec::Compute(*config, 4, 1);
  ASSERT_TRUE(shard4.ok()) << shard4.status();
  auto refused = LlamaWeights::Load(*ok.file, *config, *shard4, KernelChoice::kReference);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("attn_output.weight"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("Q4_K blocks of 256"), std::string::npos)
      << refused.status();
}

// Every matrix of a real GGUF (e.g. Gemma 3 270M Q4_K_M: Q5_0, Q4_K, Q6_K, Q8_0 as
// llama.cpp's quantizer wrote them), named by WEFT_QUANT_CHECK_GGUF: its first 64 rows
// on each kernel path this CPU runs, against the reference kernels. Skips when unset
// (the file is not in the repository).
TEST(QuantTypesTest, EveryMatrixOfARealFileComputes) {
  const char* path = std::getenv("WEFT_QUANT_CHECK_GGUF");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set WEFT_QUANT_CHECK_GGUF to a GGUF file to check all its matrices";
  }
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::mt19937 rng(5);
  std::normal_distribution<float> val(0.0f, 1.0f);
  int checked = 0;
  for (const GgufTensor& t : (*file)->tensors()) {
    if (t.ne.size() != 2) continue;
    SCOPED_TRACE(t.name + " " + GgmlTypeName(static_cast<uint32_t>(t.type)));
    auto full = Linear::FromTensor(t, t.ne[0], t.ne[1], KernelChoice::kReference);
    ASSERT_TRUE(full.ok()) << full.status();
    auto ref = full->RowSlice(0, std::min<int64_t>(64, t.ne[1]));
    ASSERT_TRUE(ref.ok()) << ref.status();
    const int64_t k = t.ne[0], n = ref->out_features(), m = 3;
    std::vector<float> x(m * k);
    for (float& v : x) v = val(rng);
    std::vector<float> want(m * n), got(m * n);
    ref->Compute(LinearInput{x.data(), k}, m, want.data(), n, 0, n);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    for (KernelChoice c : SupportedKernelChoices()) {
      SCOPED_TRACE(KernelChoiceName(c));
      auto lin = ref->WithKernels(c);
      ASSERT_TRUE(lin.ok()) << lin.status();
      ActivationBuffer buf;
      buf.Resize(lin->input_forms(), m, k);
      buf.Convert(x.data(), k, 0, m);
      lin->Compute(buf.Input(x.data(), k), m, got.data(), n, 0, n);
      float diff = 0;
      for (int64_t i = 0; i < m * n; ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
      EXPECT_LE(diff, (RoundsActivations(c) ? 3e-2f : 1e-4f) * scale) << lin->kernel_name();
    }
    ++checked;
  }
  std::printf("%d matrices of %s checked\n", checked, path);
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace weft
