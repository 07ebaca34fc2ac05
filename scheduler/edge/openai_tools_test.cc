#include "scheduler/edge/openai_tools.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "common/field_error.h"
#include "nlohmann/json.hpp"
#include "scheduler/edge/openai_json.h"

namespace weft::openai {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kWeather[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",)"
    R"( "parameters": {"type": "object", "properties": {"city": {"type": "string"}},)"
    R"( "required": ["city"]}}})";
constexpr char kTime[] = R"({"type": "function", "function": {"name": "get_time"}})";

std::string Body(const std::string& extra) {
  return absl::StrCat(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)", kWeather,
                      ", ", kTime, "]", extra.empty() ? "" : ", ", extra, "}");
}

ParsedRequest Parse(const std::string& body) {
  auto p = ParseRequest(Api::kChatCompletions, body);
  EXPECT_TRUE(p.ok()) << p.status() << " for " << body;
  return p.ok() ? *std::move(p) : ParsedRequest();
}

std::string FailedParam(const std::string& body) {
  auto p = ParseRequest(Api::kChatCompletions, body);
  if (p.ok()) return "";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return ErrorFor(p.status()).param;
}

TEST(OpenAiToolsTest, RequiredHoldsTheOutputToCallsOfTheTools) {
  const ParsedRequest p = Parse(Body(R"("tool_choice": "required", "parallel_tool_calls": false)"));
  EXPECT_TRUE(p.parse_tool_calls);
  ASSERT_EQ(p.request.chat().tools_size(), 2);
  EXPECT_EQ(p.request.chat().tools(0).name(), "get_weather");
  EXPECT_EQ(p.request.chat().tools(0).description(), "Weather now");
  EXPECT_EQ(Json::parse(p.request.chat().tools(0).parameters())["required"][0], "city");
  EXPECT_EQ(p.request.chat().tools(1).parameters(), "");
  // The grammar is built from these by BuildSpec in the model's format
  // (generate_request_test).
  EXPECT_EQ(p.request.chat().tool_choice().mode(), weft::v1::ToolChoice::MODE_REQUIRED);
  ASSERT_TRUE(p.request.chat().has_parallel_tool_calls());
  EXPECT_FALSE(p.request.chat().parallel_tool_calls());
  EXPECT_FALSE(p.request.has_constraint());
}

TEST(OpenAiToolsTest, ChoicesMapToTheirGrammars) {
  // "auto" is the default with tools: text, and a call wherever one is triggered.
  ParsedRequest p = Parse(Body(""));
  EXPECT_TRUE(p.parse_tool_calls);
  EXPECT_EQ(p.request.chat().tool_choice().mode(), weft::v1::ToolChoice::MODE_AUTO);
  EXPECT_FALSE(p.request.chat().has_parallel_tool_calls());  // default: true
  // A named function.
  p = Parse(Body(R"("tool_choice": {"type": "function", "function": {"name": "get_time"}})"));
  EXPECT_TRUE(p.parse_tool_calls);
  EXPECT_EQ(p.request.chat().tool_choice().function(), "get_time");
  // "none": the model is told about the tools, nothing is constrained or parsed.
  p = Parse(Body(R"("tool_choice": "none")"));
  EXPECT_FALSE(p.parse_tool_calls);
  EXPECT_EQ(p.request.chat().tool_choice().mode(), weft::v1::ToolChoice::MODE_NONE);
  EXPECT_FALSE(p.request.has_constraint());
  EXPECT_EQ(p.request.chat().tools_size(), 2);
  // No tools: nothing.
  p = Parse(R"({"messages": [{"role": "user", "content": "hi"}], "tools": []})");
  EXPECT_FALSE(p.parse_tool_calls);
  EXPECT_FALSE(p.request.has_constraint());
}

TEST(OpenAiToolsTest, MalformedToolsNameTheirField) {
  const std::string user = R"({"messages": [{"role": "user", "content": "hi"}], )";
  EXPECT_EQ(FailedParam(Body(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})")),
            "tool_choice.function.name");
  EXPECT_EQ(FailedParam(Body(R"("tool_choice": "sometimes")")), "tool_choice");
  EXPECT_EQ(FailedParam(Body(R"("tool_choice": {"type": "retrieval"})")), "tool_choice.type");
  EXPECT_EQ(FailedParam(user + R"("tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(FailedParam(user + R"("tools": [{"type": "code_interpreter"}]})"), "tools[0].type");
  EXPECT_EQ(FailedParam(user + R"("tools": [{"type": "function", "function": {"name": "a b"}}]})"),
            "tools[0].function.name");
  EXPECT_EQ(FailedParam(user + R"("tools": [{"type": "function", "function": {"name": "f",)"
                               R"( "parameters": [1]}}]})"),
            "tools[0].function.parameters");
  EXPECT_EQ(FailedParam(user + R"("tools": [{"type": "function", "function": {"name": "f",)"
                               R"( "parameters": {"type": 7}}}]})"),
            "tools[0].function.parameters.type");
  EXPECT_EQ(FailedParam(absl::StrCat(user, R"("tools": [)", kTime, ", ", kTime, "]}")),
            "tools[1].function.name");
  EXPECT_EQ(FailedParam(user + R"("tools": {"a": 1}})"), "tools");
  EXPECT_EQ(FailedParam(Body(R"("parallel_tool_calls": "yes")")), "parallel_tool_calls");
  EXPECT_EQ(FailedParam(Body(R"("response_format": {"type": "json_object"})")), "response_format");
  EXPECT_EQ(FailedParam(user + R"("functions": [{"name": "f"}]})"), "functions");
  std::string many = user + R"("tools": [)";
  for (int i = 0; i < 129; ++i) {
    absl::StrAppend(&many, i ? ", " : "", R"({"type": "function", "function": {"name": "f)", i, "\"}}");
  }
  EXPECT_EQ(FailedParam(many + "]}"), "tools");
}

TEST(OpenAiToolsTest, ToolTurnsOfTheConversationMap) {
  const ParsedRequest p = Parse(R"({"messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "12 C"}]})");
  const weft::v1::ChatPrompt& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 3);
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(1).tool_calls(0).name(), "get_weather");
  EXPECT_EQ(chat.messages(1).tool_calls(0).arguments(), "{\"city\": \"Oslo\"}");
  EXPECT_EQ(chat.messages(1).content(), "");
  EXPECT_EQ(chat.messages(2).role(), "tool");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");
  EXPECT_EQ(chat.messages(2).content(), "12 C");
  EXPECT_FALSE(p.parse_tool_calls);
  EXPECT_EQ(FailedParam(R"({"messages": [{"role": "user", "content": "x", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})"),
            "messages[0].tool_calls");
  EXPECT_EQ(FailedParam(R"({"messages": [{"role": "assistant", "tool_calls": [
      {"type": "function", "function": {"name": "", "arguments": "{}"}}]}]})"),
            "messages[0].tool_calls[0].function.name");
  EXPECT_EQ(FailedParam(R"({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]})"),
            "messages[0].tool_call_id");
}

weft::v1::GenerateResponse Resp(const std::string& text,
                                weft::v1::FinishReason finish = weft::v1::FINISH_REASON_UNSPECIFIED) {
  weft::v1::GenerateResponse r;
  r.set_request_id("7");
  r.set_text(text);
  r.set_finish_reason(finish);
  if (finish != weft::v1::FINISH_REASON_UNSPECIFIED) {
    r.mutable_usage()->set_prompt_tokens(30);
    r.mutable_usage()->set_completion_tokens(12);
  }
  return r;
}

ResponseOptions ChatOptions() {
  ResponseOptions o;
  o.api = Api::kChatCompletions;
  o.model = "smol";
  o.parse_tool_calls = true;
  return o;
}

const std::vector<std::string> kPieces = {
    "<tool_call>\n{\"name\": \"get_", "weather\", \"arguments\": {\"ci", "ty\": \"Oslo\"}",
    "}\n</tool_call>"};

TEST(OpenAiToolsTest, AnswerCarriesTheCallsInOpenAisShape) {
  ResponseBuilder b(ChatOptions());
  for (size_t i = 0; i < kPieces.size(); ++i) {
    b.Add(Resp(kPieces[i], i + 1 == kPieces.size() ? weft::v1::FINISH_REASON_STOP
                                                   : weft::v1::FINISH_REASON_UNSPECIFIED));
  }
  const Json j = Json::parse(b.Body());
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_7_0_0");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  // An answer without calls stays an ordinary one.
  ResponseBuilder plain(ChatOptions());
  plain.Add(Resp("It is sunny.", weft::v1::FINISH_REASON_STOP));
  const Json p = Json::parse(plain.Body());
  EXPECT_EQ(p["choices"][0]["message"]["content"], "It is sunny.");
  EXPECT_FALSE(p["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(p["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiToolsTest, StreamSendsNameFirstThenArgumentFragments) {
  ResponseBuilder b(ChatOptions());
  std::vector<Json> chunks;
  for (size_t i = 0; i < kPieces.size(); ++i) {
    for (const std::string& e : b.StreamEvents(
             Resp(kPieces[i], i + 1 == kPieces.size() ? weft::v1::FINISH_REASON_STOP
                                                      : weft::v1::FINISH_REASON_UNSPECIFIED))) {
      chunks.push_back(Json::parse(e));
    }
  }
  ASSERT_GE(chunks.size(), 3u);
  const Json& first = chunks[0]["choices"][0]["delta"];
  EXPECT_EQ(first["role"], "assistant");
  EXPECT_TRUE(first["content"].is_null());  // no text yet: the header is incomplete
  EXPECT_FALSE(first.contains("tool_calls"));
  const Json& head = chunks[1]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(head["index"], 0);
  EXPECT_EQ(head["id"], "call_7_0_0");
  EXPECT_EQ(head["type"], "function");
  EXPECT_EQ(head["function"]["name"], "get_weather");
  std::string arguments;
  for (const Json& c : chunks) {
    const Json& d = c["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    EXPECT_EQ(d["tool_calls"][0]["index"], 0);
    arguments += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace weft::openai
