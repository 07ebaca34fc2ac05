#include "worker/backends/cpu_backend.h"

#include <algorithm>

#include "common/status_macros.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"

namespace weft {

absl::Status CpuBackendOptions::Validate() const {
  if (block_size < 1 || block_size > 1024) {
    return absl::InvalidArgumentError("block size must be in 1..1024");
  }
  if (num_kv_blocks < 0) return absl::InvalidArgumentError("--num_kv_blocks must be >= 0");
  if (num_kv_blocks == 0 && kv_memory_bytes <= 0) {
    return absl::InvalidArgumentError("set --num_kv_blocks or a positive --kv_memory_bytes");
  }
  return model.Validate();
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const GgufFile& file,
                                                               const CpuBackendOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<CpuBackend> b(new CpuBackend());
  WEFT_ASSIGN_OR_RETURN(b->model_, LlamaModel::Create(file, options.model));
  const KvCacheOptions kv =
      b->model_->KvOptions(options.block_size, std::max(options.num_kv_blocks, 1));
  if (options.num_kv_blocks > 0) {
    WEFT_ASSIGN_OR_RETURN(b->kv_, KvCache::Create(kv));
  } else {
    WEFT_ASSIGN_OR_RETURN(b->kv_, KvCache::CreateWithBudget(kv, options.kv_memory_bytes));
  }
  // Fail at start, not at the first step, if the attention kernel cannot take this cache.
  WEFT_RETURN_IF_ERROR(b->model_->AttentionImplFor(options.block_size).status());
  LOG(INFO) << "CPU features: " << kernels::CpuFeatures::Get().ToString() << "; kernels "
            << b->kernels() << ", " << options.model.num_threads << " threads";
  return b;
}

std::string CpuBackend::kernels() const {
  const KernelChoice choice = model_->options().kernels;
  std::string s = KernelChoiceName(ResolveKernelChoice(choice));
  if (choice == KernelChoice::kAuto) s += " (auto)";
  auto attn = model_->AttentionImplFor(kv_->block_size());
  if (attn.ok()) s += std::string(", attention ") + kernels::AttentionImplName(*attn);
  return s;
}

}  // namespace weft
