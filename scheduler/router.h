// Router: picks the data-parallel replica a waiting sequence is queued on — the
// longest prefix-cache hit first, then the most free blocks (net of the blocks its
// waiting queue already claims, so a burst of arrivals spreads out), then the lowest
// replica id. Replicas too small for the sequence even alone are never picked.
//
// Routing happens when a sequence is queued (arrival, or re-queue after its replica
// was removed), as TGI's and vLLM's data-parallel front ends do; it is not revisited.
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
