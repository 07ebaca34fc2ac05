// End to end, real processes and the default model: structured output (issue 33).
//  * gRPC: regular-expression and choice constraints hold on every answer that finishes
//    with STOP (and the same seed gives the same tokens alone and under load); a
//    constraint that does not compile is INVALID_ARGUMENT naming why.
//  * OpenAI HTTP with PyPI's `openai` client (structured_client.py): every answer under
//    response_format json_schema that finishes with "stop" validates against its schema
//    with PyPI's `jsonschema`, also at 64 streams at once mixed with unconstrained ones;
//    answers cut by max_tokens are counted and printed. On the same cluster, tool calls
//    (tools_client.py): tool_choice required / named / auto, a `tool` message back and an
//    answer, streamed delta.tool_calls put together as the whole answer's call.
//  * gRPC tool calls: chat.tool_choice "required" gives a parsed call (tool_calls,
//    FINISH_REASON_TOOL_CALLS).
// Skips the HTTP part, saying why, only when the package index cannot be reached.
//
// The model: the default one; with WEFT_STRUCTURED_MODEL=gemma3 (the manual target
// structured_output_gemma3_test, run by test.sh's gemma3 phase) Gemma 3 270M
// (tools/bootstrap.sh --model gemma3-270m), whose GGUF has no chat template: the scheduler
// gets llama.cpp's google-gemma-2-2b-it.jinja (Gemma 2 and 3 share the turn format
// <start_of_turn>role ... <end_of_turn>; they differ only in a system message, which Gemma 3
// folds into the first user turn and Gemma 2 refuses: these tests send none).
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/llama_cpp_data.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/openai_python.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

// The model under test and the scheduler flags it needs.
struct ModelUnderTest {
  std::string path;                     // "" = not found: skip
  std::string skip;                     // why
  std::vector<std::string> scheduler_flags;
};

ModelUnderTest FindModel() {
  ModelUnderTest m;
  m.scheduler_flags = {"--http_port=0"};
  const char* which = std::getenv("WEFT_STRUCTURED_MODEL");
  if (which == nullptr || std::string(which).empty()) {
    m.path = testing::FindModelFile();
    if (m.path.empty()) m.skip = "default model not found (run tools/bootstrap.sh)";
    return m;
  }
  if (std::string(which) != "gemma3") {
    m.skip = absl::StrCat("unknown WEFT_STRUCTURED_MODEL=", which);
    return m;
  }
  const std::string llama = testing::LlamaCppDataDir();
  m.path = testing::FindModelFile("gemma-3-270m-q4_k_m.gguf");
  if (m.path.empty() || llama.empty()) {
    m.path.clear();
    m.skip = "Gemma 3 270M or llama.cpp's templates not found "
             "(tools/bootstrap.sh --model gemma3-270m)";
    return m;
  }
  m.scheduler_flags.push_back(
      absl::StrCat("--chat_template=", llama, "/models/templates/google-gemma-2-2b-it.jinja"));
  // Its 262,144-token vocabulary compiles 4-7x slower than the default model's (seconds
  // per schema on 2 busy cores): the test checks answers, not the default cap.
  m.scheduler_flags.push_back("--grammar_compile_timeout_s=60");
  return m;
}

#define WEFT_REQUIRE_MODEL_UNDER_TEST(var)     \
  const ModelUnderTest var = FindModel();       \
  if (var.path.empty()) GTEST_SKIP() << var.skip

void StartServing(Cluster& cluster, const ModelUnderTest& m) {
  ASSERT_TRUE(cluster.StartScheduler(m.scheduler_flags).ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 512;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
}

weft::v1::GenerateRequest Constrained(const std::string& prompt, uint64_t seed, int max_tokens) {
  weft::v1::GenerateRequest r;
  if (!prompt.empty()) r.set_text(prompt);
  r.mutable_sampling()->set_temperature(0.9f);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  return r;
}

TEST(StructuredOutputE2eTest, RegexAndChoiceHoldOverGrpc) {
  WEFT_REQUIRE_MODEL_UNDER_TEST(model);
  Cluster cluster(model.path);
  StartServing(cluster, model);
  const std::string pattern = "[0-9]{3}-[a-z]{2,4}";
  const std::regex re(pattern);
  const std::vector<std::string> choices = {"yes", "no", "maybe later"};
  int stops = 0, lengths = 0;
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    weft::v1::GenerateRequest r = Constrained("Write a code:", seed, 24);
    r.mutable_constraint()->set_regex(pattern);
    StreamResult s = Generate(cluster.stub(), r);
    ASSERT_TRUE(s.status.ok()) << s.status.error_message() << cluster.Logs();
    if (s.finish_reason == weft::v1::FINISH_REASON_STOP) {
      ++stops;
      EXPECT_TRUE(std::regex_match(s.text, re)) << "'" << s.text << "'";
    } else {
      ++lengths;
    }
    alone.push_back(s.token_ids);
    weft::v1::GenerateRequest c = Constrained("Shall we go?", seed, 16);
    for (const std::string& x : choices) c.mutable_constraint()->mutable_choice()->add_choices(x);
    StreamResult t = Generate(cluster.stub(), c);
    ASSERT_TRUE(t.status.ok()) << t.status.error_message();
    ASSERT_EQ(t.finish_reason, weft::v1::FINISH_REASON_STOP) << t.text;
    EXPECT_NE(std::find(choices.begin(), choices.end(), t.text), choices.end()) << t.text;
  }
  EXPECT_GT(stops, 0);
  std::printf("regex: %d stop, %d cut by max_tokens\n", stops, lengths);

  // Same seed, same tokens: the regex requests again, among 16 free-running streams.
  std::vector<std::unique_ptr<BackgroundStream>> load;
  for (int i = 0; i < 16; ++i) {
    weft::v1::GenerateRequest free = Constrained("Once upon a time", 500 + i, 48);
    load.push_back(std::make_unique<BackgroundStream>(cluster.stub(), free));
  }
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    weft::v1::GenerateRequest r = Constrained("Write a code:", seed, 24);
    r.mutable_constraint()->set_regex(pattern);
    StreamResult s = Generate(cluster.stub(), r);
    ASSERT_TRUE(s.status.ok());
    EXPECT_EQ(s.token_ids, alone[seed - 1]) << "seed " << seed;
  }
  for (auto& b : load) EXPECT_TRUE(b->Join().status.ok());

  // Tool calls over gRPC: chat.tool_choice "required" holds the answer to one call in the
  // model's format (ChatML's or Gemma's template: the Hermes fallback) and the
  // response carries it parsed (tool_calls, FINISH_REASON_TOOL_CALLS), its text empty.
  int tool_calls = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    weft::v1::GenerateRequest r = Constrained("", seed, 64);
    auto* chat = r.mutable_chat();
    auto* m = chat->add_messages();
    m->set_role("user");
    m->set_content("What is the weather in Oslo?");
    auto* t = chat->add_tools();
    t->set_name("get_weather");
    t->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string",)"
                      R"( "maxLength": 12}}, "required": ["city"], "additionalProperties": false})");
    chat->mutable_tool_choice()->set_mode(weft::v1::ToolChoice::MODE_REQUIRED);
    chat->set_parallel_tool_calls(false);
    std::vector<weft::v1::ToolCall> calls;
    StreamResult s = Generate(cluster.stub(), r, absl::Seconds(120),
                              [&](const weft::v1::GenerateResponse& resp) {
                                for (const auto& c : resp.tool_calls()) calls.push_back(c);
                                return true;
                              });
    ASSERT_TRUE(s.status.ok()) << s.status.error_message() << cluster.Logs();
    if (s.finish_reason != weft::v1::FINISH_REASON_TOOL_CALLS) {
      EXPECT_EQ(s.finish_reason, weft::v1::FINISH_REASON_LENGTH) << s.text;
      continue;
    }
    ++tool_calls;
    ASSERT_EQ(calls.size(), 1u) << s.text;
    EXPECT_EQ(calls[0].name(), "get_weather");
    EXPECT_FALSE(calls[0].id().empty());
    const auto args = nlohmann::json::parse(calls[0].arguments(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << calls[0].arguments();
    EXPECT_TRUE(args["city"].is_string()) << calls[0].arguments();
    EXPECT_EQ(s.text, "");
  }
  EXPECT_GT(tool_calls, 0);
  std::printf("grpc tool calls: %d of 4 finished with a call\n", tool_calls);

  // A grammar that does not compile: INVALID_ARGUMENT, naming the grammar.
  weft::v1::GenerateRequest bad = Constrained("x", 1, 4);
  bad.mutable_constraint()->set_grammar("root ::= undefined_rule");
  StreamResult b = Generate(cluster.stub(), bad);
  EXPECT_EQ(b.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(b.status.error_message().find("grammar"), std::string::npos)
      << b.status.error_message();
  // Masks were filled; no worker sampled outside one.
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_grammar_masks_total") > 0; },
                      absl::Seconds(10)));
  EXPECT_EQ(cluster.Metric("weft_grammar_violations_total"), 0);
  std::printf("mask time: %.1f us per constrained token (%g masks)\n",
              1e6 * cluster.Metric("weft_grammar_mask_seconds_total") /
                  cluster.Metric("weft_grammar_masks_total"),
              cluster.Metric("weft_grammar_masks_total"));
  EXPECT_TRUE(
      WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

TEST(StructuredOutputE2eTest, JsonSchemasAndToolCallsThroughTheOpenAiClient) {
  if (!OpenAiPython().skip.empty()) GTEST_SKIP() << OpenAiPython().skip;
  ASSERT_TRUE(OpenAiPython().error.empty()) << OpenAiPython().error;
  WEFT_REQUIRE_MODEL_UNDER_TEST(model);
  Cluster cluster(model.path);
  StartServing(cluster, model);
  RunResult py = RunOpenAiScript(
      "tests/e2e/structured_client.py",
      {absl::StrCat("--base_url=http://127.0.0.1:", cluster.http_port(), "/v1"),
       "--phase=schemas", "--concurrency=64", "--max_tokens=96"});
  ASSERT_EQ(py.code, 0) << "structured_client.py failed:\n" << py.log << py.out << cluster.Logs();
  const nlohmann::json counts = PrintedJson(py.out, "structured");
  ASSERT_TRUE(counts.is_object()) << py.out;
  std::printf("structured output: %s\n", counts.dump().c_str());
  EXPECT_GT(counts["stop"].get<int>(), 0);

  // Tool calls on the same cluster (tools_client.py): required, named, the round trip
  // with a tool message, streamed deltas, auto.
  py = RunOpenAiScript("tests/e2e/tools_client.py",
                       {absl::StrCat("--base_url=http://127.0.0.1:", cluster.http_port(), "/v1"),
                        "--phase=tools"});
  ASSERT_EQ(py.code, 0) << "tools_client.py failed:\n" << py.log << py.out << cluster.Logs();
  const nlohmann::json tools = PrintedJson(py.out, "tools");
  ASSERT_TRUE(tools.is_object()) << py.out;
  std::printf("tool calls: %s\n", tools.dump().c_str());
  EXPECT_GT(tools["calls"].get<int>(), 0);
  // What the model's vocabulary costs the scheduler (a figure, not a check).
  const double compiles = cluster.Metric("weft_grammar_compiles_total");
  std::printf("grammar compiles: %g (mean %.1f ms), cache hits %g, refused %g; masks %g "
              "(mean %.1f us)\n",
              compiles, 1e3 * cluster.Metric("weft_grammar_compile_seconds_total") / compiles,
              cluster.Metric("weft_grammar_compile_cache_hits_total"),
              cluster.Metric("weft_grammar_compile_refusals_total"),
              cluster.Metric("weft_grammar_masks_total"),
              1e6 * cluster.Metric("weft_grammar_mask_seconds_total") /
                  cluster.Metric("weft_grammar_masks_total"));
  EXPECT_TRUE(
      WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e
