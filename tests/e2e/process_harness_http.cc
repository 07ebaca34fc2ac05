// process_harness.h: metrics pages and plain HTTP (MetricsPage, ScrapeMetrics, HttpGet),
// and the shipped HAProxy started on free ports.
#include "tests/e2e/process_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace weft::e2e {

// --- Metrics --------------------------------------------------------------------------

namespace {

// Removes label `name` from a series key 'metric{a="x",name="y",b="z"}' (values may hold
// escaped quotes and commas) and returns its value (escapes kept as printed); the key
// keeps the other labels in their order, and loses its braces when none is left.
std::optional<std::string> TakeLabel(std::string* key, absl::string_view name) {
  const size_t open = key->find('{');
  if (open == std::string::npos || key->back() != '}') return std::nullopt;
  std::vector<std::string> kept;
  std::optional<std::string> taken;
  size_t i = open + 1;
  const size_t end = key->size() - 1;
  while (i < end) {
    const size_t eq = key->find('=', i);
    if (eq == std::string::npos || eq + 1 >= end || (*key)[eq + 1] != '"') return std::nullopt;
    size_t j = eq + 2;
    while (j < end && (*key)[j] != '"') j += (*key)[j] == '\\' ? 2 : 1;
    if (j >= end) return std::nullopt;  // unterminated value: leave the key alone
    const std::string label_name = key->substr(i, eq - i);
    if (label_name == name) {
      taken = key->substr(eq + 2, j - eq - 2);
    } else {
      kept.push_back(key->substr(i, j + 1 - i));
    }
    i = j + 1;
    if (i < end && (*key)[i] == ',') ++i;
  }
  if (!taken.has_value()) return std::nullopt;
  std::string rebuilt = key->substr(0, open);
  if (!kept.empty()) absl::StrAppend(&rebuilt, "{", absl::StrJoin(kept, ","), "}");
  *key = std::move(rebuilt);
  return taken;
}

}  // namespace

MetricsPage MetricsPage::Parse(const std::string& text) {
  MetricsPage page;
  page.text_ = text;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    // "name{labels} value [timestamp]"; label values may hold spaces, so split after '}'.
    size_t key_end = line.find('}');
    key_end = key_end == absl::string_view::npos ? line.find(' ') : key_end + 1;
    if (key_end == absl::string_view::npos || key_end >= line.size()) continue;
    absl::string_view rest = line.substr(key_end);
    while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
    rest = rest.substr(0, rest.find(' '));
    double v = 0;
    if (rest == "+Inf") {
      v = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(rest, &v)) {
      continue;
    }
    std::string key(line.substr(0, key_end));
    if (std::optional<std::string> model = TakeLabel(&key, "model"); model.has_value()) {
      page.models_.insert(*model);
      ++page.model_labelled_;
    }
    page.series_[key] = v;
  }
  return page;
}

double MetricsPage::Get(const std::string& series, double missing) const {
  auto it = series_.find(series);
  return it == series_.end() ? missing : it->second;
}

double MetricsPage::Sum(const std::string& name) const {
  double sum = 0;
  for (const auto& [key, v] : series_) {
    if (key == name || (key.size() > name.size() && key.compare(0, name.size(), name) == 0 &&
                        key[name.size()] == '{')) {
      sum += v;
    }
  }
  return sum;
}

absl::StatusOr<HttpReply> HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  struct timeval tv = {10, 0};  // hang guard
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", std::strerror(errno)));
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return absl::UnavailableError("send");
  }
  std::string resp;
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      resp.append(buf, n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(fd);
  // "HTTP/1.x NNN ..."
  HttpReply reply;
  const size_t body = resp.find("\r\n\r\n");
  if (resp.compare(0, 5, "HTTP/") != 0 || resp.size() < 12 ||
      !absl::SimpleAtoi(resp.substr(9, 3), &reply.status) || body == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("HTTP GET ", path, ": ", resp.substr(0, 80)));
  }
  reply.body = resp.substr(body + 4);
  return reply;
}

absl::StatusOr<MetricsPage> ScrapeMetrics(int port) {
  absl::StatusOr<HttpReply> r = HttpGet(port, "/metrics");
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return absl::UnavailableError(absl::StrCat("metrics HTTP ", r->status, ": ", r->body.substr(0, 80)));
  }
  return MetricsPage::Parse(r->body);
}

int HttpStatus(int port, const std::string& path) {
  absl::StatusOr<HttpReply> r = HttpGet(port, path);
  return r.ok() ? r->status : -1;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartShippedHaproxy(const std::string& haproxy,
                                                                 const std::string& models_cfg,
                                                                 bool http,
                                                                 const std::string& log_path,
                                                                 HaproxyPorts* ports) {
  const size_t admin = http ? 2 : 1;
  std::vector<int> used;
  auto proxy = StartOnFreePorts(
      static_cast<int>(admin) + 1,
      [&](const std::vector<int>& p) {
        std::vector<std::string> argv = {"/usr/bin/env",
                                         absl::StrCat("WEFT_PROXY_BIND=127.0.0.1:", p[0])};
        if (http) argv.push_back(absl::StrCat("WEFT_PROXY_HTTP_BIND=127.0.0.1:", p[1]));
        argv.insert(argv.end(), {absl::StrCat("WEFT_PROXY_ADMIN=127.0.0.1:", p[admin]), haproxy,
                                 "-db", "-f", Runfile("deploy/proxy/haproxy.cfg"), "-f",
                                 models_cfg});
        return argv;
      },
      log_path, [&](const std::vector<int>& p) { return HttpStatus(p[admin], "/metrics") == 200; },
      &used);
  if (proxy.ok()) *ports = HaproxyPorts{used[0], http ? used[1] : 0, used[admin]};
  return proxy;
}

}  // namespace weft::e2e
