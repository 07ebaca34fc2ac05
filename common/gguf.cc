#include "common/gguf.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace weft {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian

// Bounds-checked little-endian cursor over the file bytes.
class Reader {
 public:
  // *truncated (when given) is set when a read runs past `size`.
  Reader(const uint8_t* data, size_t size, bool* truncated = nullptr)
      : data_(data), size_(size), truncated_(truncated) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  absl::Status Read(T* out, const char* what) {
    if (remaining() < sizeof(T)) return Truncated(what, sizeof(T));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, uint64_t max_bytes, const char* what) {
    uint64_t len = 0;
    WEFT_RETURN_IF_ERROR(Read(&len, what));
    if (len > max_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF: %s at offset %d has length %d, over the limit of %d bytes", what,
          pos_ - 8, len, max_bytes));
    }
    if (len > remaining()) return Truncated(what, len);
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status Skip(uint64_t n, const char* what) {
    if (n > remaining()) return Truncated(what, n);
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status Truncated(const char* what, uint64_t need) const {
    if (truncated_ != nullptr) *truncated_ = true;
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF: file truncated reading %s at offset %d (need %d bytes, %d left)",
                        what, pos_, need, remaining()));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  bool* truncated_;
  size_t pos_ = 0;
};

bool ScalarSize(GgufValueType t, size_t* size) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      *size = 1;
      return true;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      *size = 2;
      return true;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      *size = 4;
      return true;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      *size = 8;
      return true;
    default:
      return false;
  }
}

// Reads one scalar of type t into v (i/u/f fields).
absl::Status ReadScalar(Reader& r, GgufValueType t, GgufValue* v) {
  switch (t) {
#define WEFT_GGUF_INT_CASE(TAG, CTYPE)                   \
  case GgufValueType::TAG: {                             \
    CTYPE x{};                                           \
    WEFT_RETURN_IF_ERROR(r.Read(&x, "metadata value"));  \
    v->i = static_cast<int64_t>(x);                      \
    v->u = static_cast<uint64_t>(x);                     \
    return absl::OkStatus();                             \
  }
    WEFT_GGUF_INT_CASE(kUint8, uint8_t)
    WEFT_GGUF_INT_CASE(kInt8, int8_t)
    WEFT_GGUF_INT_CASE(kUint16, uint16_t)
    WEFT_GGUF_INT_CASE(kInt16, int16_t)
    WEFT_GGUF_INT_CASE(kUint32, uint32_t)
    WEFT_GGUF_INT_CASE(kInt32, int32_t)
    WEFT_GGUF_INT_CASE(kInt64, int64_t)
#undef WEFT_GGUF_INT_CASE
    case GgufValueType::kUint64: {
      uint64_t x = 0;
      WEFT_RETURN_IF_ERROR(r.Read(&x, "metadata value"));
      v->u = x;
      v->i = x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(x);
      return absl::OkStatus();
    }
    case GgufValueType::kBool: {
      uint8_t x = 0;
      WEFT_RETURN_IF_ERROR(r.Read(&x, "metadata bool"));
      if (x > 1) return absl::InvalidArgumentError("GGUF: bool metadata value is not 0 or 1");
      v->i = x;
      v->u = x;
      return absl::OkStatus();
    }
    case GgufValueType::kFloat32: {
      float x = 0;
      WEFT_RETURN_IF_ERROR(r.Read(&x, "metadata value"));
      v->f = x;
      return absl::OkStatus();
    }
    case GgufValueType::kFloat64: {
      double x = 0;
      WEFT_RETURN_IF_ERROR(r.Read(&x, "metadata value"));
      v->f = x;
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF: unknown metadata value type ", static_cast<uint32_t>(t)));
  }
}

absl::Status ReadValue(Reader& r, GgufValueType t, const GgufLimits& limits, int depth,
                       GgufValue* v);

absl::Status ReadArray(Reader& r, const GgufLimits& limits, int depth, GgufValue* v) {
  if (depth >= limits.max_array_depth) {
    return absl::InvalidArgumentError("GGUF: metadata arrays nested too deeply");
  }
  uint32_t et = 0;
  uint64_t n = 0;
  WEFT_RETURN_IF_ERROR(r.Read(&et, "array element type"));
  WEFT_RETURN_IF_ERROR(r.Read(&n, "array length"));
  if (n > limits.max_array_elements) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF: array of %d elements is over the limit of %d", n,
                        limits.max_array_elements));
  }
  const auto elem = static_cast<GgufValueType>(et);
  v->elem_type = elem;
  v->array_size = n;
  size_t scalar = 0;
  if (ScalarSize(elem, &scalar)) {
    if (n > r.remaining() / scalar) return r.Truncated("array elements", n * scalar);
    const bool is_float = elem == GgufValueType::kFloat32 || elem == GgufValueType::kFloat64;
    if (is_float) {
      v->floats.reserve(n);
    } else {
      v->ints.reserve(n);
    }
    for (uint64_t k = 0; k < n; ++k) {
      GgufValue x;
      WEFT_RETURN_IF_ERROR(ReadScalar(r, elem, &x));
      if (is_float) {
        v->floats.push_back(x.f);
      } else {
        v->ints.push_back(x.i);
      }
    }
    return absl::OkStatus();
  }
  if (elem == GgufValueType::kString) {
    // Each string takes at least its 8-byte length.
    if (n > r.remaining() / 8) return r.Truncated("string array", n * 8);
    v->strings.resize(n);
    for (uint64_t k = 0; k < n; ++k) {
      WEFT_RETURN_IF_ERROR(r.ReadString(&v->strings[k], limits.max_string_bytes, "array string"));
    }
    return absl::OkStatus();
  }
  if (elem == GgufValueType::kArray) {
    if (n > r.remaining() / 12) return r.Truncated("nested arrays", n * 12);
    for (uint64_t k = 0; k < n; ++k) {
      GgufValue inner;
      WEFT_RETURN_IF_ERROR(ReadArray(r, limits, depth + 1, &inner));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("GGUF: unknown array element type ", et));
}

absl::Status ReadValue(Reader& r, GgufValueType t, const GgufLimits& limits, int depth,
                       GgufValue* v) {
  v->type = t;
  if (t == GgufValueType::kString) {
    return r.ReadString(&v->s, limits.max_string_bytes, "metadata string");
  }
  if (t == GgufValueType::kArray) return ReadArray(r, limits, depth, v);
  return ReadScalar(r, t, v);
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::IsFloat() const {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

int64_t GgufTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t GgufTensor::NumRows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path,
                                                         const GgufLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model file '", path, "': ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat '", path, "': ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is too small to be a GGUF file (", size, " bytes)"));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot mmap '", path, "': ", std::strerror(err)));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(p);
  file->size_ = size;
  file->held_ = size;
  file->owns_mapping_ = true;
  absl::Status s = file->Parse(limits);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const uint8_t* data, size_t size,
                                                               const GgufLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = "<buffer>";
  file->base_ = data;
  file->size_ = size;
  file->held_ = size;
  WEFT_RETURN_IF_ERROR(file->Parse(limits));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::OpenMetadata(const std::string& path,
                                                                 const GgufLimits& limits,
                                                                 size_t first_read,
                                                                 size_t max_header_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model file '", path, "': ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  // Read a prefix, parse; on running out of it, read twice as much (the table's end is
  // unknown until parsed). The buffer is bounded by the file and max_header_bytes.
  size_t want = std::max<size_t>(first_read, 24);
  absl::Status s;
  for (;;) {
    want = std::min({want, file->size_, max_header_bytes});
    const size_t have = file->header_.size();
    file->header_.resize(want);
    for (size_t done = have; done < want;) {
      const ssize_t n =
          ::pread(fd, file->header_.data() + done, want - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot read '", path, "': ",
                                                n == 0 ? "unexpected end" : std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
    file->base_ = file->header_.data();
    file->held_ = want;
    file->keys_.clear();
    file->kv_.clear();
    file->tensors_.clear();
    file->tensor_index_.clear();
    file->alignment_ = 32;
    bool truncated = false;
    s = file->Parse(limits, &truncated);
    if (s.ok() || !truncated || want == file->size_) break;
    if (want >= max_header_bytes) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "GGUF: the header, metadata and tensor table are larger than ", max_header_bytes,
          " bytes"));
      break;
    }
    want *= 2;
  }
  ::close(fd);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  file->header_.resize(file->header_bytes_);  // what is kept: up to the table's end
  file->header_.shrink_to_fit();
  file->base_ = file->header_.data();
  file->held_ = file->header_.size();
  for (GgufTensor& t : file->tensors_) t.data = nullptr;  // data starts past what is held
  return file;
}

GgufFile::~GgufFile() {
  if (owns_mapping_ && base_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(base_), size_);
  }
}

absl::Status GgufFile::Parse(const GgufLimits& limits, bool* truncated) {
  Reader r(base_, held_, truncated);
  uint32_t magic = 0;
  WEFT_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("not a GGUF file: bad magic 0x%08x (expected 'GGUF')", magic));
  }
  WEFT_RETURN_IF_ERROR(r.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported GGUF version ", version_, " (supported: 2, 3)"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  WEFT_RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  WEFT_RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  if (n_tensors > limits.max_tensors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF: tensor count %d is over the limit of %d", n_tensors, limits.max_tensors));
  }
  if (n_kv > limits.max_kv) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF: metadata count %d is over the limit of %d", n_kv, limits.max_kv));
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    WEFT_RETURN_IF_ERROR(r.ReadString(&key, 65536, "metadata key"));
    uint32_t t = 0;
    WEFT_RETURN_IF_ERROR(r.Read(&t, "metadata value type"));
    GgufValue v;
    WEFT_RETURN_IF_ERROR(ReadValue(r, static_cast<GgufValueType>(t), limits, 0, &v));
    if (kv_.contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF: duplicate metadata key '", key, "'"));
    }
    keys_.push_back(key);
    kv_.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (!a->IsInteger() || a->i <= 0 || a->i > 65536 || (a->i & (a->i - 1)) != 0) {
      return absl::InvalidArgumentError("GGUF: general.alignment is not a power of two <= 65536");
    }
    alignment_ = static_cast<uint64_t>(a->i);
  }

  std::vector<uint64_t> rel_offsets;
  rel_offsets.reserve(std::min<uint64_t>(n_tensors, r.remaining() / 24 + 1));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    WEFT_RETURN_IF_ERROR(r.ReadString(&t.name, 65536, "tensor name"));
    uint32_t n_dims = 0;
    WEFT_RETURN_IF_ERROR(r.Read(&n_dims, "tensor n_dims"));
    if (n_dims == 0 || n_dims > limits.max_dims) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF: tensor '", t.name, "' has ", n_dims, " dimensions (1..",
                       limits.max_dims, " allowed)"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      WEFT_RETURN_IF_ERROR(r.Read(&ne, "tensor dimension"));
      if (ne == 0 || ne > (uint64_t{1} << 40) || MulOverflows(elements, ne, &elements) ||
          elements > (uint64_t{1} << 40)) {
        return absl::InvalidArgumentError(
            absl::StrCat("GGUF: tensor '", t.name, "' has an invalid shape"));
      }
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    uint32_t type = 0;
    WEFT_RETURN_IF_ERROR(r.Read(&type, "tensor type"));
    const GgmlTypeTraits* traits = GetGgmlTypeTraits(type);
    if (traits == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF: tensor '", t.name, "' has unknown type ", type));
    }
    t.type = static_cast<GgmlType>(type);
    if (t.ne[0] % traits->block_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF: tensor '", t.name, "' row length ", t.ne[0], " is not a multiple of the ",
          traits->name, " block size ", traits->block_size));
    }
    t.nbytes = elements / traits->block_size * traits->type_size;
    uint64_t off = 0;
    WEFT_RETURN_IF_ERROR(r.Read(&off, "tensor offset"));
    if (off % alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF: tensor '", t.name, "' offset ", off, " is not aligned to ", alignment_));
    }
    if (tensor_index_.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF: duplicate tensor '", t.name, "'"));
    }
    tensor_index_.emplace(t.name, tensors_.size());
    rel_offsets.push_back(off);
    tensors_.push_back(std::move(t));
  }
  header_bytes_ = r.pos();
  data_offset_ = (header_bytes_ + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && n_tensors > 0) {
    return absl::InvalidArgumentError("GGUF: tensor data section starts past the end of file");
  }
  for (size_t k = 0; k < tensors_.size(); ++k) {
    GgufTensor& t = tensors_[k];
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_offset_, rel_offsets[k], &begin) ||
        __builtin_add_overflow(begin, t.nbytes, &end) || end > size_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF: tensor '%s' (%d bytes at data offset %d) runs past the end of the file "
          "(%d bytes)",
          t.name, t.nbytes, rel_offsets[k], size_));
    }
    t.offset = begin;
    t.data = end <= held_ ? base_ + begin : nullptr;  // none after OpenMetadata
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (!v->IsInteger()) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF: key '", key, "' is not an integer"));
  }
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(v->i);
  return absl::InvalidArgumentError(absl::StrCat("GGUF: key '", key, "' is not a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (v->type != GgufValueType::kString) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF: key '", key, "' is not a string"));
  }
  return v->s;
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (v->type != GgufValueType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF: key '", key, "' is not a bool"));
  }
  return v->i != 0;
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(absl::string_view key, int64_t def) const {
  if (Find(key) == nullptr) return def;
  return GetInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(absl::string_view key, double def) const {
  if (Find(key) == nullptr) return def;
  return GetFloat(key);
}

absl::StatusOr<bool> GgufFile::GetBoolOr(absl::string_view key, bool def) const {
  if (Find(key) == nullptr) return def;
  return GetBool(key);
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF: key '", key, "' is not an array of strings"));
  }
  return &v->strings;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetIntArray(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  GgufValue probe;
  probe.type = v->elem_type;
  if (v->type != GgufValueType::kArray ||
      !(probe.IsInteger() || v->elem_type == GgufValueType::kBool)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF: key '", key, "' is not an array of integers"));
  }
  return &v->ints;
}

absl::StatusOr<const std::vector<double>*> GgufFile::GetFloatArray(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF: missing key '", key, "'"));
  if (v->type != GgufValueType::kArray ||
      (v->elem_type != GgufValueType::kFloat32 && v->elem_type != GgufValueType::kFloat64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF: key '", key, "' is not an array of floats"));
  }
  return &v->floats;
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string GgufFile::Fingerprint() const {
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, base_, header_bytes_);
  uint8_t size_le[8];
  uint64_t s = size_;
  for (int i = 0; i < 8; ++i) size_le[i] = static_cast<uint8_t>(s >> (8 * i));
  SHA256_Update(&ctx, size_le, sizeof(size_le));
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256_Final(digest, &ctx);
  std::string hex;
  hex.reserve(2 * sizeof(digest));
  for (uint8_t b : digest) absl::StrAppendFormat(&hex, "%02x", b);
  return hex;
}

void GgufFile::ReleasePages(uint64_t offset, uint64_t len) const {
  if (!owns_mapping_ || len == 0) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset + page - 1) / page * page;
  uint64_t end = std::min<uint64_t>(offset + len, size_) / page * page;
  if (end <= begin) return;
  ::madvise(const_cast<uint8_t*>(base_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace weft
