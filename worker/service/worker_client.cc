#include "worker/service/worker_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/protocol_version.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/worker.grpc.pb.h"

namespace weft {

absl::Status WorkerClientOptions::Validate() const {
  if (scheduler_address.empty()) return absl::InvalidArgumentError("--scheduler is required (host:port)");
  if (initial_backoff <= absl::ZeroDuration() || max_backoff < initial_backoff) {
    return absl::InvalidArgumentError("backoff must be positive and max >= initial");
  }
  return tls.Validate("attach TLS");
}

namespace {

absl::Status FromGrpc(const grpc::Status& st) {
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

// The gRPC Attach call.
class GrpcAttachStream : public AttachStream {
 public:
  explicit GrpcAttachStream(weft::v1::WorkerControl::Stub* stub) : call_(stub->Attach(&ctx_)) {}
  bool Read(weft::v1::SchedulerMessage* message) override { return call_->Read(message); }
  bool Write(const weft::v1::WorkerMessage& message) override { return call_->Write(message); }
  absl::Status Finish() override {
    call_->WritesDone();
    return FromGrpc(call_->Finish());
  }
  void Cancel() override { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;  // no deadline: once attached the call lives as long as both ends
  const std::unique_ptr<grpc::ClientReaderWriter<weft::v1::WorkerMessage,
                                                 weft::v1::SchedulerMessage>> call_;
};

class GrpcAttachDialer : public AttachDialer {
 public:
  explicit GrpcAttachDialer(const WorkerClientOptions& options) : address_(options.scheduler_address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(options.keepalive_time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                absl::ToInt64Milliseconds(options.keepalive_timeout));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 256 << 20);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, absl::ToInt64Milliseconds(options.max_backoff));
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        MakeChannelCredentials(options.tls, &args);
    CHECK(creds.ok()) << "WorkerClientOptions must Validate(): " << creds.status();
    channel_ = grpc::CreateCustomChannel(address_, *creds, args);
    stub_ = weft::v1::WorkerControl::NewStub(channel_);
  }

  absl::StatusOr<std::unique_ptr<AttachStream>> Dial() override {
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(2))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", address_));
    }
    return std::unique_ptr<AttachStream>(new GrpcAttachStream(stub_.get()));
  }

 private:
  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<weft::v1::WorkerControl::Stub> stub_;
};

}  // namespace

WorkerClient::WorkerClient(WorkerClientOptions options, StepExecutor* executor)
    : WorkerClient(options, executor, std::make_unique<GrpcAttachDialer>(options)) {}

WorkerClient::WorkerClient(WorkerClientOptions options, StepExecutor* executor,
                           std::unique_ptr<AttachDialer> dialer)
    : options_(std::move(options)), executor_(executor), dialer_(std::move(dialer)) {}

void WorkerClient::Stop() {
  stop_ = true;
  MutexLock lock(&mu_);
  if (active_ != nullptr) active_->Cancel();
  wake_.SignalAll();
}

bool WorkerClient::Write(const weft::v1::WorkerMessage& message) {
  MutexLock lock(&stream_mu_);
  return stream_ != nullptr && stream_->Write(message);
}

bool WorkerClient::RequestDrain(const std::string& reason) {
  drain_requested_ = true;
  draining_ = true;
  weft::v1::WorkerMessage m;
  m.mutable_drain()->set_reason(reason);
  const bool sent = Write(m);
  if (sent) LOG(INFO) << "asked the scheduler to drain this replica (" << reason << ")";
  return sent;
}

absl::Status WorkerClient::Run() {
  absl::Duration backoff = options_.initial_backoff;
  absl::Time last_ok = absl::Now();
  while (!stop_) {
    bool admitted = false, rejected = false;
    absl::Status s = AttachOnce(&admitted, &rejected);
    if (stop_) break;
    if (draining_) {
      // Drained, or the stream ended while draining: there is nothing left to serve.
      LOG(INFO) << "drain over: " << (s.ok() ? "the scheduler released this replica"
                                            : absl::StrCat("stream ended (", s.message(), ")"));
      return absl::OkStatus();
    }
    if (admitted) {
      backoff = options_.initial_backoff;
      last_ok = absl::Now();
    }
    // Only the scheduler's Reject is final. A local failure to start serving (say, the
    // tensor-parallel group could not form: FAILED_PRECONDITION from a leftover
    // segment) is retried: the next admission comes with a new epoch.
    if (rejected && !options_.retry_on_reject) return s;  // would be rejected again
    if (absl::Now() - last_ok > options_.give_up_after) {
      return absl::UnavailableError(absl::StrCat("no scheduler at ", options_.scheduler_address,
                                                 " for ", absl::FormatDuration(options_.give_up_after),
                                                 ": ", s.message()));
    }
    LOG(WARNING) << "attach to " << options_.scheduler_address << " ended: " << s
                 << "; retrying in " << absl::FormatDuration(backoff);
    MutexLock lock(&mu_);
    if (!stop_) wake_.WaitWithTimeout(&mu_, backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  return absl::OkStatus();
}

absl::Status WorkerClient::AttachOnce(bool* admitted, bool* rejected) {
  absl::StatusOr<std::unique_ptr<AttachStream>> dialed = dialer_->Dial();
  if (!dialed.ok()) return dialed.status();
  const std::unique_ptr<AttachStream> stream = std::move(*dialed);
  bool stopping = false;
  {
    MutexLock lock(&mu_);
    stopping = stop_;
    if (!stopping) active_ = stream.get();
  }
  bool hello_sent = false;
  absl::Status result = absl::CancelledError("stopping");
  if (stopping) {
    stream->Cancel();
  } else if ((hello_sent = Hello(stream.get()))) {
    result = Serve(stream.get(), admitted, rejected);
  }
  {
    MutexLock lock(&stream_mu_);
    stream_ = nullptr;
  }
  attached_ = false;
  const absl::Status finished = stream->Finish();
  {
    MutexLock lock(&mu_);
    active_ = nullptr;
  }
  if (*admitted) executor_->OnDetach();
  if (!stopping && !hello_sent) {
    return absl::UnavailableError(absl::StrCat("hello not sent: ", finished.message()));
  }
  if (!result.ok()) return result;
  if (!finished.ok()) return finished;
  if (draining_) return absl::OkStatus();
  return absl::UnavailableError("scheduler ended the stream");
}

bool WorkerClient::Hello(AttachStream* stream) {
  weft::v1::WorkerMessage hello;
  *hello.mutable_hello() = executor_->Hello();
  // The wire's version, whatever the executor: set here, at the edge, and nowhere else.
  hello.mutable_hello()->set_protocol_version(kWorkerProtocolVersion);
  {
    // Published with the hello on it: a drain request can only follow the hello.
    MutexLock lock(&stream_mu_);
    if (!stream->Write(hello)) return false;
    stream_ = stream;
  }
  // A drain asked for while no stream was up (reconnecting) is carried by this one.
  if (drain_requested_) {
    weft::v1::WorkerMessage drain;
    drain.mutable_drain()->set_reason("shutting down");
    Write(drain);
  }
  return true;
}

absl::Status WorkerClient::Serve(AttachStream* stream, bool* admitted, bool* rejected) {
  weft::v1::SchedulerMessage msg;
  weft::v1::WorkerMessage out;  // each step's result, reused (ExecuteInto)
  while (stream->Read(&msg)) {
    if (msg.has_reject()) {
      *rejected = true;
      LOG(ERROR) << "scheduler rejected this worker: " << msg.reject().reason();
      stream->Cancel();
      return absl::FailedPreconditionError(absl::StrCat("rejected: ", msg.reject().reason()));
    }
    if (msg.has_welcome()) {
      if (absl::Status s = executor_->OnWelcome(msg.welcome()); !s.ok()) {
        LOG(ERROR) << "cannot start serving replica " << msg.welcome().replica() << ": " << s;
        stream->Cancel();
        return s;
      }
      *admitted = true;
      ++attachments_;
      attached_ = true;
      LOG(INFO) << "attached to " << options_.scheduler_address << " as replica "
                << msg.welcome().replica() << " (epoch " << msg.welcome().epoch() << ", "
                << msg.welcome().num_kv_blocks() << " KV blocks)";
    } else if (msg.has_drain_status()) {
      draining_ = true;  // not ready from now on, whichever rank asked
      if (!msg.drain_status().done()) {
        LOG(INFO) << "the scheduler drains this replica: running sequences finish";
      } else {
        LOG(INFO) << "replica drained (" << msg.drain_status().num_requeued()
                  << " requests re-queued elsewhere by the drain timeout)";
        // The scheduler ends the stream OK next.
      }
    } else if (msg.has_plan()) {
      if (!*admitted) {
        stream->Cancel();
        return absl::FailedPreconditionError("plan before welcome");
      }
      executor_->ExecuteInto(msg.plan(), out.mutable_result());
      ++steps_;
      // A failed write means the call is ending: keep reading what the scheduler sent
      // before (a DrainStatus) until Read fails. Finish() after an unread message
      // would wait forever when the status is OK.
      Write(out);
    }
  }
  return absl::OkStatus();
}

}  // namespace weft
