#include "tools/bench/report.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace bench {
namespace {

struct Metric {
  const char* name;   // JSON key
  const char* label;  // table heading
  double (*get)(const RunSummary&);
};

constexpr Metric kMetrics[] = {
    {"output_tok_s", "out tok/s", [](const RunSummary& s) { return s.output_tok_s; }},
    {"req_s", "req/s", [](const RunSummary& s) { return s.req_s; }},
    {"ttft_p50_s", "TTFT p50", [](const RunSummary& s) { return s.ttft_s.p50; }},
    {"ttft_p99_s", "TTFT p99", [](const RunSummary& s) { return s.ttft_s.p99; }},
    {"itl_p50_s", "ITL p50", [](const RunSummary& s) { return s.itl_s.p50; }},
    {"itl_p99_s", "ITL p99", [](const RunSummary& s) { return s.itl_s.p99; }},
    {"e2e_p50_s", "e2e p50", [](const RunSummary& s) { return s.e2e_s.p50; }},
    {"e2e_p99_s", "e2e p99", [](const RunSummary& s) { return s.e2e_s.p99; }},
};

// JSON has no NaN: unknown values are null.
nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json DistToJson(const Distribution& d) {
  return {{"count", d.count}, {"mean", Num(d.mean)}, {"p50", Num(d.p50)},
          {"p90", Num(d.p90)}, {"p99", Num(d.p99)}, {"max", Num(d.max)}};
}

const char* ModeName(LoadMode m) {
  switch (m) {
    case LoadMode::kClosed: return "closed";
    case LoadMode::kPoisson: return "poisson";
    case LoadMode::kReplay: return "replay";
  }
  return "?";
}

std::string Row(absl::string_view target, absl::string_view pair, absl::string_view okfail,
                const double (&v)[8]) {
  return absl::StrFormat("%-24s %5s %9s %10.1f %7.2f %9s %9s %9s %9s %9s %9s\n",
                         target.substr(0, 24), pair, okfail, v[0], v[1], FormatSeconds(v[2]),
                         FormatSeconds(v[3]), FormatSeconds(v[4]), FormatSeconds(v[5]),
                         FormatSeconds(v[6]), FormatSeconds(v[7]));
}

void PrintWarnings(std::ostream& out, const RunResult& r) {
  const RunSummary& s = r.summary;
  if (s.num_failed > 0) {
    out << absl::StrFormat("  ! %s pair %d: %d of %d requests FAILED\n", r.target, r.pair + 1,
                           s.num_failed, s.num_requests);
    for (const auto& [what, count] : s.errors) out << "      " << count << "x " << what << "\n";
  }
  if (s.num_short > 0) {
    out << absl::StrFormat("  ! %s pair %d: %d requests returned fewer tokens than max_tokens\n",
                           r.target, r.pair + 1, s.num_short);
  }
  if (s.num_count_mismatch > 0) {
    out << absl::StrFormat(
        "  ! %s pair %d: %d requests: server-reported token count != tokens received\n",
        r.target, r.pair + 1, s.num_count_mismatch);
  }
}

}  // namespace

std::string FormatRatio(double r) {
  return std::isfinite(r) ? absl::StrFormat("%.3g", r) : "-";
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-3) return absl::StrFormat("%.0fus", s * 1e6);
  if (s < 1.0) return absl::StrFormat("%.1fms", s * 1e3);
  return absl::StrFormat("%.2fs", s);
}

std::vector<Comparison> CompareLevel(absl::Span<const RunResult> runs, int32_t level_index,
                                     absl::Span<const std::string> targets) {
  std::vector<Comparison> out;
  if (targets.size() < 2) return out;
  // (target, pair) -> summary
  std::map<std::pair<int32_t, int32_t>, const RunResult*> by;
  for (const RunResult& r : runs) {
    if (r.level_index == level_index) by[{r.target_index, r.pair}] = &r;
  }
  for (int32_t t = 1; t < static_cast<int32_t>(targets.size()); ++t) {
    Comparison c;
    c.level_index = level_index;
    c.numerator = targets[0];
    c.denominator = targets[t];
    for (const Metric& m : kMetrics) {
      MetricRatio ratio;
      ratio.metric = m.name;
      for (const auto& [key, a] : by) {
        if (key.first != 0) continue;
        const auto b = by.find({t, key.second});
        if (b == by.end()) continue;
        c.level = a->level;
        ratio.per_pair.push_back(m.get(a->summary) / m.get(b->second->summary));
      }
      ratio.median = Median(ratio.per_pair);
      c.ratios.push_back(std::move(ratio));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void PrintLevelTable(std::ostream& out, absl::string_view title,
                     absl::Span<const RunResult> runs, int32_t level_index,
                     absl::Span<const Comparison> comparisons) {
  out << "\n== " << title << " ==\n";
  out << absl::StrFormat("%-24s %5s %9s %10s %7s %9s %9s %9s %9s %9s %9s\n", "target", "pair",
                         "ok/fail", "out tok/s", "req/s", "TTFT p50", "TTFT p99", "ITL p50",
                         "ITL p99", "e2e p50", "e2e p99");
  std::map<int32_t, std::vector<const RunResult*>> by_target;
  for (const RunResult& r : runs) {
    if (r.level_index != level_index) continue;
    by_target[r.target_index].push_back(&r);
  }
  for (const auto& [t, list] : by_target) {
    for (const RunResult* r : list) {
      double v[8];
      for (int i = 0; i < 8; ++i) v[i] = kMetrics[i].get(r->summary);
      out << Row(r->target, absl::StrCat(r->pair + 1),
                 absl::StrCat(r->summary.num_ok, "/", r->summary.num_failed), v);
    }
    if (list.size() > 1) {
      double v[8];
      for (int i = 0; i < 8; ++i) {
        std::vector<double> xs;
        for (const RunResult* r : list) xs.push_back(kMetrics[i].get(r->summary));
        v[i] = Median(xs);
      }
      out << Row(list[0]->target, "med", "", v);
    }
  }
  for (const auto& [t, list] : by_target) {
    for (const RunResult* r : list) PrintWarnings(out, *r);
  }
  for (const Comparison& c : comparisons) {
    if (c.level_index != level_index || c.ratios.empty()) continue;
    out << absl::StrFormat("%s / %s, median of %d per-pair ratios [each pair]:\n", c.numerator,
                           c.denominator, c.ratios[0].per_pair.size());
    for (size_t i = 0; i < c.ratios.size(); ++i) {
      const MetricRatio& m = c.ratios[i];
      std::vector<std::string> each;
      for (double x : m.per_pair) each.push_back(FormatRatio(x));
      out << absl::StrFormat("  %-10s %9s  [%s]\n", kMetrics[i].label,
                             std::isfinite(m.median) ? absl::StrCat(FormatRatio(m.median), "x") : "-", absl::StrJoin(each, " "));
    }
  }
}

nlohmann::json SummaryToJson(const RunSummary& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [what, count] : s.errors) errors[what] = count;
  return {{"num_requests", s.num_requests},
          {"num_ok", s.num_ok},
          {"num_failed", s.num_failed},
          {"num_short", s.num_short},
          {"num_count_mismatch", s.num_count_mismatch},
          {"output_tokens", s.output_tokens},
          {"prompt_tokens", s.prompt_tokens},
          {"cached_prompt_tokens", s.cached_prompt_tokens},
          {"wall_s", s.wall_s},
          {"output_tok_s", s.output_tok_s},
          {"total_tok_s", s.total_tok_s},
          {"req_s", s.req_s},
          {"max_dispatch_lag_s", s.max_dispatch_lag_s},
          {"ttft_s", DistToJson(s.ttft_s)},
          {"itl_s", DistToJson(s.itl_s)},
          {"e2e_s", DistToJson(s.e2e_s)},
          {"errors", errors}};
}

nlohmann::json RecordToJson(const RequestRecord& r) {
  nlohmann::json j = {{"index", r.index},
                      {"prompt_tokens", r.prompt_tokens},
                      {"max_tokens", r.max_tokens},
                      {"output_tokens", r.output_tokens},
                      {"scheduled_s", r.scheduled_ns * 1e-9},
                      {"send_s", r.send_ns * 1e-9},
                      {"end_s", r.end_ns * 1e-9},
                      {"ttft_s", r.arrivals.empty()
                                     ? nlohmann::json()
                                     : nlohmann::json((r.arrivals[0].t_ns - r.send_ns) * 1e-9)},
                      {"ok", r.ok()}};
  if (!r.ok()) j["error"] = r.status.ToString();
  if (r.server_output_tokens >= 0) j["server_output_tokens"] = r.server_output_tokens;
  if (r.cached_prompt_tokens >= 0) j["cached_prompt_tokens"] = r.cached_prompt_tokens;
  // Token arrivals relative to the send: [[seconds, tokens], ...].
  nlohmann::json arrivals = nlohmann::json::array();
  for (const TokenArrival& a : r.arrivals) {
    arrivals.push_back({(a.t_ns - r.send_ns) * 1e-9, a.num_tokens});
  }
  j["arrivals"] = std::move(arrivals);
  return j;
}

nlohmann::json ReportToJson(const nlohmann::json& config, absl::Span<const RunResult> runs,
                            absl::Span<const Comparison> comparisons, bool per_request) {
  nlohmann::json doc = {{"tool", "weft-bench"}, {"format_version", 1}, {"config", config}};
  nlohmann::json jruns = nlohmann::json::array();
  for (const RunResult& r : runs) {
    nlohmann::json j = {{"target", r.target},
                        {"target_index", r.target_index},
                        {"mode", ModeName(r.level.mode)},
                        {"level", r.level.value},
                        {"level_label", r.level.Label()},
                        {"pair", r.pair},
                        {"summary", SummaryToJson(r.summary)}};
    if (per_request) {
      nlohmann::json recs = nlohmann::json::array();
      for (const RequestRecord& rec : r.records) recs.push_back(RecordToJson(rec));
      j["requests"] = std::move(recs);
    }
    jruns.push_back(std::move(j));
  }
  doc["runs"] = std::move(jruns);
  nlohmann::json jcmp = nlohmann::json::array();
  for (const Comparison& c : comparisons) {
    nlohmann::json metrics = nlohmann::json::object();
    for (const MetricRatio& m : c.ratios) {
      nlohmann::json per = nlohmann::json::array();
      for (double x : m.per_pair) per.push_back(Num(x));
      metrics[m.metric] = {{"per_pair", per}, {"median", Num(m.median)}};
    }
    jcmp.push_back({{"mode", ModeName(c.level.mode)},
                    {"level", c.level.value},
                    {"level_label", c.level.Label()},
                    {"numerator", c.numerator},
                    {"denominator", c.denominator},
                    {"ratios", metrics}});
  }
  doc["comparisons"] = std::move(jcmp);
  return doc;
}

}  // namespace bench
}  // namespace weft
