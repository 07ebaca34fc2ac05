#include "worker/comm/reduce.h"

#include <algorithm>
#include <cstring>

namespace weft {
namespace {

// Fixed trip counts so that gcc's -O2 ("very cheap") vectorizer takes these loops with
// the baseline ISA; no -march flags, no runtime dispatch needed for data this small.
constexpr size_t kBlock = 256;

void SumBlock(const float* const* srcs, int num_srcs, size_t offset, float* dst) {
  alignas(64) float acc[kBlock];
  std::memcpy(acc, srcs[0] + offset, sizeof(acc));
  for (int r = 1; r < num_srcs; ++r) {
    const float* __restrict src = srcs[r] + offset;
    for (size_t i = 0; i < kBlock; ++i) acc[i] += src[i];
  }
  std::memcpy(dst + offset, acc, sizeof(acc));
}

}  // namespace

ChunkRange ReduceChunkOf(size_t count, int world_size, int rank) {
  const size_t w = static_cast<size_t>(world_size);
  size_t per_rank = (count + w - 1) / w;
  per_rank = (per_rank + kReduceChunkAlign - 1) / kReduceChunkAlign * kReduceChunkAlign;
  ChunkRange range;
  range.begin = std::min(count, per_rank * static_cast<size_t>(rank));
  range.end = std::min(count, range.begin + per_rank);
  return range;
}

void SumInRankOrder(const float* const* srcs, int num_srcs, size_t n, float* dst) {
  size_t offset = 0;
  for (; offset + kBlock <= n; offset += kBlock) SumBlock(srcs, num_srcs, offset, dst);
  for (size_t i = offset; i < n; ++i) {
    float acc = srcs[0][i];
    for (int r = 1; r < num_srcs; ++r) acc += srcs[r][i];
    dst[i] = acc;
  }
}

}  // namespace weft
