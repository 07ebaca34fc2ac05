#include "worker/model/llama_config.h"

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

TEST(LlamaConfigTest, ReadsTheDefaultModel) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto c = LlamaConfig::FromGguf(**file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->ffn_size, 1536);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_FLOAT_EQ(c->rope_freq_base, 100000.0f);
  EXPECT_NEAR(c->rms_norm_eps, 1e-5f, 1e-9f);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->rope_style, kernels::RopeStyle::kNormal);
}

TEST(LlamaConfigTest, ReadsTinyModelsAndDefaults) {
  testing::TinyLlamaSpec spec;
  spec.tied = true;
  auto file = Open(spec);
  auto c = LlamaConfig::FromGguf(*file);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 32);   // embedding_length / head_count
  EXPECT_EQ(c->rope_dim, 32);   // defaults to head_dim
  EXPECT_EQ(c->vocab_size, 80);  // rows of token_embd
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->queries_per_kv_head(), 2);
}

TEST(LlamaConfigTest, RejectsOtherArchitectures) {
  testing::TinyLlamaSpec spec;
  spec.architecture = "gpt2";
  auto c = LlamaConfig::FromGguf(*Open(spec));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("gpt2"));
}

TEST(LlamaConfigTest, MissingTensorsAreNamed) {
  for (const std::string name : {"token_embd.weight", "blk.1.ffn_up.weight",
                                 "output_norm.weight", "blk.0.attn_norm.weight"}) {
    testing::TinyLlamaSpec spec;
    spec.omit_tensor = name;
    auto file = Open(spec);
    auto model = LlamaModel::Create(*file, {});
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(name));
  }
}

TEST(LlamaConfigTest, ValidateCatchesBadShapes) {
  LlamaConfig c;
  c.num_layers = 2, c.hidden_size = 64, c.ffn_size = 128, c.num_heads = 4;
  c.num_kv_heads = 2, c.head_dim = 16, c.rope_dim = 16, c.context_length = 64;
  c.vocab_size = 10;
  EXPECT_TRUE(c.Validate().ok());
  LlamaConfig bad = c;
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
}

}  // namespace
}  // namespace weft
