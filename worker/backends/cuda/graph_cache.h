// GraphCache: the CUDA backend's captured graphs — decode steps (one graph per batch
// bucket x context bucket x table form) and the pieces of piecewise steps (one graph per
// token bucket x piece, the last piece also per logits-row bucket) — captured from the
// ModelRunner's queueing code on first use, replayed after, dropped (all, or those of
// one kind) when a buffer they captured moves. PiecewiseGraphs is the PieceHook
// (model_runner.h) that captures or replays each piece of one step.
//
// Ownership: owns the graph executables. Thread-safety: the rank's step thread only.
#ifndef WEFT_WORKER_BACKENDS_CUDA_GRAPH_CACHE_H_
#define WEFT_WORKER_BACKENDS_CUDA_GRAPH_CACHE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backends/cuda/model_runner.h"

namespace weft::cuda_backend {

class GraphCache {
 public:
  enum class Kind : int32_t { kDecode = 0, kPiece = 1 };
  // (kind, then three kind-specific numbers): kDecode (batch bucket, context bucket,
  // persistent tables 0/1); kPiece (token bucket, logits-row bucket or -1, piece index).
  using Key = std::tuple<Kind, int32_t, int32_t, int32_t>;

  GraphCache() = default;
  ~GraphCache() { Clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph of `key`; on a miss, captures what `queue` queues on `stream` (nothing runs
  // during capture) and instantiates it — `*nodes` (optional) is then its kernel count.
  absl::StatusOr<cudaGraphExec_t> Get(const Key& key, cudaStream_t stream,
                                      absl::FunctionRef<absl::Status()> queue,
                                      bool* captured = nullptr, int64_t* nodes = nullptr);
  void Clear();
  void Clear(Kind kind);  // the graphs of one kind

 private:
  std::map<Key, cudaGraphExec_t> graphs_;
};

// One piecewise step's PieceHook: piece i of the step's token bucket (and, for the last
// piece, its logits-row bucket) captured on first use, then launched on `stream`.
class PiecewiseGraphs : public PieceHook {
 public:
  PiecewiseGraphs(GraphCache* cache, cudaStream_t stream, int32_t token_bucket,
                  int32_t row_bucket)
      : cache_(cache), stream_(stream), token_bucket_(token_bucket), row_bucket_(row_bucket) {}
  absl::Status Run(int32_t index, int32_t count,
                   absl::FunctionRef<absl::Status()> queue) override;
  // Pieces this step captured (0 when every piece was a replay).
  int64_t captures() const { return captures_; }

 private:
  GraphCache* const cache_;
  const cudaStream_t stream_;
  const int32_t token_bucket_, row_bucket_;
  int64_t captures_ = 0;
};

}  // namespace weft::cuda_backend

#endif  // WEFT_WORKER_BACKENDS_CUDA_GRAPH_CACHE_H_
