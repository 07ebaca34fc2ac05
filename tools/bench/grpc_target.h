// GrpcTarget: drives Weft's weft.v1.Generation/Generate (server streaming). All streams
// share one channel (HTTP/2 multiplexes them over one connection) and one completion
// queue, polled by one thread of this target that reads every stream's messages: a token
// message costs the client no thread hand-off (a blocking reader per stream woke a
// thread per message, which at 1,024 streams took more CPU than the server it measured).
// Run() still blocks its caller until its stream ends (the runner's model), waking it
// once per request.
// A message carrying k token ids is recorded as k tokens arriving together (timed when
// the poller sees it); the last message's usage gives the server's completion_tokens
// and cached_prompt_tokens.
// Ownership: owns the channel, stub, queue and poller thread. Thread-safety: Run() is
// thread-safe.
#ifndef WEFT_TOOLS_BENCH_GRPC_TARGET_H_
#define WEFT_TOOLS_BENCH_GRPC_TARGET_H_

#include <memory>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "tools/bench/target.h"
#include "weft/v1/generate.grpc.pb.h"

namespace weft {
namespace bench {

class GrpcTarget : public Target {
 public:
  // `address` is host:port.
  GrpcTarget(std::string label, const std::string& address, const RequestOptions& options);
  // Waits for no call (Run has returned for every call) and stops the poller.
  ~GrpcTarget() override;

  void Run(const TraceRequest& request, const RunClock& clock,
           std::atomic<int64_t>* live_tokens, RequestRecord* record) override;

  // The request sent for `request` (exposed for tests).
  weft::v1::GenerateRequest BuildRequest(const TraceRequest& request) const;

 private:
  class Call;
  void Poll();

  const RequestOptions options_;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
  grpc::CompletionQueue cq_;
  std::thread poller_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_GRPC_TARGET_H_
