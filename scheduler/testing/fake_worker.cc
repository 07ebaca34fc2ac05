#include "scheduler/testing/fake_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/stop_checker.h"

namespace weft {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

absl::string_view FakeTokenText::TokenBytes(int32_t token_id) const {
  // 0: EOS (renders as nothing). Split UTF-8 pieces make characters span tokens.
  static const char* kTable[] = {"",   "!",  "a",    "b",    "c",  " ",  "ab",
                                 "ba", "\n", "\xC3", "\xA9", "ca", "bc", "\xE2\x82\xAC"};
  constexpr int32_t kSize = sizeof(kTable) / sizeof(kTable[0]);
  return kTable[static_cast<uint32_t>(token_id) % kSize];
}

uint64_t FakeModel::KvAt(uint64_t prev, int32_t token, int32_t pos) {
  return Mix(prev * 31 + Mix(static_cast<uint64_t>(static_cast<uint32_t>(token)) << 20 |
                             static_cast<uint64_t>(pos)));
}

int32_t FakeModel::Sample(uint64_t seed, int32_t sample_index, int32_t output_index,
                          uint64_t hidden) const {
  const uint64_t h = Mix(Mix(seed ^ hidden) + (static_cast<uint64_t>(sample_index) << 32) +
                         static_cast<uint64_t>(output_index));
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab_size_));
}

ReferenceOutput FakeModel::Reference(absl::Span<const int32_t> prompt, uint64_t seed,
                                     int32_t sample_index, const StopConditions& stop,
                                     const TokenTextSource* text) const {
  ReferenceOutput out;
  uint64_t hidden = 0;
  const int32_t num_prompt = static_cast<int32_t>(prompt.size());
  for (int32_t p = 0; p < num_prompt; ++p) hidden = KvAt(hidden, prompt[p], p);
  StopChecker decoder(nullptr);  // plain UTF-8 assembly
  std::string decoded;
  for (int32_t i = 0;; ++i) {
    const int32_t tok = Sample(seed, sample_index, i, hidden);
    if (!stop.ignore_eos && std::count(eos_.begin(), eos_.end(), tok) > 0) {
      out.finish_reason = FinishReason::kStopEos;  // EOS is not returned
      break;
    }
    out.tokens.push_back(tok);
    if (std::count(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), tok) > 0) {
      out.finish_reason = FinishReason::kStopToken;
      break;
    }
    if (text != nullptr) {
      decoder.Append(text->TokenBytes(tok), &decoded);
      size_t match = std::string::npos;
      for (const std::string& s : stop.stop_strings) match = std::min(match, decoded.find(s));
      if (match != std::string::npos) {
        out.text = decoded.substr(0, match);
        out.finish_reason = FinishReason::kStopString;
        return out;
      }
    }
    if (static_cast<int32_t>(out.tokens.size()) >= stop.max_tokens) {
      out.finish_reason = FinishReason::kLength;
      break;
    }
    hidden = KvAt(hidden, tok, num_prompt + i);
  }
  decoder.Flush(&decoded);
  out.text = decoded;
  return out;
}

FakeWorker::FakeWorker(int32_t num_blocks, int32_t block_size, const FakeModel* model)
    : block_size_(block_size),
      model_(model),
      cache_(block_size, num_blocks, model->vocab_size()),
      kv_(static_cast<size_t>(num_blocks) * block_size, 0) {
  cache_.Reset(/*first_step_id=*/1);
}

size_t FakeWorker::Slot(const WorkerSequence& seq, int32_t pos) const {
  return static_cast<size_t>(seq.block_ids[pos / block_size_]) * block_size_ + pos % block_size_;
}

void FakeWorker::Forward(const ScheduledSequence& sc) {
  const WorkerSequence& s = *sc.state;
  for (int32_t pos = sc.start_pos; pos < sc.start_pos + sc.num_tokens; ++pos) {
    const uint64_t prev = pos > 0 ? kv_[Slot(s, pos - 1)] : 0;
    kv_[Slot(s, pos)] = FakeModel::KvAt(prev, s.tokens[pos], pos);
  }
  num_tokens_computed_ += sc.num_tokens;
}

absl::Status FakeWorker::Execute(const StepPlan& plan, std::vector<StepToken>* out) {
  out->clear();
  if (absl::Status s = cache_.Apply(plan, &batch_); !s.ok()) return s;
  // The KV a new sequence is told it already has must really be there (prefix hits).
  // A fork's copy runs after this step's forward pass: checked through its tokens.
  for (int i = 0; i < plan.new_sequences_size(); ++i) {
    const ScheduledSequence& sc = batch_.sequences[i];
    if (sc.logits_from >= 0) continue;
    uint64_t h = 0;
    for (int32_t p = 0; p < sc.start_pos; ++p) {
      h = FakeModel::KvAt(h, sc.state->tokens[p], p);
      if (kv_[Slot(*sc.state, p)] != h) {
        return absl::InternalError(
            absl::StrCat("stale cached KV for sequence ", sc.state->seq_id, " at ", p));
      }
    }
  }
  for (const ScheduledSequence& sc : batch_.sequences) Forward(sc);
  for (const ScheduledSequence& sc : batch_.sequences) {
    if (!sc.sample) continue;
    // The logits of the last computed position: its own, or a fork's parent's.
    const ScheduledSequence& from = sc.logits_from >= 0 ? batch_.sequences[sc.logits_from] : sc;
    const uint64_t hidden = kv_[Slot(*from.state, from.state->num_computed_tokens - 1)];
    WorkerSequence* s = sc.state;
    int32_t tok = model_->Sample(s->sampling.seed, s->sample_index, s->num_output_tokens, hidden);
    if (!sc.allowed_tokens.empty()) {
      // A token mask (checked by the StateCache: it allows one at least): the first
      // allowed token at or after the model's choice, wrapping — a function of this
      // sequence's own state only, like a real masked sample.
      const auto* mask = reinterpret_cast<const uint8_t*>(sc.allowed_tokens.data());
      const int32_t vocab = model_->vocab_size();
      for (int32_t k = 0; k < vocab; ++k) {
        const int32_t t = (tok + k) % vocab;
        if ((mask[t >> 3] >> (t & 7)) & 1) {
          tok = t;
          break;
        }
      }
    }
    cache_.AppendSampled(s, tok);
    out->push_back(StepToken{SequenceRef::FromSeqId(s->seq_id), tok});
  }
  for (const auto& [src, dst] : batch_.block_copies) {
    std::copy_n(kv_.begin() + static_cast<size_t>(src) * block_size_, block_size_,
                kv_.begin() + static_cast<size_t>(dst) * block_size_);
  }
  return absl::OkStatus();
}

}  // namespace weft
