#include "scheduler/service/grammar_admission.h"

#include <utility>

namespace weft {

bool GrammarAdmission::Park(Submission& s, absl::Time now) {
  const auto& constraint = s.request->spec().constraint;
  if (!constraint.has_value()) return false;
  if (service_ == nullptr) {
    EndSubmission(s, absl::InvalidArgumentError(
                         "constraint: structured output is not enabled on this server"),
                  now);
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
    if (p.submission.outbox->Closed()) {  // the client left while it compiled
      EndSubmission(p.submission, absl::CancelledError("the client left"), now);
      continue;
    }
    if (!p.grammar->Poll(now)) {
      if (kept != i) parked_[kept] = std::move(p);
      ++kept;
      continue;
    }
    auto grammar = p.grammar->result();
    if (grammar.ok()) {
      admit(p.submission, *std::move(grammar));
    } else {
      EndSubmission(p.submission, grammar.status(), now);
    }
  }
  parked_.resize(kept);
}

void GrammarAdmission::EndAll(const absl::Status& status) {
  for (Parked& p : parked_) EndSubmission(p.submission, status, absl::Now());
  parked_.clear();
}

}  // namespace weft
