// ReplicaDrains: which replicas drain (a rank of theirs got SIGTERM and sent
// DrainRequest) and until when. It only keeps time; the scheduler core stops placing
// sequences on a draining replica (Scheduler::DrainReplica) and the engine tells the
// ranks and detaches the replica once it is empty or its drain deadline passes
// (engine_drain.cc).
// Thread-safety: thread-compatible; owned by the engine's planning thread.
#ifndef WEFT_SCHEDULER_SERVICE_REPLICA_DRAIN_H_
#define WEFT_SCHEDULER_SERVICE_REPLICA_DRAIN_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace weft {

class ReplicaDrains {
 public:
  // `timeout`: how long a draining replica's running sequences may take to finish.
  explicit ReplicaDrains(absl::Duration timeout) : timeout_(timeout) {}

  // Starts draining `replica` at `now`; false when it drains already (the deadline
  // stays the first one).
  bool Begin(const std::string& replica, absl::Time now);
  bool Contains(const std::string& replica) const { return deadlines_.count(replica) > 0; }
  // The drain is over (the replica is empty, timed out, or was fenced). No-op if unknown.
  void End(const std::string& replica) { deadlines_.erase(replica); }
  // Draining replicas, by name, with their deadlines.
  const std::map<std::string, absl::Time>& deadlines() const { return deadlines_; }
  // The drains whose deadline is <= now.
  std::vector<std::string> Expired(absl::Time now) const;
  // The earliest deadline; InfiniteFuture when nothing drains.
  absl::Time NextDeadline() const;
  size_t size() const { return deadlines_.size(); }
  absl::Duration timeout() const { return timeout_; }

 private:
  const absl::Duration timeout_;
  std::map<std::string, absl::Time> deadlines_;
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_REPLICA_DRAIN_H_
