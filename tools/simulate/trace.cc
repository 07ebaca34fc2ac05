#include "tools/simulate/trace.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace weft::sim {
namespace {

absl::Status ValidateLength(const char* what, const LengthDistribution& d) {
  if (!(d.median >= 1) || !(d.sigma >= 0) || d.min < 1 || d.max < d.min) {
    return absl::InvalidArgumentError(absl::StrCat("bad ", what, " length distribution"));
  }
  return absl::OkStatus();
}

int32_t Draw(const LengthDistribution& d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const double v = std::exp(std::log(d.median) + d.sigma * normal(rng));
  return std::clamp(static_cast<int32_t>(std::lround(v)), d.min, d.max);
}

}  // namespace

absl::Status TraceOptions::Validate() const {
  if (num_requests < 1) return absl::InvalidArgumentError("num_requests must be >= 1");
  if (absl::Status s = ValidateLength("prompt", prompt); !s.ok()) return s;
  if (absl::Status s = ValidateLength("output", output); !s.ok()) return s;
  if (!(arrival_rate >= 0)) return absl::InvalidArgumentError("arrival_rate must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<TraceOptions> TracePreset(absl::string_view name) {
  TraceOptions o;
  o.prompt = {96, 0.9, 8, 1024};
  if (name == "sharegpt") {
    o.output = {48, 1.0, 4, 512};
  } else if (name == "lowvar") {
    o.output = {48, 0.1, 4, 512};
  } else if (name == "fixed") {
    o.prompt = {128, 0, 128, 128};
    o.output = {128, 0, 128, 128};
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown trace '", name, "' (sharegpt, lowvar or fixed)"));
  }
  return o;
}

std::vector<TraceRequest> GenerateTrace(const TraceOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int32_t> token(300, 39999);
  std::exponential_distribution<double> gap(options.arrival_rate > 0 ? options.arrival_rate : 1);
  std::vector<TraceRequest> trace(options.num_requests);
  double t = 0;
  for (TraceRequest& r : trace) {
    const int32_t prompt_len = Draw(options.prompt, rng);
    r.output_len = Draw(options.output, rng);
    r.prompt_token_ids.resize(prompt_len);
    for (int32_t& id : r.prompt_token_ids) id = token(rng);
    if (options.arrival_rate > 0) t += gap(rng);
    r.arrival_s = t;
  }
  return trace;
}

}  // namespace weft::sim
