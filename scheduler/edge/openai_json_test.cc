#include "scheduler/edge/openai_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/field_error.h"
#include "nlohmann/json.hpp"
#include "scheduler/edge/generate_request.h"
#include "scheduler/edge/testing/byte_encoder.h"

namespace weft::openai {
namespace {

using Json = nlohmann::json;

ParsedRequest MustParse(Api api, const std::string& body) {
  auto p = ParseRequest(api, body);
  EXPECT_TRUE(p.ok()) << p.status() << " for " << body;
  return p.ok() ? *std::move(p) : ParsedRequest();
}

// The error a client would get for `body`: the parser's, or, when the body parses, the
// frontend's — the model, then the request contract (every API's one validator).
ApiError ErrorOf(Api api, const std::string& body, bool chat = true) {
  auto p = ParseRequest(api, body);
  if (!p.ok()) return ErrorFor(p.status());
  if (absl::Status s = CheckRequestedModel(p->request.model(), "", "smol"); !s.ok()) {
    return ErrorFor(s, &*p);
  }
  RequestLimits lim;
  lim.vocab_size = 256;
  lim.max_model_len = 64;
  testing::ByteEncoder encoder;
  encoder.chat = chat;
  auto spec = BuildSpec(p->request, lim, 1 << 20, encoder, [] { return 7; });
  absl::Status s = spec.status();
  if (spec.ok()) s = ValidateRequest(*std::move(spec), lim).status();
  EXPECT_FALSE(s.ok()) << body;
  return ErrorFor(s, &*p);
}

TEST(OpenAiParseTest, CompletionFieldsMapToTheGenerateRequest) {
  ParsedRequest p = MustParse(Api::kCompletions, R"({
      "model": "smol", "prompt": "Hello", "max_tokens": 12, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": -1, "n": 3,
      "stop": ["\n\n", "END"], "stop_token_ids": [2, 7], "ignore_eos": true,
      "logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
      "user": "ignored", "some_future_field": {"x": 1}})");
  const weft::v1::GenerateRequest& r = p.request;
  EXPECT_EQ(r.model(), "smol");
  EXPECT_EQ(r.text(), "Hello");
  EXPECT_EQ(r.stopping().max_tokens(), 12);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(r.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(r.sampling().repetition_penalty(), 1.1f);
  EXPECT_FLOAT_EQ(r.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().frequency_penalty(), -0.5f);
  EXPECT_EQ(r.sampling().seed(), ~uint64_t{0});  // -1 modulo 2^64
  EXPECT_EQ(r.n(), 3);
  ASSERT_EQ(r.stopping().stop_size(), 2);
  EXPECT_EQ(r.stopping().stop(0), "\n\n");
  EXPECT_EQ(r.stopping().stop(1), "END");
  EXPECT_EQ(std::vector<int32_t>(r.stopping().stop_token_ids().begin(),
                                 r.stopping().stop_token_ids().end()),
            (std::vector<int32_t>{2, 7}));
  EXPECT_TRUE(r.stopping().ignore_eos());
  EXPECT_EQ(r.logprobs(), 2);
  EXPECT_TRUE(p.logprobs);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
}

TEST(OpenAiParseTest, DefaultsFollowOpenAi) {
  ParsedRequest c = MustParse(Api::kCompletions, R"({"prompt": "x"})");
  EXPECT_EQ(c.request.stopping().max_tokens(), 16);  // completions: 16, as OpenAI and vLLM
  EXPECT_FALSE(c.request.sampling().has_temperature());
  EXPECT_FALSE(c.request.sampling().has_seed());
  EXPECT_FALSE(c.request.has_n());
  EXPECT_FALSE(c.request.has_logprobs());
  EXPECT_FALSE(c.stream);
  ParsedRequest chat =
      MustParse(Api::kChatCompletions,
                R"({"messages": [{"role": "user", "content": "hi"}], "temperature": null})");
  EXPECT_FALSE(chat.request.stopping().has_max_tokens());   // chat: up to the context
  EXPECT_FALSE(chat.request.sampling().has_temperature());  // null = not given
  ParsedRequest off = MustParse(Api::kCompletions, R"({"prompt": "x", "top_k": -1})");
  EXPECT_EQ(off.request.sampling().top_k(), 0);  // vLLM's "off"
}

TEST(OpenAiParseTest, PromptForms) {
  EXPECT_EQ(MustParse(Api::kCompletions, R"({"prompt": [1, 2, 3]})").request.token_ids().ids_size(),
            3);
  EXPECT_EQ(MustParse(Api::kCompletions, R"({"prompt": ["one"]})").request.text(), "one");
  EXPECT_EQ(MustParse(Api::kCompletions, R"({"prompt": [[5, 6]]})").request.token_ids().ids(1), 6);
  ApiError batch = ErrorOf(Api::kCompletions, R"({"prompt": ["a", "b"]})");
  EXPECT_EQ(batch.http_status, 400);
  EXPECT_EQ(batch.param, "prompt");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"max_tokens": 3})").param, "prompt");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": {"a": 1}})").param, "prompt");
  // An id outside the vocabulary is the validator's error, named for the client.
  ApiError vocab = ErrorOf(Api::kCompletions, R"({"prompt": [1, 300]})");
  EXPECT_EQ(vocab.param, "prompt");
  EXPECT_NE(vocab.message.find("vocabulary"), std::string::npos) << vocab.message;
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": [1, 4000000000]})").param, "prompt");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": [-3]})").param, "prompt");
}

TEST(OpenAiParseTest, ChatMessagesAndLengthFields) {
  ParsedRequest p = MustParse(Api::kChatCompletions, R"({
      "messages": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                 {"type": "text", "text": "there"}]},
                   {"role": "assistant", "content": null}],
      "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})");
  const weft::v1::ChatPrompt& chat = p.request.chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(1).content(), "Hi there");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(p.request.stopping().max_tokens(), 9);  // max_completion_tokens wins
  EXPECT_EQ(p.max_tokens_field, "max_completion_tokens");
  EXPECT_EQ(p.request.logprobs(), 3);
  EXPECT_TRUE(p.logprobs);
  ParsedRequest no_top =
      MustParse(Api::kChatCompletions,
                R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  EXPECT_EQ(no_top.request.logprobs(), 0);
  ParsedRequest none =
      MustParse(Api::kChatCompletions,
                R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})");
  EXPECT_FALSE(none.request.has_logprobs());
  EXPECT_FALSE(none.logprobs);

  EXPECT_EQ(ErrorOf(Api::kChatCompletions,
                    R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})")
                .param,
            "top_logprobs");
  ApiError image = ErrorOf(
      Api::kChatCompletions,
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})");
  EXPECT_EQ(image.param, "messages[0].content[0]");
  EXPECT_EQ(ErrorOf(Api::kChatCompletions, R"({"messages": "hi"})").param, "messages");
  // The validator's role check, named "messages".
  ApiError role =
      ErrorOf(Api::kChatCompletions, R"({"messages": [{"role": "function", "content": "x"}]})");
  EXPECT_EQ(role.http_status, 400);
  EXPECT_EQ(role.param, "messages");
}

TEST(OpenAiParseTest, BadTypesAndUnsupportedFieldsAre400NamingTheField) {
  struct Case {
    Api api;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {Api::kCompletions, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {Api::kCompletions, R"({"prompt": "x", "n": 99999999999})", "n"},
      {Api::kCompletions, R"({"prompt": "x", "stop": 3})", "stop"},
      {Api::kCompletions, R"({"prompt": "x", "stop_token_ids": ["a"]})", "stop_token_ids"},
      {Api::kCompletions, R"({"prompt": "x", "stream": "yes"})", "stream"},
      {Api::kCompletions, R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "stream_options"},
      {Api::kCompletions, R"({"prompt": "x", "seed": 0.5})", "seed"},
      {Api::kCompletions, R"({"prompt": "x", "model": 3})", "model"},
      {Api::kCompletions, R"({"prompt": "x", "echo": true})", "echo"},
      {Api::kCompletions, R"({"prompt": "x", "best_of": 3})", "best_of"},
      {Api::kCompletions, R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {Api::kCompletions, R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias"},
      {Api::kCompletions, R"({"prompt": "x", "guided_json": {}})", "guided_json"},
      {Api::kChatCompletions, R"({"messages": [], "tools": [{"type": "function"}]})",
       "tools[0].function"},
      {Api::kChatCompletions, R"({"messages": [], "response_format": {"type": "xml"}})",
       "response_format.type"},
      {Api::kChatCompletions,
       R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]})",
       "messages[0].tool_calls[0].function.name"},
  };
  for (const Case& c : cases) {
    ApiError e = ErrorOf(c.api, c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
  }
  // Harmless defaults of those fields are accepted.
  MustParse(Api::kCompletions,
            R"({"prompt": "x", "echo": false, "best_of": 1, "suffix": "", "logit_bias": {}})");
  MustParse(
      Api::kChatCompletions,
      R"({"messages": [], "tools": [], "response_format": {"type": "text"}, "tool_choice": "none"})");
  EXPECT_EQ(ErrorOf(Api::kCompletions, "not json").http_status, 400);
  EXPECT_EQ(ErrorOf(Api::kCompletions, "[1, 2]").http_status, 400);
}

TEST(OpenAiErrorTest, ValidatorMessagesNameTheJsonField) {
  ApiError t = ErrorOf(Api::kCompletions, R"({"prompt": "x", "temperature": -1})");
  EXPECT_EQ(t.http_status, 400);
  EXPECT_EQ(t.param, "temperature");
  EXPECT_EQ(t.code, "invalid_argument");
  EXPECT_EQ(t.message.rfind("temperature: ", 0), 0u) << t.message;
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": "x", "top_p": 0})").param, "top_p");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": "x", "n": 0})").param, "n");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": "x", "stop": [""]})").param, "stop");
  EXPECT_EQ(ErrorOf(Api::kCompletions, R"({"prompt": "x", "max_tokens": 100})").param,
            "max_tokens");
  EXPECT_EQ(
      ErrorOf(Api::kChatCompletions,
              R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})")
          .param,
      "max_completion_tokens");
  EXPECT_EQ(
      ErrorOf(
          Api::kChatCompletions,
          R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 50})")
          .param,
      "top_logprobs");
  EXPECT_EQ(ErrorOf(Api::kChatCompletions, R"({"messages": []})").param, "messages");

  ApiError model = ErrorOf(Api::kCompletions, R"({"prompt": "x", "model": "other"})");
  EXPECT_EQ(model.http_status, 404);
  EXPECT_EQ(model.code, "model_not_found");
  EXPECT_EQ(model.param, "model");

  ApiError chat = ErrorOf(Api::kChatCompletions,
                          R"({"messages": [{"role": "user", "content": "x"}]})", /*chat=*/false);
  EXPECT_EQ(chat.http_status, 400);
  EXPECT_EQ(chat.code, "unimplemented");
  EXPECT_EQ(chat.param, "messages");
  EXPECT_EQ(chat.message, "no chat");
}

// "param" comes only from a field carried as data, never from a message's text (before,
// any INVALID_ARGUMENT whose message began "<word>: " got that word as its param).
TEST(OpenAiErrorTest, ParamIsDataNotText) {
  ApiError text = ErrorFor(absl::InvalidArgumentError("temperature: said in text only"));
  EXPECT_EQ(text.param, "");
  EXPECT_EQ(text.message, "temperature: said in text only");
  ApiError data = ErrorFor(
      FieldErrorStatus(kRequestFieldSchema, FieldError{"sampling.min_p", "must be in [0, 1]"}));
  EXPECT_EQ(data.param, "min_p");
  EXPECT_EQ(data.message, "min_p: must be in [0, 1]");
  ApiError body = ErrorFor(FieldErrorStatus(kBodyFieldSchema, FieldError{"n", "must be >= 1"}));
  EXPECT_EQ(body.param, "n");
}

TEST(OpenAiErrorTest, StatusCodesMapToHttp) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnimplemented), 400);

  ApiError full = ErrorFor(absl::ResourceExhaustedError("too many open streams (2)"));
  EXPECT_EQ(full.http_status, 429);
  EXPECT_EQ(full.type, "rate_limit_error");
  EXPECT_EQ(full.code, "resource_exhausted");
  ApiError down = ErrorFor(absl::UnavailableError("no replica"));
  EXPECT_EQ(down.http_status, 503);
  EXPECT_EQ(down.type, "server_error");
  EXPECT_EQ(down.code, "unavailable");
  ApiError auth = ErrorFor(absl::UnauthenticatedError("missing bearer token"));
  EXPECT_EQ(auth.http_status, 401);
  EXPECT_EQ(auth.code, "invalid_api_key");
  EXPECT_EQ(ErrorForHttp(404, "Invalid URL (GET /v2)").type, "invalid_request_error");
}

TEST(OpenAiErrorTest, BodyHasOpenAisShape) {
  Json j = Json::parse(ErrorBody(ErrorFor(absl::UnavailableError("no live replica"))));
  ASSERT_TRUE(j.contains("error"));
  const Json& e = j["error"];
  EXPECT_EQ(e["message"], "no live replica");
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_TRUE(e["param"].is_null());
  EXPECT_EQ(e["code"], "unavailable");
  EXPECT_EQ(e.size(), 4u);
}

weft::v1::GenerateResponse Resp(
    int index, const std::string& text, std::vector<int32_t> ids,
    weft::v1::FinishReason finish = weft::v1::FINISH_REASON_UNSPECIFIED) {
  weft::v1::GenerateResponse r;
  r.set_index(index);
  r.set_text(text);
  for (int32_t id : ids) r.add_token_ids(id);
  r.set_finish_reason(finish);
  return r;
}

void SetUsage(weft::v1::GenerateResponse* r, int prompt, int completion, int cached) {
  r->mutable_usage()->set_prompt_tokens(prompt);
  r->mutable_usage()->set_completion_tokens(completion);
  r->mutable_usage()->set_cached_prompt_tokens(cached);
}

TEST(OpenAiResponseTest, CompletionBodyWithTwoInterleavedChoices) {
  ResponseOptions o;
  o.api = Api::kCompletions;
  o.model = "smol";
  o.created = 1700000000;
  ResponseBuilder b(o);
  auto first = Resp(1, "B", {11});
  first.set_request_id("42");
  first.set_seed(5);
  b.Add(first);
  b.Add(Resp(0, "A", {10}));
  b.Add(Resp(0, "a", {12}, weft::v1::FINISH_REASON_LENGTH));
  auto last = Resp(1, "", {2}, weft::v1::FINISH_REASON_STOP);
  SetUsage(&last, 7, 4, 3);
  b.Add(last);
  Json j = Json::parse(b.Body());
  EXPECT_EQ(j["id"], "cmpl-42");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smol");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "Aa");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][1]["text"], "B");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
}

TEST(OpenAiResponseTest, ChatStreamChunksWithUsage) {
  ResponseOptions o;
  o.api = Api::kChatCompletions;
  o.model = "smol";
  o.created = 1;
  o.include_usage = true;
  ResponseBuilder b(o);
  auto r0 = Resp(0, "Hel", {1, 2});
  r0.set_request_id("9");
  std::vector<std::string> ev = b.StreamEvents(r0);
  ASSERT_EQ(ev.size(), 1u);
  Json c0 = Json::parse(ev[0]);
  EXPECT_EQ(c0["id"], "chatcmpl-9");
  EXPECT_EQ(c0["object"], "chat.completion.chunk");
  EXPECT_TRUE(c0["usage"].is_null());
  EXPECT_EQ(c0["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(c0["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(c0["choices"][0]["finish_reason"].is_null());

  Json c1 = Json::parse(b.StreamEvents(Resp(0, "lo", {3}))[0]);
  EXPECT_FALSE(c1["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(c1["choices"][0]["delta"]["content"], "lo");

  // Tokens held back (a stop string may start) and no logprobs asked: nothing to send.
  EXPECT_TRUE(b.StreamEvents(Resp(0, "", {4})).empty());

  auto last = Resp(0, "", {}, weft::v1::FINISH_REASON_STOP);
  SetUsage(&last, 5, 4, 0);
  ev = b.StreamEvents(last);
  ASSERT_EQ(ev.size(), 2u);
  Json fin = Json::parse(ev[0]);
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  Json usage = Json::parse(ev[1]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 9);
  EXPECT_EQ(usage["id"], "chatcmpl-9");
}

TEST(OpenAiResponseTest, CompletionStreamWithoutUsageHasNoUsageField) {
  ResponseOptions o;
  o.api = Api::kCompletions;
  ResponseBuilder b(o);
  auto r = Resp(0, "x", {1}, weft::v1::FINISH_REASON_LENGTH);
  SetUsage(&r, 1, 1, 0);
  std::vector<std::string> ev = b.StreamEvents(r);
  ASSERT_EQ(ev.size(), 1u);
  Json c = Json::parse(ev[0]);
  EXPECT_FALSE(c.contains("usage"));
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
}

weft::v1::GenerateResponse WithLogprobs() {
  // Two tokens: "é" split over two byte-level tokens (0xC3, 0xA9), then " ok".
  auto r = Resp(0, "é ok", {100, 101, 102});
  const float chosen[] = {-0.5f, -0.25f, -1.0f};
  for (int i = 0; i < 3; ++i) {
    weft::v1::Logprobs* lp = r.add_logprobs();
    lp->set_logprob(chosen[i]);
    weft::v1::TokenLogprob* t = lp->add_top();
    t->set_token_id(200);
    t->set_logprob(-0.1f);
    t->set_token_bytes("alt");
  }
  return r;
}

std::string TokenText(int32_t id) {
  switch (id) {
    case 100:
      return "\xC3";
    case 101:
      return "\xA9";
    default:
      return " ok";
  }
}

TEST(OpenAiResponseTest, CompletionLogprobs) {
  ResponseOptions o;
  o.api = Api::kCompletions;
  o.logprobs = true;
  o.token_bytes = TokenText;
  ResponseBuilder b(o);
  b.Add(WithLogprobs());
  Json lp = Json::parse(b.Body())["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["tokens"][0], "\xEF\xBF\xBD");  // a lone byte: U+FFFD
  EXPECT_EQ(lp["tokens"][2], " ok");
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.25f);
  // The top alternatives plus the chosen token.
  EXPECT_EQ(lp["top_logprobs"][2].size(), 2u);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][2]["alt"].get<float>(), -0.1f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][2][" ok"].get<float>(), -1.0f);
  // Character offsets: "é" is one character made of two tokens.
  EXPECT_EQ(lp["text_offset"], Json::array({0, 1, 1}));
}

TEST(OpenAiResponseTest, ChatLogprobsCarryBytes) {
  ResponseOptions o;
  o.api = Api::kChatCompletions;
  o.logprobs = true;
  o.token_bytes = TokenText;
  ResponseBuilder b(o);
  std::vector<std::string> ev = b.StreamEvents(WithLogprobs());
  ASSERT_EQ(ev.size(), 1u);
  Json content = Json::parse(ev[0])["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["bytes"], Json::array({0xC3}));
  EXPECT_EQ(content[1]["bytes"], Json::array({0xA9}));
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  ASSERT_EQ(content[2]["top_logprobs"].size(), 1u);
  EXPECT_EQ(content[2]["top_logprobs"][0]["token"], "alt");
  EXPECT_EQ(content[2]["top_logprobs"][0]["bytes"], Json::array({'a', 'l', 't'}));
}

TEST(OpenAiModelsTest, ListAndOne) {
  weft::v1::ModelInfo info;
  info.set_name("smollm2");
  info.set_context_length(8192);
  Json list = Json::parse(ModelListBody(info, 123));
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], "smollm2");
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_EQ(list["data"][0]["created"], 123);
  EXPECT_EQ(list["data"][0]["max_model_len"], 8192);
  EXPECT_EQ(Json::parse(ModelBody(info, 123)), list["data"][0]);
}

}  // namespace
}  // namespace weft::openai
