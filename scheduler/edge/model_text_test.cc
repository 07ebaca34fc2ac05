#include "scheduler/edge/model_text.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/gguf.h"
#include "common/testing/gguf_builder.h"
#include "common/testing/llama_cpp_data.h"
#include "common/testing/model_path.h"
#include "common/tool_call_format.h"
#include "scheduler/edge/tool_call_parser.h"

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

// The scheduler reads the same model description as the workers (common/model_config.h):
// a file they would refuse is refused here, naming what is wrong, before any port opens.
TEST(ModelTextTest, RefusesWhatTheWorkersWouldRefuse) {
  testing::GgufBuilder other;
  other.AddString("general.architecture", "mamba");
  std::vector<uint8_t> bytes = other.Build();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ModelText::Load(**file, "m");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(text.status().message()).find("mamba"), std::string::npos);

  testing::GgufBuilder no_tensors;  // llama metadata, no weights at all
  no_tensors.AddString("general.architecture", "llama");
  for (const char* key : {"llama.block_count", "llama.embedding_length",
                          "llama.feed_forward_length", "llama.attention.head_count",
                          "llama.context_length"}) {
    no_tensors.AddUint32(key, 64);
  }
  no_tensors.AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  bytes = no_tensors.Build();
  file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  text = ModelText::Load(**file, "m");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(text.status().message()).find("token_embd.weight"), std::string::npos);
}

// A one-layer llama of hidden size 8 (one head), FFN 8, F32 zeros: what ModelConfig
// accepts, so that a test of the tokenizer side loads.
void AddTinyLlama(testing::GgufBuilder* b, uint64_t vocab) {
  b->AddString("general.architecture", "llama");
  b->AddUint32("llama.context_length", 64);
  b->AddUint32("llama.block_count", 1);
  b->AddUint32("llama.embedding_length", 8);
  b->AddUint32("llama.attention.head_count", 1);
  b->AddUint32("llama.feed_forward_length", 8);
  b->AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  const auto f32 = [&](const std::string& name, const std::vector<uint64_t>& ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    b->AddTensor(name, ne, /*F32=*/0, std::vector<uint8_t>(n * 4, 0));
  };
  f32("token_embd.weight", {8, vocab});
  f32("output_norm.weight", {8});
  for (const char* t : {"attn_norm", "ffn_norm"}) f32(std::string("blk.0.") + t + ".weight", {8});
  for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                        "ffn_down"}) {
    f32(std::string("blk.0.") + t + ".weight", {8, 8});
  }
}

// A SentencePiece model file without tokenizer.chat_template (as Gemma 3 270M's GGUF).
std::vector<uint8_t> NoTemplateModel() {
  testing::GgufBuilder b;
  AddTinyLlama(&b, 9);
  b.AddString("tokenizer.ggml.model", "llama");
  b.AddStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "\xE2\x96\x81Hi", "[", "]", "\xE2\x96\x81", "user",
                    "<0x0A>"});
  b.AddFloat32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -2, -3, -2, 0});
  b.AddInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 6});
  return b.Build();
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ModelTextTest, ChatNeedsATemplateFromTheFileOrTheFlag) {
  const std::vector<uint8_t> bytes = NoTemplateModel();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  weft::v1::ChatPrompt chat;
  auto* m = chat.add_messages();
  m->set_role("user");
  m->set_content("Hi");

  auto plain = ModelText::Load(**file, "m");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->model_info().chat_template(), "");
  auto refused = (*plain)->encoder().EncodeChat(chat);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("--chat_template"));

  const std::string path = WriteTemp(
      "tmpl.jinja", "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}\n"
                    "{% endfor %}");
  auto with_flag = ModelText::Load(**file, "m", path);
  ASSERT_TRUE(with_flag.ok()) << with_flag.status();
  EXPECT_EQ((*with_flag)->model_info().chat_template(), "jinja");
  auto ids = (*with_flag)->encoder().EncodeChat(chat);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // "<s>" written by the template is the BOS the vocabulary adds: once.
  EXPECT_EQ(*ids, (*with_flag)->tokenizer().Encode("[user]Hi\n"));
  EXPECT_EQ((*ids)[0], 1);

  EXPECT_FALSE(ModelText::Load(**file, "m", path + ".missing").ok());
  EXPECT_FALSE(ModelText::Load(**file, "m", WriteTemp("bad.jinja", "{% for %}")).ok());
}

// A vocabulary whose Mistral markers are control tokens, served with Mistral Small 3.2's
// template (format [TOOL_CALLS]name[ARGS]{...}).
std::vector<uint8_t> MistralMarkerModel() {
  testing::GgufBuilder b;
  AddTinyLlama(&b, 10);
  b.AddString("tokenizer.ggml.model", "llama");
  b.AddStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "[TOOL_CALLS]", "[ARGS]", "[INST]", "Ok", "f",
                    "{\"a\":", "\xE2\x96\x81" "1}"});
  b.AddFloat32Array("tokenizer.ggml.scores", {0, 0, 0, 0, 0, 0, -1, -1, -1, -1});
  b.AddInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 3, 3, 3, 1, 1, 1, 1});
  return b.Build();
}

// The text of a tool-call sequence (ToolCallBytes) has the markers the model wrote as its
// control tokens, and the tool-call parser reads the call from it with no marker left in
// the visible text; the plain text (TokenBytes, any other sequence) has no marker, and
// other control tokens stay empty either way.
TEST(ModelTextTest, ToolCallTextHasTheFormatsControlTokenMarkers) {
  WEFT_REQUIRE_LLAMA_CPP_DATA(dir);
  const std::vector<uint8_t> bytes = MistralMarkerModel();
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status();
  auto text = ModelText::Load(**file, "m",
                              dir + "/models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja");
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ((*text)->encoder().tool_call_format(), ToolCallFormat::kMistralArgs);
  // The marker tokens (the grammar vocabulary reads the same list): Mistral's two; none for
  // Hermes, whose markers are no tokens here.
  const Tokenizer& tok = (*text)->tokenizer();
  EXPECT_EQ(ToolCallMarkerTokens(tok, ToolCallFormat::kMistralArgs),
            (std::vector<std::pair<int32_t, std::string>>{{3, "[TOOL_CALLS]"}, {4, "[ARGS]"}}));
  EXPECT_EQ(ToolCallMarkerTokens(tok, ToolCallFormat::kMistralNemo),
            (std::vector<std::pair<int32_t, std::string>>{{3, "[TOOL_CALLS]"}}));
  EXPECT_TRUE(ToolCallMarkerTokens(tok, ToolCallFormat::kHermes).empty());
  const TokenTextSource& source = (*text)->text_source();
  // "Ok" [TOOL_CALLS] "f" [ARGS] "{"a":" " 1}"
  const std::vector<int32_t> ids = {6, 3, 7, 4, 8, 9};
  std::string tool_text, plain_text;
  for (int32_t id : ids) {
    tool_text += std::string(source.ToolCallBytes(id));
    plain_text += std::string(source.TokenBytes(id));
  }
  EXPECT_EQ(tool_text, "Ok[TOOL_CALLS]f[ARGS]{\"a\": 1}");
  EXPECT_EQ(plain_text, "Okf{\"a\": 1}");
  EXPECT_EQ(source.ToolCallBytes(5), "");  // [INST]: a control token, not a marker
  const openai::ParsedOutput parsed =
      openai::ReadWholeAnswer(tool_text, "call_", ToolCallFormat::kMistralArgs);
  EXPECT_EQ(parsed.content, "Ok");
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "f");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"a\": 1}");
  EXPECT_TRUE(openai::ReadWholeAnswer(plain_text, "call_", ToolCallFormat::kMistralArgs)
                  .calls.empty());

  // Without a template (the Hermes fallback, whose markers are not control tokens here):
  // the tool-call text is the plain text.
  auto plain = ModelText::Load(**file, "m");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->text_source().ToolCallBytes(3), "");
}

}  // namespace
}  // namespace weft
