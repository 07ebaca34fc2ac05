#include "scheduler/service/replica_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/protocol_version.h"
#include "common/shard_layout.h"
#include "glog/logging.h"

namespace weft {

std::string ProtocolVersionMismatch(int32_t worker_version) {
  if (worker_version >= kMinWorkerProtocolVersion && worker_version <= kWorkerProtocolVersion) {
    return "";
  }
  const std::string supported =
      kMinWorkerProtocolVersion == kWorkerProtocolVersion
          ? absl::StrCat(kWorkerProtocolVersion)
          : absl::StrCat(kMinWorkerProtocolVersion, "..", kWorkerProtocolVersion);
  return absl::StrCat("worker protocol version ", worker_version,
                      worker_version == 0 ? " (none sent: a worker older than versions)" : "",
                      " is not the scheduler's protocol version ", supported,
                      worker_version > kWorkerProtocolVersion
                          ? " (upgrade the scheduler before the workers)"
                          : " (upgrade the worker)");
}

std::string CheckReplicaName(const std::string& name) {
  if (name.empty() || name.size() > 128) return "replica name must be 1..128 bytes";
  const auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) return "replica name must start with a letter or a digit";
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') {
      return "replica name may hold only letters, digits, '.', '_' and '-'";
    }
  }
  return "";
}

namespace {

// Fields that only reach logs: bounded, printable ASCII.
std::string CheckLogField(const char* what, const std::string& value, size_t max_bytes) {
  if (value.size() > max_bytes) return absl::StrCat(what, " is over ", max_bytes, " bytes");
  for (char c : value) {
    if (c < 0x20 || c >= 0x7f) return absl::StrCat(what, " must be printable ASCII");
  }
  return "";
}

}  // namespace

std::string ReplicaRegistry::CheckCapacity(const weft::v1::WorkerHello& h) const {
  if (h.num_kv_blocks() < 1) return "worker has no KV blocks (memory budget too small?)";
  if (h.num_kv_blocks() > expected_.max_worker_kv_blocks) {
    return absl::StrCat("worker announces ", h.num_kv_blocks(), " KV blocks; the scheduler takes ",
                        expected_.max_worker_kv_blocks,
                        " at most per worker (--max_worker_kv_blocks)");
  }
  // A restart of an admitted replica gives its blocks back first.
  int64_t total = h.num_kv_blocks();
  for (const auto& [name, r] : admitted_) {
    if (name != h.replica()) total += r.num_kv_blocks;
  }
  if (total > expected_.max_total_kv_blocks) {
    return absl::StrCat("admitting ", h.num_kv_blocks(), " more KV blocks would make ", total,
                        "; the scheduler takes ", expected_.max_total_kv_blocks,
                        " at most (--max_total_kv_blocks)");
  }
  if (admitted_.count(h.replica()) == 0 && pending_.count(h.replica()) == 0) {
    const size_t names = admitted_.size() + pending_.size();
    if (names >= static_cast<size_t>(expected_.max_replicas)) {
      return absl::StrCat("already ", names, " replicas admitted or forming; the scheduler takes ",
                          expected_.max_replicas, " at most (--max_replicas)");
    }
  }
  return "";
}

std::string ReplicaRegistry::CheckHello(const weft::v1::WorkerHello& h) const {
  if (h.model_fingerprint() != expected_.fingerprint) {
    return absl::StrCat("model fingerprint ", h.model_fingerprint().substr(0, 16),
                        "... differs from the scheduler's ", expected_.fingerprint.substr(0, 16),
                        "... (different model file?)");
  }
  if (std::string why = CheckReplicaName(h.replica()); !why.empty()) return why;
  for (std::string why : {CheckLogField("worker id", h.worker_id(), 256),
                          CheckLogField("kernels", h.kernels(), 256),
                          CheckLogField("backend", h.backend(), 32)}) {
    if (!why.empty()) return why;
  }
  if (h.comm_init().size() > 4096) return "comm_init is over 4096 bytes";
  if (h.world_size() < 1 || h.world_size() > expected_.max_world_size) {
    return absl::StrCat("world size ", h.world_size(), " outside 1..", expected_.max_world_size);
  }
  if (h.rank() < 0 || h.rank() >= h.world_size()) {
    return absl::StrCat("rank ", h.rank(), " outside 0..", h.world_size() - 1);
  }
  if (h.block_size() != expected_.block_size) {
    return absl::StrCat("block size ", h.block_size(), " differs from the scheduler's ",
                        expected_.block_size);
  }
  if (h.vocab_size() != expected_.vocab_size) {
    return absl::StrCat("vocabulary size ", h.vocab_size(), " differs from the scheduler's ",
                        expected_.vocab_size);
  }
  auto layout = ComputeShardLayout(expected_.n_head, expected_.n_head_kv, expected_.n_ff,
                                   expected_.vocab_size, h.world_size(), h.rank());
  if (!layout.ok()) return std::string(layout.status().message());
  if (h.shard_layout() != layout->ToString()) {
    return absl::StrCat("shard layout '", h.shard_layout(), "' is not the expected '",
                        layout->ToString(), "'");
  }
  return CheckCapacity(h);
}

HelloOutcome ReplicaRegistry::OnHello(const std::shared_ptr<WorkerHandle>& handle,
                                      const weft::v1::WorkerHello& hello, absl::Time now) {
  HelloOutcome out;
  // First: a worker of another protocol may mean other things by every other field.
  if (std::string why = ProtocolVersionMismatch(hello.protocol_version()); !why.empty()) {
    out.kind = HelloOutcome::kRejected;
    out.reject_reason = why;
    out.protocol_mismatch = true;
    return out;
  }
  if (std::string why = CheckHello(hello); !why.empty()) {
    out.kind = HelloOutcome::kRejected;
    out.reject_reason = why;
    return out;
  }
  const std::string& name = hello.replica();
  const Shape shape{hello.world_size(), hello.backend()};
  if (auto it = admitted_.find(name); it != admitted_.end()) {
    const AdmittedReplica& a = it->second;
    const std::string& backend = a.ranks[0].hello.backend();
    if (a.world_size != shape.first || backend != shape.second) {
      // A stray of another shape never disturbs a running replica.
      out.kind = HelloOutcome::kRejected;
      out.reject_reason = absl::StrCat("replica ", name, " is running with world size ", a.world_size,
                                       " and backend '", backend, "'; this rank says ", shape.first,
                                       " and '", shape.second, "'");
      return out;
    }
    // The same replica and rank again while admitted: the old process is presumed dead
    // or hung (a restart); fence the old group, newest wins.
    LOG(WARNING) << "replica " << name << " rank " << hello.rank() << " attached again ("
                 << hello.worker_id() << "): fencing the running replica";
    FenceOutcome f = RemoveAdmitted(name, /*except_handle=*/-1);
    out.displaced = std::move(f.other_ranks);
    out.displaced_replica = name;
  }
  auto& groups = pending_[name];
  Pending& p = groups[shape];
  if (auto old = p.ranks.find(hello.rank()); old != p.ranks.end()) {
    // A pending rank re-said hello (restarted): replace it.
    out.displaced.push_back(old->second.handle);
    handle_replica_.erase(old->second.handle->id());
  }
  p.ranks[hello.rank()] = RankInfo{handle, hello};
  handle_replica_[handle->id()] = name;
  if (static_cast<int32_t>(p.ranks.size()) < shape.first) {
    out.kind = HelloOutcome::kPending;
    return out;
  }
  // Complete: the other candidate groups of this name lose.
  for (auto& [other_shape, other] : groups) {
    if (other_shape == shape) continue;
    for (auto& [rank, info] : other.ranks) {
      handle_replica_.erase(info.handle->id());
      out.losers.push_back(info.handle);
    }
  }
  if (!out.losers.empty()) {
    out.losers_reason = absl::StrCat("replica ", name, " was admitted with world size ", shape.first,
                                     " and backend '", shape.second, "'");
  }
  AdmittedReplica r;
  r.name = name;
  r.epoch = next_epoch_++;
  r.world_size = shape.first;
  r.num_kv_blocks = p.ranks.begin()->second.hello.num_kv_blocks();
  for (auto& [rank, info] : p.ranks) {
    r.num_kv_blocks = std::min(r.num_kv_blocks, info.hello.num_kv_blocks());
    r.ranks.push_back(std::move(info));
  }
  r.comm_init = r.ranks[0].hello.comm_init();
  r.admitted_at = now;
  pending_.erase(name);  // `p` and `groups` die here
  auto [it, inserted] = admitted_.emplace(name, std::move(r));
  out.kind = HelloOutcome::kAdmitted;
  out.replica = &it->second;
  return out;
}

FenceOutcome ReplicaRegistry::RemoveAdmitted(const std::string& replica, int64_t except_handle) {
  FenceOutcome out;
  auto it = admitted_.find(replica);
  if (it == admitted_.end()) return out;
  out.replica = replica;
  for (RankInfo& info : it->second.ranks) {
    handle_replica_.erase(info.handle->id());
    if (info.handle->id() != except_handle) out.other_ranks.push_back(info.handle);
  }
  admitted_.erase(it);
  return out;
}

FenceOutcome ReplicaRegistry::OnGone(const std::shared_ptr<WorkerHandle>& handle) {
  auto hit = handle_replica_.find(handle->id());
  if (hit == handle_replica_.end()) return FenceOutcome{};
  const std::string name = hit->second;
  if (admitted_.count(name) > 0) return RemoveAdmitted(name, handle->id());
  // Pending: forget just this rank.
  handle_replica_.erase(hit);
  auto pit = pending_.find(name);
  if (pit != pending_.end()) {
    for (auto g = pit->second.begin(); g != pit->second.end(); ++g) {
      auto& ranks = g->second.ranks;
      auto r = std::find_if(ranks.begin(), ranks.end(),
                            [&](const auto& kv) { return kv.second.handle->id() == handle->id(); });
      if (r == ranks.end()) continue;
      ranks.erase(r);
      if (ranks.empty()) pit->second.erase(g);
      break;
    }
    if (pit->second.empty()) pending_.erase(pit);
  }
  return FenceOutcome{};
}

FenceOutcome ReplicaRegistry::Fence(const std::string& replica) {
  return RemoveAdmitted(replica, /*except_handle=*/-1);
}

const AdmittedReplica* ReplicaRegistry::Find(const std::string& replica) const {
  auto it = admitted_.find(replica);
  return it == admitted_.end() ? nullptr : &it->second;
}

const AdmittedReplica* ReplicaRegistry::FindByHandle(int64_t handle_id) const {
  auto it = handle_replica_.find(handle_id);
  if (it == handle_replica_.end()) return nullptr;
  return Find(it->second);
}

std::vector<const AdmittedReplica*> ReplicaRegistry::Admitted() const {
  std::vector<const AdmittedReplica*> out;
  for (const auto& [name, r] : admitted_) out.push_back(&r);
  return out;
}

size_t ReplicaRegistry::num_pending_ranks() const {
  size_t n = 0;
  for (const auto& [name, groups] : pending_) {
    for (const auto& [shape, p] : groups) n += p.ranks.size();
  }
  return n;
}

std::vector<std::shared_ptr<WorkerHandle>> ReplicaRegistry::PendingRanks() const {
  std::vector<std::shared_ptr<WorkerHandle>> out;
  for (const auto& [name, groups] : pending_) {
    for (const auto& [shape, p] : groups) {
      for (const auto& [rank, info] : p.ranks) out.push_back(info.handle);
    }
  }
  return out;
}

}  // namespace weft
