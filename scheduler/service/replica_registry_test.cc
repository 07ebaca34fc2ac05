#include "scheduler/service/replica_registry.h"

#include <gtest/gtest.h>

#include "common/protocol_version.h"
#include "common/shard_layout.h"

namespace weft {
namespace {

ExpectedModel Model() {
  ExpectedModel m;
  m.fingerprint = "abc";
  m.block_size = 16;
  m.vocab_size = 49152;
  m.n_head = 9;
  m.n_head_kv = 3;
  m.n_ff = 1536;
  return m;
}

weft::v1::WorkerHello Hello(const std::string& replica, int rank, int world, int blocks) {
  weft::v1::WorkerHello h;
  h.set_protocol_version(kWorkerProtocolVersion);
  h.set_model_fingerprint("abc");
  h.set_replica(replica);
  h.set_rank(rank);
  h.set_world_size(world);
  h.set_block_size(16);
  h.set_num_kv_blocks(blocks);
  h.set_backend("cpu");
  h.set_vocab_size(49152);
  h.set_shard_layout(ComputeShardLayout(9, 3, 1536, 49152, world, rank)->ToString());
  h.set_comm_init("init" + std::to_string(rank));
  return h;
}

std::shared_ptr<WorkerHandle> H(int64_t id) { return std::make_shared<WorkerHandle>(id, "peer"); }

TEST(ReplicaRegistryTest, Tp2AdmittedOnlyWhenBothRanksArriveWithMinBlocks) {
  ReplicaRegistry reg(Model());
  auto a = H(1), b = H(2);
  EXPECT_EQ(reg.OnHello(a, Hello("r0", 1, 2, 100), absl::Now()).kind, HelloOutcome::kPending);
  EXPECT_EQ(reg.num_admitted(), 0u);
  ASSERT_EQ(reg.PendingRanks().size(), 1u);
  EXPECT_EQ(reg.PendingRanks()[0], a);
  HelloOutcome out = reg.OnHello(b, Hello("r0", 0, 2, 80), absl::Now());
  ASSERT_EQ(out.kind, HelloOutcome::kAdmitted);
  EXPECT_EQ(out.replica->num_kv_blocks, 80);
  EXPECT_EQ(out.replica->ranks.size(), 2u);
  EXPECT_EQ(out.replica->ranks[0].handle->id(), 2);
  EXPECT_EQ(out.replica->comm_init, "init0");
  EXPECT_EQ(reg.FindByHandle(1)->name, "r0");
  EXPECT_TRUE(reg.PendingRanks().empty());
}

// A worker of another Attach protocol (older, newer, or one that sends none) is refused
// before anything else is read from its hello, naming both versions; the refusal says so
// (protocol_mismatch, for the metric), other refusals do not.
TEST(ReplicaRegistryTest, OtherProtocolVersionsAreRefusedNamingBoth) {
  ReplicaRegistry reg(Model());
  for (int32_t v : {0, kMinWorkerProtocolVersion - 1, kWorkerProtocolVersion + 1, 1000}) {
    auto h = Hello("r0", 0, 1, 10);
    h.set_protocol_version(v);
    HelloOutcome o = reg.OnHello(H(1), h, absl::Now());
    ASSERT_EQ(o.kind, HelloOutcome::kRejected) << "version " << v;
    EXPECT_TRUE(o.protocol_mismatch);
    EXPECT_NE(o.reject_reason.find("worker protocol version " + std::to_string(v)),
              std::string::npos) << o.reject_reason;
    EXPECT_NE(o.reject_reason.find("scheduler's protocol version " +
                                   std::to_string(kWorkerProtocolVersion)),
              std::string::npos) << o.reject_reason;
  }
  EXPECT_EQ(reg.num_admitted(), 0u);
  EXPECT_EQ(reg.num_pending_ranks(), 0u);

  // Refused even when everything else would also be refused: the version is read first.
  auto both = Hello("r0", 0, 1, 10);
  both.set_protocol_version(kWorkerProtocolVersion + 1);
  both.set_model_fingerprint("zzz");
  EXPECT_TRUE(reg.OnHello(H(2), both, absl::Now()).protocol_mismatch);

  auto fp = Hello("r0", 0, 1, 10);
  fp.set_model_fingerprint("zzz");
  HelloOutcome o = reg.OnHello(H(3), fp, absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kRejected);
  EXPECT_FALSE(o.protocol_mismatch);
  EXPECT_EQ(reg.OnHello(H(4), Hello("r0", 0, 1, 10), absl::Now()).kind, HelloOutcome::kAdmitted);
}

TEST(ReplicaRegistryTest, MismatchesAreRejectedAndOthersNotAdmittedAlone) {
  ReplicaRegistry reg(Model());
  auto fp = Hello("r0", 0, 1, 10);
  fp.set_model_fingerprint("zzz");
  HelloOutcome o = reg.OnHello(H(1), fp, absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kRejected);
  EXPECT_NE(o.reject_reason.find("fingerprint"), std::string::npos);

  auto layout = Hello("r1", 1, 2, 10);
  layout.set_shard_layout("tp=2;rank=1;kv=0-3");
  o = reg.OnHello(H(2), layout, absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kRejected);
  EXPECT_NE(o.reject_reason.find("shard layout"), std::string::npos);

  // Rank 0 of r1 waits; rank 1 comes with another world size: a separate candidate group,
  // nothing admitted. Rank 1 of 2 completes r1; the stray loses and is rejected then.
  EXPECT_EQ(reg.OnHello(H(3), Hello("r1", 0, 2, 10), absl::Now()).kind, HelloOutcome::kPending);
  o = reg.OnHello(H(4), Hello("r1", 1, 3, 10), absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kPending);
  EXPECT_EQ(reg.num_admitted(), 0u);
  EXPECT_EQ(reg.num_pending_ranks(), 2u);
  o = reg.OnHello(H(7), Hello("r1", 1, 2, 10), absl::Now());
  ASSERT_EQ(o.kind, HelloOutcome::kAdmitted);
  EXPECT_EQ(o.replica->world_size, 2);
  ASSERT_EQ(o.losers.size(), 1u);
  EXPECT_EQ(o.losers[0]->id(), 4);
  EXPECT_NE(o.losers_reason.find("world size 2"), std::string::npos);
  EXPECT_EQ(reg.num_pending_ranks(), 0u);
  EXPECT_EQ(reg.FindByHandle(4), nullptr);
  // A stray of another shape while r1 runs: rejected, r1 untouched.
  o = reg.OnHello(H(8), Hello("r1", 2, 3, 10), absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kRejected);
  EXPECT_NE(o.reject_reason.find("is running with world size 2"), std::string::npos);
  EXPECT_TRUE(o.displaced.empty());
  EXPECT_TRUE(o.displaced_replica.empty());
  EXPECT_NE(reg.Find("r1"), nullptr);
  EXPECT_EQ(reg.OnGone(H(8)).replica, "");
  EXPECT_NE(reg.Find("r1"), nullptr);

  auto bs = Hello("r2", 0, 1, 10);
  bs.set_block_size(32);
  EXPECT_EQ(reg.OnHello(H(5), bs, absl::Now()).kind, HelloOutcome::kRejected);
  auto tp4 = Hello("r3", 0, 1, 10);
  tp4.set_world_size(4);
  EXPECT_EQ(reg.OnHello(H(6), tp4, absl::Now()).kind, HelloOutcome::kRejected);
}

TEST(ReplicaRegistryTest, LosingARankFencesTheReplicaAndReattachGetsNewEpoch) {
  ReplicaRegistry reg(Model());
  auto a = H(1), b = H(2);
  reg.OnHello(a, Hello("r0", 0, 2, 10), absl::Now());
  const int64_t epoch1 = reg.OnHello(b, Hello("r0", 1, 2, 10), absl::Now()).replica->epoch;
  FenceOutcome f = reg.OnGone(b);
  EXPECT_EQ(f.replica, "r0");
  ASSERT_EQ(f.other_ranks.size(), 1u);
  EXPECT_EQ(f.other_ranks[0]->id(), 1);
  EXPECT_EQ(reg.num_admitted(), 0u);
  EXPECT_EQ(reg.OnGone(a).replica, "");  // already fenced
  reg.OnHello(H(3), Hello("r0", 0, 2, 10), absl::Now());
  HelloOutcome o = reg.OnHello(H(4), Hello("r0", 1, 2, 10), absl::Now());
  ASSERT_EQ(o.kind, HelloOutcome::kAdmitted);
  EXPECT_GT(o.replica->epoch, epoch1);
}

TEST(ReplicaRegistryTest, EpochsStartAtFirstEpochAndGrow) {
  // A restarted scheduler passes a larger first epoch than any its predecessor used.
  ReplicaRegistry reg(Model(), /*first_epoch=*/1000);
  const int64_t e1 = reg.OnHello(H(1), Hello("r0", 0, 1, 10), absl::Now()).replica->epoch;
  const int64_t e2 = reg.OnHello(H(2), Hello("r1", 0, 1, 10), absl::Now()).replica->epoch;
  EXPECT_EQ(e1, 1000);
  EXPECT_EQ(e2, 1001);
}

TEST(ReplicaRegistryTest, SameRankAgainDisplacesTheRunningReplica) {
  ReplicaRegistry reg(Model());
  reg.OnHello(H(1), Hello("r0", 0, 1, 10), absl::Now());
  HelloOutcome o = reg.OnHello(H(2), Hello("r0", 0, 1, 10), absl::Now());
  EXPECT_EQ(o.kind, HelloOutcome::kAdmitted);
  EXPECT_EQ(o.displaced_replica, "r0");
  ASSERT_EQ(o.displaced.size(), 1u);
  EXPECT_EQ(o.displaced[0]->id(), 1);
  EXPECT_EQ(reg.FindByHandle(1), nullptr);
  EXPECT_EQ(reg.FindByHandle(2)->name, "r0");
}

TEST(ReplicaRegistryTest, PendingRankGoneIsForgotten) {
  ReplicaRegistry reg(Model());
  auto a = H(1);
  reg.OnHello(a, Hello("r0", 0, 2, 10), absl::Now());
  EXPECT_EQ(reg.OnGone(a).replica, "");
  EXPECT_EQ(reg.num_pending_ranks(), 0u);
  reg.OnHello(H(2), Hello("r0", 1, 2, 10), absl::Now());
  EXPECT_EQ(reg.num_admitted(), 0u);  // rank 0 is gone: r0 is not admitted alone
}

// A hello is untrusted: announced capacity over what one worker may hold, or past what
// all admitted replicas may hold together, is refused before anything is sized from it;
// so are names that would become odd metric labels and replicas beyond the name cap.
TEST(ReplicaRegistryTest, CapacityAndNamesAreBoundedBeforeAdmission) {
  ExpectedModel m = Model();
  m.max_worker_kv_blocks = 1000;
  m.max_total_kv_blocks = 1500;
  m.max_replicas = 2;
  ReplicaRegistry reg(m);
  HelloOutcome out = reg.OnHello(H(1), Hello("r0", 0, 1, 2147483647), absl::Now());
  ASSERT_EQ(out.kind, HelloOutcome::kRejected);
  EXPECT_NE(out.reject_reason.find("--max_worker_kv_blocks"), std::string::npos) << out.reject_reason;
  ASSERT_EQ(reg.OnHello(H(2), Hello("r0", 0, 1, 1000), absl::Now()).kind, HelloOutcome::kAdmitted);
  out = reg.OnHello(H(3), Hello("r1", 0, 1, 600), absl::Now());  // 1600 > 1500
  ASSERT_EQ(out.kind, HelloOutcome::kRejected);
  EXPECT_NE(out.reject_reason.find("--max_total_kv_blocks"), std::string::npos) << out.reject_reason;
  // A restart of r0 gives its 1000 back first: 1000 again is fine.
  EXPECT_EQ(reg.OnHello(H(4), Hello("r0", 0, 1, 1000), absl::Now()).kind, HelloOutcome::kAdmitted);
  EXPECT_EQ(reg.OnHello(H(5), Hello("r1", 0, 2, 500), absl::Now()).kind, HelloOutcome::kPending);
  out = reg.OnHello(H(6), Hello("r2", 0, 1, 10), absl::Now());  // a third name
  ASSERT_EQ(out.kind, HelloOutcome::kRejected);
  EXPECT_NE(out.reject_reason.find("--max_replicas"), std::string::npos) << out.reject_reason;
  EXPECT_EQ(reg.num_admitted(), 1u);
  EXPECT_EQ(reg.num_pending_ranks(), 1u);
  for (const char* bad : {"", "-r", "r 0", "r0\"}\n", "r{0}", "r/0", "r\xc3\xa9"}) {
    EXPECT_EQ(reg.OnHello(H(7), Hello(bad, 0, 1, 10), absl::Now()).kind, HelloOutcome::kRejected)
        << bad;
  }
  EXPECT_EQ(reg.OnHello(H(8), Hello(std::string(129, 'a'), 0, 1, 10), absl::Now()).kind,
            HelloOutcome::kRejected);
  weft::v1::WorkerHello h = Hello("r1", 1, 2, 10);
  h.set_worker_id(std::string(300, 'w'));
  EXPECT_EQ(reg.OnHello(H(9), h, absl::Now()).kind, HelloOutcome::kRejected);
  h = Hello("r1", 1, 2, 10);
  h.set_kernels("avx2\x1b[31m");
  EXPECT_EQ(reg.OnHello(H(10), h, absl::Now()).kind, HelloOutcome::kRejected);
  EXPECT_EQ(CheckReplicaName("weft-worker-7d9f.a_b-0"), "");
}

}  // namespace
}  // namespace weft
