// FillGate (tests): makes "this sequence's mask is not ready yet" an event a test
// controls rather than a timing. A test grammar calls Pass() at the start of each
// FillNextTokenBitmask; Pass counts the fill and blocks while the test holds the gate
// closed (Set(false)).
// Thread-safety: thread-safe.
#ifndef WEFT_SCHEDULER_GRAMMAR_TESTING_FILL_GATE_H_
#define WEFT_SCHEDULER_GRAMMAR_TESTING_FILL_GATE_H_

#include "common/mutex.h"

namespace weft::testing {

class FillGate {
 public:
  void Set(bool open) {
    MutexLock l(&mu_);
    open_ = open;
    cv_.SignalAll();
  }
  // Counts one fill, then waits while the gate is closed.
  void Pass() {
    MutexLock l(&mu_);
    ++fills_;
    cv_.SignalAll();
    while (!open_) cv_.Wait(&mu_);
  }
  // Waits until at least `n` fills have begun; returns how many have.
  int WaitFills(int n) {
    MutexLock l(&mu_);
    while (fills_ < n) cv_.Wait(&mu_);
    return fills_;
  }
  int fills() {
    MutexLock l(&mu_);
    return fills_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  int fills_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weft::testing

#endif  // WEFT_SCHEDULER_GRAMMAR_TESTING_FILL_GATE_H_
