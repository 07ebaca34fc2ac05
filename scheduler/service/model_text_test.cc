#include "scheduler/service/model_text.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace weft
