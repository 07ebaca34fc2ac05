// End to end, real processes: Prometheus' own checker (`promtool check metrics`, from
// Debian's prometheus package) accepts the /metrics pages of weft-scheduler and
// weft-worker after real traffic (so the labelled families and histograms have series),
// and the pages carry the metrics DESIGN.md names, every scheduler series labelled with
// the served model's name.
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

// Runs `promtool check metrics` on `page`; returns its exit code (-1: it did not run or
// hung) and output.
std::pair<int, std::string> PromtoolCheck(const std::string& page, const std::string& name) {
  const std::string in = absl::StrCat(MakeTempDir("promtool-"), "/", name, ".prom");
  std::ofstream(in) << page;
  RunResult r = RunToEnd(
      {"/bin/sh", "-c", absl::StrCat("exec ", kPromtool, " check metrics < \"$0\""), in},
      absl::Seconds(60));
  return {r.code, r.out + r.log};
}

TEST(MetricsFormatE2eTest, PromtoolAcceptsSchedulerAndWorkerMetrics) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  if (::access(kPromtool, X_OK) != 0) {
    GTEST_SKIP() << kPromtool << " not found: install Debian's prometheus package (tools/bootstrap.sh)";
  }
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--model_name=smol-test"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 64;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  // Traffic: two good requests (histograms, steps, finish reasons) and a bad one (status).
  for (int i = 0; i < 2; ++i) {
    StreamResult r = Generate(cluster.stub(), GreedyRequest(TestPrompts()[5], 6));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  weft::v1::GenerateRequest bad = GreedyRequest("x", 4);
  bad.mutable_sampling()->set_top_p(2);
  EXPECT_EQ(Generate(cluster.stub(), bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  auto sched = cluster.Metrics();
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto worker = cluster.WorkerMetrics("r0");
  ASSERT_TRUE(worker.ok()) << worker.status();

  for (const auto& [name, page] : {std::pair<std::string, const MetricsPage*>{"scheduler", &*sched},
                                   {"worker", &*worker}}) {
    SCOPED_TRACE(name);
    auto [code, out] = PromtoolCheck(page->text(), name);
    EXPECT_EQ(code, 0) << "promtool check metrics:\n" << out << "\n--- page ---\n" << page->text();
  }

  // The series DESIGN.md and RELIABILITY.md rely on are there, with the traffic counted.
  for (const char* series :
       {"weft_kv_blocks_used", "weft_kv_blocks_cached", "weft_kv_blocks_capacity", "weft_replicas",
        "weft_requests_running", "weft_requests_waiting", "weft_preemptions_total",
        "weft_prefix_cache_hit_tokens_total", "weft_time_to_first_token_seconds_count",
        "weft_inter_token_latency_seconds_count", "weft_request_queue_time_seconds_count",
        "weft_e2e_request_latency_seconds_count", "weft_steps_total{replica=\"r0\"}",
        "weft_streams_open", "weft_stream_buffer_max_bytes"}) {
    EXPECT_TRUE(sched->Has(series)) << series;
  }
  // Every scheduler series carries the served model's name (what a prometheus-adapter
  // rule selects a model's autoscaling signals by, deploy/k8s/base/monitoring.yaml).
  int weft_lines = 0;
  for (absl::string_view line : absl::StrSplit(sched->text(), '\n')) {
    if (!absl::StartsWith(line, "weft_")) continue;
    ++weft_lines;
    EXPECT_TRUE(absl::StrContains(line, "model=\"smol-test\"")) << line;
  }
  EXPECT_GT(weft_lines, 20);
  EXPECT_EQ(sched->models(), std::set<std::string>{"smol-test"});
  EXPECT_EQ(sched->Get("weft_requests_status_total{code=\"OK\"}"), 2);
  EXPECT_EQ(sched->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(sched->Get("weft_e2e_request_latency_seconds_count"), 2);
  EXPECT_EQ(sched->Get("weft_generated_tokens_total"), 12);
  EXPECT_GT(sched->Get("weft_prefix_cache_hit_tokens_total"), 0) << "the second request shares the prompt's full blocks";
  EXPECT_EQ(worker->Get("weft_worker_sampled_tokens_total"), 12);
  EXPECT_EQ(worker->Get("weft_worker_attached"), 1);
  EXPECT_EQ(worker->Get("weft_worker_kv_blocks"), 64);
  EXPECT_EQ(worker->Get("weft_worker_device_to_host_bytes_total"), 0);  // the CPU backend
  for (const char* kind : {"decode_graph", "piecewise", "eager"}) {  // no graphs on the CPU
    const std::string series = absl::StrCat("weft_worker_graph_steps_total{kind=\"", kind, "\"}");
    EXPECT_TRUE(worker->Has(series)) << series;
    EXPECT_EQ(worker->Get(series, -1), 0) << series;
  }
}

}  // namespace
}  // namespace weft::e2e
