// End to end, real processes: OpenAI HTTP routed by model through a real load balancer.
// Debian's HAProxy runs deploy/proxy/haproxy.cfg unchanged, its HTTP frontend on
// (WEFT_PROXY_HTTP_BIND), in front of two weft-schedulers with --http_port that serve
// the default model file as "alpha" and "beta", each with its own worker; the test
// writes the "openai:<name>" backends as deploy/proxy/models/smollm2.cfg shows, plus
// "openai:gamma" pointing at alpha's scheduler (a misrouted backend). PyPI's `openai`
// client (openai_client.py phases proxy and proxy_down):
//  * reaches each model's scheduler by the JSON body's "model" alone, as every OpenAI
//    SDK sends it (no header, no path: short prompts, and 100 KB prompts whose chat
//    body puts "model" after the messages, past HAProxy's default 16 KiB buffer), by
//    the x-weft-model header (the client's default_headers, and per call extra_headers)
//    and by path (base_url http://proxy/<model>/v1): every answered call is counted by
//    that scheduler alone;
//  * lists alpha and beta at GET /v1/models (not gamma, whose check fails), and gets
//    each one's own entry at GET /v1/models/<model>;
//  * gets the proxy's own errors in OpenAI's shape: no model 400, header and path that
//    disagree 400, an unknown model 404, a body larger than the proxy's buffer 413,
//    gamma 503 — the proxy's GET /health check (naming the backend's model) takes a
//    scheduler serving another model out;
//  * a stream it leaves through the proxy is cancelled by the scheduler, blocks freed;
//  * beta's scheduler stopped: the check takes beta out, beta's calls are 503 (by path
//    and by body) and beta leaves the model list, while alpha's are answered.
// Skips, saying why, when /usr/sbin/haproxy is missing or the package index cannot be
// reached to make the client's venv.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/openai_python.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kHaproxy[] = "/usr/sbin/haproxy";

class OpenAiProxyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kHaproxy, X_OK) != 0) {
      GTEST_SKIP() << kHaproxy << " not found: install Debian's haproxy (tools/bootstrap.sh)";
    }
    if (!OpenAiPython().skip.empty()) GTEST_SKIP() << OpenAiPython().skip;
    ASSERT_TRUE(OpenAiPython().error.empty()) << OpenAiPython().error;
  }

  // Active servers of a backend as the proxy reports it (-1: no answer).
  double ActiveServers(const std::string& backend) {
    auto m = ScrapeMetrics(admin_port_);
    return m.ok()
               ? m->Get(absl::StrCat("haproxy_backend_active_servers{proxy=\"", backend, "\"}"), -1)
               : -1;
  }
  // A labelled counter of a scheduler (0 before its first increment, -1: no scrape).
  static double Count(const Cluster& c, const std::string& series) {
    auto m = c.Metrics();
    return m.ok() ? m->Get(series, 0) : -1;
  }
  static double OkCalls(const Cluster& c) {
    return Count(c, "weft_requests_status_total{code=\"OK\"}");
  }

  int admin_port_ = 0;
};

TEST_F(OpenAiProxyE2eTest, OpenAiClientsReachTheirModelByHeaderOrPath) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster alpha(model), beta(model);
  for (auto [c, name] : {std::pair<Cluster*, const char*>{&alpha, "alpha"}, {&beta, "beta"}}) {
    ASSERT_TRUE(c->StartScheduler({absl::StrCat("--model_name=", name), "--http_port=0"}).ok())
        << c->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 256;  // the stream left in the middle asks for 3000 tokens
    ASSERT_TRUE(c->StartWorker(w).ok()) << c->Logs();
  }
  ASSERT_TRUE(alpha.WaitReplicas(1).ok()) << alpha.Logs();
  ASSERT_TRUE(beta.WaitReplicas(1).ok()) << beta.Logs();

  // The proxy: the shipped haproxy.cfg plus the models' backends (gRPC and HTTP), and a
  // misrouted HTTP backend.
  const std::string models_cfg = alpha.dir() + "/models.cfg";
  {
    std::ofstream cfg(models_cfg);
    for (const auto& [name, c] :
         {std::pair<std::string, Cluster*>{"alpha", &alpha}, {"beta", &beta}}) {
      cfg << "backend model:" << name << "\n  server scheduler " << c->address() << "\n"
          << "backend openai:" << name
          << " from weft_openai\n  server scheduler 127.0.0.1:" << c->http_port() << "\n";
    }
    cfg << "backend openai:gamma from weft_openai\n  server scheduler 127.0.0.1:"
        << alpha.http_port() << "\n";
  }
  HaproxyPorts ports;
  auto proxy = StartShippedHaproxy(kHaproxy, models_cfg, /*http=*/true,
                                   alpha.dir() + "/haproxy.log", &ports);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int http_port = ports.http;
  admin_port_ = ports.admin;
  auto proxy_log = [&] { return (*proxy)->LogTail(4000); };
  // The HTTP checks: alpha and beta in; gamma out (its scheduler serves alpha: 404).
  ASSERT_TRUE(WaitFor(
      [&] { return ActiveServers("openai:alpha") == 1 && ActiveServers("openai:beta") == 1; },
      absl::Seconds(60)))
      << proxy_log();
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("openai:gamma") == 0; }, absl::Seconds(60)))
      << proxy_log();
  const std::string base_url = absl::StrCat("--base_url=http://127.0.0.1:", http_port);

  const double alpha_ok = OkCalls(alpha), beta_ok = OkCalls(beta);
  RunResult py = RunOpenAiClient(
      {base_url, "--phase=proxy", "--models=alpha,beta", "--misrouted=gamma", "--unknown=zeta"});
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n"
                        << py.log << py.out << "\n"
                        << proxy_log() << alpha.Logs() << beta.Logs();
  const nlohmann::json calls = PrintedJson(py.out, "calls");
  ASSERT_TRUE(calls.is_object()) << py.out;
  // Each answered call was counted by its model's scheduler, and by it alone.
  EXPECT_EQ(OkCalls(alpha) - alpha_ok, calls["alpha"].get<double>());
  EXPECT_EQ(OkCalls(beta) - beta_ok, calls["beta"].get<double>());
  EXPECT_EQ(calls["alpha"], 8);
  EXPECT_EQ(calls["beta"], 8);
  // Routed to beta by the header, refused by beta for the body's "alpha".
  EXPECT_EQ(Count(beta, "weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(Count(alpha, "weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 0);
  // The stream left through the proxy: alpha cancels it and frees its blocks.
  EXPECT_TRUE(WaitFor(
      [&] { return Count(alpha, "weft_requests_finished_total{reason=\"cancelled\"}") == 1; },
      absl::Seconds(60)))
      << alpha.Logs();
  EXPECT_TRUE(WaitFor([&] { return alpha.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used: " << alpha.Metric("weft_kv_blocks_used");

  // Beta's scheduler stops: the HTTP check takes beta out; only beta's calls fail.
  ASSERT_TRUE(beta.scheduler()->Signal(SIGTERM));
  ASSERT_TRUE(beta.scheduler()->Wait(absl::Seconds(60)).has_value()) << beta.Logs();
  ASSERT_TRUE(WaitFor([&] { return ActiveServers("openai:beta") == 0; }, absl::Seconds(60)))
      << proxy_log();
  const double alpha_before = OkCalls(alpha);
  py = RunOpenAiClient({base_url, "--phase=proxy_down", "--models=alpha,beta"});
  ASSERT_EQ(py.code, 0) << "openai_client.py failed:\n" << py.log << py.out << "\n" << proxy_log();
  EXPECT_EQ(OkCalls(alpha) - alpha_before, 3);
  EXPECT_TRUE((*proxy)->Running()) << proxy_log();
}

}  // namespace
}  // namespace weft::e2e
