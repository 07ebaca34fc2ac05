#include "worker/model/testing/greedy_follow.h"

#include <algorithm>

#include "absl/types/span.h"
#include "common/status_macros.h"

namespace weft::testing {

absl::StatusOr<GreedyFollowed> FollowGreedy(Backend* backend, const std::vector<int32_t>& table,
                                            const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& want) {
  std::vector<int32_t> tokens = prompt;
  GreedyFollowed r;
  ForwardOutput out;
  int32_t pos = 0;  // tokens before it are in the cache
  for (size_t step = 0; step < want.size(); ++step) {
    ForwardBatch batch;
    batch.sequences.push_back({absl::MakeConstSpan(tokens).subspan(pos), pos, table, true});
    WEFT_RETURN_IF_ERROR(backend->Forward(batch, &out));
    pos = static_cast<int32_t>(tokens.size());
    const float* row = out.Row(0);
    const int32_t ours = static_cast<int32_t>(std::max_element(row, row + out.vocab_size) - row);
    if (ours != want[step]) {
      r.ours = ours;
      return r;
    }
    ++r.agreed;
    tokens.push_back(ours);
  }
  return r;
}

}  // namespace weft::testing
