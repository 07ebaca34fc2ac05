#include "scheduler/edge/openai_json.h"
#include "scheduler/edge/openai_json_util.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/field_error.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "scheduler/edge/json_bounds.h"
#include "scheduler/edge/openai_structured.h"
#include "scheduler/edge/openai_tools.h"
#include "scheduler/edge/tool_call_parser.h"
#include "scheduler/request_spec.h"

namespace weft::openai {
namespace {

// The field travels as data: ErrorFor makes it the error's "param".
absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return FieldErrorStatus(kBodyFieldSchema, FieldError{std::string(field), std::string(why)});
}

// The member `name` of object `o`, or nullptr when absent or null (OpenAI treats an
// explicit null as "not given").
const Json* Field(const Json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> OptNumber(const Json& o, const char* name) {
  const Json* v = Field(o, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return Invalid(name, "must be a number");
  return std::optional<double>(v->get<double>());
}

// An integer (a JSON number with an integral value) in [lo, hi].
absl::StatusOr<std::optional<int64_t>> OptInt(const Json& o, const char* name,
                                              int64_t lo = std::numeric_limits<int32_t>::min(),
                                              int64_t hi = std::numeric_limits<int32_t>::max()) {
  const Json* v = Field(o, name);
  if (v == nullptr) return std::optional<int64_t>();
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Invalid(name, absl::StrCat("must be an integer <= ", hi));
    }
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9.0e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return Invalid(name, "must be an integer");
  }
  if (x < lo || x > hi)
    return Invalid(name, absl::StrCat("must be an integer in [", lo, ", ", hi, "]"));
  return std::optional<int64_t>(x);
}

absl::StatusOr<std::optional<bool>> OptBool(const Json& o, const char* name) {
  const Json* v = Field(o, name);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return Invalid(name, "must be true or false");
  return std::optional<bool>(v->get<bool>());
}

// The seed: any 64-bit integer, signed (OpenAI) or not; a negative one is taken modulo 2^64.
absl::Status ParseSeed(const Json& o, weft::v1::SamplingParams* s) {
  const Json* v = Field(o, "seed");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_unsigned()) {
    s->set_seed(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    s->set_seed(static_cast<uint64_t>(v->get<int64_t>()));
  } else {
    return Invalid("seed", "must be an integer");
  }
  return absl::OkStatus();
}

// Fields Weft knows but cannot honour unless they hold their default: rejected rather
// than silently ignored, since they would change the answer.
absl::Status RejectUnsupported(Api api, const Json& o, int32_t n) {
  auto truthy = [&](const char* name) {
    const Json* v = Field(o, name);
    return v != nullptr && !(v->is_boolean() && !v->get<bool>());
  };
  auto non_empty = [&](const char* name) {
    const Json* v = Field(o, name);
    if (v == nullptr) return false;
    if (v->is_string()) return !v->get_ref<const std::string&>().empty();
    if (v->is_array() || v->is_object()) return !v->empty();
    return true;
  };
  const char* const kNeverSupported[] = {
      "guided_json",        "guided_regex",    "guided_choice",         "guided_grammar",
      "structured_outputs", "prompt_logprobs", "truncate_prompt_tokens"};
  for (const char* name : kNeverSupported) {
    if (Field(o, name) != nullptr) return Invalid(name, "is not supported by this server");
  }
  for (const char* name : {"use_beam_search", "include_stop_str_in_output", "echo"}) {
    if (truthy(name)) return Invalid(name, "is not supported by this server");
  }
  if (non_empty("logit_bias")) return Invalid("logit_bias", "is not supported by this server");
  if (const Json* v = Field(o, "min_tokens");
      v != nullptr && !(v->is_number() && v->get<double>() == 0)) {
    return Invalid("min_tokens", "is not supported by this server");
  }
  if (api == Api::kCompletions) {
    if (non_empty("suffix")) return Invalid("suffix", "is not supported by this server");
    if (const Json* v = Field(o, "best_of");
        v != nullptr && !(v->is_number() && (v->get<double>() == 1 || v->get<double>() == n))) {
      return Invalid("best_of", "only best_of = n is supported (each sample is returned)");
    }
    return absl::OkStatus();
  }
  if (Field(o, "audio") != nullptr) return Invalid("audio", "audio output is not supported");
  if (const Json* v = Field(o, "modalities");
      v != nullptr && !(v->is_array() && v->size() == 1 && (*v)[0] == "text")) {
    return Invalid("modalities", "only [\"text\"] is supported");
  }
  if (Field(o, "prediction") != nullptr)
    return Invalid("prediction", "is not supported by this server");
  if (const Json* v = Field(o, "add_generation_prompt");
      v != nullptr && v->is_boolean() && !v->get<bool>()) {
    return Invalid("add_generation_prompt", "the assistant turn is always opened");
  }
  if (truthy("continue_final_message")) {
    return Invalid("continue_final_message", "is not supported by this server");
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Json& o, weft::v1::SamplingParams* s) {
  WEFT_ASSIGN_OR_RETURN(auto temperature, OptNumber(o, "temperature"));
  if (temperature) s->set_temperature(static_cast<float>(*temperature));
  WEFT_ASSIGN_OR_RETURN(auto top_p, OptNumber(o, "top_p"));
  if (top_p) s->set_top_p(static_cast<float>(*top_p));
  WEFT_ASSIGN_OR_RETURN(auto top_k, OptInt(o, "top_k"));
  if (top_k) s->set_top_k(*top_k == -1 ? 0 : static_cast<int32_t>(*top_k));  // vLLM: -1 = off
  WEFT_ASSIGN_OR_RETURN(auto min_p, OptNumber(o, "min_p"));
  if (min_p) s->set_min_p(static_cast<float>(*min_p));
  WEFT_ASSIGN_OR_RETURN(auto rep, OptNumber(o, "repetition_penalty"));
  if (rep) s->set_repetition_penalty(static_cast<float>(*rep));
  WEFT_ASSIGN_OR_RETURN(auto presence, OptNumber(o, "presence_penalty"));
  if (presence) s->set_presence_penalty(static_cast<float>(*presence));
  WEFT_ASSIGN_OR_RETURN(auto frequency, OptNumber(o, "frequency_penalty"));
  if (frequency) s->set_frequency_penalty(static_cast<float>(*frequency));
  return ParseSeed(o, s);
}

absl::Status ParseStopping(const Json& o, weft::v1::StoppingParams* st) {
  if (const Json* v = Field(o, "stop")) {
    if (v->is_string()) {
      st->add_stop(v->get<std::string>());
    } else if (v->is_array()) {
      for (const Json& e : *v) {
        if (!e.is_string()) return Invalid("stop", "must be a string or a list of strings");
        st->add_stop(e.get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or a list of strings");
    }
  }
  if (const Json* v = Field(o, "stop_token_ids")) {
    if (!v->is_array()) return Invalid("stop_token_ids", "must be a list of token ids");
    for (const Json& e : *v) {
      if (!e.is_number_integer() || e.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
          e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Invalid("stop_token_ids", "must be a list of token ids");
      }
      st->add_stop_token_ids(static_cast<int32_t>(e.get<int64_t>()));
    }
  }
  WEFT_ASSIGN_OR_RETURN(auto ignore_eos, OptBool(o, "ignore_eos"));
  if (ignore_eos) st->set_ignore_eos(*ignore_eos);
  return absl::OkStatus();
}

// A list of integers (token ids), or nullopt when `v` is not one.
std::optional<std::vector<int64_t>> IntList(const Json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<int64_t> ids;
  for (const Json& e : v) {
    if (!e.is_number_integer()) return std::nullopt;
    // An id beyond int64 is as invalid as any other out-of-range id.
    ids.push_back(
        e.is_number_unsigned() && e.get<uint64_t>() > uint64_t{1} << 62 ? -1 : e.get<int64_t>());
  }
  return ids;
}

absl::Status ParsePrompt(const Json& o, weft::v1::GenerateRequest* r) {
  const Json* v = Field(o, "prompt");
  if (v == nullptr) return Invalid("prompt", "is required");
  const Json* one = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    // A batch of prompts: only a batch of one.
    if (v->size() != 1) {
      return Invalid("prompt", "batches of prompts are not supported: send one request per prompt");
    }
    one = &v->front();
  }
  if (one->is_string()) {
    r->set_text(one->get<std::string>());
    return absl::OkStatus();
  }
  if (auto ids = IntList(*one)) {
    for (size_t i = 0; i < ids->size(); ++i) {
      const int64_t id = (*ids)[i];
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        // The validator checks ids against the vocabulary; these do not fit an id at all.
        return Invalid("prompt", absl::StrCat("token id at index ", i, " is not a valid token id"));
      }
      r->mutable_token_ids()->add_ids(static_cast<int32_t>(id));
    }
    return absl::OkStatus();
  }
  return Invalid("prompt", "must be a string or a list of token ids");
}

absl::Status ParseMessages(const Json& o, weft::v1::GenerateRequest* r) {
  const Json* v = Field(o, "messages");
  if (v == nullptr) return Invalid("messages", "is required");
  if (!v->is_array()) return Invalid("messages", "must be a list of messages");
  weft::v1::ChatPrompt* chat = r->mutable_chat();
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& m = (*v)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(at, "must be an object");
    const Json* role = Field(m, "role");
    if (role == nullptr || !role->is_string())
      return Invalid(absl::StrCat(at, ".role"), "must be a string");
    weft::v1::ChatMessage* out = chat->add_messages();
    // OpenAI's newer name for the system role.
    out->set_role(role->get<std::string>() == "developer" ? "system" : role->get<std::string>());
    WEFT_RETURN_IF_ERROR(ParseMessageToolFields(m, at, out));  // openai_tools.h
    const Json* content = Field(m, "content");
    if (content == nullptr) continue;  // e.g. an assistant turn without text
    if (content->is_string()) {
      out->set_content(content->get<std::string>());
      continue;
    }
    if (!content->is_array())
      return Invalid(absl::StrCat(at, ".content"), "must be a string or a list of parts");
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const Json& part = (*content)[j];
      const Json* type = part.is_object() ? Field(part, "type") : nullptr;
      const Json* t = part.is_object() ? Field(part, "text") : nullptr;
      if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" ||
          t == nullptr || !t->is_string()) {
        return Invalid(absl::StrCat(at, ".content[", j, "]"), "only text parts are supported");
      }
      text += t->get<std::string>();
    }
    out->set_content(std::move(text));
  }
  return absl::OkStatus();
}

absl::Status ParseLogprobs(Api api, const Json& o, ParsedRequest* p) {
  if (api == Api::kCompletions) {
    WEFT_ASSIGN_OR_RETURN(auto lp, OptInt(o, "logprobs"));
    if (lp) {
      p->request.set_logprobs(static_cast<int32_t>(*lp));
      p->logprobs = true;
    }
    return absl::OkStatus();
  }
  WEFT_ASSIGN_OR_RETURN(auto want, OptBool(o, "logprobs"));
  WEFT_ASSIGN_OR_RETURN(auto top, OptInt(o, "top_logprobs"));
  if (top && !want.value_or(false)) {
    return Invalid("top_logprobs", "needs \"logprobs\": true");
  }
  if (want.value_or(false)) {
    p->request.set_logprobs(static_cast<int32_t>(top.value_or(0)));
    p->logprobs = true;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedRequest> ParseRequest(Api api, absl::string_view body) {
  // Depth and members per object bounded first: building the document is then linear.
  WEFT_RETURN_IF_ERROR(CheckJsonBounds(body));
  Json o = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (o.is_discarded()) return absl::InvalidArgumentError("the body is not valid JSON");
  if (!o.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  ParsedRequest p;
  p.api = api;
  weft::v1::GenerateRequest& r = p.request;
  if (const Json* m = Field(o, "model")) {
    if (!m->is_string()) return Invalid("model", "must be a string");
    r.set_model(m->get<std::string>());
  }
  WEFT_ASSIGN_OR_RETURN(auto n, OptInt(o, "n"));
  if (n) r.set_n(static_cast<int32_t>(*n));
  WEFT_RETURN_IF_ERROR(RejectUnsupported(api, o, r.has_n() ? r.n() : 1));
  if (api == Api::kCompletions) {
    WEFT_RETURN_IF_ERROR(ParsePrompt(o, &r));
  } else {
    WEFT_RETURN_IF_ERROR(ParseMessages(o, &r));
  }
  WEFT_RETURN_IF_ERROR(ParseSampling(o, r.mutable_sampling()));
  WEFT_RETURN_IF_ERROR(ParseStopping(o, r.mutable_stopping()));
  WEFT_RETURN_IF_ERROR(ParseLogprobs(api, o, &p));
  WEFT_RETURN_IF_ERROR(ParseResponseFormat(o, &r));  // openai_structured.h
  if (api == Api::kChatCompletions) {
    WEFT_RETURN_IF_ERROR(ParseTools(o, &r, &p.parse_tool_calls));  // openai_tools.h
  }

  // Length: chat prefers max_completion_tokens (OpenAI deprecated max_tokens there).
  const char* length_field = "max_tokens";
  if (api == Api::kChatCompletions && Field(o, "max_completion_tokens") != nullptr) {
    length_field = "max_completion_tokens";
  }
  p.max_tokens_field = length_field;
  WEFT_ASSIGN_OR_RETURN(auto max_tokens, OptInt(o, length_field));
  if (max_tokens) {
    r.mutable_stopping()->set_max_tokens(static_cast<int32_t>(*max_tokens));
  } else if (api == Api::kCompletions) {
    r.mutable_stopping()->set_max_tokens(16);  // OpenAI's and vLLM's default
  }

  WEFT_ASSIGN_OR_RETURN(auto stream, OptBool(o, "stream"));
  p.stream = stream.value_or(false);
  if (const Json* so = Field(o, "stream_options")) {
    if (!p.stream) return Invalid("stream_options", "is only allowed when \"stream\" is true");
    if (!so->is_object()) return Invalid("stream_options", "must be an object");
    auto usage = OptBool(*so, "include_usage");
    if (!usage.ok()) return Invalid("stream_options.include_usage", "must be true or false");
    p.include_usage = usage->value_or(false);
  }
  return p;
}

// ---------------------------------------------------------------------------------------
// Errors

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

std::string TypeFor(int http_status) {
  if (http_status == 429) return "rate_limit_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

// The request contract names generate.proto's fields ("sampling.temperature"); a client
// names the body's. The body's field for a request field, or "" when it has none.
std::string JsonField(absl::string_view proto_field, const ParsedRequest* req) {
  const bool chat = req != nullptr && req->api == Api::kChatCompletions;
  struct Entry {
    absl::string_view proto, json;
  };
  static constexpr Entry kFields[] = {
      {"sampling.temperature", "temperature"},
      {"sampling.top_k", "top_k"},
      {"sampling.top_p", "top_p"},
      {"sampling.min_p", "min_p"},
      {"sampling.repetition_penalty", "repetition_penalty"},
      {"sampling.presence_penalty", "presence_penalty"},
      {"sampling.frequency_penalty", "frequency_penalty"},
      {"sampling.seed", "seed"},
      {"stopping.stop", "stop"},
      {"stopping.stop_token_ids", "stop_token_ids"},
      {"n", "n"},
      {"model", "model"},
  };
  for (const Entry& e : kFields) {
    if (proto_field == e.proto) return std::string(e.json);
  }
  if (proto_field == "stopping.max_tokens") {
    return req != nullptr ? req->max_tokens_field : "max_tokens";
  }
  if (proto_field == "logprobs") return chat ? "top_logprobs" : "logprobs";
  if (proto_field == "constraint.structural_tag") return "tools";
  if (absl::StartsWith(proto_field, "constraint")) return "response_format";
  if (absl::StartsWith(proto_field, "chat.tools")) return "tools";
  if (proto_field == "text" || proto_field == "token_ids" || proto_field == "prompt" ||
      proto_field == "chat" || absl::StartsWith(proto_field, "chat.")) {
    return chat ? "messages" : "prompt";
  }
  return "";
}

}  // namespace

ApiError ErrorForHttp(int http_status, std::string message) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = TypeFor(http_status);
  return e;
}

ApiError ErrorFor(const absl::Status& status, const ParsedRequest* request) {
  ApiError e = ErrorForHttp(HttpStatusFor(status.code()), std::string(status.message()));
  e.code = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  if (status.code() == absl::StatusCode::kNotFound) {
    e.code = "model_not_found";
    e.param = "model";
  } else if (status.code() == absl::StatusCode::kUnauthenticated) {
    e.code = "invalid_api_key";
  }
  if (status.code() == absl::StatusCode::kUnimplemented && request != nullptr &&
      request->api == Api::kChatCompletions) {
    e.param = "messages";  // the model cannot render a chat
  }
  // A field error names its field as data: the body's own (this parser's), or the
  // request contract's, said in the body's terms.
  std::optional<FieldError> field = GetFieldError(status, kBodyFieldSchema);
  if (!field) {
    field = GetFieldError(status, kRequestFieldSchema);
    if (field) field->field = JsonField(field->field, request);
  }
  if (field && !field->field.empty()) {
    e.message = absl::StrCat(field->field, ": ", field->reason);
    e.param = std::move(field->field);
  }
  return e;
}

std::string ErrorBody(const ApiError& e) {
  Json err = Json::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  err["code"] = e.code.empty() ? Json(nullptr) : Json(e.code);
  Json body = Json::object();
  body["error"] = std::move(err);
  return Dump(body);
}

}  // namespace weft::openai
