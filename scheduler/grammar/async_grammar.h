// AsyncGrammar: one constrained sequence's grammar (sequence_grammar.h) whose next-token
// mask is computed off the planning thread, on MaskThreads, as soon as the previous token
// is accepted — so it is normally ready when the next plan wants it.
//
// Order (the core's contract, unchanged): Accept(token) for each output token in order;
// the mask that follows token i is computed after Accept(i) and taken (TakeMask) by the
// plan that samples token i+1, which is sent only after token i came back (a constrained
// row is never pipelined). A fill is therefore never running while Accept is called; if
// it were, Accept waits for it. Masks are a function of the accepted tokens only, so
// where the fill runs and when it finishes never changes a token ("same seed, same
// tokens": sampling is keyed by (seed, sample, output index), common/sampling).
//
// Bounded: WaitReady(deadline) gives up at `deadline`; the planner then leaves the row for
// a later step (planner.h) instead of stalling the others.
// With MaskThreads of 0 threads the fill runs inline in Accept/the constructor.
// Thread-safety: AsyncGrammar is used by the planning thread; its fill runs on a mask
// thread and shares only State (locked). MaskThreads is thread-safe.
#ifndef WEFT_SCHEDULER_GRAMMAR_ASYNC_GRAMMAR_H_
#define WEFT_SCHEDULER_GRAMMAR_ASYNC_GRAMMAR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/grammar/sequence_grammar.h"

namespace weft {

// A few threads running mask fills in arrival order (0 threads: Run runs `job` inline).
class MaskThreads {
 public:
  explicit MaskThreads(int32_t num_threads);
  ~MaskThreads();  // finishes the queued jobs, then joins
  MaskThreads(const MaskThreads&) = delete;
  MaskThreads& operator=(const MaskThreads&) = delete;
  void Run(std::function<void()> job) ABSL_LOCKS_EXCLUDED(mu_);
  int32_t num_threads() const { return static_cast<int32_t>(threads_.size()); }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

class AsyncGrammar {
 public:
  // Starts the first mask (the one before output token 0). `threads` outlives this.
  AsyncGrammar(std::unique_ptr<SequenceGrammar> grammar, MaskThreads* threads);
  ~AsyncGrammar();  // a fill in flight finishes on its thread (it owns what it uses)
  AsyncGrammar(const AsyncGrammar&) = delete;
  AsyncGrammar& operator=(const AsyncGrammar&) = delete;

  // The grammar's Accept; then the next mask starts. FailedPrecondition: not allowed.
  absl::Status Accept(int32_t token);
  // True once the next mask is ready; waits for it until `deadline` at most.
  bool WaitReady(absl::Time deadline);
  // Waits for the next mask and moves it into `mask` as plan bytes (BitmaskWords little-
  // endian uint32 words; empty: every token allowed). Returns the fill's own seconds.
  double TakeMask(std::string* mask);
  int32_t vocab_size() const { return vocab_size_; }

 private:
  struct State;
  void StartFill();
  std::shared_ptr<State> state_;
  MaskThreads* const threads_;
  const int32_t vocab_size_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_GRAMMAR_ASYNC_GRAMMAR_H_
