// A test double of the engine for the plumbing in front of it (the public APIs' tests,
// worker_control_service_test):
// FakeEngine: an EngineInterface that records what it is given (submissions with their
//   outboxes, cancelled keys, worker messages) so a test can play the planning thread:
//   push responses into a submission's outbox and finish it. `reject_` makes Submit fail
//   RESOURCE_EXHAUSTED (a full queue); `answer_at_submit_` is pushed into each
//   submission's outbox inside Submit (a planning thread that answers before the service
//   has built the call's writer).
//
// Thread-safety: FakeEngine's members are guarded by mu_; tests read them under it or
// through WaitFor. Test-only.
#ifndef WEFT_SCHEDULER_SERVICE_TESTING_FAKE_ENGINE_H_
#define WEFT_SCHEDULER_SERVICE_TESTING_FAKE_ENGINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "scheduler/service/engine_interface.h"

namespace weft::testing {

class FakeEngine : public EngineInterface {
 public:
  absl::Status Submit(Submission s) override {
    MutexLock l(&mu_);
    if (reject_) return absl::ResourceExhaustedError("queue full");
    for (const weft::v1::GenerateResponse& r : answer_at_submit_) s.outbox->Push(r);
    subs_.push_back(std::move(s));
    cv_.SignalAll();
    return absl::OkStatus();
  }
  void Cancel(int64_t key) override {
    MutexLock l(&mu_);
    cancelled_.push_back(key);
    cv_.SignalAll();
  }
  void OnWorkerMessage(const std::shared_ptr<WorkerHandle>& w, weft::v1::WorkerMessage m) override {
    MutexLock l(&mu_);
    if (m.has_hello()) {
      hello_ = m.hello();
      worker_ = w;
      ++hellos_;
    } else {
      results_.push_back(m.result());
    }
    cv_.SignalAll();
  }
  void OnWorkerGone(const std::shared_ptr<WorkerHandle>&) override {
    MutexLock l(&mu_);
    ++gone_;
    cv_.SignalAll();
  }
  weft::v1::ModelInfo ModelInfo() const override {
    weft::v1::ModelInfo m;
    m.set_name("fake");
    return m;
  }
  // Waits (bounded) until pred() holds.
  template <typename P>
  bool WaitFor(P pred) {
    MutexLock l(&mu_);
    const absl::Time end = absl::Now() + absl::Seconds(20);
    while (!pred()) {
      if (absl::Now() > end) return false;
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
    }
    return true;
  }

  Mutex mu_;
  CondVar cv_;
  bool reject_ = false;
  std::vector<weft::v1::GenerateResponse> answer_at_submit_;
  std::vector<Submission> subs_;
  std::vector<int64_t> cancelled_;
  weft::v1::WorkerHello hello_;
  std::shared_ptr<WorkerHandle> worker_;
  std::vector<weft::v1::StepResult> results_;
  int hellos_ = 0;
  int gone_ = 0;
};

}  // namespace weft::testing

#endif  // WEFT_SCHEDULER_SERVICE_TESTING_FAKE_ENGINE_H_
