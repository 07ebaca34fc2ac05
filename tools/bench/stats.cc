#include "tools/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string ErrorKey(const absl::Status& s) {
  std::string msg(s.message());
  if (msg.size() > 120) msg = msg.substr(0, 117) + "...";
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", msg);
}

}  // namespace

double Percentile(absl::Span<const double> sorted, double q) {
  if (sorted.empty()) return kNaN;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution Describe(absl::Span<const double> sorted) {
  Distribution d;
  d.count = static_cast<int64_t>(sorted.size());
  if (sorted.empty()) {
    d.mean = d.p50 = d.p90 = d.p99 = d.max = kNaN;
    return d;
  }
  double sum = 0;
  for (double v : sorted) sum += v;
  d.mean = sum / static_cast<double>(sorted.size());
  d.p50 = Percentile(sorted, 0.50);
  d.p90 = Percentile(sorted, 0.90);
  d.p99 = Percentile(sorted, 0.99);
  d.max = sorted.back();
  return d;
}

double Median(std::vector<double> values) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  return Percentile(values, 0.5);
}

void Summarize(absl::Span<const RequestRecord> records, RunSummary* summary,
               LatencySamples* samples) {
  *summary = RunSummary();
  *samples = LatencySamples();
  summary->num_requests = static_cast<int32_t>(records.size());
  int64_t first_send = std::numeric_limits<int64_t>::max();
  int64_t last_end = std::numeric_limits<int64_t>::min();
  int64_t max_lag = 0;
  for (const RequestRecord& r : records) {
    if (r.send_ns >= 0) {
      first_send = std::min(first_send, r.send_ns);
      max_lag = std::max(max_lag, r.send_ns - r.scheduled_ns);
    }
    if (r.end_ns >= 0) last_end = std::max(last_end, r.end_ns);
    if (!r.ok()) {
      ++summary->num_failed;
      ++summary->errors[ErrorKey(r.status)];
      continue;
    }
    ++summary->num_ok;
    summary->output_tokens += r.output_tokens;
    summary->prompt_tokens += r.prompt_tokens;
    if (r.cached_prompt_tokens > 0) summary->cached_prompt_tokens += r.cached_prompt_tokens;
    if (r.output_tokens < r.max_tokens) ++summary->num_short;
    if (r.server_output_tokens >= 0 && r.server_output_tokens != r.output_tokens) {
      ++summary->num_count_mismatch;
    }
    samples->e2e_s.push_back(static_cast<double>(r.end_ns - r.send_ns) * 1e-9);
    if (r.arrivals.empty()) continue;
    samples->ttft_s.push_back(static_cast<double>(r.arrivals[0].t_ns - r.send_ns) * 1e-9);
    for (size_t i = 0; i < r.arrivals.size(); ++i) {
      const TokenArrival& a = r.arrivals[i];
      if (i > 0) {
        samples->itl_s.push_back(static_cast<double>(a.t_ns - r.arrivals[i - 1].t_ns) * 1e-9);
      }
      for (int32_t k = 1; k < a.num_tokens; ++k) samples->itl_s.push_back(0.0);
    }
  }
  std::sort(samples->ttft_s.begin(), samples->ttft_s.end());
  std::sort(samples->itl_s.begin(), samples->itl_s.end());
  std::sort(samples->e2e_s.begin(), samples->e2e_s.end());
  summary->ttft_s = Describe(samples->ttft_s);
  summary->itl_s = Describe(samples->itl_s);
  summary->e2e_s = Describe(samples->e2e_s);
  summary->max_dispatch_lag_s = static_cast<double>(max_lag) * 1e-9;
  if (last_end > first_send && first_send != std::numeric_limits<int64_t>::max()) {
    summary->wall_s = static_cast<double>(last_end - first_send) * 1e-9;
    summary->output_tok_s = static_cast<double>(summary->output_tokens) / summary->wall_s;
    summary->total_tok_s =
        static_cast<double>(summary->output_tokens + summary->prompt_tokens) / summary->wall_s;
    summary->req_s = static_cast<double>(summary->num_ok) / summary->wall_s;
  }
}

}  // namespace bench
}  // namespace weft
