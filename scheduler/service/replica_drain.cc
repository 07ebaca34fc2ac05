#include "scheduler/service/replica_drain.h"

#include <algorithm>

namespace weft {

bool ReplicaDrains::Begin(const std::string& replica, absl::Time now) {
  return deadlines_.emplace(replica, now + timeout_).second;
}

std::vector<std::string> ReplicaDrains::Expired(absl::Time now) const {
  std::vector<std::string> out;
  for (const auto& [name, deadline] : deadlines_) {
    if (deadline <= now) out.push_back(name);
  }
  return out;
}

absl::Time ReplicaDrains::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [name, deadline] : deadlines_) next = std::min(next, deadline);
  return next;
}

}  // namespace weft
