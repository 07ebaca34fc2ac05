#include "scheduler/router.h"

#include <tuple>

namespace weft {

std::optional<ReplicaId> PickReplica(absl::Span<const RouteCandidate> candidates) {
  const RouteCandidate* best = nullptr;
  for (const RouteCandidate& c : candidates) {
    if (!c.fits) continue;
    if (best == nullptr ||
        std::make_tuple(c.free_blocks + c.prefix_hit_blocks, c.prefix_hit_blocks, -c.replica.value()) >
            std::make_tuple(best->free_blocks + best->prefix_hit_blocks, best->prefix_hit_blocks,
                            -best->replica.value())) {
      best = &c;
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->replica;
}

}  // namespace weft
