#include "scheduler/service/model_text.h"

#include <gtest/gtest.h>

#include "common/gguf.h"
#include "common/testing/model_path.h"

namespace weft {
namespace {

// A logprobs entry for a special token names it: "<|im_end|>", not "" (which a client
// could not tell from another special token, or from an empty piece).
TEST(ModelTextTest, SpecialTokensDisplayTheirTextOrdinaryTokensTheirBytes) {
  WEFT_REQUIRE_DEFAULT_MODEL(path);
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ModelText::Load(**file, "");
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
