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

std::string Ref(SequenceRef r) { return absl::StrCat(r.request_id.value(), ".", r.sample_index); }

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
                                     int32_t sample_index, const StoppingParams& stop,
                                     const TokenTextSource* text) const {
  ReferenceOutput out;
  uint64_t hidden = 0;
  const int32_t num_prompt = static_cast<int32_t>(prompt.size());
  for (int32_t p = 0; p < num_prompt; ++p) hidden = KvAt(hidden, prompt[p], p);
  StopChecker decoder(nullptr);  // plain UTF-8 assembly
  std::string decoded;
  for (int32_t i = 0;; ++i) {
    const int32_t tok = Sample(seed, sample_index, i, hidden);
    out.tokens.push_back(tok);
    if (!stop.ignore_eos && std::count(eos_.begin(), eos_.end(), tok) > 0) {
      out.finish_reason = FinishReason::kStopEos;
      break;
    }
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
    : num_blocks_(num_blocks),
      block_size_(block_size),
      model_(model),
      kv_(static_cast<size_t>(num_blocks) * block_size, 0) {}

absl::StatusOr<size_t> FakeWorker::Slot(const SeqState& s, int32_t pos) const {
  const int32_t index = pos / block_size_;
  if (pos < 0 || index >= static_cast<int32_t>(s.blocks.size())) {
    return absl::InternalError(absl::StrCat("position ", pos, " beyond the block table (",
                                            s.blocks.size(), " blocks)"));
  }
  return static_cast<size_t>(s.blocks[index].value()) * block_size_ + pos % block_size_;
}

absl::Status FakeWorker::AddNew(const NewSequenceData& e) {
  if (seqs_.contains(e.seq)) return absl::InternalError("new sequence already held: " + Ref(e.seq));
  SeqState s;
  s.tokens = e.token_ids;
  s.num_prompt_tokens = e.num_prompt_tokens;
  s.blocks = e.block_ids;
  s.num_computed = e.num_computed_tokens;
  s.seed = e.sampling.seed.value_or(0);
  for (BlockId b : s.blocks) {
    if (b.value() < 0 || b.value() >= num_blocks_) return absl::InternalError("block out of range");
  }
  if (s.num_computed > static_cast<int32_t>(s.tokens.size())) {
    return absl::InternalError("num_computed beyond the tokens of " + Ref(e.seq));
  }
  // The KV a new sequence is told it already has must really be there (prefix hits).
  // A fork's copy runs after this step's forward pass: checked through its tokens.
  if (e.fork_parent_sample_index < 0) {
    uint64_t h = 0;
    for (int32_t p = 0; p < s.num_computed; ++p) {
      h = FakeModel::KvAt(h, s.tokens[p], p);
      absl::StatusOr<size_t> slot = Slot(s, p);
      if (!slot.ok()) return slot.status();
      if (kv_[*slot] != h) {
        return absl::InternalError(absl::StrCat("stale cached KV for ", Ref(e.seq), " at ", p));
      }
    }
  }
  seqs_.emplace(e.seq, std::move(s));
  return absl::OkStatus();
}

absl::Status FakeWorker::Forward(SequenceRef ref, SeqState& s, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = s.num_computed + i;
    if (pos >= static_cast<int32_t>(s.tokens.size())) {
      return absl::InternalError(absl::StrCat("no input token at ", pos, " for ", Ref(ref)));
    }
    uint64_t prev = 0;
    if (pos > 0) {
      absl::StatusOr<size_t> prev_slot = Slot(s, pos - 1);
      if (!prev_slot.ok()) return prev_slot.status();
      prev = kv_[*prev_slot];
    }
    absl::StatusOr<size_t> slot = Slot(s, pos);
    if (!slot.ok()) return slot.status();
    kv_[*slot] = FakeModel::KvAt(prev, s.tokens[pos], pos);
  }
  s.num_computed += n;
  num_tokens_computed_ += n;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> FakeWorker::SampleFor(SequenceRef ref, SeqState& s, int32_t fork_parent) {
  const SeqState* source = &s;
  if (fork_parent >= 0) {
    auto it = seqs_.find(SequenceRef{ref.request_id, fork_parent});
    if (it == seqs_.end()) return absl::InternalError("fork parent missing for " + Ref(ref));
    source = &it->second;
  } else if (s.num_computed != static_cast<int32_t>(s.tokens.size())) {
    return absl::InternalError("sampling before the end of " + Ref(ref));
  }
  absl::StatusOr<size_t> slot = Slot(*source, source->num_computed - 1);
  if (!slot.ok()) return slot.status();
  const int32_t output_index = static_cast<int32_t>(s.tokens.size()) - s.num_prompt_tokens;
  const int32_t tok = model_->Sample(s.seed, ref.sample_index, output_index, kv_[*slot]);
  s.tokens.push_back(tok);
  return tok;
}

absl::Status FakeWorker::Execute(const StepPlan& plan, std::vector<SampledToken>* out) {
  out->clear();
  if (plan.step_id.value() != last_step_ + 1) {
    return absl::InternalError(absl::StrCat("step ", plan.step_id.value(), " after ", last_step_));
  }
  last_step_ = plan.step_id.value();
  for (const auto* list : {&plan.finished_ids, &plan.preempted_ids}) {
    for (SequenceRef r : *list) {
      if (seqs_.erase(r) != 1) return absl::InternalError("drop of unknown " + Ref(r));
    }
  }
  // The real worker's contract (worker/plan/state_cache.cc): every entry computes at
  // least one token, except a fork, which only samples.
  for (const NewSequenceData& e : plan.new_requests) {
    if (e.num_scheduled_tokens < (e.fork_parent_sample_index >= 0 ? 0 : 1)) {
      return absl::InternalError("new entry schedules no tokens: " + Ref(e.seq));
    }
  }
  for (const CachedSequenceData& c : plan.cached_requests) {
    if (c.num_scheduled_tokens < 1) return absl::InternalError("cached entry schedules no tokens: " + Ref(c.seq));
  }
  for (const NewSequenceData& e : plan.new_requests) {
    if (absl::Status st = AddNew(e); !st.ok()) return st;
  }
  for (const CachedSequenceData& c : plan.cached_requests) {
    auto it = seqs_.find(c.seq);
    if (it == seqs_.end()) return absl::InternalError("cached entry for unknown " + Ref(c.seq));
    if (it->second.num_computed != c.num_computed_tokens) {
      return absl::InternalError(absl::StrCat("num_computed mismatch for ", Ref(c.seq), ": ",
                                              it->second.num_computed, " vs ",
                                              c.num_computed_tokens));
    }
    for (BlockId b : c.new_block_ids) it->second.blocks.push_back(b);
  }
  int32_t total = 0;
  for (const NewSequenceData& e : plan.new_requests) {
    if (absl::Status st = Forward(e.seq, seqs_.at(e.seq), e.num_scheduled_tokens); !st.ok()) {
      return st;
    }
    total += e.num_scheduled_tokens;
  }
  for (const CachedSequenceData& c : plan.cached_requests) {
    if (absl::Status st = Forward(c.seq, seqs_.at(c.seq), c.num_scheduled_tokens); !st.ok()) {
      return st;
    }
    total += c.num_scheduled_tokens;
  }
  if (total != plan.total_num_scheduled_tokens) return absl::InternalError("token total");
  for (const NewSequenceData& e : plan.new_requests) {
    if (!e.do_sample) continue;
    absl::StatusOr<int32_t> tok = SampleFor(e.seq, seqs_.at(e.seq), e.fork_parent_sample_index);
    if (!tok.ok()) return tok.status();
    out->push_back(SampledToken{e.seq, *tok});
  }
  for (const CachedSequenceData& c : plan.cached_requests) {
    if (!c.do_sample) continue;
    absl::StatusOr<int32_t> tok = SampleFor(c.seq, seqs_.at(c.seq), -1);
    if (!tok.ok()) return tok.status();
    out->push_back(SampledToken{c.seq, *tok});
  }
  if (static_cast<int32_t>(out->size()) != plan.num_sampled) {
    return absl::InternalError("num_sampled mismatch");
  }
  for (const BlockCopy& c : plan.block_copies) {
    std::copy_n(kv_.begin() + static_cast<size_t>(c.src.value()) * block_size_, block_size_,
                kv_.begin() + static_cast<size_t>(c.dst.value()) * block_size_);
  }
  return absl::OkStatus();
}

}  // namespace weft
