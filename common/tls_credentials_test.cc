// TLS credentials on loopback, with certificates made by openssl at test time: a call
// that completes its handshake reaches the server (UNIMPLEMENTED: no service is
// registered), one that does not is UNAVAILABLE.
#include "common/tls_credentials.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/test_certs.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace weft {
namespace {

class TlsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = testing::MakeTestCerts();
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  std::string F(const std::string& name) const { return dir_ + "/" + name; }

  void StartServer(const ServerTlsFiles& files) {
    auto creds = MakeServerCredentials(files);
    ASSERT_TRUE(creds.ok()) << creds.status();
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", *creds, &port_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }

  // One call: its status code (UNIMPLEMENTED means it reached the server).
  grpc::StatusCode Call(const ClientTlsFiles& files, std::string* message = nullptr) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto creds = MakeChannelCredentials(files, &args);
    EXPECT_TRUE(creds.ok()) << creds.status();
    if (!creds.ok()) return grpc::StatusCode::UNKNOWN;
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port_), *creds, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
    if (message != nullptr) *message = s.error_message();
    return s.error_code();
  }
  ClientTlsFiles Trusting(const std::string& ca) const {
    ClientTlsFiles c;
    c.ca = F(ca);
    return c;
  }

  std::string dir_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(TlsCredentialsTest, ServerTlsRefusesPlaintextAndTheWrongCa) {
  ServerTlsFiles s;
  s.cert = F("server.crt");
  s.key = F("server.key");
  StartServer(s);
  EXPECT_EQ(Call(Trusting("ca.crt")), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Call(ClientTlsFiles()), grpc::StatusCode::UNAVAILABLE);  // plaintext
  EXPECT_EQ(Call(Trusting("other-ca.crt")), grpc::StatusCode::UNAVAILABLE);
  // The name the certificate must carry.
  ClientTlsFiles named = Trusting("ca.crt");
  named.server_name = "weft-test.internal";
  EXPECT_EQ(Call(named), grpc::StatusCode::UNIMPLEMENTED);
  named.server_name = "not-this-server.example";
  EXPECT_EQ(Call(named), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsCredentialsTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  ServerTlsFiles s;
  s.cert = F("server.crt");
  s.key = F("server.key");
  s.client_ca = F("ca.crt");
  StartServer(s);
  ClientTlsFiles c = Trusting("ca.crt");
  EXPECT_EQ(Call(c), grpc::StatusCode::UNAVAILABLE);  // no client certificate
  c.cert = F("stray.crt");                            // signed by another CA
  c.key = F("stray.key");
  EXPECT_EQ(Call(c), grpc::StatusCode::UNAVAILABLE);
  c.cert = F("client.crt");
  c.key = F("client.key");
  EXPECT_EQ(Call(c), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Call(ClientTlsFiles()), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsCredentialsTest, BadFilesAreRefusedWhenTheCredentialsAreMade) {
  ServerTlsFiles s;
  s.cert = F("server.crt");
  s.key = F("client.key");  // not the certificate's key
  absl::Status st = s.Validate("--tls_*");
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::StrContains(st.message(), "does not belong")) << st;
  EXPECT_FALSE(MakeServerCredentials(s).ok());
  s.key = F("missing.key");
  EXPECT_TRUE(absl::StrContains(s.Validate("x").message(), "cannot read")) << s.Validate("x");
  s.key = "";
  EXPECT_FALSE(s.Validate("x").ok());  // a certificate without its key
  ServerTlsFiles ca_only;
  ca_only.client_ca = F("ca.crt");
  EXPECT_FALSE(ca_only.Validate("x").ok());
  s.key = F("server.key");
  s.client_ca = F("server.key");  // not a certificate
  EXPECT_TRUE(absl::StrContains(s.Validate("x").message(), "no PEM certificate"))
      << s.Validate("x");
  ClientTlsFiles c;
  c.cert = F("client.crt");
  EXPECT_FALSE(c.Validate("x").ok());                // a client certificate without its key
  EXPECT_TRUE(ServerTlsFiles().Validate("x").ok());  // plaintext
  EXPECT_FALSE(ServerTlsFiles().enabled());
  EXPECT_FALSE(ClientTlsFiles().enabled());
}

// cert-manager renews a Secret in place: new handshakes use the new files, no restart.
TEST_F(TlsCredentialsTest, TheServerPicksUpRotatedFiles) {
  const std::string cert = F("live.crt"), key = F("live.key");
  auto copy = [&](const std::string& from, const std::string& to) {
    ASSERT_EQ(std::system(
                  absl::StrCat("cp '", F(from), "' '", to, ".tmp' && mv '", to, ".tmp' '", to, "'")
                      .c_str()),
              0);
  };
  copy("server.crt", cert);
  copy("server.key", key);
  ServerTlsFiles s;
  s.cert = cert;
  s.key = key;
  s.reload_interval = absl::Seconds(1);
  StartServer(s);
  EXPECT_EQ(Call(Trusting("ca.crt")), grpc::StatusCode::UNIMPLEMENTED);
  copy("server2.key", key);  // now signed by other-ca
  copy("server2.crt", cert);
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  const absl::Time end = absl::Now() + absl::Seconds(30);  // hang guard; reload is every 1 s
  while (absl::Now() < end) {
    code = Call(Trusting("other-ca.crt"));
    if (code == grpc::StatusCode::UNIMPLEMENTED) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(code, grpc::StatusCode::UNIMPLEMENTED) << "the new certificate was never served";
  EXPECT_EQ(Call(Trusting("ca.crt")), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace weft
