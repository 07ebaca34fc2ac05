// MetricsHttp: serves a Prometheus registry in text format over HTTP (prometheus-cpp's
// civetweb exposer), at /metrics on `0.0.0.0:port` (port 0 = ephemeral; the chosen port
// is logged and returned by port()).
// Thread-safety: prometheus-cpp metrics are thread-safe; this object is created once.
#ifndef WEFT_COMMON_METRICS_HTTP_H_
#define WEFT_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace weft {

class MetricsHttp {
 public:
  // Fails (UNAVAILABLE) when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttp>> Start(
      int port, std::shared_ptr<prometheus::Registry> registry, const std::string& host = "0.0.0.0");
  int port() const { return port_; }

 private:
  MetricsHttp() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_HTTP_H_
