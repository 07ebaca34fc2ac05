// ggml_quant_ref: reference data for Weft's quantized-type tests, made by llama.cpp's own
// ggml (linked from a llama.cpp build outside the repository; tools/refdata/
// make_quant_ref.sh builds and runs this file, tests/testdata/README.md describes the
// output). Not part of the Bazel build: it needs ggml's headers and shared libraries.
//
// For each type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): seeded rows of floats
// quantized by ggml_quantize_chunk (llama-quantize's quantizer, no importance matrix),
// the type's to_float dequantization of them, seeded activation rows, and ggml's CPU dot
// products of each weight row with each activation row (vec_dot after from_float into
// the type's vec_dot_type: what llama.cpp's matmuls compute). Plus ggml's block size and
// bytes per block of every type id it knows.
//
// Output (little-endian):
//   "WEFTQREF", u32 version (1)
//   u32 T; T x (u32 type id, u32 block size, u32 bytes per block, char name[16])
//   u32 C; C x case:
//     u32 type, u32 n (rows), u32 k (weights per row), u32 m (activation rows)
//     n * row_bytes bytes of quantized rows
//     f32[n * k] dequantized weights (to_float)
//     f32[m * k] activations
//     f32[m * n] y[i][j] = vec_dot(weights row j, activations row i)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

// splitmix64 + Box-Muller: the same numbers with any standard library.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (Next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double Normal() {
    const double u1 = 1.0 - Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Weights as trained layers look: gaussian, per-32 magnitudes varying, a few outliers,
// some blocks shifted (non-zero mins), one all-zero block.
std::vector<float> MakeWeights(int64_t n, int64_t k, Rng* rng) {
  std::vector<float> w(n * k);
  for (int64_t j = 0; j < n; ++j) {
    const double row_scale = 0.02 + 0.08 * rng->Uniform();
    for (int64_t b = 0; b < k / 32; ++b) {
      const double block_scale = row_scale * std::exp(2.0 * rng->Uniform() - 1.0);
      const double shift = rng->Uniform() < 0.3 ? block_scale * (2.0 * rng->Uniform() - 1.0) : 0.0;
      for (int c = 0; c < 32; ++c) {
        double v = block_scale * rng->Normal() + shift;
        if (rng->Uniform() < 0.01) v *= 8.0;
        w[j * k + 32 * b + c] = static_cast<float>(v);
      }
    }
  }
  for (int c = 0; c < 32; ++c) w[k + 64 + c] = 0.0f;  // row 1, block 2
  return w;
}

std::vector<float> MakeActivations(int64_t m, int64_t k, Rng* rng) {
  std::vector<float> x(m * k);
  for (float& v : x) v = static_cast<float>(rng->Normal());
  for (int c = 0; c < 32 && m > 1; ++c) x[k + c] *= 20.0f;  // an outlier block in row 1
  return x;
}

void PutU32(FILE* f, uint32_t v) { std::fwrite(&v, 4, 1, f); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.bin\n", argv[0]);
    return 2;
  }
  ggml_cpu_init();
  FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  std::fwrite("WEFTQREF", 1, 8, f);
  PutU32(f, 1);
  std::vector<uint32_t> ids;
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const ggml_type_traits* tt = ggml_get_type_traits(static_cast<ggml_type>(t));
    if (tt->type_name == nullptr || ggml_type_size(static_cast<ggml_type>(t)) == 0) continue;
    if (std::strncmp(tt->type_name, "DEPRECATED", 10) == 0) continue;
    ids.push_back(static_cast<uint32_t>(t));
  }
  PutU32(f, static_cast<uint32_t>(ids.size()));
  for (uint32_t t : ids) {
    const auto type = static_cast<ggml_type>(t);
    char name[16] = {};
    std::strncpy(name, ggml_type_name(type), sizeof(name) - 1);
    PutU32(f, t);
    PutU32(f, static_cast<uint32_t>(ggml_blck_size(type)));
    PutU32(f, static_cast<uint32_t>(ggml_type_size(type)));
    std::fwrite(name, 1, sizeof(name), f);
  }
  const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                             GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
  const int64_t n = 8, k = 512, m = 3;
  PutU32(f, sizeof(types) / sizeof(types[0]));
  Rng rng{20261127};
  for (ggml_type type : types) {
    const std::vector<float> w = MakeWeights(n, k, &rng);
    const std::vector<float> x = MakeActivations(m, k, &rng);
    const size_t row_bytes = ggml_row_size(type, k);
    std::vector<uint8_t> q(n * row_bytes);
    const size_t wrote = ggml_quantize_chunk(type, w.data(), q.data(), 0, n, k, nullptr);
    if (wrote != q.size()) {
      std::fprintf(stderr, "%s: quantized %zu bytes, expected %zu\n", ggml_type_name(type), wrote,
                   q.size());
      return 1;
    }
    std::vector<float> deq(n * k);
    const ggml_type_traits* tt = ggml_get_type_traits(type);
    for (int64_t j = 0; j < n; ++j) tt->to_float(q.data() + j * row_bytes, deq.data() + j * k, k);
    const ggml_type_traits_cpu* tc = ggml_get_type_traits_cpu(type);
    const ggml_type vt = tc->vec_dot_type;
    std::vector<uint8_t> xq(ggml_row_size(vt, k));
    std::vector<float> y(m * n);
    for (int64_t i = 0; i < m; ++i) {
      ggml_get_type_traits_cpu(vt)->from_float(x.data() + i * k, xq.data(), k);
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        tc->vec_dot(static_cast<int>(k), &s, 0, q.data() + j * row_bytes, 0, xq.data(), 0, 1);
        y[i * n + j] = s;
      }
    }
    PutU32(f, static_cast<uint32_t>(type));
    PutU32(f, static_cast<uint32_t>(n));
    PutU32(f, static_cast<uint32_t>(k));
    PutU32(f, static_cast<uint32_t>(m));
    std::fwrite(q.data(), 1, q.size(), f);
    std::fwrite(deq.data(), 4, deq.size(), f);
    std::fwrite(x.data(), 4, x.size(), f);
    std::fwrite(y.data(), 4, y.size(), f);
    std::fprintf(stderr, "%-5s %zu bytes per row, vec_dot with %s\n", ggml_type_name(type),
                 row_bytes, ggml_type_name(vt));
  }
  if (std::fclose(f) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  return 0;
}
