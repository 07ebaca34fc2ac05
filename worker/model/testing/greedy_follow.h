// Greedy decoding that follows a reference continuation (llama.cpp's), for the accuracy
// tests of every model: one sequence, its prompt and then one token per step through a
// backend, while Weft's argmax equals the reference. Each test judges a divergence itself
// (top 3, near ties) from what this returns.
// Thread-safety: test code, single-threaded use.
#ifndef WEFT_WORKER_MODEL_TESTING_GREEDY_FOLLOW_H_
#define WEFT_WORKER_MODEL_TESTING_GREEDY_FOLLOW_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backends/backend.h"

namespace weft::testing {

struct GreedyFollowed {
  int agreed = 0;    // steps whose argmax equals the reference's token
  int32_t ours = -1;  // Weft's token at step `agreed` when it diverged; -1 when all agree
  bool diverged() const { return ours >= 0; }
};

// Runs `prompt`, then up to want.size() single-token steps through `table` (block ids of
// `backend`'s cache, enough for prompt + want), stopping at the first argmax (lowest id on
// a tie) that differs from want.
absl::StatusOr<GreedyFollowed> FollowGreedy(Backend* backend, const std::vector<int32_t>& table,
                                            const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& want);

}  // namespace weft::testing

#endif  // WEFT_WORKER_MODEL_TESTING_GREEDY_FOLLOW_H_
