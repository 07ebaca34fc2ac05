#include "worker/service/model_executor.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shard_layout.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "common/tokens_hash.h"

namespace weft {
namespace {

std::string MakeWorkerId() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, ":", ::getpid(), ":", absl::ToUnixMillis(absl::Now()));
}

}  // namespace

absl::Status ModelExecutorOptions::Validate() const {
  if (replica.empty()) return absl::InvalidArgumentError("--replica must not be empty");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of world size ", world_size));
  }
  return absl::OkStatus();
}

ModelExecutor::ModelExecutor(const GgufFile& file, std::unique_ptr<Backend> backend,
                             const ModelExecutorOptions& options)
    : file_(file), options_(options), worker_id_(MakeWorkerId()), backend_(std::move(backend)) {}

absl::StatusOr<std::unique_ptr<ModelExecutor>> ModelExecutor::Create(
    const GgufFile& file, std::unique_ptr<Backend> backend, const ModelExecutorOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  if (backend == nullptr) return absl::InvalidArgumentError("no backend");
  std::unique_ptr<ModelExecutor> e(new ModelExecutor(file, std::move(backend), options));
  const Backend& b = *e->backend_;
  LOG(INFO) << "replica '" << options.replica << "' rank " << options.rank << "/"
            << options.world_size << ": backend " << b.name() << " (kernels " << b.kernels()
            << "), " << b.num_kv_blocks() << " KV blocks of " << b.block_size() << " tokens ("
            << (b.kv_pool_bytes() >> 20) << " MiB)";
  return e;
}

weft::v1::WorkerHello ModelExecutor::Hello() {
  const ModelConfig& c = backend_->config();
  weft::v1::WorkerHello h;
  h.set_model_fingerprint(file_.Fingerprint());
  h.set_replica(options_.replica);
  h.set_rank(options_.rank);
  h.set_world_size(options_.world_size);
  h.set_block_size(backend_->block_size());
  h.set_num_kv_blocks(backend_->num_kv_blocks());
  h.set_backend(backend_->name());
  auto layout = ComputeShardLayout(c.num_heads, c.num_kv_heads, c.ffn_size, c.vocab_size,
                                   options_.world_size, options_.rank);
  h.set_shard_layout(layout.ok() ? layout->ToString() : "invalid");
  h.set_worker_id(worker_id_);
  h.set_kernels(backend_->kernels());
  h.set_vocab_size(c.vocab_size);
  h.set_max_model_len(c.context_length);
  h.set_comm_init(backend_->CommInit());
  return h;
}

absl::Status ModelExecutor::OnWelcome(const weft::v1::Welcome& welcome) {
  if (welcome.num_kv_blocks() < 1 || welcome.num_kv_blocks() > backend_->num_kv_blocks()) {
    return absl::FailedPreconditionError(absl::StrCat("scheduler wants ", welcome.num_kv_blocks(),
                                                      " KV blocks; this rank has ",
                                                      backend_->num_kv_blocks()));
  }
  WEFT_RETURN_IF_ERROR(
      backend_->JoinGroup(welcome.replica(), welcome.epoch(), welcome.comm_init()));
  // The step's one validation (Backend::Step checks nothing again): the pool the
  // scheduler uses, the vocabulary and the model's context length.
  cache_ = std::make_unique<StateCache>(backend_->block_size(), welcome.num_kv_blocks(),
                                        backend_->config().vocab_size,
                                        backend_->config().context_length);
  cache_->Reset(welcome.first_step_id());
  return absl::OkStatus();
}

void ModelExecutor::OnDetach() {
  cache_.reset();
  backend_->LeaveGroup();
}

weft::v1::StepResult ModelExecutor::Execute(const weft::v1::StepPlan& plan) {
  weft::v1::StepResult result;
  ExecuteInto(plan, &result);
  return result;
}

void ModelExecutor::ExecuteInto(const weft::v1::StepPlan& plan, weft::v1::StepResult* out) {
  const absl::Time start = absl::Now();
  weft::v1::StepResult& result = *out;
  result.Clear();  // its token entries stay allocated for this step's
  result.set_step_id(plan.step_id());
  result.set_rank(options_.rank);
  absl::Status s = cache_ == nullptr ? absl::FailedPreconditionError("plan before welcome")
                                     : Run(plan, &result);
  if (!s.ok()) {
    LOG(WARNING) << "step " << plan.step_id() << " failed: " << s;
    if (cache_ != nullptr) cache_->Fail(plan);
    result.clear_tokens();
    result.set_error(std::string(s.message()));
  }
  result.set_tokens_hash(TokensHash(result));
  result.set_execute_seconds(absl::ToDoubleSeconds(absl::Now() - start));
}

absl::Status ModelExecutor::Run(const weft::v1::StepPlan& plan, weft::v1::StepResult* result) {
  WEFT_RETURN_IF_ERROR(cache_->Apply(plan, &batch_));
  WEFT_RETURN_IF_ERROR(backend_->Step(batch_, &step_));
  if (step_.forward_seconds > 0) result->set_forward_seconds(step_.forward_seconds);
  if (step_.num_samples != batch_.num_sampled) {
    return absl::InternalError(absl::StrCat("the backend sampled ", step_.num_samples, " of ",
                                            batch_.num_sampled, " sequences"));
  }
  int32_t k = 0;
  for (const ScheduledSequence& sc : batch_.sequences) {
    if (!sc.sample) continue;
    WorkerSequence* seq = sc.state;
    const SampleResult& sample = step_.samples[k++];
    weft::v1::SampledToken* t = result->add_tokens();
    t->set_seq_id(seq->seq_id);
    t->set_token_id(sample.token);
    if (seq->sampling.num_logprobs >= 0) {
      t->set_logprob(sample.logprob);
      for (const LogprobEntry& lp : sample.top_logprobs) {
        weft::v1::TokenLogprobEntry* e = t->add_top();
        e->set_token_id(lp.token);
        e->set_logprob(lp.logprob);
      }
    }
    cache_->AppendSampled(seq, sample.token);
  }
  return absl::OkStatus();
}

}  // namespace weft
