// GgufBuilder: writes small GGUF files in memory for tests and fuzz corpora.
// Thread-safety: a value type, not shared.
#ifndef WEFT_COMMON_TESTING_GGUF_BUILDER_H_
#define WEFT_COMMON_TESTING_GGUF_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace weft::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  void AddUint32(const std::string& key, uint32_t v) { Kv(key, 4, &v, 4); }
  void AddFloat32(const std::string& key, float v) { Kv(key, 6, &v, 4); }
  void AddBool(const std::string& key, bool b) {
    uint8_t v = b ? 1 : 0;
    Kv(key, 7, &v, 1);
  }
  void AddUint64(const std::string& key, uint64_t v) { Kv(key, 10, &v, 8); }
  void AddInt64(const std::string& key, int64_t v) { Kv(key, 11, &v, 8); }
  void AddFloat64(const std::string& key, double v) { Kv(key, 12, &v, 8); }
  void AddUint8(const std::string& key, uint8_t v) { Kv(key, 0, &v, 1); }
  void AddInt8(const std::string& key, int8_t v) { Kv(key, 1, &v, 1); }
  void AddUint16(const std::string& key, uint16_t v) { Kv(key, 2, &v, 2); }
  void AddInt16(const std::string& key, int16_t v) { Kv(key, 3, &v, 2); }
  void AddString(const std::string& key, const std::string& v) {
    Str(&kv_, key);
    Pod<uint32_t>(&kv_, 8);
    Str(&kv_, v);
    ++n_kv_;
  }
  void AddStringArray(const std::string& key, const std::vector<std::string>& v) {
    Str(&kv_, key);
    Pod<uint32_t>(&kv_, 9);
    Pod<uint32_t>(&kv_, 8);
    Pod<uint64_t>(&kv_, v.size());
    for (const auto& s : v) Str(&kv_, s);
    ++n_kv_;
  }
  void AddInt32Array(const std::string& key, const std::vector<int32_t>& v) {
    Str(&kv_, key);
    Pod<uint32_t>(&kv_, 9);
    Pod<uint32_t>(&kv_, 5);
    Pod<uint64_t>(&kv_, v.size());
    for (int32_t x : v) Pod<int32_t>(&kv_, x);
    ++n_kv_;
  }
  void AddFloat32Array(const std::string& key, const std::vector<float>& v) {
    Str(&kv_, key);
    Pod<uint32_t>(&kv_, 9);
    Pod<uint32_t>(&kv_, 6);
    Pod<uint64_t>(&kv_, v.size());
    for (float x : v) Pod<float>(&kv_, x);
    ++n_kv_;
  }

  // Adds a tensor with raw bytes `data` (its size must match shape and type).
  void AddTensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                 const std::vector<uint8_t>& data) {
    Str(&ti_, name);
    Pod<uint32_t>(&ti_, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) Pod<uint64_t>(&ti_, d);
    Pod<uint32_t>(&ti_, type);
    while (data_.size() % alignment_ != 0) data_.push_back(0);
    Pod<uint64_t>(&ti_, data_.size());
    data_.insert(data_.end(), data.begin(), data.end());
    ++n_tensors_;
  }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out;
    Pod<uint32_t>(&out, 0x46554747);
    Pod<uint32_t>(&out, version_);
    Pod<uint64_t>(&out, n_tensors_);
    Pod<uint64_t>(&out, n_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    out.insert(out.end(), ti_.begin(), ti_.end());
    while (out.size() % alignment_ != 0) out.push_back(0);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }

 private:
  template <typename T>
  static void Pod(std::vector<uint8_t>* out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out->insert(out->end(), b, b + sizeof(T));
  }
  static void Str(std::vector<uint8_t>* out, const std::string& s) {
    Pod<uint64_t>(out, s.size());
    out->insert(out->end(), s.begin(), s.end());
  }
  void Kv(const std::string& key, uint32_t type, const void* v, size_t n) {
    Str(&kv_, key);
    Pod<uint32_t>(&kv_, type);
    const auto* p = static_cast<const uint8_t*>(v);
    kv_.insert(kv_.end(), p, p + n);
    ++n_kv_;
  }

  uint32_t version_;
  uint64_t alignment_;
  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;
  std::vector<uint8_t> kv_, ti_, data_;
};

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_GGUF_BUILDER_H_
