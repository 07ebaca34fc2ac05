#include "scheduler/edge/model_text.h"

#include <gtest/gtest.h>

#include "common/gguf.h"
#include "common/testing/model_path.h"

namespace weft {
namespace {

TEST(ModelTextTest, DefaultNameIsTheFilesStemInLowerCase) {
  EXPECT_EQ(DefaultModelName("models/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "smollm2-135m-instruct.q4_1");
  EXPECT_EQ(DefaultModelName("/a/b/Llama 3 (8B).gguf"), "llama-3--8b-");
  EXPECT_EQ(DefaultModelName("model"), "model");
  EXPECT_EQ(DefaultModelName(".gguf"), ".gguf");  // a dot file: its whole name
  EXPECT_EQ(DefaultModelName("dir/"), "default");
  EXPECT_EQ(DefaultModelName(std::string(300, 'A') + ".gguf").size(), 127u);
  EXPECT_TRUE(CheckModelName(DefaultModelName("x/Ünïcode.gguf")).ok());
}

TEST(ModelTextTest, RoutableNamesOnly) {
  EXPECT_TRUE(CheckModelName("smollm2").ok());
  EXPECT_TRUE(CheckModelName("Org/Model-7B:q4").ok());
  EXPECT_FALSE(CheckModelName("").ok());
  EXPECT_FALSE(CheckModelName("two words").ok());
  EXPECT_FALSE(CheckModelName("tab\there").ok());
  EXPECT_FALSE(CheckModelName("caf\xc3\xa9").ok());
  EXPECT_FALSE(CheckModelName(std::string(128, 'a')).ok());
}

// A logprobs entry for a special token names it: "<|im_end|>", not "" (which a client
// could not tell from another special token, or from an empty piece).
TEST(ModelTextTest, SpecialTokensDisplayTheirTextOrdinaryTokensTheirBytes) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ModelText::Load(**file, "smollm2");
  ASSERT_TRUE(text.ok()) << text.status();
  const Tokenizer& t = (*text)->tokenizer();
  const TokenTextSource& source = (*text)->text_source();
  const int32_t im_end = t.FindToken("<|im_end|>");
  ASSERT_GE(im_end, 0);
  EXPECT_EQ(source.TokenBytes(im_end), "");  // renders as nothing in generated text
  EXPECT_EQ(source.DisplayBytes(im_end), "<|im_end|>");
  const std::vector<int32_t> hello = t.Encode("hello", EncodeOptions{});
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(source.DisplayBytes(hello[0]), "hello");
  EXPECT_EQ(source.DisplayBytes(hello[0]), source.TokenBytes(hello[0]));
}

}  // namespace
}  // namespace weft
