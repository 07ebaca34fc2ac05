#include "scheduler/request_spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "scheduler/stop_checker.h"

namespace weft {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return FieldErrorStatus(kRequestFieldSchema, FieldError{std::string(field), std::string(reason)});
}

absl::Status CheckTokenIds(const std::vector<int32_t>& ids, int32_t vocab_size,
                           absl::string_view field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return Invalid(field, absl::StrCat("token id ", ids[i], " at index ", i,
                                         " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStopping(const StopConditions& st, int64_t prompt, const RequestLimits& lim) {
  if (st.max_tokens < 1) return Invalid("stopping.max_tokens", "must be >= 1");
  if (st.max_tokens > lim.max_tokens) {
    return Invalid("stopping.max_tokens",
                   absl::StrCat(st.max_tokens, " is over the server cap of ", lim.max_tokens));
  }
  if (prompt + st.max_tokens > lim.max_model_len) {
    return Invalid("stopping.max_tokens",
                   absl::StrCat("prompt (", prompt, ") + max_tokens (", st.max_tokens,
                                ") is over the context of ", lim.max_model_len, " tokens"));
  }
  if (static_cast<int64_t>(st.stop_strings.size()) > lim.max_stop_strings) {
    return Invalid("stopping.stop", absl::StrCat("at most ", lim.max_stop_strings, " strings"));
  }
  for (const std::string& s : st.stop_strings) {
    if (s.empty()) return Invalid("stopping.stop", "empty stop string");
    if (s.size() > static_cast<size_t>(lim.max_stop_string_bytes)) {
      return Invalid("stopping.stop",
                     absl::StrCat("stop string over ", lim.max_stop_string_bytes, " bytes"));
    }
    if (!IsValidUtf8(s)) return Invalid("stopping.stop", "stop string is not valid UTF-8");
  }
  if (static_cast<int64_t>(st.stop_token_ids.size()) > lim.max_stop_token_ids) {
    return Invalid("stopping.stop_token_ids",
                   absl::StrCat("at most ", lim.max_stop_token_ids, " ids"));
  }
  return CheckTokenIds(st.stop_token_ids, lim.vocab_size, "stopping.stop_token_ids");
}

}  // namespace

int32_t RequestLimits::DefaultMaxTokens(int32_t num_prompt_tokens) const {
  return std::max(0, std::min(max_tokens, max_model_len - num_prompt_tokens));
}

absl::Status RequestLimits::Validate() const {
  if (vocab_size <= 0) return absl::InvalidArgumentError("vocab_size must be > 0");
  if (max_model_len <= 1) return absl::InvalidArgumentError("max_model_len must be > 1");
  if (max_tokens <= 0 || max_n <= 0 || max_stop_string_bytes <= 0) {
    return absl::InvalidArgumentError("max_tokens, max_n, max_stop_string_bytes must be > 0");
  }
  if (max_logprobs < 0 || max_stop_strings < 0 || max_stop_token_ids < 0) {
    return absl::InvalidArgumentError("max_logprobs, max_stop_strings, max_stop_token_ids >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<ValidRequest> ValidateRequest(RequestSpec spec, const RequestLimits& lim) {
  const int64_t prompt = static_cast<int64_t>(spec.prompt_token_ids.size());
  if (prompt == 0) return Invalid("prompt", "prompt is empty");
  if (prompt >= lim.max_model_len) {
    return Invalid("prompt", absl::StrCat("prompt has ", prompt, " tokens; the context holds ",
                                          lim.max_model_len,
                                          " (prompt + at least one generated token)"));
  }
  if (absl::Status s = CheckTokenIds(spec.prompt_token_ids, lim.vocab_size, "prompt"); !s.ok()) {
    return s;
  }
  if (const auto p = spec.sampling.Check(); p && p->field != "num_logprobs") {
    return Invalid(absl::StrCat("sampling.", p->field), p->reason);
  }
  if (spec.sampling.num_logprobs < -1 || spec.sampling.num_logprobs > lim.max_logprobs) {
    return Invalid("logprobs", absl::StrCat("must be in [0, ", lim.max_logprobs, "]"));
  }
  if (absl::Status s = CheckStopping(spec.stopping, prompt, lim); !s.ok()) return s;
  if (spec.n < 1 || spec.n > lim.max_n) {
    return Invalid("n", absl::StrCat("must be in [1, ", lim.max_n, "]"));
  }
  if (spec.constraint) {
    if (auto e = CheckConstraint(*spec.constraint, lim.constraint)) {
      return Invalid(absl::StrCat("constraint.", e->field), e->reason);
    }
    if (spec.stopping.ignore_eos) {
      return Invalid("stopping.ignore_eos",
                     "cannot be combined with a constraint (the grammar ends at the "
                     "end-of-sequence token)");
    }
  }
  return ValidRequest(std::move(spec));
}

}  // namespace weft
