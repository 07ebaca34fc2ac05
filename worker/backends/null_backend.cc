#include "worker/backends/null_backend.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/sampling/sampling_math.h"
#include "common/shard_layout.h"
#include "common/status_macros.h"
#include "common/tokenizer.h"
#include "glog/logging.h"

namespace weft {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Sleeps until `deadline` on CLOCK_MONOTONIC (absolute: an early wake-up resumes the
// same wait, and the step never ends before it).
void SleepUntil(const timespec& deadline) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr) == EINTR) {
  }
}

timespec MonotonicAfter(absl::Duration d) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t ns = absl::ToInt64Nanoseconds(d) + now.tv_nsec;
  now.tv_sec += ns / 1000000000;
  now.tv_nsec = ns % 1000000000;
  return now;
}

}  // namespace

absl::Status NullBackendOptions::Validate() const {
  WEFT_RETURN_IF_ERROR(
      ValidatePoolAndRank(block_size, num_kv_blocks, kv_memory_bytes, world_size, rank));
  if (step_time < absl::ZeroDuration() || step_time > absl::Seconds(60)) {
    return absl::InvalidArgumentError("--null_step_ms must be in [0, 60000]");
  }
  if (!(eos_probability >= 0 && eos_probability <= 1)) {
    return absl::InvalidArgumentError("--null_eos_probability must be in [0, 1]");
  }
  return absl::OkStatus();
}

NullBackend::NullBackend(const NullBackendOptions& options, const ModelConfig& config,
                         int32_t num_kv_blocks, std::vector<int32_t> eog)
    : options_(options), config_(config), num_kv_blocks_(num_kv_blocks), eog_(std::move(eog)) {
  is_eog_.assign(config_.vocab_size, false);
  for (int32_t t : eog_) is_eog_[t] = true;
}

absl::StatusOr<std::unique_ptr<NullBackend>> NullBackend::Create(
    const GgufFile& file, const NullBackendOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  WEFT_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::FromGguf(file));
  std::vector<int32_t> eog;
  if (options.eog_token_ids.has_value()) {
    eog = *options.eog_token_ids;
  } else if (auto tok = Tokenizer::FromGguf(file); tok.ok()) {
    eog = (*tok)->eog_ids();
  } else {
    LOG(WARNING) << "null backend: no tokenizer in the model (" << tok.status().message()
                 << "): no end-of-generation ids are known";
  }
  for (int32_t t : eog) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("end-of-generation id ", t,
                                                     " outside the vocabulary"));
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  if (static_cast<int32_t>(eog.size()) >= config.vocab_size) {
    return absl::InvalidArgumentError("every token is an end-of-generation token");
  }
  if (options.eos_probability > 0 && eog.empty()) {
    return absl::InvalidArgumentError(
        "--null_eos_probability needs an end-of-generation token (the model has none)");
  }
  int32_t blocks = options.num_kv_blocks;
  if (blocks == 0) {
    WEFT_ASSIGN_OR_RETURN(const ShardLayout layout,
                          ComputeShardLayout(config.num_heads, config.num_kv_heads,
                                             config.ffn_size, config.vocab_size,
                                             options.world_size, options.rank));
    // As many blocks as the CPU pool of this shape would hold.
    KvPoolOptions kv;
    kv.num_layers = config.num_layers;
    kv.num_kv_heads = layout.num_kv_heads();
    kv.head_dim = config.head_dim;
    kv.block_size = options.block_size;
    kv.num_blocks = 1;
    kv.dtype = options.kv_dtype;
    const int64_t per_block = KvCache::BytesPerBlock(kv);
    WEFT_RETURN_IF_ERROR(kv.Validate(per_block));
    WEFT_ASSIGN_OR_RETURN(blocks, KvPoolBlocks(0, options.kv_memory_bytes, per_block));
  }
  auto b = std::unique_ptr<NullBackend>(new NullBackend(options, config, blocks, std::move(eog)));
  LOG(INFO) << "null backend: no model arithmetic; " << b->kernels();
  return b;
}

std::string NullBackend::kernels() const {
  return absl::StrCat("none (step ", absl::FormatDuration(options_.step_time), ", ",
                      options_.device_sampling ? "device" : "host", " sampling, eos p=",
                      options_.eos_probability, ")");
}

int32_t NullBackend::NextToken(int32_t last_token, int32_t position) const {
  const uint64_t h = Mix64((uint64_t{static_cast<uint32_t>(last_token)} << 32) |
                           static_cast<uint32_t>(position));
  if (options_.eos_probability > 0 &&
      static_cast<double>(h >> 11) * 0x1.0p-53 < options_.eos_probability) {
    return eog_[0];
  }
  int32_t t = static_cast<int32_t>(Mix64(h) % static_cast<uint64_t>(config_.vocab_size));
  while (is_eog_[t]) t = (t + 1) % config_.vocab_size;
  return t;
}

absl::Status NullBackend::Forward(const ForwardBatch& batch, ForwardOutput* out) {
  const timespec deadline = MonotonicAfter(options_.step_time);
  WEFT_RETURN_IF_ERROR(ValidateBatch(
      batch, BatchLimits{config_.context_length, config_.vocab_size, options_.block_size,
                         num_kv_blocks_}));
  row_tokens_.clear();
  out->row_sequence.clear();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& seq = batch.sequences[s];
    const int32_t n = static_cast<int32_t>(seq.token_ids.size());
    const int32_t k = seq.num_logit_rows();
    for (int32_t i = n - k; i < n; ++i) {
      row_tokens_.push_back(NextToken(seq.token_ids[i], seq.start_pos + i));
      out->row_sequence.push_back(static_cast<int32_t>(s));
    }
  }
  WriteLogits(out);
  ++num_forwards_;
  num_rows_ += out->num_rows;
  if (options_.step_time > absl::ZeroDuration()) SleepUntil(deadline);
  return absl::OkStatus();
}

void NullBackend::WriteLogits(ForwardOutput* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  const size_t rows = row_tokens_.size();
  out->vocab_size = config_.vocab_size;
  out->num_rows = static_cast<int32_t>(rows);
  std::vector<float>& logits = out->logits;
  if (logits.data() != filled_ || logits.size() != filled_size_) {
    // Not the buffer filled last step: its contents are unknown.
    std::fill(logits.begin(), logits.end(), kNegInf);
    hot_.assign(logits.size() / vocab, -1);
  }
  if (logits.size() < rows * vocab) {
    // Grows in steps of 64 rows (a handful of reallocations up to the largest batch);
    // resize keeps the existing rows and fills the new ones with -inf.
    const size_t want_rows = (rows + 63) / 64 * 64;
    logits.resize(want_rows * vocab, kNegInf);
    hot_.resize(want_rows, -1);
  }
  for (size_t r = 0; r < rows; ++r) {
    const int32_t t = row_tokens_[r];
    if (hot_[r] == t) continue;
    if (hot_[r] >= 0) logits[r * vocab + hot_[r]] = kNegInf;
    logits[r * vocab + t] = 0.0f;
    hot_[r] = t;
  }
  filled_ = logits.data();
  filled_size_ = logits.size();
}

// A constrained row (a grammar's bit-packed mask, bit t of byte t / 8; StateCache checked
// that it allows a token): the null model's token if allowed, else the next allowed one
// (wrapping), so constrained streams run on --backend=null as they do on a real model.
static int32_t FirstAllowedFrom(absl::string_view mask, int32_t token, int32_t vocab) {
  const auto* bits = reinterpret_cast<const uint8_t*>(mask.data());
  for (int32_t k = 0; k < vocab; ++k) {
    const int32_t t = (token + k) % vocab;
    if (sampling::MaskAllows(bits, t)) return t;
  }
  return token;
}

absl::Status NullBackend::Step(const StepBatch& batch, StepOutput* out) {
  const timespec deadline = MonotonicAfter(options_.step_time);
  const absl::Time start = absl::Now();
  out->Clear();
  entry_tokens_.assign(batch.sequences.size(), -1);
  int64_t rows = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (sc.num_tokens == 0 || !sc.sample) continue;  // forks take their parent's below
    const int32_t last = sc.start_pos + sc.num_tokens - 1;
    entry_tokens_[i] = NextToken(sc.state->tokens[last], last);
    ++rows;
  }
  ++num_forwards_;
  num_rows_ += rows;
  for (const auto& [src, dst] : batch.block_copies) WEFT_RETURN_IF_ERROR(CopyBlock(src, dst));
  if (options_.step_time > absl::ZeroDuration()) SleepUntil(deadline);
  out->forward_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const ScheduledSequence& sc = batch.sequences[i];
    if (!sc.sample) continue;
    int32_t token = entry_tokens_[sc.logits_from >= 0 ? sc.logits_from : i];
    if (!sc.allowed_tokens.empty()) token = FirstAllowedFrom(sc.allowed_tokens, token, config_.vocab_size);
    SampleResult* r = out->Add();
    if (options_.device_sampling && sc.state->sampling.num_logprobs < 0) {
      r->token = token;
    } else {
      WEFT_RETURN_IF_ERROR(SampleOneHot(*sc.state, token, r));
    }
  }
  return absl::OkStatus();
}

absl::Status NullBackend::SampleOneHot(const WorkerSequence& seq, int32_t token,
                                       SampleResult* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (sampler_ == nullptr) {
    sampler_ = std::make_unique<Sampler>(config_.vocab_size);
    one_hot_.assign(config_.vocab_size, kNegInf);
  }
  one_hot_[token] = 0.0f;
  const auto tokens = absl::MakeConstSpan(seq.tokens);
  const absl::Status s = sampler_->Sample(SamplerParams{seq.sampling, seq.sample_index},
                                          one_hot_, tokens.subspan(0, seq.num_prompt_tokens),
                                          tokens.subspan(seq.num_prompt_tokens), out);
  one_hot_[token] = kNegInf;
  return s;
}

absl::Status NullBackend::CopyBlock(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_kv_blocks_ || dst < 0 || dst >= num_kv_blocks_) {
    return absl::InvalidArgumentError(absl::StrCat("block copy ", src, " -> ", dst,
                                                   " outside [0, ", num_kv_blocks_, ")"));
  }
  ++num_block_copies_;
  return absl::OkStatus();
}

absl::Status NullBackend::SampleOnDevice(absl::Span<const SampleRequest> requests,
                                         std::vector<int32_t>* tokens) {
  tokens->clear();
  if (!options_.device_sampling) return absl::UnimplementedError("device sampling is off");
  for (const SampleRequest& q : requests) {
    if (!q.allowed_tokens.empty()) return absl::UnimplementedError("token masks sample on the host");
  }
  for (const SampleRequest& q : requests) {
    if (q.row < 0 || q.row >= static_cast<int32_t>(row_tokens_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no logits row ", q.row));
    }
    tokens->push_back(row_tokens_[q.row]);
  }
  num_device_samples_ += static_cast<int64_t>(requests.size());
  return absl::OkStatus();
}

}  // namespace weft
