#include "tools/bench/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tools/bench/rng.h"

namespace weft {
namespace bench {
namespace {

// How one length is drawn. Lognormal: round(median * exp(sigma * N(0,1))), clipped.
struct LengthDist {
  enum Shape { kConstant, kLogNormal, kUniform } shape;
  double median;  // kConstant: the value; kLogNormal: the median
  double sigma;
  int32_t lo;
  int32_t hi;
};

struct KindSpec {
  TraceKind kind;
  absl::string_view name;
  LengthDist prompt;
  LengthDist output;
};

// The workloads of BENCHMARKS.md. Changing a row changes every seeded trace.
constexpr KindSpec kKinds[] = {
    {TraceKind::kFixed, "fixed",
     {LengthDist::kConstant, 128, 0, 128, 128},
     {LengthDist::kConstant, 128, 0, 128, 128}},
    {TraceKind::kShareGptLike, "sharegpt-like",
     {LengthDist::kLogNormal, 96, 0.9, 8, 1024},
     {LengthDist::kLogNormal, 48, 1.0, 4, 512}},
    {TraceKind::kShort, "short",
     {LengthDist::kLogNormal, 20, 0.5, 4, 128},
     {LengthDist::kLogNormal, 40, 0.6, 4, 256}},
    {TraceKind::kLongPrompt, "long-prompt",
     {LengthDist::kUniform, 0, 0, 1024, 2048},
     {LengthDist::kUniform, 0, 0, 16, 64}},
};

const KindSpec& Spec(TraceKind kind) {
  for (const KindSpec& s : kKinds) {
    if (s.kind == kind) return s;
  }
  return kKinds[0];
}

int32_t DrawLength(const LengthDist& d, Rng* rng) {
  switch (d.shape) {
    case LengthDist::kConstant:
      return static_cast<int32_t>(d.median);
    case LengthDist::kUniform:
      return static_cast<int32_t>(rng->UniformInt(d.lo, d.hi));
    case LengthDist::kLogNormal: {
      const double v = std::round(d.median * std::exp(d.sigma * rng->Normal()));
      return static_cast<int32_t>(std::clamp(v, static_cast<double>(d.lo),
                                             static_cast<double>(d.hi)));
    }
  }
  return d.lo;
}

}  // namespace

absl::StatusOr<TraceKind> ParseTraceKind(absl::string_view name) {
  for (const KindSpec& s : kKinds) {
    if (s.name == name) return s.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace '", name, "' (fixed, sharegpt-like, short, long-prompt)"));
}

absl::string_view TraceKindName(TraceKind kind) { return Spec(kind).name; }

absl::Status TraceOptions::Validate() const {
  if (num_requests < 1) return absl::InvalidArgumentError("num_requests must be >= 1");
  if (min_token_id < 0 || max_token_id < min_token_id) {
    return absl::InvalidArgumentError("need 0 <= min_token_id <= max_token_id");
  }
  return absl::OkStatus();
}

std::vector<TraceRequest> GenerateTrace(const TraceOptions& options) {
  const KindSpec& spec = Spec(options.kind);
  std::vector<TraceRequest> trace(options.num_requests);
  for (int32_t i = 0; i < options.num_requests; ++i) {
    Rng rng(MixSeed(options.seed, static_cast<uint64_t>(options.kind), i));
    TraceRequest& r = trace[i];
    const int32_t prompt_len = DrawLength(spec.prompt, &rng);
    r.max_tokens = DrawLength(spec.output, &rng);
    r.prompt.resize(prompt_len);
    for (int32_t& id : r.prompt) {
      id = static_cast<int32_t>(rng.UniformInt(options.min_token_id, options.max_token_id));
    }
  }
  return trace;
}

void AssignPoissonArrivals(double rate, uint64_t seed, std::vector<TraceRequest>* trace) {
  Rng rng(MixSeed(seed, 0x41727269766C ^ static_cast<uint64_t>(rate * 1e6)));
  double t = 0;
  for (size_t i = 0; i < trace->size(); ++i) {
    if (i > 0) t += rng.Exponential(rate);
    (*trace)[i].arrival_s = t;
  }
}

void SaltPrompts(uint64_t salt, int32_t min_token_id, int32_t max_token_id,
                 std::vector<TraceRequest>* trace) {
  for (size_t i = 0; i < trace->size(); ++i) {
    TraceRequest& r = (*trace)[i];
    if (r.prompt.empty()) continue;
    Rng rng(MixSeed(salt, 0x53616C74, i));
    r.prompt[0] = static_cast<int32_t>(rng.UniformInt(min_token_id, max_token_id));
  }
}

absl::StatusOr<TraceRequest> ParseTraceLine(absl::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  TraceRequest r;
  const auto prompt = j.find("prompt");
  if (prompt == j.end() || !prompt->is_array() || prompt->empty()) {
    return absl::InvalidArgumentError("\"prompt\" must be a non-empty array of token ids");
  }
  r.prompt.reserve(prompt->size());
  for (const auto& id : *prompt) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError("\"prompt\" holds a value that is not a token id");
    }
    r.prompt.push_back(id.get<int32_t>());
  }
  const auto max_tokens = j.find("max_tokens");
  if (max_tokens == j.end() || !max_tokens->is_number_integer() ||
      max_tokens->get<int64_t>() < 1 || max_tokens->get<int64_t>() > INT32_MAX) {
    return absl::InvalidArgumentError("\"max_tokens\" must be an integer >= 1");
  }
  r.max_tokens = max_tokens->get<int32_t>();
  const auto arrival = j.find("arrival_s");
  if (arrival != j.end()) {
    if (!arrival->is_number() || arrival->get<double>() < 0) {
      return absl::InvalidArgumentError("\"arrival_s\" must be a number >= 0");
    }
    r.arrival_s = arrival->get<double>();
  }
  return r;
}

std::string FormatTraceLine(const TraceRequest& request) {
  std::string out = "{\"prompt\":[";
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (i > 0) out += ',';
    absl::StrAppend(&out, request.prompt[i]);
  }
  absl::StrAppend(&out, "],\"max_tokens\":", request.max_tokens);
  if (request.arrival_s >= 0) {
    nlohmann::json a = request.arrival_s;  // shortest round-trip representation
    absl::StrAppend(&out, ",\"arrival_s\":", a.dump());
  }
  out += '}';
  return out;
}

absl::StatusOr<std::vector<TraceRequest>> ReadTraceFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace file ", path));
  std::vector<TraceRequest> trace;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    absl::StatusOr<TraceRequest> r = ParseTraceLine(line);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": ", r.status().message()));
    }
    trace.push_back(*std::move(r));
  }
  if (trace.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no requests"));
  return trace;
}

absl::Status WriteTraceFile(const std::string& path, absl::Span<const TraceRequest> trace) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  for (const TraceRequest& r : trace) out << FormatTraceLine(r) << '\n';
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace weft
