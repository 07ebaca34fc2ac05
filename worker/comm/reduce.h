// Reduction kernels of the CPU collectives: deterministic chunking and an in-order sum.
//
// Determinism: every output element is ((s0 + s1) + s2) + ... + s(W-1), in rank order,
// in fp32, whatever the chunking, block size or vector width (vectorization happens
// across elements, never across ranks). So the bits depend only on the inputs.
// Thread-safety: pure functions.
#ifndef WEFT_WORKER_COMM_REDUCE_H_
#define WEFT_WORKER_COMM_REDUCE_H_

#include <cstddef>

namespace weft {

// Elements per chunk are rounded up to this (one 64-byte cache line of floats), so that
// ranks never write the same cache line.
inline constexpr size_t kReduceChunkAlign = 16;

struct ChunkRange {
  size_t begin = 0;
  size_t end = 0;  // exclusive
};

// The chunk of [0, count) that `rank` of `world_size` reduces: contiguous, disjoint,
// covering, in rank order, depending only on (count, world_size, rank). Trailing ranks
// may get empty chunks when count is small.
ChunkRange ReduceChunkOf(size_t count, int world_size, int rank);

// dst[i] = srcs[0][i] + srcs[1][i] + ... + srcs[num_srcs-1][i], summed left to right,
// for i in [0, n). dst may alias any of srcs (results go through a stack buffer).
void SumInRankOrder(const float* const* srcs, int num_srcs, size_t n, float* dst);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_REDUCE_H_
