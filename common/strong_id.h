// StrongId<Tag, T>: a typed integer id so a RequestId can never be passed where a
// BlockId is expected. Trivially copyable, hashable (absl and std), ordered.
// Thread-safety: a value type.
#ifndef WEFT_COMMON_STRONG_ID_H_
#define WEFT_COMMON_STRONG_ID_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <utility>

namespace weft {

template <typename Tag, typename T = int64_t>
class StrongId {
 public:
  using ValueType = T;
  constexpr StrongId() : value_(T{}) {}
  constexpr explicit StrongId(T value) : value_(value) {}
  constexpr T value() const { return value_; }

  friend constexpr bool operator==(StrongId a, StrongId b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(StrongId a, StrongId b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(StrongId a, StrongId b) { return a.value_ < b.value_; }
  friend constexpr bool operator>(StrongId a, StrongId b) { return a.value_ > b.value_; }
  friend constexpr bool operator<=(StrongId a, StrongId b) { return a.value_ <= b.value_; }
  friend constexpr bool operator>=(StrongId a, StrongId b) { return a.value_ >= b.value_; }

  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }
  friend std::ostream& operator<<(std::ostream& os, StrongId id) { return os << id.value_; }

 private:
  T value_;
};

struct RequestIdTag {};
struct BlockIdTag {};
struct StepIdTag {};

// A request as the scheduler numbers it (unique for the scheduler's lifetime).
using RequestId = StrongId<RequestIdTag, int64_t>;
// A KV-cache block index inside one replica's pool: 0 .. num_blocks-1.
using BlockId = StrongId<BlockIdTag, int32_t>;
// A plan's sequence number on one replica (starts at 1, +1 per plan).
using StepId = StrongId<StepIdTag, int64_t>;

}  // namespace weft

namespace std {
template <typename Tag, typename T>
struct hash<weft::StrongId<Tag, T>> {
  size_t operator()(weft::StrongId<Tag, T> id) const { return std::hash<T>()(id.value()); }
};
}  // namespace std

#endif  // WEFT_COMMON_STRONG_ID_H_
