#include "tools/bench/target.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tools/bench/grpc_target.h"
#include "tools/bench/http_client.h"
#include "tools/bench/llama_target.h"

namespace weft {
namespace bench {

absl::Status RequestOptions::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0) {
    return absl::InvalidArgumentError("temperature must be finite and >= 0");
  }
  if (!(timeout_s > 0)) return absl::InvalidArgumentError("timeout_s must be > 0");
  if (!(constrained_fraction >= 0 && constrained_fraction <= 1)) {
    return absl::InvalidArgumentError("constrained_fraction must be in [0, 1]");
  }
  if (grpc_streams_per_connection < 1) {
    return absl::InvalidArgumentError("grpc_streams_per_connection must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Target>> MakeTarget(absl::string_view spec,
                                                   const RequestOptions& options) {
  std::string label;
  absl::string_view url = spec;
  const size_t scheme = spec.find("://");
  const size_t eq = spec.find('=');
  if (eq != absl::string_view::npos && scheme != absl::string_view::npos && eq < scheme) {
    label = std::string(spec.substr(0, eq));
    url = spec.substr(eq + 1);
  }
  if (label.empty()) label = std::string(url);
  if (absl::StartsWith(url, "grpc://")) {
    absl::string_view address = url;
    absl::ConsumePrefix(&address, "grpc://");
    absl::ConsumeSuffix(&address, "/");
    if (address.empty() || !absl::StrContains(address, ':')) {
      return absl::InvalidArgumentError(absl::StrCat("grpc target needs host:port: ", spec));
    }
    return std::unique_ptr<Target>(
        new GrpcTarget(std::move(label), std::string(address), options));
  }
  if (absl::StartsWith(url, "http://")) {
    absl::StatusOr<HttpEndpoint> ep = ParseHttpUrl(url);
    if (!ep.ok()) return ep.status();
    if (ep->path == "/") ep->path.clear();
    return std::unique_ptr<Target>(new LlamaHttpTarget(std::move(label), *std::move(ep), options));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("target must be grpc://host:port or http://host:port: ", spec));
}

}  // namespace bench
}  // namespace weft
