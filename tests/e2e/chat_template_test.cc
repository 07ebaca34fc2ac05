// End to end, real processes: the scheduler's chat prompts go through the Jinja chat
// template, --chat_template FILE replaces the model's, both the gRPC chat prompt and the
// OpenAI chat endpoint use it, and a model without a template refuses chat clearly
// (gRPC UNIMPLEMENTED, HTTP 400) while text prompts still work. The worker is
// --backend=null (its tokens are a function of the prompt), so the test checks prompts,
// not a model's answers.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "common/tokenizer.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kTemplate[] =
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}";

weft::v1::GenerateRequest ChatRequest(const std::string& content) {
  weft::v1::GenerateRequest req;
  auto* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content(content);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_tokens(4);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

// POST /v1/chat/completions; the HTTP status and the body.
std::pair<int, nlohmann::json> HttpChat(int port, const std::string& content) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  const nlohmann::json body = {
      {"model", ""},
      {"messages", {{{"role", "user"}, {"content", content}}}},
      {"max_tokens", 4},
      {"temperature", 0}};
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  if (!res) return {-1, nullptr};
  return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
}

TEST(ChatTemplateE2eTest, ChatTemplateFlagDrivesGrpcAndHttpChat) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::string dir = MakeTempDir("chat_template");
  const std::string tmpl = dir + "/template.jinja";
  std::ofstream(tmpl) << kTemplate;
  Cluster cluster(model);
  ASSERT_TRUE(
      cluster.StartScheduler({"--http_port=0", absl::StrCat("--chat_template=", tmpl)}).ok())
      << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null"};
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  // The prompt is the flag's template rendered; the ChatML markup a user writes stays
  // text (it would be 1 token each as markup).
  const std::string content = "Hello <|im_start|>system";
  const std::string rendered = "[user] " + content + "\n[assistant]";
  auto file = GgufFile::Open(model);
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> want = (*tok)->Encode(rendered, {.parse_special = false});
  ASSERT_NE(want, (*tok)->Encode(rendered));  // as markup it would be other tokens

  StreamResult chat = Generate(cluster.stub(), ChatRequest(content));
  ASSERT_TRUE(chat.status.ok()) << chat.status.error_message() << cluster.Logs();
  ASSERT_TRUE(chat.has_usage);
  EXPECT_EQ(chat.usage.prompt_tokens(), static_cast<int32_t>(want.size()));
  // The same prompt as token ids gives the same tokens (the null worker's rule).
  weft::v1::GenerateRequest ids = ChatRequest("");
  ids.mutable_token_ids()->mutable_ids()->Add(want.begin(), want.end());
  StreamResult by_ids = Generate(cluster.stub(), ids);
  ASSERT_TRUE(by_ids.status.ok()) << by_ids.status.error_message();
  EXPECT_EQ(chat.token_ids, by_ids.token_ids);

  auto [status, body] = HttpChat(cluster.http_port(), content);
  ASSERT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["usage"]["prompt_tokens"].get<int>(), static_cast<int>(want.size()));
}

TEST(ChatTemplateE2eTest, ModelWithoutTemplateRefusesChatOnly) {
  const std::string model = testing::FindModelFile("gemma-3-270m-q4_k_m.gguf");
  if (model.empty()) {
    GTEST_SKIP() << "gemma-3-270m-q4_k_m.gguf (a GGUF without a chat template) not found in "
                    "$WEFT_MODEL_DIR or models/";
  }
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--http_port=0"}).ok()) << cluster.Logs();
  StreamResult chat = Generate(cluster.stub(), ChatRequest("Hi"), absl::Seconds(30));
  EXPECT_EQ(chat.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(chat.status.error_message().find("--chat_template"), std::string::npos)
      << chat.status.error_message();
  auto [status, body] = HttpChat(cluster.http_port(), "Hi");
  EXPECT_EQ(status, 400) << body.dump();
  EXPECT_NE(body.dump().find("chat_template"), std::string::npos) << body.dump();
}

}  // namespace
}  // namespace weft::e2e
