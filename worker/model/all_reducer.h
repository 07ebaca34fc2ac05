// AllReducer: the tensor-parallel hook of the model runtime.
//
// LlamaModel calls AllReduceSum on the partial outputs of the row-parallel projections
// (attention output and FFN down) and AllGatherV on its slice of the logits
// (vocab-parallel LM head) when it runs as one rank of a TP group, and never when it has
// no AllReducer (TP = 1). The signature is the one of weft::Communicator
// (worker/comm/communicator.h), so a Communicator plugs in through a one-line adapter;
// the model only needs this method, which keeps it testable without shared memory.
// Thread-safety: called from the model's step thread only.
#ifndef WEFT_WORKER_MODEL_ALL_REDUCER_H_
#define WEFT_WORKER_MODEL_ALL_REDUCER_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace weft {

class AllReducer {
 public:
  virtual ~AllReducer() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In-place sum over the group; every rank gets the same bits, in a fixed order.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;
  // Rank r's my_count floats land at out + counts[0] + ... + counts[r-1] on every rank
  // (counts identical on all ranks, counts[rank()] == my_count).
  virtual absl::Status AllGatherV(const float* in, size_t my_count,
                                  const std::vector<size_t>& counts, float* out) = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_MODEL_ALL_REDUCER_H_
