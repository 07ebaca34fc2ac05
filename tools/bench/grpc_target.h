// GrpcTarget: drives Weft's weft.v1.Generation/Generate (server streaming). Streams are
// multiplexed over a pool of HTTP/2 connections, at most
// RequestOptions::grpc_streams_per_connection (64) each: a call takes the connection with
// the fewest streams and opens another when every one is full. One connection would cap
// the run at the server's streams per connection (weft-scheduler's
// --grpc_max_concurrent_streams, 100 by default): at --concurrency=256 the other 156
// requests waited in the client, and their wait counted as time to first token. All
// connections share one completion queue, polled by one thread of this target that reads
// every stream's messages: a token
// message costs the client no thread hand-off (a blocking reader per stream woke a
// thread per message, which at 1,024 streams took more CPU than the server it measured).
// Run() still blocks its caller until its stream ends (the runner's model), waking it
// once per request.
// A message carrying k token ids is recorded as k tokens arriving together (timed when
// the poller sees it); the last message's usage gives the server's completion_tokens
// and cached_prompt_tokens.
// Ownership: owns the channels, stubs, queue and poller thread. Thread-safety: Run() and
// connections() are thread-safe.
#ifndef WEFT_TOOLS_BENCH_GRPC_TARGET_H_
#define WEFT_TOOLS_BENCH_GRPC_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
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
  // Connections opened so far (each its own channel and TCP connection).
  int32_t connections() const;

 private:
  class Call;
  struct Connection {
    std::unique_ptr<weft::v1::Generation::Stub> stub;
    int32_t streams = 0;  // calls in flight on it
  };
  void Poll();
  // The connection with the fewest streams, a new one when all are full; its count + 1.
  Connection* Acquire();
  void Release(Connection* c);

  const RequestOptions options_;
  const std::string address_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  grpc::CompletionQueue cq_;
  std::thread poller_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_GRPC_TARGET_H_
