#include "tools/bench/grpc_target.h"

#include <chrono>

#include "grpcpp/grpcpp.h"

namespace weft {
namespace bench {
namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

GrpcTarget::GrpcTarget(std::string label, const std::string& address,
                       const RequestOptions& options)
    : Target(std::move(label)), options_(options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  stub_ = weft::v1::Generation::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

weft::v1::GenerateRequest GrpcTarget::BuildRequest(const TraceRequest& request) const {
  weft::v1::GenerateRequest req;
  req.set_model(options_.model);
  req.mutable_token_ids()->mutable_ids()->Assign(request.prompt.begin(), request.prompt.end());
  req.mutable_sampling()->set_temperature(static_cast<float>(options_.temperature));
  req.mutable_stopping()->set_max_tokens(request.max_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

void GrpcTarget::Run(const TraceRequest& request, const RunClock& clock,
                     std::atomic<int64_t>* live_tokens, RequestRecord* record) {
  const weft::v1::GenerateRequest req = BuildRequest(request);
  record->arrivals.reserve(static_cast<size_t>(request.max_tokens) + 1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(options_.timeout_s * 1e6)));
  weft::v1::GenerateResponse resp;

  record->send_ns = clock.NowNs();
  std::unique_ptr<grpc::ClientReader<weft::v1::GenerateResponse>> reader =
      stub_->Generate(&ctx, req);
  while (reader->Read(&resp)) {
    const int64_t t = clock.NowNs();
    const int32_t k = resp.token_ids_size();
    if (k > 0) {
      record->AddTokens(t, k);
      if (live_tokens != nullptr) live_tokens->fetch_add(k, std::memory_order_relaxed);
    }
    if (resp.has_usage()) {
      record->server_output_tokens = resp.usage().completion_tokens();
      record->cached_prompt_tokens = resp.usage().cached_prompt_tokens();
    }
  }
  record->status = ToAbsl(reader->Finish());
  record->end_ns = clock.NowNs();
}

}  // namespace bench
}  // namespace weft
