#include "tools/bench/progress.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_format.h"

namespace weft {
namespace bench {
namespace {

ProgressMode Resolve(const ProgressOptions& o) {
  if (o.mode != ProgressMode::kAuto) return o.mode;
  return o.out != nullptr && isatty(fileno(o.out)) ? ProgressMode::kBar : ProgressMode::kLines;
}

}  // namespace

Progress::Progress(const ProgressOptions& options, std::string label, int32_t total)
    : mode_(options.out == nullptr ? ProgressMode::kOff : Resolve(options)),
      out_(options.out),
      interval_(mode_ == ProgressMode::kBar ? options.bar_interval : options.line_interval),
      label_(std::move(label)),
      total_(total) {
  if (mode_ != ProgressMode::kOff) thread_ = std::thread([this] { Loop(); });
}

Progress::~Progress() { Stop(); }

void Progress::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!thread_.joinable()) return;
  {
    MutexLock l(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  thread_.join();
  Draw(/*final_line=*/true);
}

void Progress::Loop() {
  MutexLock l(&mu_);
  while (!stop_) {
    cv_.WaitWithTimeout(&mu_, interval_);
    if (stop_) break;
    Draw(/*final_line=*/false);
  }
}

void Progress::Draw(bool final_line) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int32_t done = done_.load(std::memory_order_relaxed);
  const int32_t failed = failed_.load(std::memory_order_relaxed);
  const int64_t tokens = tokens_.load(std::memory_order_relaxed);
  const double tok_s = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0;
  const int32_t finished = done + failed;
  std::string fail = failed > 0 ? absl::StrFormat("  %d FAILED", failed) : "";
  if (mode_ == ProgressMode::kBar) {
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? kWidth * finished / total_ : kWidth;
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    absl::FPrintF(out_, "\r\x1b[2K%s [%s] %d/%d req  %.1f tok/s  %.1fs%s%s", label_, bar,
                  finished, total_, tok_s, elapsed, fail, final_line ? "\n" : "");
  } else {
    absl::FPrintF(out_, "%s: %d/%d req  %.1f tok/s  %.1fs%s%s\n", label_, finished, total_,
                  tok_s, elapsed, fail, final_line ? "  done" : "");
  }
  std::fflush(out_);
}

}  // namespace bench
}  // namespace weft
