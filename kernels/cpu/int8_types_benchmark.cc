// The int8 matmul per weight type beside Q4_1, A/B interleaved (BENCHMARKS.md): for each
// shape and m, `--pairs` rounds of (Q4_1, type) timed back to back on one thread; each
// prints weight bytes/s (bytes of the GGUF encoding, i.e. the file's bits per weight) and
// GOPS (2 x multiply-adds per second), and the median over the pairs of
//   ratio = (type's rate) / (Q4_1's rate)           GOPS at the same shape
//   per weight byte = ratio x (type's bytes per weight / Q4_1's)
// (at m = 1, where a step streams the weights, the second is the ratio of weight bytes/s).
// The weights cycle through ~256 MB of copies so that m = 1 reads them from memory (HOT
// set in the environment: one copy, cache-resident).
//   bazel run -c opt //kernels:cpu_int8_types_benchmark -- [--isa=avx2|scalar|avx512vnni|amx]
//       [--pairs=7] [--seconds=0.25] [--types=q5_0,q5_1,q4_k,q5_k,q6_k,q8_0,q4_0]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/ggml_types.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/testing/random_weights.h"

namespace weft::kernels {
namespace {

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// One type's packed weights (copies to cycle through) and a batch of activations.
class Case {
 public:
  Case(GgmlType type, int64_t n, int64_t k, int64_t m) : type_(type), n_(n), k_(k), m_(m) {
    std::mt19937 rng(1);
    const std::vector<uint8_t> src = testing::RandomQuantRows(type, n, k, rng);
    bytes_ = Int8PackedBytes(type, n, k);
    copies_ = std::getenv("HOT") ? 1 : std::max<int64_t>(1, (int64_t{256} << 20) / bytes_);
    w_.resize(copies_ * bytes_);
    for (int64_t c = 0; c < copies_; ++c) {
      PackInt8Weights(QuantMatrix{type, src.data(), n, k, RowBytes(type, k)},
                      w_.data() + c * bytes_);
    }
    std::vector<float> x(m * k);
    for (float& f : x) f = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    q_.resize(m * k);
    d_.resize(m * k / 32);
    ds_.resize(m * k / 32);
    qsum_.resize(m * k / 32);
    rows_ = Q8Rows{k, q_.data(), d_.data(), ds_.data(), qsum_.data()};
    QuantizeRowsQ8(x.data(), k, 0, m, &rows_);
    y_.resize(m * n);
  }

  // Calls per second over about `seconds` of thread CPU time.
  double CallsPerSecond(Int8Isa isa, double seconds) {
    int64_t calls = 0;
    const double start = ThreadSeconds();
    double now = start;
    while (now - start < seconds) {
      for (int r = 0; r < 4; ++r) {
        const Int8PackedMatrix mat{type_, w_.data() + (next_++ % copies_) * bytes_, n_, k_};
        Int8Matmul(isa, mat, rows_, m_, y_.data(), n_, 0, n_);
        ++calls;
      }
      now = ThreadSeconds();
    }
    return calls / (now - start);
  }

  double FileBytes() const { return static_cast<double>(RowBytes(type_, k_) * n_); }
  double Ops() const { return 2.0 * m_ * n_ * k_; }

 private:
  GgmlType type_;
  int64_t n_, k_, m_;
  int64_t bytes_ = 0, copies_ = 1, next_ = 0;
  std::vector<uint8_t> w_;
  std::vector<int8_t> q_;
  std::vector<float> d_, ds_;
  std::vector<int32_t> qsum_;
  Q8Rows rows_;
  std::vector<float> y_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return def;
}

GgmlType ParseType(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id) {
    if (GetGgmlTypeTraits(id) != nullptr && absl::AsciiStrToLower(GgmlTypeName(id)) == name) {
      return static_cast<GgmlType>(id);
    }
  }
  std::fprintf(stderr, "unknown type %s\n", name.c_str());
  std::exit(2);
}

int Main(int argc, char** argv) {
  const std::string isa_name = Flag(argc, argv, "isa", "avx2");
  Int8Isa isa = Int8Isa::kAvx2;
  for (Int8Isa i : {Int8Isa::kScalar, Int8Isa::kAvx2, Int8Isa::kAvx512Vnni, Int8Isa::kAmx}) {
    if (isa_name == Int8IsaName(i) || (isa_name == "amx" && i == Int8Isa::kAmx)) isa = i;
  }
  if (!Int8IsaSupported(isa)) {
    std::fprintf(stderr, "ISA %s is not supported here (%s)\n", isa_name.c_str(),
                 CpuFeatures::Get().ToString().c_str());
    return 2;
  }
  int pairs = 7;
  double seconds = 0.25;
  if (!absl::SimpleAtoi(Flag(argc, argv, "pairs", "7"), &pairs) ||
      !absl::SimpleAtod(Flag(argc, argv, "seconds", "0.25"), &seconds) || pairs < 1) {
    std::fprintf(stderr, "bad --pairs or --seconds\n");
    return 2;
  }
  std::vector<GgmlType> types;
  for (absl::string_view t : absl::StrSplit(Flag(argc, argv, "types", "q5_0,q5_1,q4_k,q5_k,q6_k"), ',')) {
    types.push_back(ParseType(std::string(t)));
  }
  std::printf("CPU: %s; ISA asked %s; %d interleaved pairs of %.2f s (thread CPU time)\n",
              CpuFeatures::Get().ToString().c_str(), Int8IsaName(isa), pairs, seconds);
  std::printf("%-5s %5s %5s %4s %-10s %9s %8s | %9s %8s | %7s %9s\n", "type", "k", "n", "m",
              "runs on", "GB/s", "GOPS", "Q4_1GB/s", "Q4_1GOPS", "ratio", "perbyte");
  const std::pair<int64_t, int64_t> shapes[] = {{1536, 576}, {4096, 1024}};  // {k, n}
  for (const auto& [k, n] : shapes) {
    for (int64_t m : {1, 64, 256}) {
      Case base(GgmlType::kQ4_1, n, k, m);
      for (GgmlType type : types) {
        Case c(type, n, k, m);
        std::vector<double> ratios, base_rate, rate;
        for (int p = 0; p < pairs; ++p) {
          const double b = base.CallsPerSecond(isa, seconds);
          const double t = c.CallsPerSecond(isa, seconds);
          base_rate.push_back(b);
          rate.push_back(t);
          ratios.push_back(t / b);
        }
        const double r = Median(ratios), br = Median(base_rate), tr = Median(rate);
        const double per_byte = r * (c.FileBytes() / base.FileBytes());
        std::printf("%-5s %5ld %5ld %4ld %-10s %9.2f %8.1f | %9.2f %8.1f | %7.3f %9.3f\n",
                    GgmlTypeName(static_cast<uint32_t>(type)).c_str(), static_cast<long>(k),
                    static_cast<long>(n), static_cast<long>(m),
                    Int8IsaName(Int8IsaFor(isa, type)), 1e-9 * tr * c.FileBytes(),
                    1e-9 * tr * c.Ops(), 1e-9 * br * base.FileBytes(), 1e-9 * br * base.Ops(),
                    r, per_byte);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace weft::kernels

int main(int argc, char** argv) { return weft::kernels::Main(argc, argv); }
