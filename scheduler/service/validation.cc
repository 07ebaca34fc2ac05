#include "scheduler/service/validation.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace weft {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Defaults for what the client left out, then the one rule (SamplingParams::Validate),
// its message prefixed with the API's field path.
absl::Status ResolveSampling(const weft::v1::GenerateRequest& req, const ValidationLimits& lim,
                             SamplingParams* out) {
  const weft::v1::SamplingParams& s = req.sampling();
  if (s.has_temperature()) out->temperature = s.temperature();
  if (s.has_top_k()) out->top_k = s.top_k();
  if (s.has_top_p()) out->top_p = s.top_p();
  if (s.has_min_p()) out->min_p = s.min_p();
  if (s.has_repetition_penalty()) out->repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out->presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out->frequency_penalty = s.frequency_penalty();
  if (absl::Status st = out->Validate(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", st.message()));
  }
  if (req.has_logprobs()) {
    if (req.logprobs() < 0 || req.logprobs() > lim.max_logprobs) {
      return Invalid("logprobs", absl::StrCat("must be in [0, ", lim.max_logprobs, "]"));
    }
    out->num_logprobs = req.logprobs();
  }
  return absl::OkStatus();
}

absl::Status CheckTokenIds(const std::vector<int32_t>& ids, const ValidationLimits& lim,
                           absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= lim.vocab_size) {
      return Invalid(field, absl::StrCat("token id ", ids[i], " at index ", i,
                                         " is outside the vocabulary [0, ", lim.vocab_size,
                                         ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ResolvePrompt(const weft::v1::GenerateRequest& req, const ValidationLimits& lim,
                           const PromptEncoder& encoder, std::vector<int32_t>* ids) {
  switch (req.prompt_case()) {
    case weft::v1::GenerateRequest::kText: {
      if (req.text().empty()) return Invalid("text", "prompt is empty");
      if (req.text().size() > static_cast<size_t>(lim.max_prompt_bytes)) {
        return Invalid("text", absl::StrCat("prompt is over ", lim.max_prompt_bytes, " bytes"));
      }
      WEFT_ASSIGN_OR_RETURN(*ids, encoder.EncodeText(req.text()));
      break;
    }
    case weft::v1::GenerateRequest::kTokenIds:
      ids->assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      WEFT_RETURN_IF_ERROR(CheckTokenIds(*ids, lim, "token_ids"));
      break;
    case weft::v1::GenerateRequest::kChat: {
      if (req.chat().messages().empty()) return Invalid("chat", "no messages");
      size_t bytes = 0;
      for (const auto& m : req.chat().messages()) {
        if (m.role() != "system" && m.role() != "user" && m.role() != "assistant") {
          return Invalid("chat.messages.role",
                         absl::StrCat("unknown role '", m.role().substr(0, 32),
                                      "' (system, user or assistant)"));
        }
        bytes += m.content().size();
      }
      if (bytes > static_cast<size_t>(lim.max_prompt_bytes)) {
        return Invalid("chat", absl::StrCat("messages are over ", lim.max_prompt_bytes, " bytes"));
      }
      WEFT_ASSIGN_OR_RETURN(*ids, encoder.EncodeChat(req.chat()));
      break;
    }
    case weft::v1::GenerateRequest::PROMPT_NOT_SET:
      return Invalid("prompt", "no prompt given (text, token_ids or chat)");
  }
  if (ids->empty()) return Invalid("prompt", "prompt is empty after tokenization");
  // Also for encoder output: the tokenizer's vocabulary may be wider than the logits.
  return CheckTokenIds(*ids, lim, "prompt");
}

absl::Status ResolveStopping(const weft::v1::GenerateRequest& req, const ValidationLimits& lim,
                             size_t prompt_len, ResolvedRequest* out) {
  const weft::v1::StoppingParams& st = req.stopping();
  if (prompt_len >= static_cast<size_t>(lim.context_length)) {
    return Invalid("prompt", absl::StrCat("prompt has ", prompt_len,
                                          " tokens; the context holds ", lim.context_length,
                                          " (prompt + at least one generated token)"));
  }
  const int32_t room = lim.context_length - static_cast<int32_t>(prompt_len);
  if (st.has_max_tokens()) {
    if (st.max_tokens() <= 0) return Invalid("stopping.max_tokens", "must be >= 1");
    if (st.max_tokens() > lim.max_tokens_cap) {
      return Invalid("stopping.max_tokens",
                     absl::StrCat(st.max_tokens(), " is over the server cap of ",
                                  lim.max_tokens_cap));
    }
    if (st.max_tokens() > room) {
      return Invalid("stopping.max_tokens",
                     absl::StrCat("prompt (", prompt_len, ") + max_tokens (", st.max_tokens(),
                                  ") is over the context of ", lim.context_length, " tokens"));
    }
    out->max_tokens = st.max_tokens();
  } else {
    out->max_tokens = std::min(lim.max_tokens_cap, room);
  }
  if (st.stop_size() > lim.max_stop_strings) {
    return Invalid("stopping.stop", absl::StrCat("at most ", lim.max_stop_strings, " strings"));
  }
  for (const std::string& s : st.stop()) {
    if (s.empty()) return Invalid("stopping.stop", "empty stop string");
    if (s.size() > static_cast<size_t>(lim.max_stop_string_bytes)) {
      return Invalid("stopping.stop", absl::StrCat("stop string over ",
                                                   lim.max_stop_string_bytes, " bytes"));
    }
    out->stop_strings.push_back(s);
  }
  if (st.stop_token_ids_size() > lim.max_stop_token_ids) {
    return Invalid("stopping.stop_token_ids",
                   absl::StrCat("at most ", lim.max_stop_token_ids, " ids"));
  }
  out->stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  WEFT_RETURN_IF_ERROR(CheckTokenIds(out->stop_token_ids, lim, "stopping.stop_token_ids"));
  out->ignore_eos = st.ignore_eos();
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidationLimits::Validate() const {
  if (vocab_size <= 0) return absl::InvalidArgumentError("vocab_size must be > 0");
  if (context_length <= 1) return absl::InvalidArgumentError("context_length must be > 1");
  if (max_tokens_cap <= 0 || max_n <= 0 || max_logprobs < 0 || max_stop_strings < 0) {
    return absl::InvalidArgumentError("validation caps must be positive");
  }
  return absl::OkStatus();
}

absl::Status CheckRequestedModel(absl::string_view field, absl::string_view header,
                                 absl::string_view served) {
  if (!field.empty() && !header.empty() && field != header) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: the request names '", field.substr(0, 128), "' but its ",
                     kModelMetadataKey, " metadata names '", header.substr(0, 128), "'"));
  }
  const absl::string_view wanted = field.empty() ? header : field;
  if (!wanted.empty() && wanted != served) {
    return absl::NotFoundError(absl::StrCat("model '", wanted.substr(0, 128),
                                            "' is not served here (serving '", served, "')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResolvedRequest> ValidateRequest(const weft::v1::GenerateRequest& request,
                                                const ValidationLimits& limits,
                                                const PromptEncoder& encoder,
                                                const std::function<uint64_t()>& seed_source) {
  WEFT_RETURN_IF_ERROR(CheckRequestedModel(request.model(), "", limits.model_name));
  ResolvedRequest out;
  // Cheap checks first: a bad number never costs a tokenization.
  WEFT_RETURN_IF_ERROR(ResolveSampling(request, limits, &out.sampling));
  if (request.has_n()) {
    if (request.n() < 1 || request.n() > limits.max_n) {
      return Invalid("n", absl::StrCat("must be in [1, ", limits.max_n, "]"));
    }
    out.n = request.n();
  }
  if (request.stopping().has_max_tokens() && request.stopping().max_tokens() <= 0) {
    return Invalid("stopping.max_tokens", "must be >= 1");
  }
  WEFT_RETURN_IF_ERROR(ResolvePrompt(request, limits, encoder, &out.prompt_token_ids));
  WEFT_RETURN_IF_ERROR(ResolveStopping(request, limits, out.prompt_token_ids.size(), &out));
  out.sampling.seed = request.sampling().has_seed() ? request.sampling().seed() : seed_source();
  out.priority = request.priority();
  out.client_request_id = request.client_request_id().substr(0, 256);
  return out;
}

}  // namespace weft
