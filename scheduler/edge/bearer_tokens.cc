#include "scheduler/edge/bearer_tokens.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
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

namespace {

bool TenantNameOk(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// One key=value field of a token's line into `t`; the error names the field's key or
// position, never the line's content (the token is on it).
absl::Status ParseField(absl::string_view field, int index, Tenant* t) {
  const size_t eq = field.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("field ", index, " is not key=value (one token a line, then its tenant's "
                     "tenant=, max_streams=, max_priority=, tokens_per_minute=)"));
  }
  const absl::string_view key = field.substr(0, eq), value = field.substr(eq + 1);
  if (key == "tenant") {
    if (!TenantNameOk(value)) {
      return absl::InvalidArgumentError("tenant= must be 1..64 of [A-Za-z0-9._-]");
    }
    t->name = std::string(value);
    return absl::OkStatus();
  }
  int64_t n = 0;
  const bool number = absl::SimpleAtoi(value, &n);
  if (key == "max_streams" && number && n >= 1 && n <= 1000000) {
    t->max_streams = static_cast<int32_t>(n);
  } else if (key == "max_priority" && number && n >= -1000000 && n <= 1000000) {
    t->max_priority = static_cast<int32_t>(n);
  } else if (key == "tokens_per_minute" && number && n >= 1 && n <= (int64_t{1} << 40)) {
    t->tokens_per_minute = n;
  } else if (key == "max_streams" || key == "max_priority" || key == "tokens_per_minute") {
    return absl::InvalidArgumentError(absl::StrCat(key, "= is not a number in its range"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("field ", index, ": unknown key"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<BearerTokens::Entry>> BearerTokens::Parse(absl::string_view text) {
  std::vector<Entry> out;
  std::map<std::string, std::shared_ptr<const Tenant>> tenants;  // one object per name
  std::map<std::string, bool> limits_given;
  std::vector<std::string> names;  // out[i]'s tenant
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const absl::string_view token = fields[0];
    if (token.size() > kMaxTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": a token is at most ", kMaxTokenBytes, " bytes"));
    }
    for (char c : token) {
      if (c <= 0x20 || c >= 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": a token is printable ASCII without spaces (one token a line)"));
      }
    }
    Tenant t;
    for (size_t i = 1; i < fields.size(); ++i) {
      if (absl::Status s = ParseField(fields[i], static_cast<int>(i + 1), &t); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", s.message()));
      }
    }
    const bool has_limits = t.max_streams > 0 || t.max_priority.has_value() || t.tokens_per_minute > 0;
    auto it = tenants.find(t.name);
    if (it == tenants.end()) {
      it = tenants.emplace(t.name, std::make_shared<const Tenant>(t)).first;
      limits_given[t.name] = has_limits;
    } else if (has_limits && !(*it->second == t)) {
      if (limits_given[t.name]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": tenant ", t.name, " was given other limits on an earlier line"));
      }
      it->second = std::make_shared<const Tenant>(t);  // the first line that gives limits
      limits_given[t.name] = true;
    }
    out.push_back(Entry{Sha256(token), nullptr});  // its tenant once every line is read
    names.push_back(t.name);
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].tenant = tenants.at(names[i]);
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.digest < b.digest; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Entry& a, const Entry& b) { return a.digest == b.digest; }),
            out.end());
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

absl::StatusOr<std::vector<BearerTokens::Entry>> BearerTokens::Read() const {
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
    t->tokens_ = std::make_shared<const std::vector<Entry>>(std::move(*tokens));
  }
  t->next_check_ns_ =
      absl::GetCurrentTimeNanos() + absl::ToInt64Nanoseconds(t->options_.recheck_interval);
  return t;
}

std::shared_ptr<const std::vector<BearerTokens::Entry>> BearerTokens::Current() const {
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

void BearerTokens::FailReload(const std::string& why) const {
  LOG(WARNING) << "auth tokens: " << why << "; failing closed: no token is accepted until "
               << options_.path << " loads again";
  {
    MutexLock lock(&mu_);
    tokens_ = std::make_shared<const std::vector<Entry>>();
  }
  ++failed_reloads_;
  if (options_.on_failed_reload) options_.on_failed_reload();
}

void BearerTokens::ReloadLocked(int64_t now) const {
  next_check_ns_.store(now + absl::ToInt64Nanoseconds(options_.recheck_interval));
  absl::StatusOr<FileStamp> stamp = Stat(options_.path);
  if (!stamp.ok()) {
    if (!stat_failed_) FailReload(std::string(stamp.status().message()));
    stat_failed_ = true;
    return;
  }
  // Back after a failed stat: re-read even when the stamp is the old one.
  const bool was_missing = stat_failed_;
  stat_failed_ = false;
  if (!was_missing && (*stamp == stamp_ || (refused_.has_value() && *stamp == *refused_))) return;
  absl::StatusOr<std::vector<Entry>> tokens = Read();
  if (!tokens.ok()) {
    refused_ = *stamp;
    FailReload(absl::StrCat("not reloaded: ", tokens.status().message()));
    return;
  }
  stamp_ = *stamp;
  refused_.reset();
  const size_t n = tokens->size();
  {
    MutexLock lock(&mu_);
    tokens_ = std::make_shared<const std::vector<Entry>>(std::move(*tokens));
  }
  ++reloads_;
  LOG(INFO) << "auth tokens: reloaded " << options_.path << " (" << n << " tokens)";
}

absl::Status BearerTokens::Check(absl::string_view authorization) const {
  return Resolve(authorization).status();
}

absl::StatusOr<std::shared_ptr<const Tenant>> BearerTokens::Resolve(
    absl::string_view authorization) const {
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
  // Every digest is compared (no early exit); the match's index is kept without a branch
  // on the comparison's result.
  size_t found = tokens->size();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const size_t eq = CRYPTO_memcmp((*tokens)[i].digest.data(), presented.data(), 32) == 0;
    found = eq * i + (1 - eq) * found;
  }
  if (found == tokens->size() || token.empty()) return Unauthenticated("invalid bearer token");
  return (*tokens)[found].tenant;
}

}  // namespace weft
