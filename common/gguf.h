// GgufFile: a read-only view of a GGUF model file (llama.cpp's format, versions 2 and 3).
//
// The file is memory-mapped; metadata is parsed eagerly into owned values and tensor
// data stays in the mapping. Every length, count, offset and size is validated against
// the file's bytes before use (no overflow, no out-of-bounds read): a malformed file is
// an InvalidArgument status naming what is wrong and where, never a crash.
//
// Layout (little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value_type, value),
//   tensor_count x (string name, u32 n_dims, n_dims x u64 ne, u32 type, u64 offset),
//   padding to general.alignment (default 32), tensor data (offsets relative to here).
//   string = u64 length + bytes; array = u32 element type + u64 count + elements.
// Tensor shapes are ggml's: ne[0] is the fastest-varying (row length).
//
// Ownership: GgufFile owns the mapping; GgufTensor::data points into it and is valid
// while the GgufFile lives. OpenMetadata reads only the header, metadata and tensor-info
// table (pread into a buffer it owns; no weight byte is read or mapped): tensors carry
// their shapes, types and offsets, and null data. Thread-safety: immutable after
// Open/OpenMetadata, safe to share.
#ifndef WEFT_COMMON_GGUF_H_
#define WEFT_COMMON_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/ggml_types.h"

namespace weft {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Scalars of every integer type are kept as int64/uint64, floats as
// double; arrays keep their element type and hold scalars or strings (nested arrays are
// parsed for validation and kept as a count only).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Scalar payloads.
  int64_t i = 0;          // every integer type except uint64 (and bool)
  uint64_t u = 0;         // uint64 (and a copy of non-negative integers)
  double f = 0;           // float32 / float64
  std::string s;          // string
  // Array payloads (only one is filled, by element type).
  GgufValueType elem_type = GgufValueType::kUint8;
  uint64_t array_size = 0;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool IsInteger() const;
  bool IsFloat() const;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] = row length
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;      // absolute offset in the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  int64_t NumElements() const;
  int64_t NumRows() const;  // product of ne[1..]
};

struct GgufLimits {
  // Hard caps that keep a hostile file from making us allocate without bound.
  uint64_t max_tensors = 1 << 20;
  uint64_t max_kv = 1 << 20;
  uint64_t max_string_bytes = 1 << 24;
  uint64_t max_array_elements = 1 << 26;
  uint32_t max_dims = 4;
  int max_array_depth = 4;
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                        const GgufLimits& limits = {});
  // Reads and parses only the header, metadata and tensor-info table of `path` (what the
  // scheduler needs: tokenizer, shapes, the fingerprint), with pread: first_read bytes,
  // then twice as many until the table ends, never more than the file nor
  // max_header_bytes. Tensor data pointers are null; Fingerprint() is Open's.
  static absl::StatusOr<std::unique_ptr<GgufFile>> OpenMetadata(
      const std::string& path, const GgufLimits& limits = {}, size_t first_read = 1 << 20,
      size_t max_header_bytes = size_t{512} << 20);
  // Parses `size` bytes at `data` without copying or owning them (tests, fuzzing).
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const uint8_t* data, size_t size,
                                                              const GgufLimits& limits = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const uint8_t* bytes() const { return base_; }
  size_t size() const { return size_; }  // the file's size
  // Bytes of the file held in memory: all of it (mapped) after Open, the header region
  // after OpenMetadata (whose tensors have no data).
  size_t bytes_held() const { return held_; }
  // Bytes from the start of the file to the end of the tensor-info table.
  uint64_t header_bytes() const { return header_bytes_; }
  const std::string& path() const { return path_; }

  const GgufValue* Find(absl::string_view key) const;
  const std::vector<std::string>& keys() const { return keys_; }  // file order

  // Typed getters: NotFound if absent, InvalidArgument if of the wrong type.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;  // ints are accepted
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  // Getters with a default when the key is absent (wrong type is still an error).
  absl::StatusOr<int64_t> GetIntOr(absl::string_view key, int64_t def) const;
  absl::StatusOr<double> GetFloatOr(absl::string_view key, double def) const;
  absl::StatusOr<bool> GetBoolOr(absl::string_view key, bool def) const;
  // Arrays: NotFound if absent, InvalidArgument if not an array of that kind.
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(absl::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetIntArray(absl::string_view key) const;
  absl::StatusOr<const std::vector<double>*> GetFloatArray(absl::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(absl::string_view name) const;

  // Hex sha256 of bytes [0, header_bytes()) followed by the file size as 8 bytes
  // little-endian: changes with any metadata or tensor-table change, reads no weights.
  std::string Fingerprint() const;

  // Tells the kernel the mapped pages of [offset, offset+len) are not needed now
  // (MADV_DONTNEED on a private read-only mapping: they are re-read on next touch).
  void ReleasePages(uint64_t offset, uint64_t len) const;

 private:
  GgufFile() = default;
  // Parses the held bytes [base_, base_ + held_) of a file of size_ bytes; *truncated
  // (when given) tells whether it failed for want of held bytes.
  absl::Status Parse(const GgufLimits& limits, bool* truncated = nullptr);

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;  // the file's
  size_t held_ = 0;  // bytes readable at base_ (size_, or the header's after OpenMetadata)
  bool owns_mapping_ = false;
  std::vector<uint8_t> header_;  // OpenMetadata's buffer
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t header_bytes_ = 0;
  std::vector<std::string> keys_;
  absl::flat_hash_map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace weft

#endif  // WEFT_COMMON_GGUF_H_
