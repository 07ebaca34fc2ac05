#include "scheduler/grammar/async_grammar.h"

#include <utility>

#include "absl/time/clock.h"

namespace weft {

MaskThreads::MaskThreads(int32_t num_threads) {
  for (int32_t i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

MaskThreads::~MaskThreads() {
  {
    MutexLock l(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void MaskThreads::Run(std::function<void()> job) {
  if (threads_.empty()) {
    job();
    return;
  }
  MutexLock l(&mu_);
  jobs_.push_back(std::move(job));
  cv_.Signal();
}

void MaskThreads::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock l(&mu_);
      while (jobs_.empty() && !stopping_) cv_.Wait(&mu_);
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

// What a fill shares with the planning thread. The grammar is used by one side at a
// time: the fill between StartFill and `ready`, the planning thread otherwise.
struct AsyncGrammar::State {
  std::unique_ptr<SequenceGrammar> grammar;
  std::vector<uint32_t> words;  // the fill's output (written before `ready`)
  Mutex mu;
  CondVar cv;
  bool ready ABSL_GUARDED_BY(mu) = false;
  bool all_allowed ABSL_GUARDED_BY(mu) = false;
  double seconds ABSL_GUARDED_BY(mu) = 0.0;

  void Fill() ABSL_LOCKS_EXCLUDED(mu) {
    const absl::Time start = absl::Now();
    const bool masked = grammar->FillNextTokenBitmask(words.data());
    const double s = absl::ToDoubleSeconds(absl::Now() - start);
    MutexLock l(&mu);
    all_allowed = !masked;
    seconds = s;
    ready = true;
    cv.SignalAll();
  }
};

AsyncGrammar::AsyncGrammar(std::unique_ptr<SequenceGrammar> grammar, MaskThreads* threads)
    : state_(std::make_shared<State>()),
      threads_(threads),
      vocab_size_(grammar->vocab_size()) {
  state_->grammar = std::move(grammar);
  state_->words.resize((vocab_size_ + 31) / 32);
  StartFill();
}

AsyncGrammar::~AsyncGrammar() = default;

void AsyncGrammar::StartFill() {
  {
    MutexLock l(&state_->mu);
    state_->ready = false;
  }
  threads_->Run([s = state_] { s->Fill(); });
}

absl::Status AsyncGrammar::Accept(int32_t token) {
  WaitReady(absl::InfiniteFuture());  // never waits in practice (see the header)
  absl::Status status = state_->grammar->Accept(token);
  if (status.ok()) StartFill();
  return status;
}

bool AsyncGrammar::WaitReady(absl::Time deadline) {
  MutexLock l(&state_->mu);
  while (!state_->ready) {
    if (deadline == absl::InfiniteFuture()) {
      state_->cv.Wait(&state_->mu);
      continue;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    state_->cv.WaitWithTimeout(&state_->mu, left);
  }
  return true;
}

double AsyncGrammar::TakeMask(std::string* mask) {
  WaitReady(absl::InfiniteFuture());
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TokenBitmask words are little-endian");
  MutexLock l(&state_->mu);
  if (state_->all_allowed) {
    mask->clear();
  } else {
    mask->assign(reinterpret_cast<const char*>(state_->words.data()), state_->words.size() * 4);
  }
  return state_->seconds;
}

}  // namespace weft
