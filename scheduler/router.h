// Router: picks the data-parallel replica a waiting sequence is queued on: the one
// that would have the most blocks left after taking it, a prefix-cache hit counting as
// the blocks it saves — free blocks (net of the blocks its waiting queue already
// claims, so a burst of arrivals spreads out) + prefix-hit blocks; then the longer hit;
// then the lowest replica id. Replicas too small for the sequence even alone are never
// picked. A hit wins between replicas of similar load and never sends work to a
// replica much busier than another (a shared system prompt cached on one replica would
// otherwise route every request there, and a replica added under load would get none).
//
// Routing happens when a sequence is queued (arrival, or re-queue after its replica
// was removed), and again for every waiting sequence when the replicas that take work
// change (one added, or one starts draining): see Scheduler.
// Thread-safety: pure function.
#ifndef WEFT_SCHEDULER_ROUTER_H_
#define WEFT_SCHEDULER_ROUTER_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "scheduler/types.h"

namespace weft {

struct RouteCandidate {
  ReplicaId replica;
  int32_t prefix_hit_blocks = 0;
  int64_t free_blocks = 0;  // may be negative: the waiting queue claims more than is free
  bool fits = false;        // the sequence fits in this replica alone
};

std::optional<ReplicaId> PickReplica(absl::Span<const RouteCandidate> candidates);

}  // namespace weft

#endif  // WEFT_SCHEDULER_ROUTER_H_
