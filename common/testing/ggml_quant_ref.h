// Reads tests/testdata/ggml_quant_ref.bin: tensors quantized by llama.cpp's ggml, their
// dequantization and ggml's dot products (format: tools/refdata/ggml_quant_ref.cc,
// tests/testdata/README.md). Tests only.
// Thread-safety: a pure function.
#ifndef WEFT_COMMON_TESTING_GGML_QUANT_REF_H_
#define WEFT_COMMON_TESTING_GGML_QUANT_REF_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace weft::testing {

struct GgmlTypeInfo {
  uint32_t id = 0, block_size = 0, type_size = 0;
  std::string name;
};

struct GgmlQuantCase {
  uint32_t type = 0;
  int64_t n = 0, k = 0, m = 0;
  std::vector<uint8_t> bytes;  // n rows of k weights in the type's encoding
  std::vector<float> dequant;  // [n][k] ggml's to_float
  std::vector<float> x;        // [m][k]
  std::vector<float> y;        // [m][n] ggml's vec_dot(weights row j, x row i)
};

struct GgmlQuantRef {
  std::vector<GgmlTypeInfo> types;
  std::vector<GgmlQuantCase> cases;
};

// False (and *error set) for a missing or malformed file.
inline bool ReadGgmlQuantRef(const std::string& path, GgmlQuantRef* out, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  bool ok = true;
  auto take = [&](void* dst, size_t bytes) {
    if (!ok || pos + bytes > data.size()) {
      ok = false;
      return;
    }
    std::memcpy(dst, data.data() + pos, bytes);
    pos += bytes;
  };
  auto u32 = [&] {
    uint32_t v = 0;
    take(&v, 4);
    return v;
  };
  char magic[8] = {};
  take(magic, 8);
  if (!ok || std::memcmp(magic, "WEFTQREF", 8) != 0 || u32() != 1) {
    *error = "not a version-1 ggml_quant_ref file: " + path;
    return false;
  }
  const uint32_t num_types = u32();
  for (uint32_t i = 0; ok && i < num_types && i < 4096; ++i) {
    GgmlTypeInfo t;
    t.id = u32();
    t.block_size = u32();
    t.type_size = u32();
    char name[16] = {};
    take(name, 16);
    t.name.assign(name, strnlen(name, 16));
    out->types.push_back(t);
  }
  const uint32_t num_cases = u32();
  for (uint32_t i = 0; ok && i < num_cases && i < 256; ++i) {
    GgmlQuantCase c;
    c.type = u32();
    c.n = u32();
    c.k = u32();
    c.m = u32();
    uint32_t block = 0, size = 0;
    for (const GgmlTypeInfo& t : out->types) {
      if (t.id == c.type) block = t.block_size, size = t.type_size;
    }
    if (block == 0 || c.k % block != 0 || c.n * c.k > (1 << 24) || c.m * c.k > (1 << 24)) {
      ok = false;
      break;
    }
    c.bytes.resize(c.n * (c.k / block) * size);
    c.dequant.resize(c.n * c.k);
    c.x.resize(c.m * c.k);
    c.y.resize(c.m * c.n);
    take(c.bytes.data(), c.bytes.size());
    take(c.dequant.data(), 4 * c.dequant.size());
    take(c.x.data(), 4 * c.x.size());
    take(c.y.data(), 4 * c.y.size());
    out->cases.push_back(std::move(c));
  }
  if (!ok || pos != data.size()) {
    *error = "truncated or malformed: " + path;
    return false;
  }
  return true;
}

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_GGML_QUANT_REF_H_
