// End to end, real processes: weft-scheduler + weft-worker --backend=null
// (worker/backends/null_backend.h) serve many concurrent streams to completion. Every
// stream gets exactly max_tokens tokens, and they are the null backend's rule applied
// to its prompt — through planning, pipelining (two steps in flight), a KV pool too
// small for all streams at once (queueing, preemption and recompute), the plan codec,
// the worker's state cache and the streaming path. With --null_eos_probability the
// streams that do not ignore EOS end on the end-of-generation token.
#include <algorithm>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "worker/backends/null_backend.h"

namespace weft::e2e {
namespace {

struct Stream {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  bool ignore_eos = false;
  StreamResult result;
};

std::vector<Stream> MakeStreams(int n, int max_out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Stream> streams(n);
  for (Stream& s : streams) {
    const int len = 1 + static_cast<int>(rng() % 100);
    for (int i = 0; i < len; ++i) s.prompt.push_back(300 + static_cast<int32_t>(rng() % 39700));
    s.max_tokens = 1 + static_cast<int>(rng() % max_out);
    s.ignore_eos = rng() % 2 == 0;
  }
  return streams;
}

void RunAll(Cluster& cluster, std::vector<Stream>& streams) {
  std::vector<std::thread> threads;
  for (Stream& s : streams) {
    threads.emplace_back([&cluster, &s] {
      weft::v1::GenerateRequest req;
      req.mutable_token_ids()->mutable_ids()->Add(s.prompt.begin(), s.prompt.end());
      req.mutable_sampling()->set_temperature(0);
      req.mutable_stopping()->set_max_tokens(s.max_tokens);
      req.mutable_stopping()->set_ignore_eos(s.ignore_eos);
      s.result = Generate(cluster.stub(), req, absl::Seconds(120));
    });
  }
  for (auto& t : threads) t.join();
}

// The null backend's tokens for `prompt`, computed with the same rule as the worker's.
std::vector<int32_t> RuleTokens(const NullBackend& rule, const std::vector<int32_t>& prompt,
                                int n) {
  std::vector<int32_t> out;
  int32_t last = prompt.back();
  for (int i = 0; i < n; ++i) {
    last = rule.NextToken(last, static_cast<int32_t>(prompt.size()) - 1 + i);
    out.push_back(last);
  }
  return out;
}

std::unique_ptr<NullBackend> Rule(const std::string& model, double eos_probability) {
  auto file = GgufFile::Open(model);  // read during Create only
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  NullBackendOptions o;
  o.num_kv_blocks = 1;
  o.eos_probability = eos_probability;
  auto b = NullBackend::Create(**file, o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

TEST(NullWorkerE2eTest, ServesManyStreamsToCompletionWithTheRulesTokens) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  auto rule = Rule(model, 0);
  ASSERT_NE(rule, nullptr);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--max_steps_in_flight=2"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null"};
  w.num_kv_blocks = 96;  // 1,536 slots: far fewer than the streams need at once
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  std::vector<Stream> streams = MakeStreams(64, 80, 7);
  RunAll(cluster, streams);
  int64_t total = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i, " (prompt ", streams[i].prompt.size(),
                              ", max_tokens ", streams[i].max_tokens, ")"));
    const Stream& s = streams[i];
    ASSERT_TRUE(s.result.status.ok()) << s.result.status.error_message() << cluster.Logs();
    EXPECT_EQ(s.result.finish_reason, weft::v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(s.result.token_ids, RuleTokens(*rule, s.prompt, s.max_tokens));
    ASSERT_TRUE(s.result.has_usage);
    EXPECT_EQ(s.result.usage.completion_tokens(), s.max_tokens);
    total += s.max_tokens;
  }
  EXPECT_EQ(cluster.Metric("weft_generated_tokens_total"), total);
  // Not asserted (it depends on arrival timing); printed to show what was exercised.
  std::cerr << "preemptions: " << cluster.Metric("weft_preemptions_total")
            << ", steps: " << cluster.Steps() << "\n";
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; },
                      absl::Seconds(30)))
      << cluster.Logs();
  auto wm = cluster.WorkerMetrics("r0");
  ASSERT_TRUE(wm.ok()) << wm.status();
  // Tokens of steps in flight for a sequence that finished or was preempted are
  // sampled and discarded: at least every delivered token was sampled.
  EXPECT_GE(wm->Get("weft_worker_sampled_tokens_total"), total);
  EXPECT_EQ(wm->Get("weft_worker_step_errors_total"), 0);
}

TEST(NullWorkerE2eTest, EndOfGenerationStopsStreamsThatDoNotIgnoreIt) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  auto rule = Rule(model, 0.1);
  ASSERT_NE(rule, nullptr);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null", "--null_eos_probability=0.1"};
  w.num_kv_blocks = 512;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  std::vector<Stream> streams = MakeStreams(16, 1, 11);
  for (Stream& s : streams) s.max_tokens = 150;
  RunAll(cluster, streams);
  int stopped = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i, streams[i].ignore_eos ? " (ignore_eos)" : ""));
    const Stream& s = streams[i];
    ASSERT_TRUE(s.result.status.ok()) << s.result.status.error_message() << cluster.Logs();
    const std::vector<int32_t> all = RuleTokens(*rule, s.prompt, s.max_tokens);
    const auto eos = std::find(all.begin(), all.end(), rule->eog_token_ids()[0]);
    if (s.ignore_eos || eos == all.end()) {
      EXPECT_EQ(s.result.finish_reason, weft::v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(s.result.token_ids, all);
    } else {
      // EOS ends the stream and is not returned nor counted (generate.proto).
      EXPECT_EQ(s.result.finish_reason, weft::v1::FINISH_REASON_STOP);
      EXPECT_EQ(s.result.token_ids, std::vector<int32_t>(all.begin(), eos));
      ASSERT_TRUE(s.result.has_usage);
      EXPECT_EQ(s.result.usage.completion_tokens(), eos - all.begin());
      ++stopped;
    }
  }
  EXPECT_GT(stopped, 0);
}

}  // namespace
}  // namespace weft::e2e
