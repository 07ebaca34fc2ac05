// HealthService over loopback: Check and Watch per service, status changes reaching
// open Watch streams, Shutdown ending them, and the service described by reflection
// (its descriptors are linked: grpc.health.v1 is an ordinary service here).
#include "scheduler/service/health_service.h"

#include <gtest/gtest.h>

#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"

namespace weft {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    health_ =
        std::make_unique<HealthService>(std::vector<std::string>{"weft.v1.Generation", "smollm2"});
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(health_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    health_->Shutdown();
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }
  // "SERVING", "NOT_SERVING" or the error code.
  std::string Check(const std::string& service) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    grpc::Status s = stub_->Check(&ctx, req, &resp);
    if (!s.ok()) return "error " + std::to_string(s.error_code());
    return HealthCheckResponse::ServingStatus_Name(resp.status());
  }

  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
};

TEST_F(HealthServiceTest, EveryKnownServiceFollowsSetServing) {
  for (const char* s : {"", "weft.v1.Generation", "smollm2"}) {
    EXPECT_EQ(Check(s), "NOT_SERVING") << s;
  }
  health_->SetServing(true);
  for (const char* s : {"", "weft.v1.Generation", "smollm2"}) {
    EXPECT_EQ(Check(s), "SERVING") << s;
  }
  EXPECT_EQ(Check("other-model"), "error 5");  // NOT_FOUND
  health_->SetServing(false);
  EXPECT_EQ(Check("smollm2"), "NOT_SERVING");
  health_->SetServing(true);
  health_->Shutdown();
  EXPECT_EQ(Check(""), "NOT_SERVING");
  health_->SetServing(true);  // ignored after Shutdown
  EXPECT_EQ(Check("smollm2"), "NOT_SERVING");
}

TEST_F(HealthServiceTest, WatchSendsEveryChangeAndEndsAtShutdown) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  HealthCheckRequest req;
  req.set_service("smollm2");
  auto reader = stub_->Watch(&ctx, req);
  HealthCheckResponse r;
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health_->SetServing(true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  health_->SetServing(false);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  health_->SetServing(true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  health_->Shutdown();
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&r));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceSaysSoAndCancelsCleanly) {
  grpc::ClientContext ctx;
  HealthCheckRequest req;
  req.set_service("nope");
  auto reader = stub_->Watch(&ctx, req);
  HealthCheckResponse r;
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  ctx.TryCancel();
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server forgets it (OnDone): no watch left behind (a hang guard, not a timing).
  EXPECT_TRUE(health_->WaitForWatchesAtMost(0, absl::Now() + absl::Seconds(30)));
}

TEST_F(HealthServiceTest, ManyWatchersWhileTheStatusFlips) {
  constexpr int kWatchers = 8;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientReader<HealthCheckResponse>>> readers;
  HealthCheckRequest req;
  req.set_service("weft.v1.Generation");
  for (int i = 0; i < kWatchers; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(stub_->Watch(ctxs.back().get(), req));
    HealthCheckResponse r;
    ASSERT_TRUE(readers.back()->Read(&r));
  }
  for (int k = 0; k < 100; ++k) health_->SetServing(k % 2 == 0);
  health_->SetServing(true);
  // Whatever intermediate statuses were coalesced, each watcher ends on SERVING.
  for (auto& reader : readers) {
    HealthCheckResponse r;
    do {
      ASSERT_TRUE(reader->Read(&r));
    } while (r.status() != HealthCheckResponse::SERVING || health_->Status("") != r.status());
  }
  health_->Shutdown();
  for (auto& reader : readers) {
    HealthCheckResponse r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
}

TEST(HealthServiceDescriptorTest, TheHealthServiceIsInTheGeneratedPool) {
  // What reflection reads: the health service's descriptor is linked into the binary.
  const auto* d = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      "grpc.health.v1.Health");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->FindMethodByName("Watch"), nullptr);
}

}  // namespace
}  // namespace weft
