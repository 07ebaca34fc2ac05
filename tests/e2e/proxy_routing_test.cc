// End to end, real processes: routing by model through a real load balancer
// (RELIABILITY.md row "proxy_routing"). Debian's HAProxy runs deploy/proxy/haproxy.cfg
// unchanged (ports from its environment) in front of two weft-schedulers that serve the
// default model file under two names, "alpha" and "beta", each with its own worker; the
// test writes the two "model:<name>" backends as deploy/proxy/models/smollm2.cfg shows.
//  * calls with x-weft-model reach that model's scheduler (counted in each scheduler's
//    /metrics and named by ListModels through the proxy);
//  * an unknown model is NOT_FOUND, no model at all INVALID_ARGUMENT, both from the
//    proxy with a message saying so; health through the proxy is grpc.health.v1;
//  * the proxy's own grpc.health.v1 checks: beta's worker killed -> beta's scheduler
//    NOT_SERVING -> the proxy takes beta out (its metrics say so) and beta's calls are
//    UNAVAILABLE at once, while alpha serves; the worker back -> beta back in;
//  * beta's scheduler stopped -> only beta's calls fail (UNAVAILABLE), alpha keeps serving.
// Skips, saying why, only when /usr/sbin/haproxy is missing (tools/bootstrap.sh installs it).
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kHaproxy[] = "/usr/sbin/haproxy";

class ProxyRoutingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kHaproxy, X_OK) != 0) {
      GTEST_SKIP() << kHaproxy << " not found: install Debian's haproxy (tools/bootstrap.sh)";
    }
  }

  // A model's call through the proxy: its status (and tokens in *r).
  StreamResult Call(const std::string& model, int max_tokens = 3) {
    grpc::ClientContext ctx;
    if (!model.empty()) ctx.AddMetadata("x-weft-model", model);
    return Generate(stub_.get(), GreedyRequest("The capital of France is", max_tokens),
                    absl::Seconds(60), {}, &ctx);
  }
  std::string Code(const std::string& model) { return CodeName(Call(model).status.error_code()); }
  // Active servers of a model's backend as the proxy reports it (-1: no answer).
  double ActiveServers(const std::string& model) {
    auto m = ScrapeMetrics(admin_port_);
    return m.ok()
               ? m->Get(absl::StrCat("haproxy_backend_active_servers{proxy=\"model:", model, "\"}"),
                        -1)
               : -1;
  }
  // Generate calls the scheduler ended OK (0 before the first; NaN: no scrape).
  static double OkCalls(const Cluster& c) {
    auto m = c.Metrics();
    return m.ok() ? m->Get("weft_requests_status_total{code=\"OK\"}", 0) : std::nan("");
  }

  int proxy_port_ = 0, admin_port_ = 0;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ProxyRoutingE2eTest, CallsReachTheirModelsSchedulerAndOnlyTheStoppedModelFails) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster alpha(model), beta(model);
  for (auto [c, name] : {std::pair<Cluster*, const char*>{&alpha, "alpha"}, {&beta, "beta"}}) {
    ASSERT_TRUE(c->StartScheduler({absl::StrCat("--model_name=", name)}).ok()) << c->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 64;
    ASSERT_TRUE(c->StartWorker(w).ok()) << c->Logs();
  }
  ASSERT_TRUE(alpha.WaitReplicas(1).ok()) << alpha.Logs();
  ASSERT_TRUE(beta.WaitReplicas(1).ok()) << beta.Logs();

  // The proxy: the shipped haproxy.cfg plus one backend per model.
  const std::string models_cfg = alpha.dir() + "/models.cfg";
  std::ofstream(models_cfg) << "backend model:alpha\n  server scheduler " << alpha.address() << "\n"
                            << "backend model:beta\n  server scheduler " << beta.address() << "\n";
  HaproxyPorts ports;
  auto proxy = StartShippedHaproxy(kHaproxy, models_cfg, /*http=*/false,
                                   alpha.dir() + "/haproxy.log", &ports);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  proxy_port_ = ports.grpc;
  admin_port_ = ports.admin;
  auto proxy_log = [&] { return (*proxy)->LogTail(4000); };
  // Both backends up: the proxy's grpc.health.v1 checks passed.
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("alpha") == 1 && ActiveServers("beta") == 1; },
                      absl::Seconds(60)))
      << proxy_log();
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", proxy_port_),
                                 grpc::InsecureChannelCredentials());
  stub_ = weft::v1::Generation::NewStub(channel_);

  // Routing by header: each call lands on its model's scheduler.
  const double alpha_ok = OkCalls(alpha), beta_ok = OkCalls(beta);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Code("alpha"), "OK") << proxy_log();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Code("beta"), "OK") << proxy_log();
  EXPECT_EQ(OkCalls(alpha) - alpha_ok, 3);
  EXPECT_EQ(OkCalls(beta) - beta_ok, 2);
  for (const char* name : {"alpha", "beta"}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-weft-model", name);
    weft::v1::ListModelsResponse resp;
    ASSERT_TRUE(stub_->ListModels(&ctx, {}, &resp).ok());
    ASSERT_EQ(resp.models_size(), 1);
    EXPECT_EQ(resp.models(0).name(), name);
  }
  // Health through the proxy, by model.
  {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-weft-model", "beta");
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("beta");
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  // The proxy's own answers, as gRPC statuses with messages.
  StreamResult unknown = Call("gamma");
  EXPECT_EQ(CodeName(unknown.status.error_code()), "NOT_FOUND");
  EXPECT_TRUE(absl::StrContains(unknown.status.error_message(), "x-weft-model"))
      << unknown.status.error_message();
  StreamResult none = Call("");
  EXPECT_EQ(CodeName(none.status.error_code()), "INVALID_ARGUMENT");
  EXPECT_TRUE(absl::StrContains(none.status.error_message(), "x-weft-model"))
      << none.status.error_message();

  // Beta's worker dies: its scheduler says NOT_SERVING, the proxy's check takes beta out.
  ASSERT_TRUE(beta.worker("r0")->Signal(SIGKILL));
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("beta") == 0; }, absl::Seconds(60)))
      << proxy_log();
  StreamResult out = Call("beta");
  EXPECT_EQ(CodeName(out.status.error_code()), "UNAVAILABLE");
  EXPECT_TRUE(absl::StrContains(out.status.error_message(), "no healthy weft-scheduler"))
      << out.status.error_message();
  EXPECT_EQ(Code("alpha"), "OK");
  EXPECT_NE(proxy_log().find("not SERVING"), std::string::npos) << proxy_log();
  // It comes back: beta back in.
  WorkerSpec w;
  w.num_kv_blocks = 64;
  ASSERT_TRUE(beta.StartWorker(w).ok()) << beta.Logs();
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("beta") == 1; }, absl::Seconds(60)))
      << proxy_log();
  EXPECT_EQ(Code("beta"), "OK");

  // Beta's scheduler stops: only beta's calls fail, alpha serves on.
  ASSERT_TRUE(beta.scheduler()->Signal(SIGTERM));
  ASSERT_TRUE(beta.scheduler()->Wait(absl::Seconds(60)).has_value()) << beta.Logs();
  EXPECT_EQ(beta.scheduler()->exit_code(), 0);
  EXPECT_EQ(Code("beta"), "UNAVAILABLE");  // before the check notices, too
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("beta") == 0; }, absl::Seconds(60)))
      << proxy_log();
  const double alpha_before = OkCalls(alpha);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Code("beta"), "UNAVAILABLE");
    EXPECT_EQ(Code("alpha"), "OK");
  }
  EXPECT_EQ(OkCalls(alpha) - alpha_before, 3);
  EXPECT_TRUE((*proxy)->Running()) << proxy_log();
}

}  // namespace
}  // namespace weft::e2e
