// WorkerClient: a worker rank's connection to the scheduler.
//
// Dials the scheduler's Attach endpoint, says hello, waits for Welcome (or Reject), then
// runs plans on this thread: read a StepPlan, execute it, write its StepResult — one
// result per plan, in order. When the stream breaks (scheduler restarted, network), the
// executor's state is dropped and the client re-dials with exponential backoff; a
// Reject is final unless `retry_on_reject` (a fingerprint mismatch will not fix itself).
// An executor that fails to start serving (OnWelcome error) is not rejected: it re-dials.
//
// Scale-down: RequestDrain() (SIGTERM) sends DrainRequest on the live stream; the
// scheduler drains the whole replica and answers DrainStatus{done} once it is empty
// (after its running sequences finished, or its drain timeout re-queued the rest), and
// Run() returns OK. A drain the scheduler starts for this replica (another rank asked)
// ends the same way. After a drain request Run() never re-dials: a broken stream also
// ends it (OK).
// The calls go through AttachDialer/AttachStream, the transport boundary: gRPC in
// production, a fake in worker_client_test (so that TSan sees every thread involved;
// Debian's gRPC is not built with TSan).
// Thread-safety: Run() owns the calling thread; Stop(), RequestDrain() and the state
// accessors may be called from any thread (e.g. a signal-watcher, an HTTP probe);
// Stop() makes Run() return.
#ifndef WEFT_WORKER_SERVICE_WORKER_CLIENT_H_
#define WEFT_WORKER_SERVICE_WORKER_CLIENT_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/tls_credentials.h"
#include "weft/v1/worker.pb.h"

namespace weft {

// What a worker rank runs. Implemented by the model executor (and by fakes in tests).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // The hello this rank sends (fingerprint, replica, rank, blocks, ...).
  virtual weft::v1::WorkerHello Hello() = 0;
  // The scheduler admitted this rank: drop all sequence state, expect plan
  // `welcome.first_step_id()` next. An error ends the attachment (and re-dials).
  virtual absl::Status OnWelcome(const weft::v1::Welcome& welcome) = 0;
  // Runs one plan. Errors go into StepResult.error (the stream stays up).
  virtual weft::v1::StepResult Execute(const weft::v1::StepPlan& plan) = 0;
  // Execute into `*result`, which the client reuses from step to step (a cleared
  // message keeps its token entries' allocations). What the worker loop calls; the
  // default copies Execute's answer in.
  virtual void ExecuteInto(const weft::v1::StepPlan& plan, weft::v1::StepResult* result) {
    *result = Execute(plan);
  }
  // The attachment ended (stream broke): drop all state.
  virtual void OnDetach() = 0;
};

struct WorkerClientOptions {
  std::string scheduler_address;  // host:port of the scheduler's worker (Attach) port
  // Mutual TLS to the attach port (cert + key + the cluster CA); none: plaintext.
  ClientTlsFiles tls;
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
  // Give up (Run returns UNAVAILABLE) after this long without a successful attach;
  // infinite by default (workers wait for their scheduler).
  absl::Duration give_up_after = absl::InfiniteDuration();
  bool retry_on_reject = false;
  // Keepalive pings so a vanished scheduler is noticed even when idle.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);

  // Also checks the TLS files (readable, the key matches the certificate).
  absl::Status Validate() const;
};

// One Attach call as WorkerClient drives it. Read and Finish come from Run's thread;
// Write from Run's thread or RequestDrain's, never two at once; Cancel from any thread,
// at any time: it makes a blocked Read or Write return false.
class AttachStream {
 public:
  virtual ~AttachStream() = default;
  // The scheduler's next message; false once the call is over (ended, broken, cancelled).
  virtual bool Read(weft::v1::SchedulerMessage* message) = 0;
  // False when the call is over.
  virtual bool Write(const weft::v1::WorkerMessage& message) = 0;
  // Half-closes and returns the call's status; after Read returned false or Cancel.
  virtual absl::Status Finish() = 0;
  virtual void Cancel() = 0;
};

// Opens Attach calls (one at a time, from Run's thread).
class AttachDialer {
 public:
  virtual ~AttachDialer() = default;
  // A new call, or UNAVAILABLE when the scheduler cannot be reached.
  virtual absl::StatusOr<std::unique_ptr<AttachStream>> Dial() = 0;
};

class WorkerClient {
 public:
  // Dials options.scheduler_address over gRPC. `options` must Validate().
  WorkerClient(WorkerClientOptions options, StepExecutor* executor);
  // Dials through `dialer` (tests).
  WorkerClient(WorkerClientOptions options, StepExecutor* executor,
               std::unique_ptr<AttachDialer> dialer);

  // Attaches and serves until Stop(), the end of a drain, or a final error (Reject,
  // give-up).
  absl::Status Run() ABSL_LOCKS_EXCLUDED(mu_, stream_mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the scheduler to drain this rank's replica (see above). False when no stream
  // is up to carry it (not attached: nothing to drain; the caller should Stop()).
  bool RequestDrain(const std::string& reason) ABSL_LOCKS_EXCLUDED(stream_mu_);

  int64_t attachments() const { return attachments_.load(); }
  int64_t steps_executed() const { return steps_.load(); }
  // Admitted (welcomed) to a replica on a live stream.
  bool attached() const { return attached_.load(); }
  // This rank asked to drain, or the scheduler drains its replica.
  bool draining() const { return draining_.load(); }
  // Serving: attached and not draining (the worker's /readyz).
  bool ready() const { return attached() && !draining(); }

 private:
  // One Attach call: returns when the stream ends. `admitted` tells whether a Welcome
  // came, `rejected` whether a Reject did.
  absl::Status AttachOnce(bool* admitted, bool* rejected) ABSL_LOCKS_EXCLUDED(mu_, stream_mu_);
  // Says hello on `stream` and publishes it for writers (then a drain asked for while no
  // stream was up follows the hello). False when the hello could not be written.
  bool Hello(AttachStream* stream) ABSL_LOCKS_EXCLUDED(stream_mu_);
  // Reads the scheduler's messages and answers plans until the call ends (OK) or a
  // message ends the attachment (Reject, a failed OnWelcome, a plan before Welcome:
  // its status; the call is cancelled).
  absl::Status Serve(AttachStream* stream, bool* admitted, bool* rejected)
      ABSL_LOCKS_EXCLUDED(stream_mu_);
  // Writes on the current stream; false when it is gone or the write failed.
  bool Write(const weft::v1::WorkerMessage& message) ABSL_LOCKS_EXCLUDED(stream_mu_);

  const WorkerClientOptions options_;
  StepExecutor* const executor_;
  const std::unique_ptr<AttachDialer> dialer_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_requested_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> attached_{false};
  std::atomic<int64_t> attachments_{0};
  std::atomic<int64_t> steps_{0};
  Mutex mu_;
  AttachStream* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // for Stop() to cancel
  CondVar wake_;
  // The current Attach stream, for writers: one write at a time, and RequestDrain
  // writes from another thread than Run's. Held across a Write (which Stop() can always
  // end by cancelling the call); never taken with mu_ held.
  Mutex stream_mu_;
  AttachStream* stream_ ABSL_GUARDED_BY(stream_mu_) = nullptr;
};

}  // namespace weft

#endif  // WEFT_WORKER_SERVICE_WORKER_CLIENT_H_
