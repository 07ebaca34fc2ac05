#include "worker/backends/cuda/graph_cache.h"

#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace weft::cuda_backend {

absl::StatusOr<cudaGraphExec_t> GraphCache::Get(const Key& key, cudaStream_t stream,
                                                absl::FunctionRef<absl::Status()> queue,
                                                bool* captured, int64_t* nodes) {
  if (captured != nullptr) *captured = false;
  if (auto it = graphs_.find(key); it != graphs_.end()) return it->second;
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status queued = queue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!queued.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return queued;
  }
  WEFT_CUDA_RETURN_IF_ERROR(ended);
  size_t count = 0;
  const cudaError_t counted = cudaGraphGetNodes(graph, nullptr, &count);
  if (counted != cudaSuccess) {
    cudaGraphDestroy(graph);
    WEFT_CUDA_RETURN_IF_ERROR(counted);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  WEFT_CUDA_RETURN_IF_ERROR(inst);
  graphs_[key] = exec;
  if (captured != nullptr) *captured = true;
  if (nodes != nullptr) *nodes = static_cast<int64_t>(count);
  return exec;
}

void GraphCache::Clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void GraphCache::Clear(Kind kind) {
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (std::get<0>(it->first) == kind) {
      cudaGraphExecDestroy(it->second);
      it = graphs_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status PiecewiseGraphs::Run(int32_t index, int32_t count,
                                  absl::FunctionRef<absl::Status()> queue) {
  // Only the last piece reads the logits rows.
  const GraphCache::Key key{GraphCache::Kind::kPiece, token_bucket_,
                            index + 1 == count ? row_bucket_ : -1, index};
  bool captured = false;
  WEFT_ASSIGN_OR_RETURN(cudaGraphExec_t exec, cache_->Get(key, stream_, queue, &captured));
  if (captured) ++captures_;
  WEFT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));
  return absl::OkStatus();
}

}  // namespace weft::cuda_backend
