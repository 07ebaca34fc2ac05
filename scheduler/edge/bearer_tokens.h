// BearerTokens: the API tokens weft-scheduler accepts (--auth_tokens_file), for every
// public endpoint that takes them (gRPC Generate/ListModels, the HTTP API).
//
// The file holds one token per line, optionally followed by its tenant and the tenant's
// limits as key=value fields separated by spaces:
//   <token> [tenant=NAME] [max_streams=N] [max_priority=P] [tokens_per_minute=T]
// A line with the token alone (the older format) belongs to the tenant "default" with no
// limits of its own. Surrounding whitespace is trimmed, blank lines and lines starting
// with '#' are ignored. A token is 1..4096 printable ASCII characters without spaces
// (RFC 6750's b64token is a subset); a tenant name is 1..64 of [A-Za-z0-9._-] (it is a
// metric label: tenant names come from this file only). Several tokens may name one
// tenant; they must then give it the same limits (or give them on one line only).
// Only SHA-256 digests of the tokens are kept in memory.
//
// Reload: Check() stats the file at most once per `recheck_interval` (1 s by default)
// and re-reads it when its inode, size, mtime or ctime changed — so an edited file, a
// file replaced by rename, and a Kubernetes Secret volume's symlink swap are all seen
// within about a second, without a restart or a watcher thread. Replace the file whole
// (write a new one, rename it over the old): a reader may see an in-place edit half
// written. A file that is deleted, cannot be read or does not parse on reload fails
// closed: no token is accepted until a good version comes (logged and counted once per
// version: failed_reloads() and Options::on_failed_reload); an empty file (no tokens)
// refuses every call.
//
// Check(header) takes the value of the `authorization` header/metadata: "Bearer <token>"
// (the scheme is case-insensitive). It returns OK or UNAUTHENTICATED; the message never
// contains the token. Resolve does the same and returns the token's tenant. The
// comparison hashes the presented token and compares it with every digest in constant
// time (no early exit, no length leak).
//
// Thread-safety: Check and the accessors are safe from any number of threads.
#ifndef WEFT_SCHEDULER_SERVICE_BEARER_TOKENS_H_
#define WEFT_SCHEDULER_SERVICE_BEARER_TOKENS_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace weft {

// Who a token belongs to and what that tenant may do (GenerateFrontend enforces it).
struct Tenant {
  static constexpr char kDefaultName[] = "default";
  std::string name = kDefaultName;
  int32_t max_streams = 0;              // open generation calls at once; 0: no own limit
  std::optional<int32_t> max_priority;  // highest priority it may ask; unset: the default
  // Charged at admission as prompt + max_tokens x n, the unused part refunded when the
  // call ends; a call is admitted while the bucket is above 0. 0: no limit.
  int64_t tokens_per_minute = 0;
  bool operator==(const Tenant& o) const {
    return name == o.name && max_streams == o.max_streams && max_priority == o.max_priority &&
           tokens_per_minute == o.tokens_per_minute;
  }
};

class BearerTokens {
 public:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    Digest digest;
    std::shared_ptr<const Tenant> tenant;
  };

  struct Options {
    std::string path;  // the tokens file
    absl::Duration recheck_interval = absl::Seconds(1);
    // Called (from a checking thread) once per failed reload, e.g. to count it.
    std::function<void()> on_failed_reload;
  };

  // Reads the file; INVALID_ARGUMENT naming the line (never its content) when a line is
  // not a token, or when the file cannot be read.
  static absl::StatusOr<std::unique_ptr<BearerTokens>> Load(Options options);

  // `authorization` is the header's value ("" when absent).
  absl::Status Check(absl::string_view authorization) const;
  // Check, returning the token's tenant.
  absl::StatusOr<std::shared_ptr<const Tenant>> Resolve(absl::string_view authorization) const;

  // Tokens in force now, and how many times a changed file was loaded (for tests/logs).
  size_t num_tokens() const;
  int64_t reloads() const { return reloads_.load(); }
  int64_t failed_reloads() const { return failed_reloads_.load(); }

  // Parses a tokens file's text into entries (sorted by digest, unique).
  static absl::StatusOr<std::vector<Entry>> Parse(absl::string_view text);

 private:
  // What identifies one version of the file.
  struct FileStamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileStamp& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
             ctime_ns == o.ctime_ns;
    }
  };

  explicit BearerTokens(Options options) : options_(std::move(options)) {}
  static absl::StatusOr<FileStamp> Stat(const std::string& path);
  // Reads and parses the file.
  absl::StatusOr<std::vector<Entry>> Read() const;
  // Fails closed: no token accepted until a good version loads.
  void FailReload(const std::string& why) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  // Re-reads the file if it changed and the recheck interval has passed.
  void MaybeReload() const ABSL_LOCKS_EXCLUDED(mu_, reload_mu_);
  void ReloadLocked(int64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(reload_mu_);
  std::shared_ptr<const std::vector<Entry>> Current() const ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  mutable std::atomic<int64_t> next_check_ns_{0};
  mutable std::atomic<int64_t> reloads_{0};
  mutable std::atomic<int64_t> failed_reloads_{0};
  // Serializes reloads (one thread stats and reads; the others keep checking).
  mutable Mutex reload_mu_;
  mutable FileStamp stamp_ ABSL_GUARDED_BY(reload_mu_);                   // the version in force
  mutable std::optional<FileStamp> refused_ ABSL_GUARDED_BY(reload_mu_);  // did not parse
  mutable bool stat_failed_ ABSL_GUARDED_BY(reload_mu_) = false;          // logged already
  mutable Mutex mu_;
  mutable std::shared_ptr<const std::vector<Entry>> tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_SCHEDULER_SERVICE_BEARER_TOKENS_H_
