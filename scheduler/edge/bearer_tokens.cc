#include "scheduler/edge/bearer_tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace weft {
namespace {

constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxFileBytes = 4 << 20;

BearerTokens::Digest Sha256(absl::string_view s) {
  BearerTokens::Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

absl::Status Unauthenticated(absl::string_view why) { return absl::UnauthenticatedError(why); }

int64_t Nanos(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

absl::StatusOr<std::vector<BearerTokens::Digest>> BearerTokens::Parse(absl::string_view text) {
  std::vector<Digest> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.size() > kMaxTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": a token is at most ", kMaxTokenBytes, " bytes"));
    }
    for (char c : line) {
      if (c <= 0x20 || c >= 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": a token is printable ASCII without spaces (one token a line)"));
      }
    }
    out.push_back(Sha256(line));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<BearerTokens::FileStamp> BearerTokens::Stat(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot stat '", path, "': ", std::strerror(errno)));
  }
  FileStamp s;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = Nanos(st.st_mtim);
  s.ctime_ns = Nanos(st.st_ctim);
  return s;
}

absl::StatusOr<std::vector<BearerTokens::Digest>> BearerTokens::Read() const {
  std::ifstream in(options_.path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the tokens file '", options_.path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokens file '", options_.path, "' is over ", kMaxFileBytes, " bytes"));
  }
  auto parsed = Parse(text.str());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens file '", options_.path, "' ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<BearerTokens>> BearerTokens::Load(Options options) {
  if (options.path.empty()) return absl::InvalidArgumentError("no tokens file given");
  std::unique_ptr<BearerTokens> t(new BearerTokens(std::move(options)));
  auto stamp = Stat(t->options_.path);
  if (!stamp.ok()) return absl::InvalidArgumentError(stamp.status().message());
  auto tokens = t->Read();
  if (!tokens.ok()) return tokens.status();
  {
    MutexLock lock(&t->reload_mu_);
    t->stamp_ = *stamp;
  }
  {
    MutexLock lock(&t->mu_);
    t->tokens_ = std::make_shared<const std::vector<Digest>>(std::move(*tokens));
  }
  t->next_check_ns_ =
      absl::GetCurrentTimeNanos() + absl::ToInt64Nanoseconds(t->options_.recheck_interval);
  return t;
}

std::shared_ptr<const std::vector<BearerTokens::Digest>> BearerTokens::Current() const {
  MutexLock lock(&mu_);
  return tokens_;
}

size_t BearerTokens::num_tokens() const { return Current()->size(); }

void BearerTokens::MaybeReload() const {
  const int64_t now = absl::GetCurrentTimeNanos();
  if (now < next_check_ns_.load(std::memory_order_relaxed)) return;
  // One thread rechecks; the others go on with the tokens in force.
  if (!reload_mu_.TryLock()) return;
  ReloadLocked(now);
  reload_mu_.Unlock();
}

void BearerTokens::ReloadLocked(int64_t now) const {
  next_check_ns_.store(now + absl::ToInt64Nanoseconds(options_.recheck_interval));
  absl::StatusOr<FileStamp> stamp = Stat(options_.path);
  if (!stamp.ok()) {
    if (!stat_failed_) {
      LOG(WARNING) << "auth tokens: " << stamp.status().message()
                   << "; the tokens loaded before stay in force";
    }
    stat_failed_ = true;
    return;
  }
  stat_failed_ = false;
  if (*stamp == stamp_ || (refused_.has_value() && *stamp == *refused_)) return;
  absl::StatusOr<std::vector<Digest>> tokens = Read();
  if (!tokens.ok()) {
    LOG(WARNING) << "auth tokens: not reloaded: " << tokens.status().message()
                 << "; the tokens loaded before stay in force";
    refused_ = *stamp;
    return;
  }
  stamp_ = *stamp;
  refused_.reset();
  const size_t n = tokens->size();
  {
    MutexLock lock(&mu_);
    tokens_ = std::make_shared<const std::vector<Digest>>(std::move(*tokens));
  }
  ++reloads_;
  LOG(INFO) << "auth tokens: reloaded " << options_.path << " (" << n << " tokens)";
}

absl::Status BearerTokens::Check(absl::string_view authorization) const {
  MaybeReload();
  authorization = absl::StripAsciiWhitespace(authorization);
  if (authorization.empty()) {
    return Unauthenticated(
        "missing bearer token (send the header 'authorization: Bearer <token>')");
  }
  const size_t space = authorization.find(' ');
  if (space == absl::string_view::npos ||
      !absl::EqualsIgnoreCase(authorization.substr(0, space), "bearer")) {
    return Unauthenticated("the authorization header is not a bearer token ('Bearer <token>')");
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(authorization.substr(space));
  const Digest presented = Sha256(token);
  const auto tokens = Current();
  int match = 0;
  for (const Digest& d : *tokens) {
    match |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0 ? 1 : 0;
  }
  if (match == 0 || token.empty()) return Unauthenticated("invalid bearer token");
  return absl::OkStatus();
}

}  // namespace weft
