// ReplicaRegistry: forms tensor-parallel replicas from worker hellos and tracks them.
//
// A replica is admitted only when all `world_size` ranks have said hello with a protocol
// version the scheduler supports (common/protocol_version.h; checked first), the
// scheduler's model fingerprint, the same block size, backend and world size, and each
// rank the shard layout ComputeShardLayout gives for it. Until then its ranks wait
// (pending); a rank that does not fit is rejected with a reason and the others are never
// admitted alone. Ranks of one name that disagree on the shape (world size, backend)
// form separate candidate groups, so a stray that attaches first never decides the shape:
// the first group to complete is admitted and the ranks of the other groups are rejected.
// A rank whose shape differs from an admitted replica of its name is rejected without
// touching it; one of the same shape and rank replaces it (a restart: the old group is
// fenced). The replica's block count is the minimum over its ranks. Losing any
// rank (stream gone) or an explicit Fence removes the whole replica; its remaining ranks
// are returned so the caller can close their streams (they re-attach and start clean,
// under a new epoch). Epochs only grow, and start at `first_epoch`: the engine starts
// them at its start time in microseconds, so a scheduler that restarts never hands out
// an epoch of its predecessor (workers name their shared-memory groups "<replica>-e<epoch>",
// and a group left behind by a crashed rank must never be joined again).
// Thread-safety: not thread-safe; owned by the planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_REPLICA_REGISTRY_H_
#define WEFT_SCHEDULER_SERVICE_REPLICA_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "scheduler/service/worker_link.h"
#include "weft/v1/worker.pb.h"

namespace weft {

struct ExpectedModel {
  std::string fingerprint;
  int32_t block_size = 16;
  int32_t vocab_size = 0;
  int32_t n_head = 0, n_head_kv = 0;
  int64_t n_ff = 0;
  int32_t max_world_size = 8;
  // What workers may announce. A hello is untrusted input: nothing is sized from it
  // before these checks (the scheduler keeps ~45 bytes of bookkeeping per KV block).
  // A worker over max_worker_kv_blocks, or one that would take the admitted replicas
  // past max_total_kv_blocks, is refused; so is a new replica name beyond max_replicas
  // (admitted and pending together: the names are metric labels).
  int32_t max_worker_kv_blocks = 1 << 20;
  int64_t max_total_kv_blocks = int64_t{4} << 20;
  int32_t max_replicas = 64;
};

// "" when `name` may name a replica (it becomes a metric label and a shared-memory
// segment's name): 1..128 bytes of [A-Za-z0-9._-], starting with a letter or digit.
// Otherwise the reason.
std::string CheckReplicaName(const std::string& name);

struct RankInfo {
  std::shared_ptr<WorkerHandle> handle;
  weft::v1::WorkerHello hello;
};

struct AdmittedReplica {
  std::string name;
  int64_t epoch = 0;
  int32_t world_size = 1;
  int32_t num_kv_blocks = 0;
  std::vector<RankInfo> ranks;  // index = rank
  std::string comm_init;        // rank 0's
  absl::Time admitted_at;
};

struct HelloOutcome {
  enum Kind { kRejected, kPending, kAdmitted } kind = kPending;
  std::string reject_reason;                  // kRejected
  bool protocol_mismatch = false;             // kRejected for WorkerHello.protocol_version
  const AdmittedReplica* replica = nullptr;   // kAdmitted (owned by the registry)
  // Ranks of a replica the newcomer displaced (same name and rank attached again: the
  // old group is fenced, newest wins). Their streams should be closed.
  std::vector<std::shared_ptr<WorkerHandle>> displaced;
  std::string displaced_replica;              // non-empty when an admitted one was fenced
  // Pending ranks of other shapes, rejected because this hello completed a replica of
  // their name (with `losers_reason`). Their streams should get a Reject.
  std::vector<std::shared_ptr<WorkerHandle>> losers;
  std::string losers_reason;
};

// "" when a worker speaking Attach protocol `worker_version` is admissible
// (common/protocol_version.h), else the refusal naming both versions.
std::string ProtocolVersionMismatch(int32_t worker_version);

struct FenceOutcome {
  std::string replica;   // empty: the handle belonged to no admitted replica
  std::vector<std::shared_ptr<WorkerHandle>> other_ranks;
};

class ReplicaRegistry {
 public:
  explicit ReplicaRegistry(ExpectedModel expected, int64_t first_epoch = 1)
      : expected_(std::move(expected)), next_epoch_(first_epoch) {}

  HelloOutcome OnHello(const std::shared_ptr<WorkerHandle>& handle,
                       const weft::v1::WorkerHello& hello, absl::Time now);
  // A worker stream ended. Fences its replica if admitted; forgets it if pending.
  FenceOutcome OnGone(const std::shared_ptr<WorkerHandle>& handle);
  // Removes an admitted replica (deadline misses, disagreeing ranks).
  FenceOutcome Fence(const std::string& replica);

  const AdmittedReplica* Find(const std::string& replica) const;
  // The admitted replica a worker stream belongs to, or nullptr.
  const AdmittedReplica* FindByHandle(int64_t handle_id) const;
  std::vector<const AdmittedReplica*> Admitted() const;
  size_t num_admitted() const { return admitted_.size(); }
  size_t num_pending_ranks() const;
  // The streams of the ranks still waiting for their peers (to close them at shutdown).
  std::vector<std::shared_ptr<WorkerHandle>> PendingRanks() const;

 private:
  struct Pending {
    std::map<int32_t, RankInfo> ranks;
  };
  // A candidate group's shape: (world size, backend).
  using Shape = std::pair<int32_t, std::string>;

  std::string CheckHello(const weft::v1::WorkerHello& hello) const;
  // The capacity checks: KV blocks (per worker and all admitted replicas together) and
  // the number of replica names.
  std::string CheckCapacity(const weft::v1::WorkerHello& hello) const;
  FenceOutcome RemoveAdmitted(const std::string& replica, int64_t except_handle);

  const ExpectedModel expected_;
  int64_t next_epoch_;
  std::map<std::string, AdmittedReplica> admitted_;
  std::map<std::string, std::map<Shape, Pending>> pending_;  // name -> candidate groups
  absl::flat_hash_map<int64_t, std::string> handle_replica_;  // handle id -> replica name
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_REPLICA_REGISTRY_H_
