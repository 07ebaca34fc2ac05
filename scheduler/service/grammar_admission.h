// GrammarAdmission: where a Submission with a structured-output constraint waits for its
// grammar before it enters the scheduler core. The planning thread parks it (Park), the
// grammar compiles on the compile service's own threads, and each iteration Poll admits
// the ready ones with their compiled grammar and ends the refused ones' calls with the
// compile's status (INVALID_ARGUMENT naming the reason, with the constraint's field as
// data — "constraint.json_schema", "constraint.structural_tag", ... — so that an edge
// names its own field; RESOURCE_EXHAUSTED when too many compiles wait). The planning loop never waits for a compile; while anything is parked
// it wakes within poll_interval.
// Ownership: borrows the compile service (null: constraints are refused).
// Thread-safety: thread-compatible (the planning thread).
#ifndef WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_
#define WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/grammar/sequence_grammar.h"
#include "scheduler/service/engine_interface.h"

namespace weft {

class GrammarAdmission {
 public:
  using AdmitFn = std::function<void(Submission&, std::shared_ptr<const SequenceGrammarFactory>)>;

  explicit GrammarAdmission(GrammarCompileService* service) : service_(service) {}

  // True when the submission has a constraint and was taken (parked, or its call ended
  // when structured output is off); false: admit it as usual.
  bool Park(Submission& submission, absl::Time now);
  // Admits or ends every parked submission whose compile is final as of `now`.
  void Poll(absl::Time now, const AdmitFn& admit);
  // Ends every parked call with `status` (the loop stops).
  void EndAll(const absl::Status& status);

  size_t size() const { return parked_.size(); }
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

 private:
  struct Parked {
    Submission submission;
    std::unique_ptr<PendingGrammar> grammar;
  };
  GrammarCompileService* const service_;
  std::vector<Parked> parked_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_GRAMMAR_ADMISSION_H_
