// End to end, real processes: TLS, client certificates, bearer tokens and mutual TLS
// between scheduler and workers (RELIABILITY.md rows "authn" and "stray_worker"), with a
// CA and certificates made by openssl at test time (common/testing/make_test_certs.sh).
//
// One scheduler for the suite: public port TLS (server.crt) with --auth_tokens_file, the
// attach port mutual TLS with the same CA; one worker r0 with a certificate from that CA.
//  * plaintext and a client trusting another CA are refused at the handshake; a call
//    without a token or with a wrong one is UNAUTHENTICATED; none of them reaches the
//    core (no prompt token admitted, no step run);
//  * the tokens file is re-read when it changes: a token added is accepted, one removed
//    refused, without a restart;
//  * stray workers (no certificate; a certificate from another CA) that claim r0's name
//    and rank cannot attach: the serving replica is untouched (its stream goes on to the
//    end, no fence, no re-attach, nothing rejected because nothing got through);
//  * Debian's Python grpcio, through the vendorable client, works over TLS with a token;
//    server reflection lists grpc.health.v1.Health;
//  * with --tls_client_ca a client needs a certificate from that CA.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "common/testing/test_certs.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kToken[] = "tok-alpha-1234";
constexpr char kPrompt[] = "The capital of France is";

class EdgeAuthE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(testing::FindModelFile());
    if (model_->empty()) return;
    auto certs = testing::MakeTestCerts();
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new std::string(*certs);
    WriteTokens({kToken});
    cluster_ = new Cluster(*model_);
    ClientTlsFiles tls;
    tls.ca = Cert("ca.crt");
    cluster_->SetClientTls(tls);
    ASSERT_TRUE(cluster_
                    ->StartScheduler({
                        "--tls_cert=" + Cert("server.crt"),
                        "--tls_key=" + Cert("server.key"),
                        "--auth_tokens_file=" + TokensPath(),
                        "--worker_tls_cert=" + Cert("server.crt"),
                        "--worker_tls_key=" + Cert("server.key"),
                        "--worker_tls_ca=" + Cert("ca.crt"),
                    })
                    .ok())
        << cluster_->Logs();
    WorkerSpec w;
    w.num_kv_blocks = 96;
    w.threads = 2;
    w.extra_flags = WorkerTls("client");
    ASSERT_TRUE(cluster_->StartWorker(w).ok()) << cluster_->Logs();
    ASSERT_TRUE(cluster_->WaitReplicas(1).ok()) << cluster_->Logs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete model_;
    delete certs_;
  }
  void SetUp() override {
    if (model_->empty()) {
      GTEST_SKIP() << "default model not found (run tools/bootstrap.sh, or set WEFT_MODEL_DIR)";
    }
    ASSERT_NE(cluster_, nullptr);
  }

  static std::string Cert(const std::string& name) { return *certs_ + "/" + name; }
  static std::string TokensPath() { return *certs_ + "/tokens"; }
  // Replaces the tokens file whole (write + rename), as the scheduler's docs ask.
  static void WriteTokens(const std::vector<std::string>& tokens) {
    {
      std::ofstream out(TokensPath() + ".tmp");
      out << "# API tokens\n" << absl::StrJoin(tokens, "\n") << "\n";
    }
    ASSERT_EQ(std::rename((TokensPath() + ".tmp").c_str(), TokensPath().c_str()), 0);
  }
  static std::vector<std::string> WorkerTls(const std::string& who) {
    return {"--worker_tls_cert=" + Cert(who + ".crt"), "--worker_tls_key=" + Cert(who + ".key"),
            "--worker_tls_ca=" + Cert("ca.crt")};
  }
  // A stub on a channel of its own with `tls`.
  static std::unique_ptr<weft::v1::Generation::Stub> StubWith(const ClientTlsFiles& tls) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto creds = MakeChannelCredentials(tls, &args);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return weft::v1::Generation::NewStub(
        grpc::CreateCustomChannel(cluster_->address(), *creds, args));
  }
  // One short greedy call with `authorization` ("" = none).
  static StreamResult Call(weft::v1::Generation::Stub* stub, const std::string& authorization,
                           int max_tokens = 4) {
    grpc::ClientContext ctx;
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    return Generate(stub, GreedyRequest(kPrompt, max_tokens), absl::Seconds(60), {}, &ctx);
  }
  static std::string Bearer(const std::string& token) { return "Bearer " + token; }

  static inline std::string* model_ = nullptr;
  static inline std::string* certs_ = nullptr;
  static inline Cluster* cluster_ = nullptr;
};

TEST_F(EdgeAuthE2eTest, PlaintextWrongCaAndMissingTokensAreRefusedBeforeAnyWork) {
  auto before = cluster_->Metrics();
  ASSERT_TRUE(before.ok()) << before.status();
  ClientTlsFiles plaintext;
  ClientTlsFiles other_ca;
  other_ca.ca = Cert("other-ca.crt");
  for (const ClientTlsFiles* tls : {&plaintext, &other_ca}) {
    StreamResult r = Call(StubWith(*tls).get(), Bearer(kToken));
    EXPECT_EQ(CodeName(r.status.error_code()), "UNAVAILABLE") << r.status.error_message();
  }
  ClientTlsFiles good;
  good.ca = Cert("ca.crt");
  auto stub = StubWith(good);
  for (const std::string& auth :
       {std::string(), Bearer("tok-wrong"), std::string(kToken), std::string("Basic ") + kToken}) {
    StreamResult r = Call(stub.get(), auth);
    EXPECT_EQ(CodeName(r.status.error_code()), "UNAUTHENTICATED") << "'" << auth << "'";
    EXPECT_FALSE(absl::StrContains(r.status.error_message(), kToken)) << r.status.error_message();
    EXPECT_EQ(r.num_messages, 0);
  }
  auto after = cluster_->Metrics();
  ASSERT_TRUE(after.ok()) << after.status();
  // Nothing reached the core: no prompt token, no step.
  EXPECT_EQ(after->Get("weft_prompt_tokens_total"), before->Get("weft_prompt_tokens_total"));
  EXPECT_EQ(after->Sum("weft_steps_total"), before->Sum("weft_steps_total"));
  EXPECT_EQ(after->Get("weft_requests_status_total{code=\"UNAUTHENTICATED\"}") -
                before->Get("weft_requests_status_total{code=\"UNAUTHENTICATED\"}"),
            4);
  // With the token the same stub works; health stays open (probes carry no token).
  StreamResult ok = Call(stub.get(), Bearer(kToken));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.token_ids.size(), 4u);
  EXPECT_EQ(cluster_->Health(), "SERVING");
}

TEST_F(EdgeAuthE2eTest, TheTokensFileIsReloadedWithoutARestart) {
  ClientTlsFiles tls;
  tls.ca = Cert("ca.crt");
  auto stub = StubWith(tls);
  const std::string beta = "tok-beta-5678";
  EXPECT_EQ(CodeName(Call(stub.get(), Bearer(beta), 1).status.error_code()), "UNAUTHENTICATED");
  WriteTokens({kToken, beta});
  // Re-read within about a second of the change (hang guard 30 s).
  EXPECT_TRUE(WaitFor([&] { return Call(stub.get(), Bearer(beta), 1).status.ok(); },
                      absl::Seconds(30), absl::Milliseconds(200)))
      << cluster_->Logs();
  WriteTokens({beta});
  EXPECT_TRUE(WaitFor(
      [&] {
        return Call(stub.get(), Bearer(kToken), 1).status.error_code() ==
               grpc::StatusCode::UNAUTHENTICATED;
      },
      absl::Seconds(30), absl::Milliseconds(200)));
  EXPECT_TRUE(Call(stub.get(), Bearer(beta), 1).status.ok());
  EXPECT_NE(ReadFile(cluster_->scheduler()->log_path()).find("auth tokens: reloaded"),
            std::string::npos);
  // Back as the other tests expect.
  WriteTokens({kToken});
  EXPECT_TRUE(WaitFor([&] { return Call(stub.get(), Bearer(kToken), 1).status.ok(); },
                      absl::Seconds(30), absl::Milliseconds(200)));
}

TEST_F(EdgeAuthE2eTest, StrayWorkersCannotAttachAndTheReplicaIsUntouched) {
  auto before = cluster_->Metrics();
  ASSERT_TRUE(before.ok()) << before.status();
  auto r0_before = cluster_->WorkerMetrics("r0");
  ASSERT_TRUE(r0_before.ok()) << r0_before.status();
  // A stream on r0 that runs while the strays try.
  weft::v1::GenerateRequest req = GreedyRequest(kPrompt, 48);
  ClientTlsFiles tls;
  tls.ca = Cert("ca.crt");
  auto stub = StubWith(tls);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", Bearer(kToken));
  StreamResult streamed;
  std::atomic<int> tokens{0};
  std::thread reader([&] {
    streamed = Generate(
        stub.get(), req, absl::Seconds(120),
        [&](const weft::v1::GenerateResponse& r) {
          tokens += r.token_ids_size();
          return true;
        },
        &ctx);
  });
  ASSERT_TRUE(WaitFor([&] { return tokens.load() >= 2; }, absl::Seconds(60)));

  // Two strays claim r0's name and rank: one without TLS, one with a certificate from
  // another CA. They load the model, then dial and fail, and retry.
  struct Stray {
    std::string name;
    std::vector<std::string> flags;
    std::unique_ptr<ChildProcess> process;
  };
  std::vector<Stray> strays(2);
  strays[0].name = "plaintext";
  strays[1].name = "other-ca";
  strays[1].flags = WorkerTls("stray");
  for (Stray& s : strays) {
    std::vector<std::string> argv = {
        Runfile("worker/service/weft-worker"),
        absl::StrCat("--scheduler=127.0.0.1:", cluster_->worker_port()),
        "--model=" + *model_,
        "--replica=r0",
        "--rank=0",
        "--world_size=1",
        "--num_kv_blocks=96",
        "--threads=1"};
    argv.insert(argv.end(), s.flags.begin(), s.flags.end());
    auto p = ChildProcess::Start(argv, absl::StrCat(cluster_->dir(), "/stray-", s.name, ".log"));
    ASSERT_TRUE(p.ok()) << p.status();
    s.process = std::move(*p);
  }
  for (Stray& s : strays) {
    // Its first attach attempt has failed (the log says so), and it is still trying.
    EXPECT_TRUE(WaitFor(
        [&] { return absl::StrContains(ReadFile(s.process->log_path()), "attach to 127.0.0.1"); },
        absl::Seconds(120)))
        << s.name << ":\n"
        << s.process->LogTail();
    EXPECT_TRUE(s.process->Running()) << s.name << ":\n" << s.process->LogTail();
    EXPECT_FALSE(absl::StrContains(ReadFile(s.process->log_path()), "attached to"))
        << s.name << ":\n"
        << s.process->LogTail();
  }
  reader.join();
  EXPECT_TRUE(streamed.status.ok()) << streamed.status.error_message() << "\n" << cluster_->Logs();
  EXPECT_EQ(streamed.token_ids.size(), 48u);
  auto after = cluster_->Metrics();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->Get("weft_replicas"), 1);
  EXPECT_EQ(after->Sum("weft_replicas_fenced_total"), before->Sum("weft_replicas_fenced_total"));
  // Not even a rejection: the handshake refused them before any hello was read.
  EXPECT_EQ(after->Get("weft_workers_rejected_total"), before->Get("weft_workers_rejected_total"));
  EXPECT_EQ(after->Get("weft_worker_ranks_pending"), 0);
  auto r0_after = cluster_->WorkerMetrics("r0");
  ASSERT_TRUE(r0_after.ok()) << r0_after.status();
  EXPECT_EQ(r0_after->Get("weft_worker_attachments_total"),
            r0_before->Get("weft_worker_attachments_total"));
  EXPECT_EQ(r0_after->Get("weft_worker_attached"), 1);
  EXPECT_TRUE(Call(stub.get(), Bearer(kToken)).status.ok());
}

TEST_F(EdgeAuthE2eTest, PythonClientOverTlsWithATokenAndReflection) {
  if (::access(kPython, X_OK) != 0 ||
      RunToEnd({kPython, "-I", "-c", "import grpc, google.protobuf"}, absl::Seconds(60)).code !=
          0) {
    GTEST_SKIP() << kPython << " with python3-grpcio is needed (tools/bootstrap.sh)";
  }
  auto models = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", Bearer(kToken));
    weft::v1::ListModelsResponse resp;
    EXPECT_TRUE(cluster_->stub()->ListModels(&ctx, {}, &resp).ok());
    return resp.models_size() > 0 ? resp.models(0).name() : "";
  };
  const std::string model = models();
  EXPECT_EQ(model, "smollm2-135m-instruct.q4_1");  // the default name: the file's stem
  const std::vector<std::string> common = {kPython,
                                           "-I",
                                           Runfile("tests/e2e/edge_client.py"),
                                           "--client_dir=" + Runfile("clients/python"),
                                           "--server=" + cluster_->address(),
                                           "--ca=" + Cert("ca.crt"),
                                           "--model=" + model};
  std::vector<std::string> call = common;
  call.insert(call.end(), {std::string("--token=") + kToken, "call"});
  RunResult py = RunToEnd(call, absl::Seconds(180));
  ASSERT_EQ(py.code, 0) << py.log << py.out;
  EXPECT_TRUE(absl::StrContains(py.log, "edge_client: ok")) << py.log;
  std::string py_tokens;
  for (absl::string_view line : absl::StrSplit(py.out, '\n')) {
    if (absl::ConsumePrefix(&line, "greedy_tokens: ")) py_tokens = std::string(line);
  }
  StreamResult cc = Call(cluster_->stub(), Bearer(kToken), 6);
  ASSERT_TRUE(cc.status.ok()) << cc.status.error_message();
  EXPECT_EQ(py_tokens, absl::StrJoin(cc.token_ids, " "));

  std::vector<std::string> reflection = common;
  reflection.push_back("reflection");
  RunResult r = RunToEnd(reflection, absl::Seconds(120));
  ASSERT_EQ(r.code, 0) << r.log << r.out;
  EXPECT_TRUE(absl::StrContains(r.log, "grpc.health.v1.Health")) << r.log;
}

// The weft CLI over TLS with a token file, and `weft health` as the Kubernetes TLS
// readiness probe runs it (deploy/k8s/edge/tls): exit 0 only for SERVING.
TEST_F(EdgeAuthE2eTest, TheCliOverTlsWithATokenAndAsTheReadinessProbe) {
  const std::string token_file = *certs_ + "/cli-token";
  std::ofstream(token_file) << kToken << "\n";
  auto weft = [&](std::vector<std::string> args) {
    args.insert(args.begin(), Runfile("tools/cli/weft"));
    args.push_back("--server=" + cluster_->address());
    args.push_back("--tls_ca=" + Cert("ca.crt"));
    return RunToEnd(args, absl::Seconds(120));
  };
  RunResult r =
      weft({"generate", "--prompt=Hello", "--max_tokens=3", "--token_file=" + token_file});
  EXPECT_EQ(r.code, 0) << r.log;
  r = weft({"generate", "--prompt=Hello", "--max_tokens=3"});
  EXPECT_EQ(r.code, 1) << r.log;
  EXPECT_TRUE(absl::StrContains(r.log, "weft: UNAUTHENTICATED: missing bearer token")) << r.log;
  r = weft(
      {"health", "--tls_server_name=weft-test.internal", "--service=smollm2-135m-instruct.q4_1"});
  EXPECT_EQ(r.code, 0) << r.log;
  EXPECT_EQ(r.out, "SERVING\n");
  r = weft({"health", "--tls_server_name=wrong.name.example"});
  EXPECT_EQ(r.code, 1) << r.log;
  EXPECT_TRUE(absl::StrContains(r.log, "weft: UNAVAILABLE")) << r.log;
}

// --tls_client_ca: a client needs a certificate from that CA (a scheduler of its own,
// no worker needed: health answers NOT_SERVING once the handshake is through).
TEST_F(EdgeAuthE2eTest, ClientCertificatesOnThePublicPort) {
  Cluster strict(*model_);
  ASSERT_TRUE(
      strict
          .StartScheduler({"--tls_cert=" + Cert("server.crt"), "--tls_key=" + Cert("server.key"),
                           "--tls_client_ca=" + Cert("ca.crt")})
          .ok())
      << strict.Logs();
  auto health = [&](const std::string& client) {
    ClientTlsFiles tls;
    tls.ca = Cert("ca.crt");
    if (!client.empty()) {
      tls.cert = Cert(client + ".crt");
      tls.key = Cert(client + ".key");
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto creds = MakeChannelCredentials(tls, &args);
    EXPECT_TRUE(creds.ok());
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateCustomChannel(strict.address(), *creds, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, {}, &resp);
    return s.ok() ? grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status())
                  : CodeName(s.error_code());
  };
  EXPECT_EQ(health(""), "UNAVAILABLE");
  EXPECT_EQ(health("stray"), "UNAVAILABLE");
  EXPECT_EQ(health("client"), "NOT_SERVING");
}

}  // namespace
}  // namespace weft::e2e
