#include "scheduler/service/grammar_admission.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "scheduler/request_spec.h"

namespace weft {
namespace {

// A refused compile names the constraint's field as data (the message stays the engine's).
absl::Status Refused(const absl::Status& status, const GrammarConstraint& constraint) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  std::string field = constraint.request_field.empty()
                          ? absl::StrCat("constraint.", ConstraintKindName(constraint.kind))
                          : constraint.request_field;
  return FieldErrorStatus(kRequestFieldSchema,
                          FieldError{std::move(field), std::string(status.message())});
}

}  // namespace

void GrammarAdmission::Waker::Call() {
  MutexLock l(&mu);
  if (wake) wake();
}

void GrammarAdmission::Waker::Clear() {
  MutexLock l(&mu);  // waits for a Call in progress
  wake = nullptr;
}

GrammarAdmission::GrammarAdmission(GrammarCompileService* service, std::function<void()> wake,
                                   ServiceMetrics* metrics)
    : service_(service), metrics_(metrics), waker_(std::make_shared<Waker>()) {
  MutexLock l(&waker_->mu);
  waker_->wake = std::move(wake);
}

GrammarAdmission::~GrammarAdmission() { waker_->Clear(); }

bool GrammarAdmission::Park(Submission& s, absl::Time now) {
  const auto& constraint = s.request->spec().constraint;
  if (!constraint.has_value()) return false;
  if (service_ == nullptr) {
    EndSubmission(s, absl::InvalidArgumentError(
                         "constraint: structured output is not enabled on this server"),
                  now, metrics_);
    return true;
  }
  // Compile before the submission (which holds the constraint) is moved.
  std::unique_ptr<PendingGrammar> grammar =
      service_->Compile(*constraint, [waker = waker_] { waker->Call(); });
  parked_.push_back(Parked{std::move(s), std::move(grammar)});
  return true;
}

void GrammarAdmission::Poll(absl::Time now, const AdmitFn& admit) {
  size_t kept = 0;
  for (size_t i = 0; i < parked_.size(); ++i) {
    Parked& p = parked_[i];
    if (p.submission.outbox->Closed()) {  // the client left while it compiled
      EndSubmission(p.submission, absl::CancelledError("the client left"), now, metrics_);
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
      EndSubmission(p.submission,
                    Refused(grammar.status(), *p.submission.request->spec().constraint), now,
                    metrics_);
    }
  }
  parked_.resize(kept);
}

void GrammarAdmission::EndAll(const absl::Status& status) {
  waker_->Clear();
  for (Parked& p : parked_) EndSubmission(p.submission, status, absl::Now(), metrics_);
  parked_.clear();
}

absl::Time GrammarAdmission::NextDeadline() const {
  absl::Time t = absl::InfiniteFuture();
  for (const Parked& p : parked_) t = std::min(t, p.grammar->deadline());
  return t;
}

}  // namespace weft
