// SequenceGrammar: what the scheduler core needs from a structured-output grammar, as an
// interface, so that the core (and its sanitizer-built tests) does not link the grammar
// engine: the service layer compiles a request's constraint off the planning thread
// (grammar_engine.h, XGrammar) and hands AddRequest a SequenceGrammarFactory; tests may
// hand a small fake grammar.
//
// Order (the core's contract): a sequence's grammar accepts each of its output tokens in
// order (ApplyResults), and FillNextTokenBitmask is called when a plan samples its next
// token, always after the previous token was accepted: a constrained sequence is never
// pipelined (the planner schedules it again only once its sampled token is back).
// Thread-safety: a SequenceGrammar is used by the planning thread only; a factory may be
// shared (NewSequence is const and thread-safe).
#ifndef WEFT_SCHEDULER_GRAMMAR_SEQUENCE_GRAMMAR_H_
#define WEFT_SCHEDULER_GRAMMAR_SEQUENCE_GRAMMAR_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/grammar/constraint.h"

namespace weft {

class SequenceGrammar {
 public:
  virtual ~SequenceGrammar() = default;
  // FailedPrecondition when the grammar does not allow `token` here.
  virtual absl::Status Accept(int32_t token) = 0;
  // Writes (vocab_size() + 31) / 32 little-endian uint32 words (worker.proto
  // TokenBitmask); false when every token is allowed (then nothing need be sent).
  virtual bool FillNextTokenBitmask(uint32_t* words) = 0;
  virtual int32_t vocab_size() const = 0;
};

class SequenceGrammarFactory {
 public:
  virtual ~SequenceGrammarFactory() = default;
  // A grammar at its start, for one sequence.
  virtual std::unique_ptr<SequenceGrammar> NewSequence() const = 0;
};

// A compile in progress, checked by the planning thread when it is woken: by the
// service's `on_final` (Compile) or at deadline().
class PendingGrammar {
 public:
  virtual ~PendingGrammar() = default;
  // True once result() is final (compiled, refused, or past the compile time limit as
  // of `now`).
  virtual bool Poll(absl::Time now) = 0;
  // When Poll becomes true at the latest (the compile time limit).
  virtual absl::Time deadline() const = 0;
  virtual absl::StatusOr<std::shared_ptr<const SequenceGrammarFactory>> result() const = 0;
};

// What a compile service did so far (monotonic totals; exported as metrics).
struct GrammarCompileTotals {
  int64_t compiles = 0;          // finished compiles (successful or not)
  double compile_seconds = 0.0;  // their total time
  int64_t refused = 0;           // refused (invalid, or past the time limit)
  int64_t cache_hits = 0;        // answered from the compiled-grammar cache
};

// Compiles constraints off the calling thread (grammar_engine.h is the implementation).
class GrammarCompileService {
 public:
  virtual ~GrammarCompileService() = default;
  virtual GrammarCompileTotals totals() const { return {}; }
  // Never blocks. `constraint` passed CheckConstraint. `on_final` (may be null) runs once
  // when the compile finishes or is refused (on a compile thread, or on this one when
  // the result is known at once); not for the deadline, which the caller watches.
  virtual std::unique_ptr<PendingGrammar> Compile(const GrammarConstraint& constraint,
                                                  std::function<void()> on_final) = 0;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_SEQUENCE_GRAMMAR_H_
