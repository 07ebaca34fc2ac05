// GrpcTarget: drives Weft's weft.v1.Generation/Generate (server streaming) with the
// synchronous gRPC API, one calling thread per in-flight stream. All streams share one
// channel (HTTP/2 multiplexes them over one connection).
// A message carrying k token ids is recorded as k tokens arriving together; the last
// message's usage gives the server's completion_tokens and cached_prompt_tokens.
// Ownership: owns the channel and stub. Thread-safety: Run() is thread-safe.
#ifndef WEFT_TOOLS_BENCH_GRPC_TARGET_H_
#define WEFT_TOOLS_BENCH_GRPC_TARGET_H_

#include <memory>
#include <string>

#include "tools/bench/target.h"
#include "weft/v1/generate.grpc.pb.h"

namespace weft {
namespace bench {

class GrpcTarget : public Target {
 public:
  // `address` is host:port.
  GrpcTarget(std::string label, const std::string& address, const RequestOptions& options);

  void Run(const TraceRequest& request, const RunClock& clock,
           std::atomic<int64_t>* live_tokens, RequestRecord* record) override;

  // The request sent for `request` (exposed for tests).
  weft::v1::GenerateRequest BuildRequest(const TraceRequest& request) const;

 private:
  const RequestOptions options_;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
};

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_GRPC_TARGET_H_
