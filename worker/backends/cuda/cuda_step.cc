// CudaBackend::Step: one step with the logits kept on the device (cuda_backend.h "Step").
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sampling/sampler.h"
#include "common/sampling/sampling_math.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/sampling.h"
#include "worker/backends/cuda/cuda_backend.h"

namespace weft {
namespace {

namespace kc = ::weft::kernels::cuda;

size_t Align16(size_t x) { return (x + 15) / 16 * 16; }

// The next capacity >= need: doubling from at least `floor`.
int32_t Grown(int32_t have, int32_t need, int32_t floor) {
  int32_t c = std::max(have, floor);
  while (c < need) c *= 2;
  return c;
}

}  // namespace

cuda_backend::StepGraph CudaBackend::ChooseGraph(const StepBatch& batch) const {
  return cuda_backend::ChooseStepGraph(graph_policy_, cuda_backend::StepInputs::NumChunks(batch),
                                       cuda_backend::StepInputs::NumTokens(batch),
                                       cuda_backend::StepInputs::AllDecode(batch));
}

absl::Status CudaBackend::Step(const StepBatch& batch, StepOutput* out) {
  if (!options_.device_sampling) return stepper_->Step(*this, batch, out);
  out->Clear();
  const absl::Status s = DeviceStep(batch, out);
  if (!s.ok()) slots_.Clear();  // the device state may be partly updated: start over
  return s;
}

absl::Status CudaBackend::ReserveState(const StepBatch& batch) {
  const int64_t max_blocks = slots_.max_blocks_per_seq();
  const bool tables_short = slots_.num_slots() > table_capacity_;
  const bool counts_short = slots_.num_count_rows() > count_capacity_;
  if (!tables_short && !counts_short) return absl::OkStatus();
  if (tables_short) {
    const int32_t cap = Grown(table_capacity_, slots_.num_slots(), 64);
    if (int64_t{cap} * max_blocks > int64_t{1} << 31) {
      return absl::ResourceExhaustedError(
          absl::StrCat(slots_.num_slots(), " sequences' block tables exceed int32 indexing"));
    }
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));  // the old one may be in use
    WEFT_RETURN_IF_ERROR(tables_dev_.Allocate(cap * max_blocks * sizeof(int32_t)));
    table_capacity_ = cap;
    graphs_.Clear(cuda_backend::GraphCache::Kind::kDecode);  // they captured the old tables
  }
  if (counts_short) {
    const int32_t cap = Grown(count_capacity_, slots_.num_count_rows(), 16);
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    WEFT_RETURN_IF_ERROR(
        counts_dev_.Allocate(static_cast<size_t>(cap) * config_.vocab_size * sizeof(int32_t)));
    count_capacity_ = cap;
  }
  // The new memory holds nothing: every sequence is uploaded whole when next scheduled.
  slots_.Clear();
  slots_.Update(batch);
  return absl::OkStatus();
}

absl::Status CudaBackend::DeviceStep(const StepBatch& batch, StepOutput* out) {
  if (options_.world_size > 1 && comm_ == nullptr) {
    return absl::FailedPreconditionError("the tensor-parallel group is not formed");
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (stream_dirty_) {
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    stream_dirty_ = false;
  }
  slots_.Update(batch);
  WEFT_RETURN_IF_ERROR(ReserveState(batch));
  const cuda_backend::StepGraph graph = ChooseGraph(batch);
  const bool computes = cuda_backend::StepInputs::NumChunks(batch) > 0;
  if (computes) WEFT_RETURN_IF_ERROR(inputs_.Build(batch, slots_, limits_, graph));
  WEFT_RETURN_IF_ERROR(PackStep(batch));  // before anything is queued
  WEFT_RETURN_IF_ERROR(FlushCopies());    // the last step's copy-on-write
  stream_dirty_ = true;  // cleared once the step's work is known to be finished
  char* d = step_dev_.as<char>();
  if (blob_.upload > 0) {
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d, step_host_.get(), blob_.upload,
                                              cudaMemcpyHostToDevice, stream_));
    h2d_bytes_ += static_cast<int64_t>(blob_.upload);
  }
  WEFT_CUDA_RETURN_IF_ERROR(kc::UpdateBlockTables(
      tables_dev_.as<int32_t>(), reinterpret_cast<const int32_t*>(d + blob_.table_pairs),
      blob_.num_pairs, stream_));
  kc::CountUpdate cu;
  cu.counts = counts_dev_.as<int32_t>();
  cu.vocab = config_.vocab_size;
  cu.zero_rows = reinterpret_cast<const int32_t*>(d + blob_.zero_rows);
  cu.num_zero = blob_.num_zero;
  cu.marks = reinterpret_cast<const int32_t*>(d + blob_.marks);
  cu.num_marks = blob_.num_marks;
  WEFT_CUDA_RETURN_IF_ERROR(kc::UpdateCounts(cu, stream_));
  // The forward pass's share: from its queueing to the step's synchronization (the
  // sampling kernels and the small copy back included, as ForwardStepper's Forward
  // included its logits copy).
  const absl::Time start = absl::Now();
  if (computes) WEFT_RETURN_IF_ERROR(EnqueueForward(graph, tables_dev_.as<int32_t>()));
  WEFT_RETURN_IF_ERROR(EnqueueSampling(batch));
  const size_t back = blob_.total - blob_.tokens;
  if (blob_.rows > 0) {
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_host_.as<char>() + blob_.tokens,
                                              d + blob_.tokens, back, cudaMemcpyDeviceToHost,
                                              stream_));
    d2h_bytes_ += static_cast<int64_t>(back);
  }
  WEFT_RETURN_IF_ERROR(Sync());  // the step's one synchronization
  stream_dirty_ = false;
  if (computes) out->forward_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  WEFT_RETURN_IF_ERROR(ReadSamples(batch, out));
  slots_.Sampled(batch);
  for (const auto& [src, dst] : batch.block_copies) {
    WEFT_RETURN_IF_ERROR(CopyBlock(src, dst));  // queued: they run before the next pass
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::PackStep(const StepBatch& batch) {
  blob_ = StepBlob();
  WEFT_RETURN_IF_ERROR(CountSampleRows(batch));
  scratch_pairs_.clear();
  scratch_marks_.clear();
  slots_.TablePairs(batch, &scratch_pairs_);
  slots_.CountMarks(batch, &scratch_marks_);
  blob_.num_pairs = static_cast<int32_t>(scratch_pairs_.size() / 2);
  blob_.num_zero = static_cast<int32_t>(slots_.zeroed_count_rows().size());
  blob_.num_marks = static_cast<int32_t>(scratch_marks_.size() / 3);
  LayOutBlob();
  WEFT_RETURN_IF_ERROR(step_host_.Reserve(blob_.total));
  WEFT_RETURN_IF_ERROR(step_dev_.Reserve(blob_.total));
  char* h = step_host_.as<char>();
  const size_t i4 = sizeof(int32_t);
  std::memcpy(h + blob_.table_pairs, scratch_pairs_.data(), scratch_pairs_.size() * i4);
  if (blob_.num_zero > 0) {
    std::memcpy(h + blob_.zero_rows, slots_.zeroed_count_rows().data(), blob_.num_zero * i4);
  }
  if (!scratch_marks_.empty()) {
    std::memcpy(h + blob_.marks, scratch_marks_.data(), scratch_marks_.size() * i4);
  }
  return FillSampleRows(batch);
}

absl::Status CudaBackend::CountSampleRows(const StepBatch& batch) {
  const int32_t vocab = config_.vocab_size;
  StepBlob& b = blob_;
  entry_row_.assign(batch.sequences.size(), -1);
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    entry_row_[i] = b.rows++;
    const int32_t n = sc.state->sampling.num_logprobs;
    if (n > vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_logprobs ", n, " over the vocabulary of ", vocab));
    }
    if (n >= 0) {
      ++b.lp_count;
      b.max_top = std::max(b.max_top, n);
    }
    if (!sc.allowed_tokens.empty()) ++b.num_masks;
  }
  if (b.rows > 65535) return absl::InvalidArgumentError("more than 65535 sampled rows");
  return absl::OkStatus();
}

void CudaBackend::LayOutBlob() {
  StepBlob& b = blob_;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at = Align16(at + bytes);
    return here;
  };
  const size_t n = b.rows, lp = b.lp_count, i4 = sizeof(int32_t);
  const size_t mask_bytes = sampling::MaskBytes(config_.vocab_size);
  b.params = take(n * sizeof(sampling::RowParams));
  b.logits_rows = take(n * i4);
  b.count_rows = take(n * i4);
  b.mask_index = take(n * i4);
  b.table_pairs = take(static_cast<size_t>(b.num_pairs) * 2 * i4);
  b.zero_rows = take(b.num_zero * i4);
  b.marks = take(static_cast<size_t>(b.num_marks) * 3 * i4);
  b.lp_rows = take(lp * i4);
  b.lp_index = take(lp * i4);
  b.lp_top = take(lp * i4);
  b.masks = take(static_cast<size_t>(b.num_masks) * mask_bytes);
  b.upload = at;
  b.tokens = take(n * i4);  // read back from here on
  b.lp = take(lp * i4);
  b.top_ids = take(lp * b.max_top * i4);
  b.top_lp = take(lp * b.max_top * i4);
  b.total = at;
}

absl::Status CudaBackend::FillSampleRows(const StepBatch& batch) {
  const StepBlob& b = blob_;
  const int32_t mask_bytes = sampling::MaskBytes(config_.vocab_size);
  char* h = step_host_.as<char>();
  auto* params = reinterpret_cast<sampling::RowParams*>(h + b.params);
  auto* logits_rows = reinterpret_cast<int32_t*>(h + b.logits_rows);
  auto* count_rows = reinterpret_cast<int32_t*>(h + b.count_rows);
  auto* mask_index = reinterpret_cast<int32_t*>(h + b.mask_index);
  auto* lp_rows = reinterpret_cast<int32_t*>(h + b.lp_rows);
  auto* lp_index = reinterpret_cast<int32_t*>(h + b.lp_index);
  auto* lp_top = reinterpret_cast<int32_t*>(h + b.lp_top);
  // The logits row of each sampled entry's own chunk (a fork: its parent's).
  own_row_.assign(batch.sequences.size(), -1);
  if (cuda_backend::StepInputs::NumChunks(batch) > 0) {
    for (const cuda_backend::OutputRow& r : inputs_.output_rows()) {
      own_row_[r.sequence] = r.logits_row;
    }
  }
  int32_t m = 0, l = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    const int32_t r = entry_row_[i];
    if (r < 0) continue;
    const WorkerSequence& seq = *sc.state;
    params[r] = ToRowParams({seq.sampling, seq.sample_index}, seq.num_prompt_tokens,
                            static_cast<int32_t>(seq.tokens.size()) - seq.num_prompt_tokens);
    logits_rows[r] = own_row_[sc.logits_from >= 0 ? sc.logits_from : i];
    if (logits_rows[r] < 0) return absl::InternalError("no logits row for a sampled sequence");
    count_rows[r] = slots_.count_row(i);
    mask_index[r] = sc.allowed_tokens.empty() ? -1 : m;
    if (!sc.allowed_tokens.empty()) {
      std::memcpy(h + b.masks + static_cast<size_t>(m++) * mask_bytes, sc.allowed_tokens.data(),
                  mask_bytes);
    }
    if (seq.sampling.num_logprobs >= 0) {
      lp_rows[l] = logits_rows[r];
      lp_index[l] = r;
      lp_top[l++] = seq.sampling.num_logprobs;
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::EnqueueSampling(const StepBatch& batch) {
  const StepBlob& b = blob_;
  if (b.rows == 0) return absl::OkStatus();
  const int32_t vocab = config_.vocab_size;
  WEFT_RETURN_IF_ERROR(sample_work_.Reserve(static_cast<size_t>(b.rows) * vocab * sizeof(float)));
  char* d = step_dev_.as<char>();
  kc::SampleArgs a;
  a.logits = runner_->logits();
  a.logits_stride = vocab;
  a.logits_rows = reinterpret_cast<const int32_t*>(d + b.logits_rows);
  a.num_rows = b.rows;
  a.vocab = vocab;
  a.params = reinterpret_cast<const sampling::RowParams*>(d + b.params);
  a.work = sample_work_.as<float>();
  a.counts = counts_dev_.as<int32_t>();
  a.count_rows = reinterpret_cast<const int32_t*>(d + b.count_rows);
  a.tokens = reinterpret_cast<int32_t*>(d + b.tokens);
  if (b.num_masks > 0) {
    a.masks = reinterpret_cast<const uint8_t*>(d + b.masks);
    a.mask_index = reinterpret_cast<const int32_t*>(d + b.mask_index);
  }
  WEFT_CUDA_RETURN_IF_ERROR(kc::SampleTokens(a, stream_));
  if (b.lp_count == 0) return absl::OkStatus();
  kc::LogprobArgs g;
  g.logits = runner_->logits();
  g.logits_stride = vocab;
  g.vocab = vocab;
  g.num_rows = b.lp_count;
  g.max_top = b.max_top;
  g.logits_rows = reinterpret_cast<const int32_t*>(d + b.lp_rows);
  g.tokens = a.tokens;
  g.token_index = reinterpret_cast<const int32_t*>(d + b.lp_index);
  g.num_top = reinterpret_cast<const int32_t*>(d + b.lp_top);
  g.logprob = reinterpret_cast<float*>(d + b.lp);
  g.top_ids = reinterpret_cast<int32_t*>(d + b.top_ids);
  g.top_logprobs = reinterpret_cast<float*>(d + b.top_lp);
  WEFT_CUDA_RETURN_IF_ERROR(kc::TokenLogprobs(g, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadSamples(const StepBatch& batch, StepOutput* out) {
  const StepBlob& b = blob_;
  const char* h = step_host_.as<char>();
  const auto* tokens = reinterpret_cast<const int32_t*>(h + b.tokens);
  const auto* lp = reinterpret_cast<const float*>(h + b.lp);
  const auto* top_ids = reinterpret_cast<const int32_t*>(h + b.top_ids);
  const auto* top_lp = reinterpret_cast<const float*>(h + b.top_lp);
  int32_t l = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const int32_t r = entry_row_[i];
    if (r < 0) continue;
    if (tokens[r] < 0) return absl::InvalidArgumentError("no token has a finite logit");
    SampleResult* s = out->Add();
    s->token = tokens[r];
    const int32_t n = batch.sequences[i].state->sampling.num_logprobs;
    if (n < 0) continue;
    s->logprob = lp[l];
    for (int32_t k = 0; k < n; ++k) {
      s->top_logprobs.push_back({top_ids[l * b.max_top + k], top_lp[l * b.max_top + k]});
    }
    ++l;
  }
  return absl::OkStatus();
}

}  // namespace weft
