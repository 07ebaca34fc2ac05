// The OpenAI responses (ResponseBuilder, models), split from openai_json.cc (the
// requests and errors); both read and write JSON through openai_json_util.h.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/edge/openai_json.h"
#include "scheduler/edge/openai_json_util.h"
#include "scheduler/edge/openai_tools.h"
#include "scheduler/edge/tool_call_parser.h"

namespace weft::openai {

// ---------------------------------------------------------------------------------------
// Responses

namespace {

const char* FinishReasonName(weft::v1::FinishReason r) {
  switch (r) {
    case weft::v1::FINISH_REASON_STOP:
      return "stop";
    case weft::v1::FINISH_REASON_LENGTH:
      return "length";
    default:
      return nullptr;
  }
}

Json FinishJson(weft::v1::FinishReason r) {
  const char* name = FinishReasonName(r);
  return name == nullptr ? Json(nullptr) : Json(name);
}

// Characters a token's bytes add to decoded text: its bytes that start a UTF-8 sequence.
int64_t CodePoints(absl::string_view bytes) {
  int64_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

Json ByteList(absl::string_view bytes) {
  Json list = Json::array();
  for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
  return list;
}

}  // namespace

struct ResponseBuilder::Choice {
  std::string text;
  weft::v1::FinishReason finish = weft::v1::FINISH_REASON_UNSPECIFIED;
  bool role_sent = false;
  int64_t text_offset = 0;  // characters of the tokens' text so far (completions logprobs)
  // Non-streaming: the logprobs gathered so far, in the API's shape.
  Json logprobs;
  // Streaming with parse_tool_calls: reads the answer as it comes.
  std::unique_ptr<ToolCallParser> calls;
};

struct ResponseBuilder::Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
};

namespace {

// The logprobs of `r`'s tokens in the API's shape, appended to `*out` (completions: an
// object of parallel lists; chat: an object with a "content" list). `text_offset`
// advances over the tokens' characters.
void AppendLogprobs(Api api, const weft::v1::GenerateResponse& r, const TokenBytesFn& token_bytes,
                    int64_t* text_offset, Json* out) {
  if (out->is_null()) {
    if (api == Api::kCompletions) {
      *out = Json::object();
      (*out)["tokens"] = Json::array();
      (*out)["token_logprobs"] = Json::array();
      (*out)["top_logprobs"] = Json::array();
      (*out)["text_offset"] = Json::array();
    } else {
      *out = Json::object();
      (*out)["content"] = Json::array();
    }
  }
  const int count = std::min(r.token_ids_size(), r.logprobs_size());
  for (int i = 0; i < count; ++i) {
    const int32_t id = r.token_ids(i);
    const weft::v1::Logprobs& lp = r.logprobs(i);
    const std::string bytes = token_bytes ? token_bytes(id) : std::string();
    if (api == Api::kCompletions) {
      (*out)["tokens"].push_back(bytes);
      (*out)["token_logprobs"].push_back(lp.logprob());
      // OpenAI: the top alternatives plus the chosen token (up to logprobs + 1 entries).
      Json top = Json::object();
      for (const weft::v1::TokenLogprob& t : lp.top()) top[t.token_bytes()] = t.logprob();
      if (top.find(bytes) == top.end()) top[bytes] = lp.logprob();
      (*out)["top_logprobs"].push_back(std::move(top));
      (*out)["text_offset"].push_back(*text_offset);
    } else {
      Json entry = Json::object();
      entry["token"] = bytes;
      entry["logprob"] = lp.logprob();
      entry["bytes"] = ByteList(bytes);
      Json top = Json::array();
      for (const weft::v1::TokenLogprob& t : lp.top()) {
        Json alt = Json::object();
        alt["token"] = t.token_bytes();
        alt["logprob"] = t.logprob();
        alt["bytes"] = ByteList(t.token_bytes());
        top.push_back(std::move(alt));
      }
      entry["top_logprobs"] = std::move(top);
      (*out)["content"].push_back(std::move(entry));
    }
    *text_offset += CodePoints(bytes);
  }
}

}  // namespace

ResponseBuilder::ResponseBuilder(ResponseOptions options) : options_(std::move(options)) {}
ResponseBuilder::~ResponseBuilder() = default;

ResponseBuilder::Choice& ResponseBuilder::ChoiceAt(int32_t index) {
  std::unique_ptr<Choice>& c = choices_[index];
  if (c == nullptr) c = std::make_unique<Choice>();
  return *c;
}

void ResponseBuilder::NoteIdAndUsage(const weft::v1::GenerateResponse& r) {
  if (id_.empty() && !r.request_id().empty()) {
    id_ = absl::StrCat(options_.api == Api::kCompletions ? "cmpl-" : "chatcmpl-", r.request_id());
    request_id_ = r.request_id();
  }
  if (r.has_usage()) {
    usage_ = std::make_unique<Usage>();
    usage_->prompt_tokens = r.usage().prompt_tokens();
    usage_->completion_tokens = r.usage().completion_tokens();
    usage_->cached_tokens = r.usage().cached_prompt_tokens();
  }
}

namespace {

// Call ids: "call_<request id>_<choice>_<call>".
// delta.tool_calls of one chunk: a call's first piece has id, type and name.
Json CallDeltasJson(const std::vector<ToolCallDelta>& calls) {
  Json list = Json::array();
  for (const ToolCallDelta& d : calls) {
    Json call = Json::object();
    call["index"] = d.index;
    Json function = Json::object();
    if (!d.id.empty()) {
      call["id"] = d.id;
      call["type"] = "function";
      function["name"] = d.name;
    }
    function["arguments"] = d.arguments;
    call["function"] = std::move(function);
    list.push_back(std::move(call));
  }
  return list;
}

// finish_reason: "tool_calls" when an answer that stopped made calls.
Json ChoiceFinishJson(weft::v1::FinishReason r, int num_calls) {
  if (r == weft::v1::FINISH_REASON_STOP && num_calls > 0) return "tool_calls";
  return FinishJson(r);
}

Json UsageJson(int32_t prompt, int32_t completion, int32_t cached) {
  Json u = Json::object();
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = completion;
  u["total_tokens"] = prompt + completion;
  Json details = Json::object();
  details["cached_tokens"] = cached;
  u["prompt_tokens_details"] = std::move(details);
  return u;
}

}  // namespace

std::vector<std::string> ResponseBuilder::StreamEvents(const weft::v1::GenerateResponse& r) {
  NoteIdAndUsage(r);
  const bool chat = options_.api == Api::kChatCompletions;
  auto envelope = [&] {
    Json chunk = Json::object();
    chunk["id"] = id_;
    chunk["object"] = chat ? "chat.completion.chunk" : "text_completion";
    chunk["created"] = options_.created;
    chunk["model"] = options_.model;
    return chunk;
  };
  std::vector<std::string> events;
  Choice& c = ChoiceAt(r.index());
  const bool has_tokens = options_.logprobs && r.token_ids_size() > 0;
  const bool finished = r.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED;
  // What this response shows: its text, or with parse_tool_calls what the parser lets out.
  ParsedOutput shown;
  if (options_.parse_tool_calls && chat) {
    if (c.calls == nullptr) {
      c.calls = std::make_unique<ToolCallParser>(ToolCallIdPrefix(request_id_, r.index()),
                                                 options_.tool_format);
    }
    shown = c.calls->Feed(r.text());
    if (finished) shown.Append(c.calls->Finish());
  } else {
    shown.content = r.text();
  }
  if (!shown.empty() || finished || has_tokens || (chat && !c.role_sent)) {
    Json choice = Json::object();
    choice["index"] = r.index();
    if (chat) {
      Json delta = Json::object();
      if (!c.role_sent) delta["role"] = "assistant";
      if (!shown.content.empty()) {
        delta["content"] = shown.content;
      } else if (!c.role_sent) {
        // Reading for calls, no text yet: null, as OpenAI starts a stream of calls.
        delta["content"] = options_.parse_tool_calls ? Json(nullptr) : Json("");
      }
      if (!shown.calls.empty()) delta["tool_calls"] = CallDeltasJson(shown.calls);
      c.role_sent = true;
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = r.text();
    }
    Json logprobs;
    if (has_tokens)
      AppendLogprobs(options_.api, r, options_.token_bytes, &c.text_offset, &logprobs);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] =
        ChoiceFinishJson(r.finish_reason(), c.calls != nullptr ? c.calls->num_calls() : 0);
    Json chunk = envelope();
    chunk["choices"] = Json::array({std::move(choice)});
    if (options_.include_usage) chunk["usage"] = nullptr;
    events.push_back(Dump(chunk));
  }
  if (options_.include_usage && r.has_usage()) {
    Json chunk = envelope();
    chunk["choices"] = Json::array();
    chunk["usage"] =
        UsageJson(usage_->prompt_tokens, usage_->completion_tokens, usage_->cached_tokens);
    events.push_back(Dump(chunk));
  }
  return events;
}

void ResponseBuilder::Add(const weft::v1::GenerateResponse& r) {
  NoteIdAndUsage(r);
  Choice& c = ChoiceAt(r.index());
  c.text += r.text();
  if (r.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED) c.finish = r.finish_reason();
  if (options_.logprobs)
    AppendLogprobs(options_.api, r, options_.token_bytes, &c.text_offset, &c.logprobs);
}

std::string ResponseBuilder::Body() const {
  const bool chat = options_.api == Api::kChatCompletions;
  Json body = Json::object();
  body["id"] = id_;
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = options_.created;
  body["model"] = options_.model;
  Json choices = Json::array();
  for (const auto& [index, c] : choices_) {
    Json choice = Json::object();
    choice["index"] = index;
    int num_calls = 0;
    if (chat) {
      Json message = Json::object();
      message["role"] = "assistant";
      message["content"] = c->text;
      if (options_.parse_tool_calls) {
        // The same reading as the stream's: the whole answer at once.
        const ParsedOutput all = ReadWholeAnswer(c->text, ToolCallIdPrefix(request_id_, index),
                                                   options_.tool_format);
        num_calls = static_cast<int>(all.calls.size());
        if (num_calls > 0) {
          message["content"] = all.content.empty() ? Json(nullptr) : Json(all.content);
          Json calls = Json::array();
          for (const ToolCallDelta& d : all.calls) {
            Json function = Json::object();
            function["name"] = d.name;
            function["arguments"] = d.arguments;
            Json call = Json::object();
            call["id"] = d.id;
            call["type"] = "function";
            call["function"] = std::move(function);
            calls.push_back(std::move(call));
          }
          message["tool_calls"] = std::move(calls);
        }
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c->text;
    }
    Json logprobs = c->logprobs;
    if (options_.logprobs && logprobs.is_null()) {
      // Asked for, but no token came (cannot happen with max_tokens >= 1): empty lists.
      int64_t offset = 0;
      AppendLogprobs(options_.api, weft::v1::GenerateResponse(), options_.token_bytes, &offset,
                     &logprobs);
    }
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = ChoiceFinishJson(c->finish, num_calls);
    choices.push_back(std::move(choice));
  }
  body["choices"] = std::move(choices);
  body["usage"] =
      usage_ ? UsageJson(usage_->prompt_tokens, usage_->completion_tokens, usage_->cached_tokens)
             : UsageJson(0, 0, 0);
  return Dump(body);
}

namespace {

Json ModelJson(const weft::v1::ModelInfo& info, int64_t created) {
  Json m = Json::object();
  m["id"] = info.name();
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "weft";
  m["max_model_len"] = info.context_length();  // as vLLM reports it
  return m;
}

}  // namespace

std::string ModelBody(const weft::v1::ModelInfo& info, int64_t created) {
  return Dump(ModelJson(info, created));
}

std::string ModelListBody(const weft::v1::ModelInfo& info, int64_t created) {
  Json list = Json::object();
  list["object"] = "list";
  list["data"] = Json::array({ModelJson(info, created)});
  return Dump(list);
}

}  // namespace weft::openai
