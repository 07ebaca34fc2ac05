#include "common/metrics_http.h"

#include <httplib.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/build_info.h"
#include "common/http_gate.h"
#include "glog/logging.h"
#include "prometheus/gauge.h"
#include "prometheus/text_serializer.h"

namespace weft {
namespace {

constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

void Probe(const std::function<bool()>& holds, const char* what, httplib::Response& res) {
  if (!holds || holds()) {
    res.set_content("ok\n", "text/plain");
  } else {
    res.status = 503;
    res.set_content(absl::StrCat("not ", what, "\n"), "text/plain");
  }
}

// weft_build_info{version, revision} 1: the build's identity (common/build_info.h), the
// Prometheus convention for versions (join on it, or count distinct revisions in a rollout).
std::shared_ptr<prometheus::Registry> BuildInfoRegistry(const prometheus::Labels& constant) {
  auto r = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("weft_build_info")
      .Help("1, labelled with the release version and the source revision this binary was "
            "built from (the same as its --version).")
      .Labels(constant)
      .Register(*r)
      .Add({{"version", std::string(BuildVersion())}, {"revision", std::string(BuildRevision())}})
      .Set(1);
  return r;
}

}  // namespace

absl::Status MetricsHttpOptions::Validate() const {
  if (registry == nullptr) return absl::InvalidArgumentError("metrics HTTP: no registry");
  if (port < 0 || port > 65535) return absl::InvalidArgumentError("metrics HTTP: bad port");
  if (max_connections < 1) {
    return absl::InvalidArgumentError("metrics HTTP: max_connections must be >= 1");
  }
  if (request_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError("metrics HTTP: request_timeout must be >= 1 s");
  }
  return absl::OkStatus();
}

namespace {

HttpGateOptions GateOptions(const MetricsHttpOptions& o) {
  HttpGateOptions g;
  g.max_connections = o.max_connections;
  g.overflow_threads = 4;
  g.max_header_bytes = 16 << 10;
  g.max_header_fields = 64;
  g.max_body_wire_bytes = 64 << 10;
  g.request_timeout = o.request_timeout;
  // Scrapers keep connections open; each holds a thread, so idle ones are let go quickly.
  g.keep_alive_timeout = absl::Seconds(2);
  g.write_timeout = absl::Seconds(5);
  return g;
}

}  // namespace

MetricsHttp::MetricsHttp(MetricsHttpOptions options)
    : options_(std::move(options)),
      server_(std::make_unique<GatedHttpServer>(GateOptions(options_))) {}

absl::StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(MetricsHttpOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<MetricsHttp> m(new MetricsHttp(std::move(options)));
  GatedHttpServer& server = *m->server_;
  const MetricsHttpOptions& o = m->options_;
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second process
  // binds the same port silently and the kernel splits the scrapes between the two.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [registry = o.registry, build_info = BuildInfoRegistry(o.constant_labels)](
                             const httplib::Request&, httplib::Response& res) {
    std::vector<prometheus::MetricFamily> families = registry->Collect();
    for (prometheus::MetricFamily& f : build_info->Collect()) families.push_back(std::move(f));
    res.set_content(prometheus::TextSerializer().Serialize(families), kTextFormat);
  });
  server.Get("/livez", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/startupz", [started = o.started](const httplib::Request&, httplib::Response& res) {
    Probe(started, "started", res);
  });
  auto ready = o.ready ? o.ready : o.started;
  server.Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
    Probe(ready, "ready", res);
  });
  const std::string addr = absl::StrCat(o.host, ":", o.port);
  if (o.port == 0) {
    m->port_ = server.bind_to_any_port(o.host);
  } else {
    m->port_ = server.bind_to_port(o.host, o.port) ? o.port : -1;
  }
  if (m->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", addr,
                                               ": cannot bind (in use, or a bad address?)"));
  }
  m->listener_ = std::thread([&server] { server.listen_after_bind(); });
  // Until the accept loop runs, stop() would not end it (connections already queue on
  // the bound socket meanwhile). Bounded: the loop starts at once.
  for (int i = 0; i < 5000 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  LOG(INFO) << "metrics and probes on http://" << o.host << ":" << m->port_
            << " (/metrics /livez /startupz /readyz)";
  return m;
}

MetricsHttp::~MetricsHttp() {
  server_->Stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace weft
