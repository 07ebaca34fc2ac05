#include "worker/comm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace weft {
namespace {


size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t TotalBytes(int world_size, size_t slot_bytes) {
  return 2 * kShmPageBytes + 2 * static_cast<size_t>(world_size) * slot_bytes;
}

absl::Status ErrnoError(absl::string_view what, absl::string_view shm_name) {
  const int err = errno;
  return absl::InternalError(absl::StrCat(what, "(", shm_name, "): ", std::strerror(err)));
}

// Closes a file descriptor when it goes out of scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

// What an existing segment says about itself (a copy; the segment may change).
struct Snapshot {
  size_t file_bytes = 0;
  bool has_header = false;
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t world_size = 0;
  uint64_t slot_bytes = 0;
  uint64_t generation = 0;
  uint64_t total_bytes = 0;
  pid_t creator_pid = 0;
  uint64_t creator_pid_ns = 0;
  ShmState state = ShmState::kInitializing;
  absl::Time modified;  // the file's mtime (set by shm_open and posix_fallocate)
};

// How long a segment without its creator's pid may be one a live creator is still
// making (Create: shm_open, posix_fallocate, mmap, then the pid). Far longer than that
// takes; a creator that died in between leaves a leftover removed once it is this old.
constexpr absl::Duration kCreationGrace = absl::Seconds(60);

absl::StatusOr<Snapshot> TakeSnapshot(int fd, absl::string_view shm_name) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError("fstat", shm_name);
  Snapshot snap;
  snap.file_bytes = static_cast<size_t>(st.st_size);
  snap.modified = absl::TimeFromTimespec(st.st_mtim);
  if (snap.file_bytes < kShmPageBytes) return snap;
  void* p = mmap(nullptr, kShmPageBytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoError("mmap header", shm_name);
  const auto* h = static_cast<const ShmHeader*>(p);
  snap.has_header = true;
  snap.state = static_cast<ShmState>(h->state.load(std::memory_order_acquire));
  snap.creator_pid = h->creator_pid.load(std::memory_order_acquire);
  snap.creator_pid_ns = h->creator_pid_ns;
  snap.magic = h->magic;
  snap.version = h->version;
  snap.world_size = h->world_size;
  snap.slot_bytes = h->slot_bytes;
  snap.generation = h->generation;
  snap.total_bytes = h->total_bytes;
  munmap(p, kShmPageBytes);
  return snap;
}

// Why the segment can never become usable; empty when it is (or may become) live.
std::string StaleReason(const Snapshot& s, bool check_pids) {
  if (!s.has_header) return absl::StrCat("too small for a header (", s.file_bytes, " bytes)");
  if (s.creator_pid <= 0) return "no creator pid";
  if (check_pids && SamePidNamespace(s.creator_pid_ns) && !ProcessAlive(s.creator_pid)) {
    return absl::StrCat("creator pid ", s.creator_pid, " is gone");
  }
  if (s.state == ShmState::kInitializing) return "";  // a live creator is still writing it
  if (s.magic != kShmMagic) return "bad magic";
  if (s.version != kShmVersion) return absl::StrCat("version ", s.version);
  if (s.state == ShmState::kClosed) return "closed by its creator";
  if (s.state != ShmState::kReady) return "bad state";
  if (s.total_bytes != s.file_bytes) return "size does not match its header";
  return "";
}

// True if `shm_name` currently names the object (dev, ino).
bool NameRefersTo(const std::string& shm_name, dev_t dev, ino_t ino) {
  const int fd = shm_open(shm_name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  FdCloser closer(fd);
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

}  // namespace

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on zombies (dead, not yet reaped): look at the state in /proc.
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;  // no /proc: trust kill()
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // "pid (comm) S ...", comm may hold ')'
  if (paren == nullptr || paren[1] != ' ') return true;
  return paren[2] != 'Z' && paren[2] != 'X';
}

uint64_t PidNamespaceId() {
  static const uint64_t id = [] {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }();
  return id;
}

bool IsShmNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

absl::Status ShmSegmentOptions::Validate() const {
  if (name.empty() || name.size() > kShmMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm name must have 1..", kShmMaxNameLength, " characters: '", name, "'"));
  }
  for (char c : name) {
    if (!IsShmNameChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shm name may only hold [A-Za-z0-9._-]: '", name, "'"));
    }
  }
  if (world_size < 1 || world_size > kShmMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size ", world_size, " not in [1, ", kShmMaxWorldSize, "]"));
  }
  if (slot_bytes < sizeof(float) || slot_bytes > (size_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("slot_bytes ", slot_bytes,
                                                   " not in [4, 4 GiB]"));
  }
  return absl::OkStatus();
}

std::string ShmSegment::ShmNameFor(absl::string_view name) {
  return absl::StrCat("/", kShmNamePrefix, name);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Map(int fd,
                                                            const std::string& shm_name,
                                                            int world_size, size_t slot_bytes,
                                                            bool is_creator) {
  const size_t total = TotalBytes(world_size, slot_bytes);
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ErrnoError("mmap", shm_name);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    munmap(base, total);
    return ErrnoError("fstat", shm_name);
  }
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->shm_name_ = shm_name;
  seg->is_creator_ = is_creator;
  seg->base_ = base;
  seg->total_bytes_ = total;
  seg->world_size_ = world_size;
  seg->slot_bytes_ = slot_bytes;
  seg->dev_ = st.st_dev;
  seg->ino_ = st.st_ino;
  seg->header_ = static_cast<ShmHeader*>(base);
  seg->controls_ = reinterpret_cast<ShmRankControl*>(static_cast<char*>(base) + kShmPageBytes);
  seg->data_ = static_cast<char*>(base) + 2 * kShmPageBytes;
  return seg;
}

namespace {

// Creates `shm_name` exclusively, first unlinking a stale segment of that name. Returns
// the new object's file descriptor.
absl::StatusOr<int> CreateExclusive(const ShmSegmentOptions& options,
                                    const std::string& shm_name) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return ErrnoError("shm_open", shm_name);
    const int old_fd = shm_open(shm_name.c_str(), O_RDONLY, 0);
    if (old_fd < 0) continue;  // unlinked meanwhile: try again
    absl::StatusOr<Snapshot> snap = TakeSnapshot(old_fd, shm_name);
    close(old_fd);
    if (!snap.ok()) return snap.status();
    std::string reason = StaleReason(*snap, options.check_pids);
    if (reason.empty() && snap->state == ShmState::kReady &&
        snap->generation != options.generation) {
      reason = absl::StrCat("generation ", snap->generation, " superseded by ",
                            options.generation);
    }
    if (reason.empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "shm segment ", shm_name, " is in use by live creator pid ", snap->creator_pid,
          " (or one in another PID namespace); use a new generation"));
    }
    if (!options.replace_stale) {
      return absl::AlreadyExistsError(absl::StrCat("stale shm segment ", shm_name, " (",
                                                   reason, ") and replace_stale is false"));
    }
    LOG(WARNING) << "replacing stale shm segment " << shm_name << ": " << reason;
    if (shm_unlink(shm_name.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("shm_unlink", shm_name);
    }
  }
  return absl::UnavailableError(absl::StrCat("could not create ", shm_name,
                                             ": it keeps reappearing"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(
    const ShmSegmentOptions& options) {
  absl::Status status = options.Validate();
  if (!status.ok()) return status;
  const std::string shm_name = ShmNameFor(options.name);
  const size_t slot_bytes = RoundUp(options.slot_bytes, kShmPageBytes);
  absl::StatusOr<int> fd = CreateExclusive(options, shm_name);
  if (!fd.ok()) return fd.status();
  FdCloser closer(*fd);
  absl::StatusOr<std::unique_ptr<ShmSegment>> seg;
  const off_t total = static_cast<off_t>(TotalBytes(options.world_size, slot_bytes));
  // Reserve the pages now: on a full /dev/shm (containers default to 64 MiB) ftruncate
  // alone succeeds and the first touch of a missing page raises SIGBUS instead.
  const int err = posix_fallocate(*fd, 0, total);
  if (err != 0) {
    seg = absl::ResourceExhaustedError(absl::StrCat(
        "posix_fallocate(", shm_name, ", ", total, " bytes): ", std::strerror(err),
        " (is /dev/shm large enough for 2 x world_size x max_bytes?)"));
  } else {
    seg = Map(*fd, shm_name, options.world_size, slot_bytes, /*is_creator=*/true);
  }
  if (!seg.ok()) {
    shm_unlink(shm_name.c_str());
    return seg.status();
  }
  // The file is zero-filled, so every atomic starts at 0. The pid goes first so that a
  // prober can tell "being initialized by a live creator" from "crashed while creating".
  ShmHeader* h = (*seg)->header_;
  h->creator_pid_ns = PidNamespaceId();
  h->creator_pid.store(getpid(), std::memory_order_release);
  h->magic = kShmMagic;
  h->version = kShmVersion;
  h->world_size = static_cast<uint32_t>(options.world_size);
  h->slot_bytes = slot_bytes;
  h->generation = options.generation;
  h->total_bytes = (*seg)->total_bytes_;
  h->state.store(static_cast<uint32_t>(ShmState::kReady), std::memory_order_release);
  return seg;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Attach(const ShmSegmentOptions& options,
                                                               absl::Time deadline) {
  absl::Status status = options.Validate();
  if (!status.ok()) return status;
  const std::string shm_name = ShmNameFor(options.name);
  const size_t slot_bytes = RoundUp(options.slot_bytes, kShmPageBytes);
  std::string last_reason = "it does not exist";
  absl::Duration backoff = absl::Microseconds(100);
  while (true) {
    const int fd = shm_open(shm_name.c_str(), O_RDWR, 0);
    if (fd < 0 && errno != ENOENT) return ErrnoError("shm_open", shm_name);
    if (fd >= 0) {
      FdCloser closer(fd);
      absl::StatusOr<Snapshot> snap = TakeSnapshot(fd, shm_name);
      if (!snap.ok()) return snap.status();
      last_reason = StaleReason(*snap, options.check_pids);
      if (last_reason.empty() && snap->state != ShmState::kReady) last_reason = "initializing";
      if (last_reason.empty() && snap->generation != options.generation) {
        last_reason = absl::StrCat("generation ", snap->generation, ", want ",
                                   options.generation);
      }
      if (last_reason.empty()) {
        if (snap->world_size != static_cast<uint32_t>(options.world_size) ||
            snap->slot_bytes != slot_bytes) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "%s: segment has world_size %d and slot_bytes %d, this rank wants %d and %d",
              shm_name, snap->world_size, snap->slot_bytes, options.world_size, slot_bytes));
        }
        return Map(fd, shm_name, options.world_size, slot_bytes, /*is_creator=*/false);
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "timed out attaching to shm segment ", shm_name, ": ", last_reason));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(5));
  }
}

absl::StatusOr<bool> ShmSegment::RemoveIfStale(absl::string_view name) {
  const std::string shm_name = ShmNameFor(name);
  const int fd = shm_open(shm_name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no shm segment ", shm_name));
    return ErrnoError("shm_open", shm_name);
  }
  FdCloser closer(fd);
  absl::StatusOr<Snapshot> snap = TakeSnapshot(fd, shm_name);
  if (!snap.ok()) return snap.status();
  const std::string reason = StaleReason(*snap, /*check_pids=*/true);
  if (reason.empty()) return false;
  // No pid yet and young: another process may be creating it right now (a worker's
  // startup sweep could unlink a forming tensor-parallel group's segment).
  if (snap->creator_pid <= 0 && absl::Now() - snap->modified < kCreationGrace) return false;
  LOG(INFO) << "removing stale shm segment " << shm_name << ": " << reason;
  if (shm_unlink(shm_name.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError("shm_unlink", shm_name);
  }
  return true;
}

absl::StatusOr<int> ShmSegment::RemoveStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return ErrnoError("opendir", "/dev/shm");
  int removed = 0;
  absl::Status first_error;
  while (const dirent* entry = readdir(dir)) {
    absl::string_view file = entry->d_name;
    if (!absl::ConsumePrefix(&file, kShmNamePrefix)) continue;
    absl::StatusOr<bool> r = RemoveIfStale(file);
    if (r.ok()) {
      removed += *r ? 1 : 0;
    } else if (!absl::IsNotFound(r.status()) && first_error.ok()) {
      first_error = r.status();
    }
  }
  closedir(dir);
  if (!first_error.ok()) return first_error;
  return removed;
}

ShmSegment::~ShmSegment() {
  if (is_creator_) {
    header_->state.store(static_cast<uint32_t>(ShmState::kClosed), std::memory_order_release);
    // A newer run may already have replaced the name: unlink only our own object.
    if (NameRefersTo(shm_name_, dev_, ino_)) shm_unlink(shm_name_.c_str());
  }
  munmap(base_, total_bytes_);
}

}  // namespace weft
