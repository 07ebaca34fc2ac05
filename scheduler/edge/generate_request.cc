#include "scheduler/edge/generate_request.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chat_tools.h"
#include "common/field_error.h"
#include "common/status_macros.h"
#include "common/tool_call_format.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return FieldErrorStatus(kRequestFieldSchema, FieldError{std::string(field), std::string(why)});
}

// The client's sampling settings over SamplingConfig's defaults (checked by the core).
void ResolveSampling(const weft::v1::GenerateRequest& req, SamplingConfig* out) {
  const weft::v1::SamplingParams& s = req.sampling();
  if (s.has_temperature()) out->temperature = s.temperature();
  if (s.has_top_k()) out->top_k = s.top_k();
  if (s.has_top_p()) out->top_p = s.top_p();
  if (s.has_min_p()) out->min_p = s.min_p();
  if (s.has_repetition_penalty()) out->repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out->presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out->frequency_penalty = s.frequency_penalty();
  // An explicit negative count is the client's error, not "none" (-1).
  if (req.has_logprobs()) out->num_logprobs = req.logprobs() < 0 ? -2 : req.logprobs();
}

// The request's constraint as the core's GrammarConstraint (sizes are the core's check).
absl::Status ResolveConstraint(const weft::v1::GenerateRequest& req,
                               std::optional<GrammarConstraint>* out) {
  if (!req.has_constraint()) return absl::OkStatus();
  using C = weft::v1::Constraint;
  using Kind = GrammarConstraint::Kind;
  const C& c = req.constraint();
  GrammarConstraint g;
  switch (c.kind_case()) {
    case C::kJsonSchema: g.kind = Kind::kJsonSchema; g.source = c.json_schema(); break;
    case C::kJsonObject: g.kind = Kind::kJsonObject; break;
    case C::kRegex: g.kind = Kind::kRegex; g.source = c.regex(); break;
    case C::kGrammar: g.kind = Kind::kEbnf; g.source = c.grammar(); break;
    case C::kChoice:
      g.kind = Kind::kChoice;
      g.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      break;
    case C::kStructuralTag: g.kind = Kind::kStructuralTag; g.source = c.structural_tag(); break;
    case C::KIND_NOT_SET:
      return Invalid("constraint",
                     "set one of json_schema, json_object, regex, grammar, choice, structural_tag");
  }
  *out = std::move(g);
  return absl::OkStatus();
}

// chat.tool_choice: the structural tag holding calls to the model's format (`format`).
absl::Status ResolveToolChoice(const weft::v1::GenerateRequest& req, ToolCallFormat format,
                               std::optional<GrammarConstraint>* out) {
  if (req.prompt_case() != weft::v1::GenerateRequest::kChat || !req.chat().has_tool_choice()) {
    return absl::OkStatus();
  }
  using TC = weft::v1::ToolChoice;
  const weft::v1::ChatPrompt& chat = req.chat();
  const TC& choice = chat.tool_choice();
  if (choice.choice_case() == TC::kMode && !TC::Mode_IsValid(choice.mode())) {
    return Invalid("chat.tool_choice.mode", "none, auto, required or a function");
  }
  if (!ReadsToolCalls(req)) return absl::OkStatus();
  if (chat.tools().empty()) return Invalid("chat.tool_choice", "needs chat.tools");
  if (req.has_constraint()) {
    return Invalid("constraint", "cannot be combined with chat.tool_choice other than none");
  }
  std::vector<ToolSchema> tools;
  for (const auto& t : chat.tools()) {
    if (choice.choice_case() == TC::kFunction && t.name() != choice.function()) continue;
    tools.push_back({t.name(), t.parameters()});
  }
  if (tools.empty()) {
    return Invalid("chat.tool_choice.function",
                   absl::StrCat("no tool named '", choice.function().substr(0, 64), "' in chat.tools"));
  }
  const ToolCallMode mode = choice.choice_case() == TC::kMode && choice.mode() == TC::MODE_AUTO
                                ? ToolCallMode::kAuto
                                : ToolCallMode::kRequired;
  const bool parallel = !chat.has_parallel_tool_calls() || chat.parallel_tool_calls();
  GrammarConstraint g;
  g.kind = GrammarConstraint::Kind::kStructuralTag;
  g.source = ToolCallsStructuralTag(format, tools, mode, parallel);
  g.request_field = "chat.tools";  // what does not compile is the tools' schemas
  *out = std::move(g);
  return absl::OkStatus();
}

// A JSON Schema for a tool's arguments: "" or a JSON object's text.
bool IsSchemaText(const std::string& s) {
  if (s.empty()) return true;
  const auto j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  return j.is_object();
}

absl::Status CheckTools(const weft::v1::ChatPrompt& chat, size_t* bytes) {
  if (chat.tools_size() > kMaxTools) {
    return Invalid("chat.tools", absl::StrCat("at most ", kMaxTools, " tools"));
  }
  for (int i = 0; i < chat.tools_size(); ++i) {
    const weft::v1::Tool& t = chat.tools(i);
    if (!IsValidToolName(t.name())) {
      return Invalid("chat.tools.name", "1 to 64 characters of A-Z a-z 0-9 _ -");
    }
    for (int j = 0; j < i; ++j) {
      if (chat.tools(j).name() == t.name()) {
        return Invalid("chat.tools.name", absl::StrCat("'", t.name(), "' is defined twice"));
      }
    }
    *bytes += t.name().size() + t.description().size() + t.parameters().size();
    if (!IsSchemaText(t.parameters())) {
      return Invalid("chat.tools.parameters", "must be a JSON Schema object");
    }
  }
  return absl::OkStatus();
}

// Roles, tool turns and tools; at most max_bytes of text in all.
absl::Status CheckChat(const weft::v1::ChatPrompt& chat, size_t max_bytes) {
  if (chat.messages().empty()) return Invalid("chat", "no messages");
  size_t bytes = 0;
  for (const auto& m : chat.messages()) {
    const std::string& role = m.role();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Invalid("chat.messages.role", absl::StrCat("unknown role '", role.substr(0, 32),
                                                        "' (system, user, assistant or tool)"));
    }
    if (!m.tool_calls().empty() && role != "assistant") {
      return Invalid("chat.messages.tool_calls", "only an assistant turn has tool calls");
    }
    if (!m.tool_call_id().empty() && role != "tool") {
      return Invalid("chat.messages.tool_call_id", "only a tool turn has a tool_call_id");
    }
    bytes += m.content().size() + m.tool_call_id().size();
    for (const auto& c : m.tool_calls()) {
      if (!IsValidToolName(c.name())) {
        return Invalid("chat.messages.tool_calls.name", "1 to 64 characters of A-Z a-z 0-9 _ -");
      }
      bytes += c.id().size() + c.name().size() + c.arguments().size();
    }
  }
  WEFT_RETURN_IF_ERROR(CheckTools(chat, &bytes));
  if (bytes > max_bytes) {
    return Invalid("chat", absl::StrCat("messages and tools are over ", max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ResolvePrompt(const weft::v1::GenerateRequest& req, size_t max_bytes,
                           const PromptEncoder& encoder, std::vector<int32_t>* ids) {
  switch (req.prompt_case()) {
    case weft::v1::GenerateRequest::kText: {
      if (req.text().empty()) return Invalid("text", "prompt is empty");
      if (req.text().size() > max_bytes) {
        return Invalid("text", absl::StrCat("prompt is over ", max_bytes, " bytes"));
      }
      WEFT_ASSIGN_OR_RETURN(*ids, encoder.EncodeText(req.text()));
      return absl::OkStatus();
    }
    case weft::v1::GenerateRequest::kTokenIds:
      ids->assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      return absl::OkStatus();
    case weft::v1::GenerateRequest::kChat: {
      WEFT_RETURN_IF_ERROR(CheckChat(req.chat(), max_bytes));
      WEFT_ASSIGN_OR_RETURN(*ids, encoder.EncodeChat(req.chat()));
      return absl::OkStatus();
    }
    case weft::v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return Invalid("prompt", "no prompt given (text, token_ids or chat)");
}

}  // namespace

bool ReadsToolCalls(const weft::v1::GenerateRequest& request) {
  if (request.prompt_case() != weft::v1::GenerateRequest::kChat) return false;
  using TC = weft::v1::ToolChoice;
  const TC& c = request.chat().tool_choice();
  return c.choice_case() == TC::kFunction ||
         (c.choice_case() == TC::kMode && (c.mode() == TC::MODE_AUTO || c.mode() == TC::MODE_REQUIRED));
}

absl::Status CheckRequestedModel(absl::string_view field, absl::string_view header,
                                 absl::string_view served) {
  if (!field.empty() && !header.empty() && field != header) {
    return Invalid("model", absl::StrCat("the request names '", field.substr(0, 128), "' but its ",
                                         kModelMetadataKey, " metadata names '",
                                         header.substr(0, 128), "'"));
  }
  const absl::string_view wanted = field.empty() ? header : field;
  if (!wanted.empty() && wanted != served) {
    return absl::NotFoundError(absl::StrCat("model '", wanted.substr(0, 128),
                                            "' is not served here (serving '", served, "')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestSpec> BuildSpec(const weft::v1::GenerateRequest& request,
                                      const RequestLimits& limits, size_t max_prompt_bytes,
                                      const PromptEncoder& encoder,
                                      const std::function<uint64_t()>& seed_source) {
  RequestSpec spec;
  WEFT_RETURN_IF_ERROR(ResolvePrompt(request, max_prompt_bytes, encoder, &spec.prompt_token_ids));
  ResolveSampling(request, &spec.sampling);
  WEFT_RETURN_IF_ERROR(ResolveConstraint(request, &spec.constraint));
  WEFT_RETURN_IF_ERROR(ResolveToolChoice(request, encoder.tool_call_format(), &spec.constraint));
  const weft::v1::StoppingParams& st = request.stopping();
  spec.stopping.max_tokens =
      st.has_max_tokens()
          ? st.max_tokens()
          : limits.DefaultMaxTokens(static_cast<int32_t>(spec.prompt_token_ids.size()));
  spec.stopping.stop_strings.assign(st.stop().begin(), st.stop().end());
  spec.stopping.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  spec.stopping.ignore_eos = st.ignore_eos();
  if (request.has_n()) spec.n = request.n();
  spec.priority = request.priority();
  spec.sampling.seed = request.sampling().has_seed() ? request.sampling().seed() : seed_source();
  return spec;
}

}  // namespace weft
