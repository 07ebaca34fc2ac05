#include "scheduler/service/scheduler_flags.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, model_name);
ABSL_DECLARE_FLAG(std::string, chat_template);
ABSL_DECLARE_FLAG(double, grammar_compile_timeout_s);
ABSL_DECLARE_FLAG(std::string, policy);
ABSL_DECLARE_FLAG(int32_t, max_num_seqs);
ABSL_DECLARE_FLAG(int32_t, max_tokens_cap);
ABSL_DECLARE_FLAG(int32_t, max_steps_in_flight);
ABSL_DECLARE_FLAG(int32_t, http_port);
ABSL_DECLARE_FLAG(double, stall_timeout_s);
ABSL_DECLARE_FLAG(std::string, worker_tls_cert);
ABSL_DECLARE_FLAG(std::string, worker_tls_key);
ABSL_DECLARE_FLAG(std::string, worker_tls_ca);
ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(bool, allow_insecure_attach);
ABSL_DECLARE_FLAG(int32_t, max_worker_kv_blocks);
ABSL_DECLARE_FLAG(int64_t, max_total_kv_blocks);

namespace weft {
namespace {

class SchedulerFlagsTest : public ::testing::Test {
 protected:
  // Every test starts from the defaults, on loopback (a plaintext attach port on the
  // default 0.0.0.0 is refused: PlaintextAttachOffLoopbackNeedsTheFlag).
  SchedulerFlagsTest() { absl::SetFlag(&FLAGS_host, "127.0.0.1"); }
  absl::FlagSaver saver_;
};

TEST_F(SchedulerFlagsTest, PlaintextAttachOffLoopbackNeedsTheFlag) {
  absl::SetFlag(&FLAGS_host, "0.0.0.0");
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--allow_insecure_attach"), std::string::npos);
  absl::SetFlag(&FLAGS_allow_insecure_attach, true);
  EXPECT_TRUE(OptionsFromFlags().ok());
  absl::SetFlag(&FLAGS_allow_insecure_attach, false);
  absl::SetFlag(&FLAGS_worker_tls_cert, "c.pem");  // mutual TLS: fine anywhere
  absl::SetFlag(&FLAGS_worker_tls_key, "k.pem");
  absl::SetFlag(&FLAGS_worker_tls_ca, "ca.pem");
  EXPECT_TRUE(OptionsFromFlags().ok());
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "10.0.0.1", "::", "example.org", "1127.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST_F(SchedulerFlagsTest, WorkerLimitsAreCheckedAndPassedOn) {
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_worker_kv_blocks, 1 << 20);
  EXPECT_EQ(o->max_total_kv_blocks, int64_t{4} << 20);
  EXPECT_EQ(o->max_replicas, 64);
  absl::SetFlag(&FLAGS_max_total_kv_blocks, 10);  // below the per-worker bound
  EXPECT_EQ(OptionsFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_max_worker_kv_blocks, 0);
  absl::SetFlag(&FLAGS_max_total_kv_blocks, 10);
  EXPECT_EQ(OptionsFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerFlagsTest, DefaultsMakeAWorkingConfiguration) {
  absl::SetFlag(&FLAGS_model, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model_name, "smollm2-135m-instruct.q4_1");
  EXPECT_EQ(o->frontend.model_name, o->model_name);
  EXPECT_EQ(o->chat_template_path, "") << "the GGUF's own template";
  EXPECT_EQ(o->engine.core.policy, PolicyKind::kDecodeFirst);
  EXPECT_EQ(o->engine.core.max_steps_in_flight, 1);
  EXPECT_TRUE(o->engine.steps_in_flight_by_backend);  // --max_steps_in_flight=0
  EXPECT_FALSE(o->http);
  EXPECT_FALSE(o->public_tls.enabled());
  ASSERT_TRUE(ApplyModel(49152, 8192, {2}, &*o).ok());
  EXPECT_EQ(o->engine.core.limits.vocab_size, 49152);
  EXPECT_EQ(o->engine.core.limits.max_model_len, 8192);
  EXPECT_EQ(o->engine.core.eos_token_ids, std::vector<int32_t>{2});
}

TEST_F(SchedulerFlagsTest, GrammarCompileTimeoutReachesTheGrammarEngine) {
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->grammar.compile_timeout, absl::Seconds(10));
  absl::SetFlag(&FLAGS_grammar_compile_timeout_s, 60);
  o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->grammar.compile_timeout, absl::Seconds(60));
  absl::SetFlag(&FLAGS_grammar_compile_timeout_s, 0);
  o = OptionsFromFlags();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--grammar_compile_timeout_s"), std::string::npos)
      << o.status();
}

TEST_F(SchedulerFlagsTest, ChatTemplateFileReachesTheModelText) {
  absl::SetFlag(&FLAGS_chat_template, "/etc/weft/gemma.jinja");
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->chat_template_path, "/etc/weft/gemma.jinja");
}

// One set of request limits for the core and the edge, from the flags: --max_tokens_cap
// is the cap, and n is capped at what a replica runs at once.
TEST_F(SchedulerFlagsTest, RequestLimitsAreTheCoresAndNIsCappedByMaxNumSeqs) {
  absl::SetFlag(&FLAGS_max_num_seqs, 4);
  absl::SetFlag(&FLAGS_max_tokens_cap, 100);
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(ApplyModel(1000, 512, {}, &*o).ok());
  const RequestLimits& limits = o->engine.core.limits;
  EXPECT_EQ(limits.max_tokens, 100);
  EXPECT_EQ(limits.max_n, 4);
  // Before, the edge let n = 5 through (its own cap was 16) and the core refused it as
  // "n must be in [1, 16]"; now it is refused once, with the limit that applies.
  RequestSpec spec;
  spec.prompt_token_ids = {1, 2, 3};
  spec.stopping.max_tokens = 8;
  spec.n = 5;
  absl::StatusOr<ValidRequest> v = ValidateRequest(spec, limits);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "n: must be in [1, 4]");
  spec.n = 4;
  EXPECT_TRUE(ValidateRequest(spec, limits).ok());
}

TEST_F(SchedulerFlagsTest, BadFlagsAreInvalidArgumentNamingThem) {
  absl::SetFlag(&FLAGS_policy, "fifo");
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--policy"), std::string::npos) << o.status();
  absl::SetFlag(&FLAGS_policy, "static");
  absl::SetFlag(&FLAGS_worker_tls_cert, "cert.pem");  // without its key and CA
  EXPECT_EQ(OptionsFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_worker_tls_cert, "");
  absl::SetFlag(&FLAGS_model_name, "Not Routable!");
  EXPECT_EQ(OptionsFromFlags().status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_model_name, "");
  absl::SetFlag(&FLAGS_max_steps_in_flight, 9);  // over 8: known once the core validates
  o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(ApplyModel(1000, 512, {}, &*o).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerFlagsTest, HttpApiSharesThePublicSurface) {
  absl::SetFlag(&FLAGS_http_port, 0);
  absl::SetFlag(&FLAGS_stall_timeout_s, 7);
  absl::StatusOr<SchedulerBinaryOptions> o = OptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->http);
  EXPECT_EQ(o->http_server.port, 0);
  EXPECT_EQ(o->http_server.host, o->host);
  EXPECT_EQ(o->http_server.write_timeout, absl::Seconds(7));
  EXPECT_EQ(o->http_server.max_body_bytes, static_cast<size_t>(o->max_message_bytes));
}

}  // namespace
}  // namespace weft
