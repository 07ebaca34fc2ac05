// End to end, real processes: the scheduler admits a tensor-parallel replica only when
// all its ranks agree with it and with each other.
//  * A rank whose model file has another fingerprint (a copy of the GGUF with one byte of
//    the general.name metadata value changed: it loads, but its header hashes
//    differently) is refused: it logs the scheduler's reason and exits; its peer is not
//    admitted alone (no replica, health NOT_SERVING, a request is UNAVAILABLE) and waits
//    (pending) until a correct rank joins, and then the replica serves.
//  * A rank that says world size 3 (so shard layout "tp=3;...") while its peer says 2 is
//    refused in the same way, whichever of them attaches first, and it never disturbs
//    an admitted replica of that name (no fence, its streams finish).
// Small pools and a few tokens: these tests are about admission, not generation.
#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

const char kReplica[] = "tp";

WorkerSpec Rank(int rank, int world_size = 2) {
  WorkerSpec w;
  w.replica = kReplica;
  w.rank = rank;
  w.world_size = world_size;
  w.num_kv_blocks = 32;
  w.threads = 1;
  return w;
}

// Copies the GGUF to `dir` with one byte of the general.name value changed; "" on error.
std::string CopyWithOtherName(const std::string& model, const std::string& dir) {
  std::string bytes = ReadFile(model);
  // GGUF metadata: key (u64 length + bytes), u32 type (8 = string), u64 length, value.
  const std::string key = "general.name";
  const size_t at = bytes.find(key);
  if (bytes.empty() || at == std::string::npos || at + key.size() + 13 > bytes.size()) return "";
  const size_t value = at + key.size() + 4 + 8;
  bytes[value] = bytes[value] == 'X' ? 'Y' : 'X';
  const std::string path = dir + "/other-name.gguf";
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good() ? path : "";
}

// A short greedy request: its status code.
std::string Try(Cluster& cluster) {
  StreamResult r = Generate(cluster.stub(), GreedyRequest("The capital of France is", 4), absl::Seconds(30));
  return CodeName(r.status.error_code());
}

// The refused worker exits (a Reject is final), having logged the scheduler's reason.
void ExpectRefused(ChildProcess* w, const std::string& reason_part) {
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->Wait(absl::Seconds(30)).has_value()) << "still running:\n" << w->LogTail();
  EXPECT_EQ(w->exit_code(), 1);
  const std::string log = ReadFile(w->log_path());
  EXPECT_NE(log.find("scheduler rejected this worker"), std::string::npos) << w->LogTail();
  EXPECT_NE(log.find(reason_part), std::string::npos) << w->LogTail();
}

// Nothing of replica `kReplica` is admitted: no replica at all here, health says so, a
// request is UNAVAILABLE, and `pending` ranks wait.
void ExpectNotAdmitted(Cluster& cluster, int pending) {
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->Get("weft_replicas", -1), 0);
  EXPECT_FALSE(m->Has(absl::StrCat("weft_steps_total{replica=\"", kReplica, "\"}")));
  EXPECT_EQ(m->Get("weft_worker_ranks_pending", -1), pending);
  EXPECT_EQ(cluster.Health(), "NOT_SERVING");
  EXPECT_EQ(Try(cluster), "UNAVAILABLE");
}

// Waits until the scheduler has counted `n` rejections.
bool WaitRejected(Cluster& cluster, double n) {
  return WaitFor([&] { return cluster.Metric("weft_workers_rejected_total") == n; }, absl::Seconds(30));
}

void ExpectAdmittedAndServing(Cluster& cluster) {
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  EXPECT_EQ(cluster.Metric("weft_worker_ranks_pending"), 0);
  EXPECT_EQ(cluster.Metric("weft_kv_blocks_capacity"), 32);
  EXPECT_EQ(Try(cluster), "OK") << cluster.Logs();
  for (int r = 0; r < 2; ++r) {
    auto m = cluster.WorkerMetrics(kReplica, r);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->Get("weft_worker_attached"), 1) << "rank " << r;
    EXPECT_GT(m->Get("weft_worker_sampled_tokens_total"), 0) << "rank " << r;
  }
}

TEST(TpAdmissionE2eTest, RankWithAnotherModelFingerprintIsRefused) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  const std::string other = CopyWithOtherName(model, cluster.dir());
  ASSERT_FALSE(other.empty()) << "cannot make the modified copy";
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();

  ASSERT_TRUE(cluster.StartWorker(Rank(0)).ok()) << cluster.Logs();
  WorkerSpec bad = Rank(1);
  bad.model_path = other;
  ASSERT_TRUE(cluster.StartWorker(bad).ok()) << cluster.Logs();  // it loads
  ExpectRefused(cluster.worker(kReplica, 1), "model fingerprint");
  ASSERT_TRUE(WaitRejected(cluster, 1)) << cluster.Logs();
  ExpectNotAdmitted(cluster, /*pending=*/1);
  EXPECT_TRUE(cluster.worker(kReplica, 0)->Running());

  ASSERT_TRUE(cluster.StartWorker(Rank(1)).ok()) << cluster.Logs();
  ExpectAdmittedAndServing(cluster);
  EXPECT_EQ(cluster.Metric("weft_workers_rejected_total"), 1);
}

// The stray rank says it is rank 2 of 3 (shard layout "tp=3;rank=2;..."); the replica's
// ranks say 0 and 1 of 2.
TEST(TpAdmissionE2eTest, RankWithAnotherWorldSizeIsRefused) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();

  ASSERT_TRUE(cluster.StartWorker(Rank(0)).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_worker_ranks_pending") == 1; }, absl::Seconds(30)));
  ASSERT_TRUE(cluster.StartWorker(Rank(2, /*world_size=*/3)).ok()) << cluster.Logs();
  // Whether it waits (it may complete a group of 3) or is refused at once, nothing is
  // admitted with it and rank 0 is not admitted alone.
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_worker_ranks_pending") +
                                       cluster.Metric("weft_workers_rejected_total") == 2; },
                      absl::Seconds(30)))
      << cluster.Logs();
  ExpectNotAdmitted(cluster, /*pending=*/static_cast<int>(cluster.Metric("weft_worker_ranks_pending")));

  // Rank 1 of 2 completes the replica; the stray is refused.
  ASSERT_TRUE(cluster.StartWorker(Rank(1)).ok()) << cluster.Logs();
  ExpectAdmittedAndServing(cluster);
  ExpectRefused(cluster.worker(kReplica, 2), "world size");
  EXPECT_EQ(cluster.Metric("weft_workers_rejected_total"), 1);
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Sum("weft_replicas_fenced_total"), 0);
}

// The stray attaches first: the right ranks are still admitted (a stray never decides
// the shape of a replica), and the stray is refused.
TEST(TpAdmissionE2eTest, StrayRankFirstDoesNotBlockTheReplica) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();

  ASSERT_TRUE(cluster.StartWorker(Rank(2, /*world_size=*/3)).ok()) << cluster.Logs();
  ASSERT_TRUE(WaitFor([&] { return cluster.Metric("weft_worker_ranks_pending") == 1; }, absl::Seconds(30)))
      << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Rank(0)).ok()) << cluster.Logs();  // ranks 0 and 1 of 2
  ExpectAdmittedAndServing(cluster);
  ExpectRefused(cluster.worker(kReplica, 2), "world size");
  EXPECT_EQ(cluster.Metric("weft_workers_rejected_total"), 1);
  EXPECT_TRUE(cluster.worker(kReplica, 0)->Running());
  EXPECT_TRUE(cluster.worker(kReplica, 1)->Running());
}

// The stray attaches while the replica runs a stream: it is refused, and the replica is
// neither fenced nor displaced (only a rank of the same shape replaces a running one).
TEST(TpAdmissionE2eTest, StrayRankDoesNotDisturbAnAdmittedReplica) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartReplica(Rank(0)).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  BackgroundStream stream(cluster.stub(), GreedyRequest("Once upon a time, in a small village by the sea,", 48));
  ASSERT_TRUE(stream.WaitTokens(2)) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorker(Rank(2, /*world_size=*/3)).ok()) << cluster.Logs();
  ExpectRefused(cluster.worker(kReplica, 2), "world size");
  StreamResult r = stream.Join();
  EXPECT_TRUE(r.status.ok()) << CodeName(r.status.error_code()) << " " << r.status.error_message()
                             << "\n" << cluster.Logs();
  EXPECT_EQ(r.token_ids.size(), 48u);
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Sum("weft_replicas_fenced_total"), 0) << cluster.Logs();
  EXPECT_EQ(m->Get("weft_workers_rejected_total"), 1);
  EXPECT_EQ(m->Get("weft_replicas"), 1);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(cluster.worker(kReplica, rank)->Running()) << "rank " << rank;
    auto wm = cluster.WorkerMetrics(kReplica, rank);
    ASSERT_TRUE(wm.ok());
    EXPECT_EQ(wm->Get("weft_worker_attachments_total"), 1) << "rank " << rank << " was re-admitted";
  }
  EXPECT_EQ(Try(cluster), "OK");
}

}  // namespace
}  // namespace weft::e2e
