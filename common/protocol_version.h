// The version of the scheduler/worker Attach protocol (proto/weft/v1/worker.proto), one
// definition for both sides: the worker sends kWorkerProtocolVersion in its WorkerHello
// (worker/service/worker_client.cc, the wire edge), the scheduler admits a worker only
// when its version lies in [kMinWorkerProtocolVersion, kWorkerProtocolVersion] and
// refuses any other, naming both (scheduler/service/replica_registry.cc).
//
// Bump kWorkerProtocolVersion when a change to the Attach messages changes their meaning
// for the other side (a field both must understand); keep kMinWorkerProtocolVersion at
// the oldest worker version this scheduler still serves correctly, so that "upgrade the
// scheduler first, then the workers" holds and is checked rather than assumed.
//
// Thread-safety: constants.
#ifndef WEFT_COMMON_PROTOCOL_VERSION_H_
#define WEFT_COMMON_PROTOCOL_VERSION_H_

#include <cstdint>

namespace weft {

// 1: the first versioned protocol (0: the field unset, a worker older than versions).
inline constexpr int32_t kWorkerProtocolVersion = 1;
inline constexpr int32_t kMinWorkerProtocolVersion = 1;
static_assert(kMinWorkerProtocolVersion <= kWorkerProtocolVersion);

}  // namespace weft

#endif  // WEFT_COMMON_PROTOCOL_VERSION_H_
