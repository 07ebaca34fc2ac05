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

// The sampler's view of a sequence: its request's settings and its sample index.
SamplerParams ParamsOf(const WorkerSequence& seq) { return {seq.sampling, seq.sample_index}; }

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
  e->sampler_ = std::make_unique<Sampler>(b.config().vocab_size);
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
  cache_ = std::make_unique<StateCache>(backend_->block_size(), welcome.num_kv_blocks(),
                                        backend_->config().vocab_size);
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
  forward_.sequences.clear();
  row_of_entry_.assign(batch_.sequences.size(), -1);
  int32_t rows = 0;
  for (size_t i = 0; i < batch_.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch_.sequences[i];
    if (sc.num_tokens == 0) continue;  // a fork: samples from its parent's row
    SequenceChunk chunk;
    chunk.token_ids = absl::MakeConstSpan(sc.state->tokens).subspan(sc.start_pos, sc.num_tokens);
    chunk.start_pos = sc.start_pos;
    chunk.block_table = absl::MakeConstSpan(sc.state->block_ids);
    chunk.want_logits = sc.sample;
    if (sc.sample) row_of_entry_[i] = rows++;
    forward_.sequences.push_back(chunk);
  }
  if (!forward_.sequences.empty()) {
    const absl::Time start = absl::Now();
    WEFT_RETURN_IF_ERROR(backend_->Forward(forward_, &logits_));
    result->set_forward_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  }
  for (const auto& [src, dst] : batch_.block_copies) {
    WEFT_RETURN_IF_ERROR(backend_->CopyBlock(src, dst));
  }
  return SampleAll(batch_, result);
}

// Samples on the backend's device when it can (no logprobs wanted, valid parameters):
// fills device_tokens_ and returns true; false means "sample on the host".
absl::StatusOr<bool> ModelExecutor::TrySampleOnDevice(const StepBatch& batch) {
  device_params_.clear();
  device_requests_.clear();
  for (const ScheduledSequence& sc : batch.sequences) {
    if (!sc.sample) continue;
    if (sc.state->sampling.num_logprobs >= 0) return false;
    device_params_.push_back(ParamsOf(*sc.state));  // validated by StateCache
  }
  if (device_params_.empty()) return false;
  size_t k = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    const int32_t row = sc.logits_from >= 0 ? row_of_entry_[sc.logits_from] : row_of_entry_[i];
    if (row < 0) return absl::InternalError("no logits row for a sampled sequence");
    const auto tokens = absl::MakeConstSpan(sc.state->tokens);
    Backend::SampleRequest r;
    r.row = row;
    r.params = &device_params_[k++];
    r.prompt = tokens.subspan(0, sc.state->num_prompt_tokens);
    r.output = tokens.subspan(sc.state->num_prompt_tokens);
    r.allowed_tokens = sc.allowed_tokens;
    device_requests_.push_back(r);
  }
  const absl::Status s = backend_->SampleOnDevice(device_requests_, &device_tokens_);
  if (absl::IsUnimplemented(s)) return false;
  if (!s.ok()) return s;
  return true;
}

absl::Status ModelExecutor::SampleAll(const StepBatch& batch, weft::v1::StepResult* result) {
  WEFT_ASSIGN_OR_RETURN(const bool on_device, TrySampleOnDevice(batch));
  size_t k = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    WorkerSequence* seq = sc.state;
    if (on_device) {
      sample_.token = device_tokens_[k++];
      sample_.top_logprobs.clear();
      if (sample_.token < 0) return absl::InvalidArgumentError("no token has a finite logit");
    } else {
      const int32_t row =
          sc.logits_from >= 0 ? row_of_entry_[sc.logits_from] : row_of_entry_[i];
      if (row < 0) return absl::InternalError("no logits row for a sampled sequence");
      const auto tokens = absl::MakeConstSpan(seq->tokens);
      const auto logits = absl::MakeConstSpan(logits_.Row(row), logits_.vocab_size);
      WEFT_RETURN_IF_ERROR(sampler_->Sample(ParamsOf(*seq), logits,
                                            tokens.subspan(0, seq->num_prompt_tokens),
                                            tokens.subspan(seq->num_prompt_tokens), &sample_,
                                            sc.allowed_tokens));
    }
    weft::v1::SampledToken* t = result->add_tokens();
    t->set_seq_id(seq->seq_id);
    t->set_token_id(sample_.token);
    if (seq->sampling.num_logprobs >= 0) {
      t->set_logprob(sample_.logprob);
      for (const LogprobEntry& lp : sample_.top_logprobs) {
        weft::v1::TokenLogprobEntry* e = t->add_top();
        e->set_token_id(lp.token);
        e->set_logprob(lp.logprob);
      }
    }
    cache_->AppendSampled(seq, sample_.token);
  }
  return absl::OkStatus();
}

}  // namespace weft
