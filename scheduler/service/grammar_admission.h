// GrammarAdmission: where a Submission with a structured-output constraint waits for its
// grammar before it enters the scheduler core. The planning thread parks it (Park), the
// grammar compiles on the compile service's own threads, and Poll admits the ready ones
// with their compiled grammar and ends the refused ones' calls with the compile's status
// (INVALID_ARGUMENT naming the reason, with the constraint's field as data —
// "constraint.json_schema", "constraint.structural_tag", ... — so that an edge names its
// own field; RESOURCE_EXHAUSTED when too many compiles wait).
// The planning loop never waits for a compile and never polls for one: a finished compile
// calls `wake` (from the compile thread), and the loop's next wake is at the latest at
// NextDeadline() (a compile past its time limit is refused then).
// Ownership: borrows the compile service (null: constraints are refused).
// Thread-safety: thread-compatible (the planning thread); `wake` must be thread-safe and
// is not called after EndAll or destruction.
#ifndef WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_
#define WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/grammar/sequence_grammar.h"
#include "scheduler/service/engine_interface.h"

namespace weft {

class GrammarAdmission {
 public:
  using AdmitFn = std::function<void(Submission&, std::shared_ptr<const SequenceGrammarFactory>)>;

  // `metrics` (may be null): the calls it ends are counted in weft_requests_status_total.
  GrammarAdmission(GrammarCompileService* service, std::function<void()> wake,
                   ServiceMetrics* metrics = nullptr);
  ~GrammarAdmission();
  GrammarAdmission(const GrammarAdmission&) = delete;
  GrammarAdmission& operator=(const GrammarAdmission&) = delete;

  // True when the submission has a constraint and was taken (parked, or its call ended
  // when structured output is off); false: admit it as usual.
  bool Park(Submission& submission, absl::Time now);
  // Admits or ends every parked submission whose compile is final as of `now`, and drops
  // those whose client left.
  void Poll(absl::Time now, const AdmitFn& admit);
  // Ends every parked call with `status` (the loop stops); `wake` is not called again.
  void EndAll(const absl::Status& status);

  // The earliest compile deadline of the parked submissions (InfiniteFuture: none).
  absl::Time NextDeadline() const;
  size_t size() const { return parked_.size(); }

 private:
  // What a compile thread calls: `wake` until EndAll or destruction clears it.
  struct Waker {
    Mutex mu;
    std::function<void()> wake ABSL_GUARDED_BY(mu);
    void Call() ABSL_LOCKS_EXCLUDED(mu);
    void Clear() ABSL_LOCKS_EXCLUDED(mu);
  };
  struct Parked {
    Submission submission;
    std::unique_ptr<PendingGrammar> grammar;
  };
  GrammarCompileService* const service_;
  ServiceMetrics* const metrics_;
  const std::shared_ptr<Waker> waker_;
  std::vector<Parked> parked_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_
