// ModelConfig (common/model_config.h) on the default model and on tiny files of every
// architecture, and the refusals of LlamaModel::Create. (Here rather than in common/:
// the tiny-model builder lives with the model's tests.)
#include "common/model_config.h"

#include <cmath>
#include <memory>
#include <vector>

#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/llama_model.h"
#include "worker/model/testing/tiny_llama.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

// A parsed in-memory GGUF; FromBuffer does not copy, so the bytes live alongside.
struct TinyFile {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
  const GgufFile& operator*() const { return *file; }
};

TinyFile Open(const testing::TinyLlamaSpec& spec) {
  TinyFile t;
  t.bytes = testing::BuildTinyLlama(spec);
  auto f = GgufFile::FromBuffer(t.bytes.data(), t.bytes.size());
  EXPECT_TRUE(f.ok()) << f.status();
  if (f.ok()) t.file = std::move(*f);
  return t;
}

TEST(ModelConfigTest, ReadsTheDefaultModel) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto c = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->ffn_size, 1536);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5f, 1e-9f);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->rope_pairing, RopePairing::kAdjacent);
  EXPECT_EQ(c->attention_scale, 1.0f / std::sqrt(64.0f));
  EXPECT_EQ(c->embedding_scale, 1.0f);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
  EXPECT_EQ(c->max_sliding_window(), 0);
  ASSERT_EQ(c->layers.size(), 30u);
  for (const LayerSpec& l : c->layers) {
    EXPECT_EQ(l.rope.freq_base, 100000.0f);
    EXPECT_EQ(l.rope.freq_scale, 1.0f);
    EXPECT_FALSE(l.rope.freq_factors || l.qkv_bias || l.qk_norm || l.post_attention_norm ||
                 l.post_ffn_norm);
    EXPECT_EQ(l.activation, FfnActivation::kSilu);
  }
  EXPECT_EQ(c->Tensors().size(), (*file)->tensors().size());
}

// The real Gemma 3 270M (tools/bootstrap.sh --model gemma3-270m), as llama.cpp reads it:
// 18 layers, a global one after every five local ones with a 512-token window.
TEST(ModelConfigTest, ReadsGemma3_270m) {
  const std::string path = testing::FindModelFile("gemma-3-270m-q4_k_m.gguf");
  if (path.empty()) GTEST_SKIP() << "gemma-3-270m-q4_k_m.gguf not found (tools/bootstrap.sh --model gemma3-270m)";
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto c = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->num_layers, 18);
  EXPECT_EQ(c->hidden_size, 640);
  EXPECT_EQ(c->ffn_size, 2048);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 1);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->rope_dim, 256);
  EXPECT_EQ(c->vocab_size, 262144);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->rope_pairing, RopePairing::kHalves);
  EXPECT_EQ(c->embedding_scale, std::sqrt(640.0f));
  EXPECT_EQ(c->attention_scale, 1.0f / 16.0f);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
  EXPECT_NEAR(c->rms_norm_eps, 1e-6f, 1e-12f);
  for (int32_t l = 0; l < 18; ++l) {
    const bool global = l % 6 == 5;
    EXPECT_EQ(c->layers[l].sliding_window, global ? 0 : 512) << l;
    EXPECT_EQ(c->layers[l].rope.freq_base, global ? 1e6f : 10000.0f) << l;
    EXPECT_TRUE(c->layers[l].qk_norm && c->layers[l].post_ffn_norm);
  }
  EXPECT_EQ(c->Tensors().size(), (*file)->tensors().size());  // every tensor is read
}

TEST(ModelConfigTest, ReadsTinyModelsAndDefaults) {
  testing::TinyLlamaSpec spec;
  spec.tied = true;
  auto file = Open(spec);
  auto c = ModelConfig::FromGguf(*file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);   // embedding_length / head_count
  EXPECT_EQ(c->rope_dim, 32);   // defaults to head_dim
  EXPECT_EQ(c->vocab_size, 80);  // rows of token_embd
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->queries_per_kv_head(), 2);
}

TEST(ModelConfigTest, EachArchitectureDescribesItsLayers) {
  testing::TinyLlamaSpec spec;
  spec.architecture = "qwen2";
  auto qwen2 = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_EQ(qwen2->rope_pairing, RopePairing::kHalves);
  EXPECT_TRUE(qwen2->layers[1].qkv_bias);
  EXPECT_FALSE(qwen2->layers[1].qk_norm);

  spec.architecture = "qwen3";
  auto qwen3 = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->rope_pairing, RopePairing::kHalves);
  EXPECT_FALSE(qwen3->layers[0].qkv_bias);
  EXPECT_TRUE(qwen3->layers[0].qk_norm);

  spec.architecture = "llama";
  spec.rope_freqs = true;
  auto llama3 = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_TRUE(llama3->layers[0].rope.freq_factors);
  EXPECT_EQ(llama3->Tensors()[2].name, "output.weight");
  EXPECT_EQ(llama3->Tensors()[3].name, "rope_freqs.weight");

  // Gemma 3: 8 layers, window 24, the default pattern (6: layer 5 global).
  spec = {};
  spec.architecture = "gemma3";
  spec.num_layers = 8;
  spec.sliding_window = 24;
  spec.rope_base = 1e6f;
  auto gemma = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->rope_pairing, RopePairing::kHalves);
  EXPECT_EQ(gemma->embedding_scale, std::sqrt(128.0f));
  EXPECT_EQ(gemma->attention_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_EQ(gemma->max_sliding_window(), 24);
  for (int32_t l = 0; l < 8; ++l) {
    const LayerSpec& ls = gemma->layers[l];
    const bool global = l == 5;
    EXPECT_EQ(ls.sliding_window, global ? 0 : 24) << l;
    EXPECT_EQ(ls.rope.freq_base, global ? 1e6f : 10000.0f) << l;
    EXPECT_TRUE(ls.qk_norm && ls.post_attention_norm && ls.post_ffn_norm);
    EXPECT_EQ(ls.activation, FfnActivation::kGeluTanh);
  }
  // An explicit pattern, local base and soft-capping.
  spec.swa_pattern = 2;
  spec.rope_base_swa = 5000.0f;
  spec.final_logit_softcap = 30.0f;
  gemma = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->final_logit_softcap, 30.0f);
  for (int32_t l = 0; l < 8; ++l) {
    EXPECT_EQ(gemma->layers[l].sliding_window, l % 2 == 0 ? 24 : 0) << l;
    EXPECT_EQ(gemma->layers[l].rope.freq_base, l % 2 == 0 ? 5000.0f : 1e6f) << l;
  }
  // Without a window every layer is global.
  spec.sliding_window = 0;
  gemma = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->max_sliding_window(), 0);
}

TEST(ModelConfigTest, LinearRopeScalingIsAppliedOthersRefused) {
  testing::TinyLlamaSpec spec;
  spec.rope_scaling_type = "linear";
  spec.rope_scaling_factor = 4.0f;
  auto c = ModelConfig::FromGguf(*Open(spec));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layers[0].rope.freq_scale, 0.25f);
  for (const char* type : {"yarn", "longrope"}) {
    spec.rope_scaling_type = type;
    c = ModelConfig::FromGguf(*Open(spec));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(type));
  }
}

TEST(ModelConfigTest, RejectsOtherArchitectures) {
  testing::TinyLlamaSpec spec;
  spec.architecture = "gpt2";
  auto c = ModelConfig::FromGguf(*Open(spec));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gpt2"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gemma3"));
}

TEST(ModelConfigTest, MissingTensorsAreNamed) {
  struct Case {
    const char* arch;
    const char* tensor;
  } cases[] = {{"llama", "token_embd.weight"},         {"llama", "blk.1.ffn_up.weight"},
               {"llama", "output_norm.weight"},        {"llama", "blk.0.attn_norm.weight"},
               {"qwen2", "blk.1.attn_k.bias"},         {"qwen3", "blk.0.attn_q_norm.weight"},
               {"gemma3", "blk.1.post_ffw_norm.weight"}, {"gemma3", "blk.0.attn_k_norm.weight"}};
  for (const Case& k : cases) {
    testing::TinyLlamaSpec spec;
    spec.architecture = k.arch;
    spec.omit_tensor = k.tensor;
    auto file = Open(spec);
    auto model = LlamaModel::Create(*file, {});
    ASSERT_FALSE(model.ok()) << k.tensor;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(k.tensor));
  }
}

// A tensor the description does not read (a bias llama.cpp would add, a QK norm in a
// llama file) is refused rather than silently ignored.
TEST(ModelConfigTest, UnusedTensorsAreRefusedByName) {
  for (const char* extra : {"blk.0.attn_output.bias", "blk.1.attn_q_norm.weight", "mystery"}) {
    testing::TinyLlamaSpec spec;
    spec.extra_tensor = extra;
    auto c = ModelConfig::FromGguf(*Open(spec));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << extra;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(extra));
  }
  testing::TinyLlamaSpec spec;
  spec.architecture = "qwen3";
  spec.rope_freqs = true;  // llama only
  auto c = ModelConfig::FromGguf(*Open(spec));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("rope_freqs.weight"));
}

TEST(ModelConfigTest, ValidateCatchesBadShapes) {
  ModelConfig c;
  c.num_layers = 2, c.hidden_size = 64, c.ffn_size = 128, c.num_heads = 4;
  c.num_kv_heads = 2, c.head_dim = 16, c.rope_dim = 16, c.context_length = 64;
  c.vocab_size = 10;
  c.attention_scale = 0.25f;
  c.layers.resize(2);
  EXPECT_TRUE(c.Validate().ok());
  ModelConfig bad = c;
  bad.num_kv_heads = 3;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.rope_dim = 15;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.rope_dim = 32;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.rms_norm_eps = 0;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.layers.resize(1);
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.layers[1].sliding_window = -1;
  EXPECT_FALSE(bad.Validate().ok());
  bad = c;
  bad.attention_scale = 0;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace weft
