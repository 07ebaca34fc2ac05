// End to end, real processes: the attach port under a hostile worker (RELIABILITY.md,
// "Hostile input at the edge": absurd capacity, odd names, plaintext off loopback).
//  * a weft-worker (null backend: it allocates no KV) announcing 2^31-1 KV blocks is
//    refused with the flag's name; the scheduler's memory does not grow by what it
//    announced (before: the scheduler sized its block pool from the hello, gigabytes);
//  * a worker whose replica name is no label-safe name is refused;
//  * a normal worker attaches right after and a request is served;
//  * a plaintext attach port on a non-loopback --host refuses to start (exit 2) unless
//    --allow_insecure_attach.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {


TEST(HostileAttachE2eTest, AbsurdCapacityAndOddNamesAreRefusedThenANormalWorkerServes) {
  const std::string model = testing::FindModelFile();
  if (model.empty()) GTEST_SKIP() << "no model file (tools/bootstrap.sh)";
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  const int64_t rss_before = RssKib(cluster.scheduler()->pid());
  ASSERT_GT(rss_before, 0);

  WorkerSpec huge;
  huge.replica = "huge";
  huge.num_kv_blocks = 2147483647;
  huge.extra_flags = {"--backend=null"};
  ASSERT_TRUE(cluster.StartWorker(huge).ok()) << cluster.Logs();
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_workers_rejected_total") >= 1; },
                      absl::Seconds(60)))
      << cluster.Logs();
  const absl::Duration refuse = absl::Now() - t0;
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(ReadFile(cluster.scheduler()->log_path()), "--max_worker_kv_blocks");
      },
      absl::Seconds(10)))
      << cluster.Logs();
  const int64_t rss_after = RssKib(cluster.scheduler()->pid());
  EXPECT_TRUE(cluster.scheduler()->Running()) << cluster.Logs();
  // 2^31-1 blocks would be ~90 GiB of bookkeeping; nothing near even 1 GiB is allowed.
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << rss_before << " -> " << rss_after << " KiB";
  std::cout << "RELIABILITY hello 2^31-1 KV blocks: refused in " << absl::FormatDuration(refuse)
            << " (after the worker's model load), scheduler RSS " << rss_before << " -> "
            << rss_after << " KiB" << std::endl;

  WorkerSpec odd;
  odd.replica = "r0{x=\"1\"}";
  odd.extra_flags = {"--backend=null"};
  ASSERT_TRUE(cluster.StartWorker(odd).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_workers_rejected_total") >= 2; },
                      absl::Seconds(60)))
      << cluster.Logs();
  EXPECT_EQ(cluster.Metric("weft_replicas"), 0);
  EXPECT_EQ(cluster.Metric("weft_kv_blocks_capacity"), 0);

  // A normal worker right after: admitted, serves.
  WorkerSpec normal;
  normal.replica = "r0";
  ASSERT_TRUE(cluster.StartWorker(normal).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  StreamResult r = Generate(cluster.stub(), GreedyRequest("The capital of France is", 4));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message() << cluster.Logs();
  EXPECT_EQ(r.token_ids.size(), 4u);
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  // Label sets: only the admitted replica's name; no rejected name made a series.
  EXPECT_FALSE(absl::StrContains(m->text(), "huge")) << m->text();
  EXPECT_FALSE(absl::StrContains(m->text(), "r0{x")) << m->text();
}

TEST(HostileAttachE2eTest, PlaintextAttachOffLoopbackRefusesToStart) {
  const std::string model = testing::FindModelFile();
  if (model.empty()) GTEST_SKIP() << "no model file (tools/bootstrap.sh)";
  const std::string dir = MakeTempDir("insecure-attach");
  std::vector<std::string> argv = {Runfile("scheduler/service/weft-scheduler"),
                                   "--model=" + model,
                                   "--host=0.0.0.0",
                                   "--port=0",
                                   "--worker_port=0",
                                   "--metrics_port=-1"};
  RunResult refused = RunToEnd(argv, absl::Seconds(60));
  EXPECT_EQ(refused.code, 2) << refused.log;
  EXPECT_TRUE(absl::StrContains(refused.log, "--allow_insecure_attach")) << refused.log;
  // With the flag it starts (and writes its ports file).
  argv.push_back("--allow_insecure_attach");
  argv.push_back("--ports_file=" + dir + "/ports.json");
  auto p = ChildProcess::Start(argv, dir + "/scheduler.log");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(WaitFor([&] { return ::access((dir + "/ports.json").c_str(), R_OK) == 0; },
                      absl::Seconds(60)))
      << (*p)->LogTail();
  EXPECT_TRUE((*p)->Running());
}

// The public gRPC port's limits are explicit (--grpc_max_metadata_bytes): request
// metadata over it is refused by the transport, and a normal call is served right after.
TEST(HostileAttachE2eTest, OversizedMetadataIsRefusedOnThePublicPort) {
  const std::string model = testing::FindModelFile();
  if (model.empty()) GTEST_SKIP() << "no model file (tools/bootstrap.sh)";
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--grpc_max_metadata_bytes=8192"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.extra_flags = {"--backend=null"};
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  const int64_t rss_before = RssKib(cluster.scheduler()->pid());
  const absl::Time t0 = absl::Now();
  grpc::ClientContext big;
  big.AddMetadata("x-padding", std::string(64 << 10, 'a'));
  StreamResult refused =
      Generate(cluster.stub(), GreedyRequest("The capital of France is", 4), absl::Seconds(30), {}, &big);
  const absl::Duration refuse = absl::Now() - t0;
  EXPECT_FALSE(refused.status.ok());
  EXPECT_TRUE(refused.token_ids.empty());
  // The transport closed that connection; a client's next connection is served.
  auto stub = weft::v1::Generation::NewStub(cluster.NewChannel());
  StreamResult ok = Generate(stub.get(), GreedyRequest("The capital of France is", 4));
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message() << cluster.Logs();
  EXPECT_EQ(ok.token_ids.size(), 4u);
  std::cout << "RELIABILITY 64 KiB metadata on the public gRPC port: "
            << CodeName(refused.status.error_code()) << " in " << absl::FormatDuration(refuse)
            << ", scheduler RSS " << rss_before << " -> " << RssKib(cluster.scheduler()->pid())
            << " KiB" << std::endl;
}

}  // namespace
}  // namespace weft::e2e
