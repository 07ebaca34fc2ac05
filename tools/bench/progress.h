// Progress display for one benchmark run, on stderr: a bar redrawn in place (5 times a
// second) when the stream is a terminal, otherwise one line every few seconds, and a
// final line when the run ends. Counters are atomics bumped by request threads; one
// reporter thread sleeps on a condition variable between redraws (no polling loops).
// Ownership: owns its reporter thread (joined by Stop() or the destructor).
// Thread-safety: OnRequestDone() and live_tokens() from any thread; Stop() from the
// owner.
#ifndef WEFT_TOOLS_BENCH_PROGRESS_H_
#define WEFT_TOOLS_BENCH_PROGRESS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace weft {
namespace bench {

enum class ProgressMode { kAuto, kBar, kLines, kOff };

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kAuto;  // kAuto: kBar on a TTY, else kLines
  FILE* out = stderr;
  absl::Duration bar_interval = absl::Milliseconds(200);
  absl::Duration line_interval = absl::Seconds(5);
};

class Progress {
 public:
  Progress(const ProgressOptions& options, std::string label, int32_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  std::atomic<int64_t>* live_tokens() { return &tokens_; }
  void OnRequestDone(bool ok) {
    (ok ? done_ : failed_).fetch_add(1, std::memory_order_relaxed);
  }
  // Stops the reporter and prints the final state. Idempotent.
  void Stop();

 private:
  void Loop();
  void Draw(bool final_line);

  const ProgressMode mode_;
  FILE* const out_;
  const absl::Duration interval_;
  const std::string label_;
  const int32_t total_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<int64_t> tokens_{0};
  std::atomic<int32_t> done_{0};
  std::atomic<int32_t> failed_{0};
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ = false;  // owner-only
  std::thread thread_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_PROGRESS_H_
