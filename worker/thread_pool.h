// ThreadPool: a tiny fork-join pool for the model's forward pass.
//
// `num_threads` threads in all: the caller of Run* is thread 0 and takes part, the pool
// owns num_threads - 1 workers. A Run* call publishes one job, every thread runs its
// share, and the call returns when all are done (a full barrier). Forward passes issue
// a few such regions per layer, microseconds apart, so waiting threads spin briefly
// (kSpinIterations pause instructions, ~0.1-0.5 ms, then a few yields so that an
// oversubscribed core goes to the thread being waited for) before sleeping on a
// condition variable: low latency between regions, no CPU burnt between steps.
//
// Work splitting is static and deterministic (ParallelFor) or dynamic (an atomic
// counter, ParallelForDynamic). Results must never depend on which thread ran what:
// kernels are written so that each output is computed the same way wherever it runs.
//
// Thread-safety: Run* may be called by one thread at a time (the owner's step thread);
// concurrent Run* calls are a programming error. The job runs concurrently on all
// threads and must only write disjoint data.
#ifndef WEFT_WORKER_THREAD_POOL_H_
#define WEFT_WORKER_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "common/mutex.h"

namespace weft {

class ThreadPool {
 public:
  // num_threads >= 1 (1 = everything runs on the caller).
  explicit ThreadPool(int num_threads);
  ~ThreadPool() ABSL_LOCKS_EXCLUDED(mu_);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(thread_index) once on each thread, thread_index in [0, num_threads).
  void RunOnAll(absl::FunctionRef<void(int)> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Splits [0, n) into num_threads contiguous ranges with boundaries on multiples of
  // `align` (the last range takes the remainder) and runs fn(begin, end) for each
  // non-empty range.
  void ParallelFor(int64_t n, int64_t align, absl::FunctionRef<void(int64_t, int64_t)> fn);

  // Runs fn(i) for every i in [0, n), items handed out one at a time.
  void ParallelForDynamic(int64_t n, absl::FunctionRef<void(int64_t)> fn);

  // For tests: threads asleep (done spinning) waiting for a job, and callers asleep
  // waiting for the end of a region.
  int num_asleep_for_job() const { return idle_sleepers_.load(); }
  int num_asleep_for_region_end() const { return done_sleepers_.load(); }

  // [begin, end) of thread t's share in ParallelFor.
  static void StaticRange(int64_t n, int64_t align, int num_threads, int t, int64_t* begin,
                          int64_t* end);

 private:
  static constexpr int kSpinIterations = 4000;
  // Then yield this many times before sleeping: on an oversubscribed machine a yield
  // hands the core to the thread we are waiting for.
  static constexpr int kYieldIterations = 50;

  void WorkerLoop(int thread_index);
  // Spins, then sleeps, until `ready()` holds.
  template <typename Ready>
  void WaitUntil(Ready ready, std::atomic<int>* sleepers) ABSL_LOCKS_EXCLUDED(mu_);
  void WakeSleepers(std::atomic<int>* sleepers) ABSL_LOCKS_EXCLUDED(mu_);

  const int num_threads_;
  std::vector<std::thread> workers_;
  // The current job; written by the caller before publishing it through epoch_ (release;
  // the workers read it after an acquire of the new epoch). Not guarded by mu_: mu_
  // and cv_ only put waiters to sleep.
  const absl::FunctionRef<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};    // workers still running the current job
  std::atomic<bool> stop_{false};
  std::atomic<int> idle_sleepers_{0};  // workers asleep waiting for a job
  std::atomic<int> done_sleepers_{0};  // callers asleep waiting for pending_ == 0
  Mutex mu_;
  CondVar cv_;
};

}  // namespace weft

#endif  // WEFT_WORKER_THREAD_POOL_H_
