// ShmSegment: the POSIX shared-memory segment that the ranks of one replica share for
// the CPU collectives (ShmCommunicator). It owns the mapping; it knows the layout and
// the create / attach / stale-replacement rules, and nothing about the protocol.
//
// Layout (every offset page aligned; slot_bytes rounded up to a page):
//
//   [0, 4096)                       ShmHeader: magic, version, world size, slot size,
//                                   generation, creator pid (+ its PID namespace),
//                                   state, abort flag + reason
//   [4096, 8192)                    ShmRankControl[world_size], one cache line each:
//                                   phase (futex word), waiters, pid, alive, PID ns,
//                                   call signatures
//   [8192 + (p * W + r) * slot, +slot)   data slot of rank r, buffer parity p (0 or 1)
//
// Naming: options.name (replica name + epoch) maps to the shm object "/weft-comm-<name>".
//
// Life cycle: rank 0 Create()s the segment (replacing a stale one: bad magic/version,
// creator dead, state closed, or another generation); it initializes the header and
// publishes state = kReady last. Other ranks Attach(), waiting until a ready segment of
// their generation exists. The creator's destructor marks the segment closed and
// unlinks the name (if the name still refers to this segment); others only unmap.
// Segments left by crashed runs are removed by RemoveIfStale / RemoveStaleSegments.
//
// Thread-safety: the object is immutable after construction; the shared words in the
// header and controls are atomics and may be used from any thread or process.
#ifndef WEFT_WORKER_COMM_SHM_SEGMENT_H_
#define WEFT_WORKER_COMM_SHM_SEGMENT_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weft {

inline constexpr uint64_t kShmMagic = 0x314d4d4f43544657ull;  // "WFTCOMM1"
inline constexpr uint32_t kShmVersion = 1;
inline constexpr int kShmMaxWorldSize = 64;
inline constexpr size_t kShmPageBytes = 4096;
inline constexpr size_t kShmAbortReasonBytes = 512;
inline constexpr char kShmNamePrefix[] = "weft-comm-";
inline constexpr size_t kShmMaxNameLength = 200;  // of ShmSegmentOptions::name

// The characters a segment name may hold: [A-Za-z0-9._-].
bool IsShmNameChar(char c);

enum class ShmState : uint32_t { kInitializing = 0, kReady = 1, kClosed = 2 };

struct ShmHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t world_size;
  uint64_t slot_bytes;
  uint64_t generation;
  uint64_t total_bytes;
  uint64_t creator_pid_ns;           // PidNamespaceId() of the creator; 0 if unknown
  std::atomic<int32_t> creator_pid;  // written first (after creator_pid_ns)
  std::atomic<uint32_t> state;       // ShmState; kReady is published last
  std::atomic<uint32_t> abort_claim;  // 0 -> 1 by the first rank that aborts
  std::atomic<uint32_t> aborted;      // 1 once abort_rank/abort_reason are written
  int32_t abort_rank;
  char abort_reason[kShmAbortReasonBytes];  // NUL terminated
};
static_assert(sizeof(ShmHeader) <= kShmPageBytes, "header must fit its page");

struct alignas(64) ShmRankControl {
  std::atomic<uint32_t> phase;    // futex word: phases this rank has published
  std::atomic<uint32_t> waiters;  // peers sleeping (or about to) on `phase`
  std::atomic<int32_t> pid;       // 0 until the rank attaches
  std::atomic<uint32_t> alive;    // 1 from attach until the rank closes
  std::atomic<uint64_t> pid_ns;   // PidNamespaceId() of the rank; 0 if unknown
  std::atomic<uint64_t> signature[2];  // op + sizes of the rank's current call
};
static_assert(sizeof(ShmRankControl) == 64, "one cache line per rank");
static_assert(kShmMaxWorldSize * sizeof(ShmRankControl) <= kShmPageBytes,
              "controls must fit their page");

struct ShmSegmentOptions {
  std::string name;  // replica name + epoch: [A-Za-z0-9._-], 1..200 characters
  int world_size = 1;
  size_t slot_bytes = 4 << 20;  // per rank and parity; rounded up to a page
  uint64_t generation = 0;      // attach only to this generation; replace any other
  bool replace_stale = true;    // creator: replace stale segments (else AlreadyExists)
  // Treat a segment whose creator pid is gone as stale. Only applies when the creator
  // ran in this process's PID namespace (recorded in the header): pids of another
  // namespace (e.g. another container sharing /dev/shm) cannot be checked from here.
  bool check_pids = true;

  absl::Status Validate() const;
};

class ShmSegment {
 public:
  // Rank 0: creates the segment (replacing a stale one) and returns it, ready.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(const ShmSegmentOptions& options);
  // Ranks 1..W-1: waits until `deadline` for a ready segment of options.generation.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Attach(const ShmSegmentOptions& options,
                                                            absl::Time deadline);

  // Removes the segment of `name` if it is stale (see the header comment). Returns
  // whether it removed it; NotFound when there is none. A segment that has no creator
  // pid yet is kept while it is younger than a minute (a creator may be making it).
  static absl::StatusOr<bool> RemoveIfStale(absl::string_view name);
  // Removes every stale /dev/shm/weft-comm-* segment; returns how many it removed.
  static absl::StatusOr<int> RemoveStaleSegments();
  // "/weft-comm-<name>".
  static std::string ShmNameFor(absl::string_view name);

  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  ShmHeader* header() const { return header_; }
  ShmRankControl* control(int rank) const { return controls_ + rank; }
  // Data slot of `rank` for buffer parity `parity`; slot_bytes() bytes, page aligned.
  char* slot(int parity, int rank) const {
    return data_ + (static_cast<size_t>(parity) * world_size_ + rank) * slot_bytes_;
  }
  int world_size() const { return world_size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  bool is_creator() const { return is_creator_; }
  const std::string& shm_name() const { return shm_name_; }

 private:
  ShmSegment() = default;
  // Maps the whole segment of `fd` (already sized) and fills in the accessors.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Map(int fd, const std::string& shm_name,
                                                         int world_size, size_t slot_bytes,
                                                         bool is_creator);

  std::string shm_name_;
  bool is_creator_ = false;
  void* base_ = nullptr;
  size_t total_bytes_ = 0;
  ShmHeader* header_ = nullptr;
  ShmRankControl* controls_ = nullptr;
  char* data_ = nullptr;
  int world_size_ = 0;
  size_t slot_bytes_ = 0;
  dev_t dev_ = 0;  // identity of the shm object, to unlink only our own
  ino_t ino_ = 0;
};

// True if `pid` names a live, non-zombie process visible in this PID namespace.
bool ProcessAlive(pid_t pid);

// An id of this process's PID namespace (inode of /proc/self/ns/pid); 0 if unknown.
uint64_t PidNamespaceId();

// True if a pid recorded with namespace id `pid_ns` can be checked from this process.
inline bool SamePidNamespace(uint64_t pid_ns) {
  return pid_ns != 0 && pid_ns == PidNamespaceId();
}

}  // namespace weft

#endif  // WEFT_WORKER_COMM_SHM_SEGMENT_H_
