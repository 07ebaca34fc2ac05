#include "tools/bench/runner.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <numeric>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/mutex.h"

namespace weft {
namespace bench {
namespace {

void RunOne(Target& target, const TraceRequest& req, int32_t index, const RunClock& clock,
            Progress* progress, RequestRecord* rec) {
  rec->index = index;
  rec->prompt_tokens = static_cast<int32_t>(req.prompt.size());
  rec->max_tokens = req.max_tokens;
  target.Run(req, clock, progress != nullptr ? progress->live_tokens() : nullptr, rec);
  if (rec->scheduled_ns < 0) rec->scheduled_ns = rec->send_ns;
  if (progress != nullptr) progress->OnRequestDone(rec->ok());
}

void RunClosed(Target& target, absl::Span<const TraceRequest> trace, int32_t concurrency,
               const RunClock& clock, Progress* progress, std::vector<RequestRecord>* recs) {
  std::atomic<int32_t> next{0};
  const int32_t n = static_cast<int32_t>(trace.size());
  std::vector<std::thread> threads;
  threads.reserve(std::min(concurrency, n));
  for (int32_t t = 0; t < std::min(concurrency, n); ++t) {
    threads.emplace_back([&] {
      for (int32_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        (*recs)[i].scheduled_ns = -1;  // closed loop: scheduled when sent
        RunOne(target, trace[i], i, clock, progress, &(*recs)[i]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// Open loop: a dispatcher (the calling thread) and a pool of stream threads that grows
// only when every thread is busy.
class OpenLoop {
 public:
  OpenLoop(Target& target, absl::Span<const TraceRequest> trace, const RunClock& clock,
           Progress* progress, std::vector<RequestRecord>* recs)
      : target_(target), trace_(trace), clock_(clock), progress_(progress), recs_(recs) {}

  void Run() {
    std::vector<int32_t> order(trace_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return trace_[a].arrival_s < trace_[b].arrival_s;
    });
    for (int32_t i : order) {
      const int64_t at_ns = static_cast<int64_t>(std::max(0.0, trace_[i].arrival_s) * 1e9);
      (*recs_)[i].scheduled_ns = at_ns;
      const int64_t wait = at_ns - clock_.NowNs();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
      MutexLock l(&mu_);
      queue_.push_back(i);
      // Invariant: queued requests never outnumber idle threads.
      if (busy_ + static_cast<int32_t>(queue_.size()) > static_cast<int32_t>(threads_.size())) {
        threads_.emplace_back([this] { Worker(); });
      } else {
        cv_.Signal();
      }
    }
    {
      MutexLock l(&mu_);
      closing_ = true;
      cv_.SignalAll();
    }
    for (std::thread& t : threads_) t.join();  // threads_ no longer changes
  }

 private:
  void Worker() {
    while (true) {
      int32_t i;
      {
        MutexLock l(&mu_);
        while (queue_.empty() && !closing_) cv_.Wait(&mu_);
        if (queue_.empty()) return;
        i = queue_.front();
        queue_.pop_front();
        ++busy_;
      }
      RunOne(target_, trace_[i], i, clock_, progress_, &(*recs_)[i]);
      MutexLock l(&mu_);
      --busy_;
    }
  }

  Target& target_;
  const absl::Span<const TraceRequest> trace_;
  const RunClock& clock_;
  Progress* const progress_;
  std::vector<RequestRecord>* const recs_;
  Mutex mu_;
  CondVar cv_;
  std::deque<int32_t> queue_ ABSL_GUARDED_BY(mu_);
  int32_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // appended under mu_ by the dispatcher only
};

}  // namespace

std::string LoadLevel::Label() const {
  switch (mode) {
    case LoadMode::kClosed:
      return absl::StrCat("c=", static_cast<int64_t>(value));
    case LoadMode::kPoisson:
      return absl::StrFormat("rate=%g/s", value);
    case LoadMode::kReplay:
      return "replay";
  }
  return "?";
}

std::vector<RequestRecord> RunLoad(Target& target, absl::Span<const TraceRequest> trace,
                                   const LoadLevel& level, Progress* progress) {
  std::vector<RequestRecord> recs(trace.size());
  const RunClock clock;
  if (level.mode == LoadMode::kClosed) {
    RunClosed(target, trace, std::max<int32_t>(1, static_cast<int32_t>(level.value)), clock,
              progress, &recs);
  } else {
    OpenLoop(target, trace, clock, progress, &recs).Run();
  }
  return recs;
}

}  // namespace bench
}  // namespace weft
