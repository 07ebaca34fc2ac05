#include "worker/thread_pool.h"

#include <algorithm>

#include "glog/logging.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define WEFT_CPU_RELAX() _mm_pause()
#else
#define WEFT_CPU_RELAX() std::this_thread::yield()
#endif

namespace weft {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads) {
  CHECK_GE(num_threads, 1) << "a thread pool needs at least the calling thread";
  workers_.reserve(num_threads - 1);
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  epoch_.fetch_add(1);
  WakeSleepers(&idle_sleepers_);
  for (std::thread& t : workers_) t.join();
}

template <typename Ready>
void ThreadPool::WaitUntil(Ready ready, std::atomic<int>* sleepers) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (ready()) return;
    WEFT_CPU_RELAX();
  }
  for (int i = 0; i < kYieldIterations; ++i) {
    if (ready()) return;
    std::this_thread::yield();
  }
  // Sleep. The waker changes the condition, then reads *sleepers; we increment
  // *sleepers, then re-check the condition (both sequentially consistent), so either
  // the waker sees us or we see its change: no lost wake-up.
  MutexLock lock(&mu_);
  sleepers->fetch_add(1);
  while (!ready()) cv_.Wait(&mu_);
  sleepers->fetch_sub(1);
}

void ThreadPool::WakeSleepers(std::atomic<int>* sleepers) {
  if (sleepers->load() == 0) return;
  MutexLock lock(&mu_);
  cv_.SignalAll();
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen = 0;
  while (true) {
    WaitUntil([&] { return epoch_.load(std::memory_order_acquire) != seen; }, &idle_sleepers_);
    seen = epoch_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(thread_index);
    if (pending_.fetch_sub(1) == 1) WakeSleepers(&done_sleepers_);
  }
}

void ThreadPool::RunOnAll(absl::FunctionRef<void(int)> fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1);
  epoch_.fetch_add(1);  // publishes job_ and pending_
  WakeSleepers(&idle_sleepers_);
  fn(0);
  WaitUntil([&] { return pending_.load(std::memory_order_acquire) == 0; }, &done_sleepers_);
  job_ = nullptr;
}

void ThreadPool::StaticRange(int64_t n, int64_t align, int num_threads, int t, int64_t* begin,
                             int64_t* end) {
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  *begin = std::min(n, units * t / num_threads * align);
  *end = std::min(n, units * (t + 1) / num_threads * align);
}

void ThreadPool::ParallelFor(int64_t n, int64_t align,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  RunOnAll([&](int t) {
    int64_t begin, end;
    StaticRange(n, align, num_threads_, t, &begin, &end);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::ParallelForDynamic(int64_t n, absl::FunctionRef<void(int64_t)> fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  RunOnAll([&](int) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  });
}

}  // namespace weft
