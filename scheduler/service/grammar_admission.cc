#include "scheduler/service/grammar_admission.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "scheduler/request_spec.h"

namespace weft {
namespace {

// A refused compile names the constraint's field as data (the message stays the engine's).
absl::Status Refused(const absl::Status& status, const GrammarConstraint& constraint) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  return FieldErrorStatus(kRequestFieldSchema,
                          FieldError{absl::StrCat("constraint.", ConstraintKindName(constraint.kind)),
                                     std::string(status.message())});
}

}  // namespace

bool GrammarAdmission::Park(Submission& s, absl::Time now) {
  const auto& constraint = s.request->spec().constraint;
  if (!constraint.has_value()) return false;
  if (service_ == nullptr) {
    s.outbox->Finish(absl::InvalidArgumentError(
        "constraint: structured output is not enabled on this server"));
    return true;
  }
  // Compile before the submission (which holds the constraint) is moved.
  std::unique_ptr<PendingGrammar> grammar = service_->Compile(*constraint);
  parked_.push_back(Parked{std::move(s), std::move(grammar)});
  return true;
}

void GrammarAdmission::Poll(absl::Time now, const AdmitFn& admit) {
  size_t kept = 0;
  for (size_t i = 0; i < parked_.size(); ++i) {
    Parked& p = parked_[i];
    if (p.submission.outbox->Closed()) continue;  // the client left while it compiled
    if (!p.grammar->Poll(now)) {
      if (kept != i) parked_[kept] = std::move(p);
      ++kept;
      continue;
    }
    auto grammar = p.grammar->result();
    if (grammar.ok()) {
      admit(p.submission, *std::move(grammar));
    } else {
      p.submission.outbox->Finish(
          Refused(grammar.status(), *p.submission.request->spec().constraint));
    }
  }
  parked_.resize(kept);
}

void GrammarAdmission::EndAll(const absl::Status& status) {
  for (Parked& p : parked_) p.submission.outbox->Finish(status);
  parked_.clear();
}

}  // namespace weft
