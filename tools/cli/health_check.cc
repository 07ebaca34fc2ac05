// `weft health`: grpc.health.v1.Health/Check against the scheduler; prints the status.
#include <chrono>
#include <iostream>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_DECLARE_FLAG(std::string, server);

int Health() {
  auto ch = grpc::CreateChannel(absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) {
    std::cerr << "weft: " << s.error_code() << " " << s.error_message() << "\n";
    return 1;
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}
