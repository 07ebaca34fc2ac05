#include "common/metrics_http.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {

absl::StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(
    int port, std::shared_ptr<prometheus::Registry> registry, const std::string& host) {
  std::unique_ptr<MetricsHttp> m(new MetricsHttp());
  const std::string addr = absl::StrCat(host, ":", port);
  // prometheus-cpp reports a bind failure by throwing; this is the one place we catch.
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(addr, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", addr, ": ", e.what()));
  }
  m->registry_ = std::move(registry);
  m->exposer_->RegisterCollectable(m->registry_);
  const auto ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? port : ports.front();
  LOG(INFO) << "metrics on http://" << host << ":" << m->port_ << "/metrics";
  return m;
}

}  // namespace weft
