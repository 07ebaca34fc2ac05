#include "worker/backends/cpu_backend.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm/shm_communicator.h"
#include "worker/comm/shm_segment.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"

namespace weft {

// The model's tensor-parallel hook: forwards to the communicator of the current group,
// which exists only between JoinGroup and LeaveGroup (all on the step thread).
class CpuBackend::GroupReducer : public AllReducer {
 public:
  GroupReducer(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(float* data, size_t count) override {
    return Timed([&] { return comm_->AllReduceSum(data, count); });
  }
  absl::Status AllGatherV(const float* in, size_t my_count, const std::vector<size_t>& counts,
                          float* out) override {
    return Timed([&] { return comm_->AllGatherV(in, my_count, counts, out); });
  }
  double seconds() const { return seconds_; }
  void Set(std::unique_ptr<Communicator> comm) { comm_ = std::move(comm); }
  bool has_group() const { return comm_ != nullptr; }

 private:
  // Runs one collective of the group, adding its time to seconds_.
  template <class F>
  absl::Status Timed(F collective) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("no tensor-parallel group (not admitted yet)");
    }
    const absl::Time start = absl::Now();
    absl::Status s = collective();
    seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    return s;
  }
  const int rank_;
  const int world_size_;
  std::unique_ptr<Communicator> comm_;
  double seconds_ = 0;  // in collectives, all groups so far
};

std::string GroupSegmentName(absl::string_view replica, int64_t epoch) {
  std::string name(replica);
  for (char& c : name) {
    if (!IsShmNameChar(c)) c = '_';
  }
  if (name.size() > 150) name.resize(150);  // "-e<epoch>" fits within kShmMaxNameLength
  return absl::StrCat(name, "-e", epoch);
}

CpuBackend::CpuBackend(const CpuBackendOptions& options) : options_(options) {}
CpuBackend::~CpuBackend() { LeaveGroup(); }

absl::Status CpuBackendOptions::Validate() const {
  WEFT_RETURN_IF_ERROR(
      ValidatePoolAndRank(block_size, num_kv_blocks, kv_memory_bytes, world_size, rank));
  if (model.all_reducer != nullptr) {
    return absl::InvalidArgumentError("CpuBackend makes its own all-reducer");
  }
  return model.Validate();
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(const GgufFile& file,
                                                               const CpuBackendOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<CpuBackend> b(new CpuBackend(options));
  LlamaModelOptions mo = options.model;
  if (options.world_size > 1) {
    b->reducer_ = std::make_unique<GroupReducer>(options.rank, options.world_size);
    mo.all_reducer = b->reducer_.get();
  }
  WEFT_ASSIGN_OR_RETURN(b->model_, LlamaModel::Create(file, mo));
  KvPoolOptions kv = b->model_->KvOptions(options.block_size, options.num_kv_blocks);
  WEFT_ASSIGN_OR_RETURN(kv.num_blocks, KvPoolBlocks(options.num_kv_blocks, options.kv_memory_bytes,
                                                    KvCache::BytesPerBlock(kv)));
  WEFT_ASSIGN_OR_RETURN(b->kv_, KvCache::Create(kv));
  b->stepper_ = std::make_unique<ForwardStepper>(b->model_->config().vocab_size);
  // Fail at start, not at the first step, if the attention kernel cannot take this cache.
  WEFT_RETURN_IF_ERROR(b->model_->AttentionImplFor(options.block_size).status());
  LOG(INFO) << "CPU features: " << kernels::CpuFeatures::Get().ToString() << "; kernels "
            << b->kernels() << ", " << options.model.num_threads << " threads";
  return b;
}

absl::Status CpuBackend::JoinGroup(absl::string_view replica, int64_t epoch,
                                   absl::string_view comm_init) {
  if (reducer_ == nullptr) return absl::OkStatus();
  LeaveGroup();  // a group of an older epoch is never reused
  ShmCommunicatorOptions o;
  o.name = GroupSegmentName(replica, epoch);
  group_name_ = o.name;
  o.rank = options_.rank;
  o.world_size = options_.world_size;
  o.generation = static_cast<uint64_t>(epoch);
  o.timeout = options_.collective_timeout;
  o.attach_timeout = options_.group_attach_timeout;
  const absl::Time start = absl::Now();
  auto comm = ShmCommunicator::Create(o);
  if (!comm.ok()) {
    return absl::Status(comm.status().code(),
                        absl::StrCat("cannot form the tensor-parallel group '", o.name,
                                     "': ", comm.status().message()));
  }
  LOG(INFO) << "tensor-parallel group '" << o.name << "' formed: rank " << options_.rank << " of "
            << options_.world_size << " in " << absl::ToDoubleMilliseconds(absl::Now() - start)
            << " ms";
  reducer_->Set(std::move(*comm));
  return absl::OkStatus();
}

void CpuBackend::LeaveGroup() {
  if (reducer_ != nullptr && reducer_->has_group()) {
    LOG(INFO) << "leaving the tensor-parallel group";
    reducer_->Set(nullptr);
  }
  if (group_name_.empty()) return;
  // Rank 0 unlinked its segment above (or a failed Create did); if rank 0 died, its
  // segment is orphaned: remove it when its creator is provably gone (same PID
  // namespace, not running). A live creator's segment is left alone.
  absl::StatusOr<bool> removed = ShmCommunicator::RemoveIfStale(group_name_);
  if (removed.ok() && *removed) {
    LOG(INFO) << "removed the orphaned segment of group '" << group_name_ << "'";
  } else if (!removed.ok() && !absl::IsNotFound(removed.status())) {
    LOG(WARNING) << "checking group '" << group_name_ << "' for removal: " << removed.status();
  }
  group_name_.clear();
}

double CpuBackend::collective_seconds() const {
  return reducer_ == nullptr ? 0 : reducer_->seconds();
}

std::string CpuBackend::kernels() const {
  const KernelChoice choice = model_->options().kernels;
  std::string s = KernelChoiceName(ResolveKernelChoice(choice));
  if (choice == KernelChoice::kAuto) s += " (auto)";
  // What the matmuls really run, when they differ (a mixed-type file: e.g. the K formats
  // on AVX2 beside VNNI / AMX kernels): "matmuls avx512vnni x 90, avx2 x 121".
  std::map<std::string, int> counts;
  const LlamaWeights& w = model_->weights();
  for (const LlamaLayerWeights& l : w.layers()) {
    for (const Linear* lin : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      ++counts[lin->kernel_name()];
    }
  }
  ++counts[w.lm_head().kernel_name()];
  if (counts.size() > 1) {
    const char* sep = ", matmuls ";
    for (const auto& [name, count] : counts) {
      absl::StrAppend(&s, sep, name, " x ", count);
      sep = ", ";
    }
  }
  auto attn = model_->AttentionImplFor(kv_->block_size());
  if (attn.ok()) s += std::string(", attention ") + kernels::AttentionImplName(*attn);
  return s;
}

}  // namespace weft
