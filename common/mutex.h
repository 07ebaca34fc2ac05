// weft::Mutex / weft::MutexLock / weft::CondVar: std::mutex-based locking with Abseil's
// thread-safety annotations (ABSL_GUARDED_BY etc. work with these types).
//
// Why not absl::Mutex: Debian's Abseil is not built with ThreadSanitizer annotations and
// absl::Mutex parks on raw futexes that TSan cannot see, so TSan runs of the scheduler
// core would report false races. std::mutex goes through pthreads, which TSan intercepts.
// Thread-safety: the types themselves are the synchronization primitives.
#ifndef WEFT_COMMON_MUTEX_H_
#define WEFT_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace weft {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  // Documents (for readers and the analysis) that the caller holds the lock.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Condition variable over weft::Mutex. Wait* must be called with `mu` held.
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns true if the timeout expired (spurious wake-ups return false).
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const auto status = cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout));
    lock.release();
    return status == std::cv_status::timeout;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace weft

#endif  // WEFT_COMMON_MUTEX_H_
