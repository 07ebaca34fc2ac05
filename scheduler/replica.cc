#include "scheduler/replica.h"

#include <utility>

#include "glog/logging.h"

namespace weft {

void Replica::AddRunning(Sequence* seq) {
  DCHECK(seq->replica == nullptr || seq->replica == this);
  CHECK(running_.emplace(seq->key(), seq).second) << "sequence already running";
  seq->replica = this;
  seq->counted_prefilling = false;
  UpdatePrefilling(seq);
}

void Replica::RemoveRunning(Sequence* seq) {
  CHECK_EQ(running_.erase(seq->key()), 1u) << "sequence not running here";
  if (seq->counted_prefilling) --num_prefilling_;
  seq->counted_prefilling = false;
  seq->replica = nullptr;
}

void Replica::AddWaiting(Sequence* seq) {
  DCHECK(seq->replica == nullptr || seq->replica == this);
  CHECK(waiting_.emplace(seq->key(), seq).second) << "sequence already waiting";
  seq->replica = this;
  seq->queued_demand_blocks = kv_.BlocksFor(seq->logical_length());
  waiting_demand_blocks_ += seq->queued_demand_blocks;
}

void Replica::RemoveWaiting(Sequence* seq) {
  CHECK_EQ(waiting_.erase(seq->key()), 1u) << "sequence not waiting here";
  waiting_demand_blocks_ -= seq->queued_demand_blocks;
  seq->queued_demand_blocks = 0;
  seq->replica = nullptr;
}

void Replica::UpdatePrefilling(Sequence* seq) {
  const bool prefilling = seq->num_uncomputed() >= 2;
  if (prefilling == seq->counted_prefilling) return;
  num_prefilling_ += prefilling ? 1 : -1;
  seq->counted_prefilling = prefilling;
}

std::vector<Sequence*> Replica::TakeSpareVector() {
  if (spare_vectors_.empty()) return {};
  std::vector<Sequence*> v = std::move(spare_vectors_.back());
  spare_vectors_.pop_back();
  return v;
}

void Replica::ReturnSpareVector(std::vector<Sequence*> v) {
  v.clear();
  spare_vectors_.push_back(std::move(v));
}

}  // namespace weft
