#include "common/plan/state_cache.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/sampling/sampling_math.h"
#include "common/status_macros.h"

namespace weft {
namespace {

absl::Status PlanError(int64_t step, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("plan ", step, ": ", what));
}

// Blocks a sequence of `len` positions needs.
int64_t BlocksFor(int64_t len, int32_t block_size) { return (len + block_size - 1) / block_size; }

}  // namespace

void StateCache::Reset(int64_t first_step_id) {
  seqs_.clear();
  next_step_id_ = first_step_id;
}

const WorkerSequence* StateCache::Find(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : &it->second;
}

absl::Status StateCache::CheckBlocks(const google::protobuf::RepeatedField<int32_t>& ids) const {
  for (int32_t b : ids) {
    if (b < 0 || b >= num_blocks_) {
      return absl::OutOfRangeError(absl::StrCat("block id ", b, " outside [0, ", num_blocks_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status StateCache::CheckContext(int64_t step, int64_t seq_id, int64_t end) const {
  if (context_length_ > 0 && end > context_length_) {
    return PlanError(step, absl::StrCat("sequence ", seq_id, " computes position ", end - 1,
                                        ", past the context length ", context_length_));
  }
  return absl::OkStatus();
}

// Everything Apply would do, checked without mutating.
absl::Status StateCache::Check(const StepPlan& plan) {
  const int64_t step = plan.step_id();
  if (step != next_step_id_) {
    return PlanError(step, absl::StrCat("expected plan ", next_step_id_, " (missed or repeated)"));
  }
  // Sized once: growing these one insert at a time rehashed them ~8 times a step at
  // 256 sequences.
  absl::flat_hash_set<int64_t> dropped;
  dropped.reserve(plan.finished_seq_ids_size() + plan.preempted_seq_ids_size());
  dropped.insert(plan.finished_seq_ids().begin(), plan.finished_seq_ids().end());
  dropped.insert(plan.preempted_seq_ids().begin(), plan.preempted_seq_ids().end());
  // Duplicates: new sequences against each other by a set (few in steady state); a held
  // sequence (every cached one) by its stamp from this pass.
  const uint64_t pass = ++check_pass_;
  absl::flat_hash_set<int64_t> scheduled;
  scheduled.reserve(plan.new_sequences_size());
  int64_t total = 0;
  for (const auto& c : plan.block_copies()) {
    if (c.src() < 0 || c.src() >= num_blocks_ || c.dst() < 0 || c.dst() >= num_blocks_ ||
        c.src() == c.dst()) {
      return PlanError(step, absl::StrCat("bad block copy ", c.src(), " -> ", c.dst()));
    }
  }
  int64_t sampled = 0;
  std::vector<std::pair<int64_t, int64_t>> forks;  // (fork, parent)
  // Entries a fork may sample from; only looked up when the plan has forks.
  std::vector<int64_t> computing_samplers;
  for (const auto& n : plan.new_sequences()) {
    if (!scheduled.insert(n.seq_id()).second) return PlanError(step, "sequence scheduled twice");
    if (auto held = seqs_.find(n.seq_id()); held != seqs_.end()) {
      if (!dropped.contains(n.seq_id()) && !n.resumed()) {
        return PlanError(step, absl::StrCat("new sequence ", n.seq_id(), " is already held"));
      }
      held->second.check_stamp = pass;
    }
    const int64_t len = n.token_ids_size();
    if (len == 0 || n.num_prompt_tokens() <= 0 || n.num_prompt_tokens() > len) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " has bad token counts"));
    }
    for (int32_t t : n.token_ids()) {
      if (t < 0 || t >= vocab_size_) return PlanError(step, absl::StrCat("token id ", t, " outside the vocabulary"));
    }
    const bool fork = n.fork_parent_seq_id() != 0;
    if (n.num_computed_tokens() < 0 || n.num_scheduled_tokens() < (fork ? 0 : 1) ||
        n.num_computed_tokens() + n.num_scheduled_tokens() > len) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " schedules past its tokens"));
    }
    WEFT_RETURN_IF_ERROR(CheckContext(step, n.seq_id(), n.num_computed_tokens() + int64_t{n.num_scheduled_tokens()}));
    const bool reaches_end = n.num_computed_tokens() + n.num_scheduled_tokens() == len;
    if (fork && (n.num_scheduled_tokens() != 0 || !n.do_sample() || !reaches_end)) {
      return PlanError(step, absl::StrCat("fork ", n.seq_id(), " computes or does not sample"));
    }
    if (fork) forks.emplace_back(n.seq_id(), n.fork_parent_seq_id());
    if (n.do_sample() != reaches_end) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " do_sample disagrees"));
    }
    WEFT_RETURN_IF_ERROR(CheckMask(step, n.seq_id(), n.do_sample(), n.allowed_tokens()));
    if (n.do_sample() && !fork) computing_samplers.push_back(n.seq_id());
    sampled += n.do_sample();
    if (n.block_ids_size() < BlocksFor(n.num_computed_tokens() + n.num_scheduled_tokens(), block_size_)) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " has too few blocks"));
    }
    if (n.num_output_tokens() != len - n.num_prompt_tokens()) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " output count mismatch"));
    }
    if (absl::Status s = FromSpec(n.sampling()).Validate(); !s.ok()) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " sampling ", s.message()));
    }
    if (n.seq_id() <= 0 ||
        n.sampling().sample_index() != SequenceRef::FromSeqId(n.seq_id()).sample_index) {
      return PlanError(step, absl::StrCat("sequence ", n.seq_id(), " has sample index ",
                                          n.sampling().sample_index()));
    }
    WEFT_RETURN_IF_ERROR(CheckBlocks(n.block_ids()));
    total += n.num_scheduled_tokens();
  }
  for (const auto& c : plan.cached_sequences()) {
    auto it = seqs_.find(c.seq_id());
    if (it == seqs_.end() || dropped.contains(c.seq_id())) {
      return PlanError(step, absl::StrCat("cached sequence ", c.seq_id(), " is not held"));
    }
    WorkerSequence& s = it->second;
    if (s.check_stamp == pass) return PlanError(step, "sequence scheduled twice");
    s.check_stamp = pass;
    if (c.num_computed_tokens() != s.num_computed_tokens) {
      return PlanError(step, absl::StrCat("sequence ", c.seq_id(), " computed ",
                                          s.num_computed_tokens, " here, ",
                                          c.num_computed_tokens(), " at the scheduler"));
    }
    const int64_t end = int64_t{s.num_computed_tokens} + c.num_scheduled_tokens();
    if (c.num_scheduled_tokens() <= 0 || end > static_cast<int64_t>(s.tokens.size())) {
      return PlanError(step, absl::StrCat("sequence ", c.seq_id(), " schedules past its tokens"));
    }
    WEFT_RETURN_IF_ERROR(CheckContext(step, c.seq_id(), end));
    if (c.do_sample() != (end == static_cast<int64_t>(s.tokens.size()))) {
      return PlanError(step, absl::StrCat("sequence ", c.seq_id(), " do_sample disagrees"));
    }
    WEFT_RETURN_IF_ERROR(CheckMask(step, c.seq_id(), c.do_sample(), c.allowed_tokens()));
    if (c.do_sample()) computing_samplers.push_back(c.seq_id());
    sampled += c.do_sample();
    if (static_cast<int64_t>(s.block_ids.size()) + c.new_block_ids_size() < BlocksFor(end, block_size_)) {
      return PlanError(step, absl::StrCat("sequence ", c.seq_id(), " has too few blocks"));
    }
    WEFT_RETURN_IF_ERROR(CheckBlocks(c.new_block_ids()));
    total += c.num_scheduled_tokens();
  }
  // A fork samples from the logits of its parent's last position in this step: the
  // parent is a new or cached entry of this plan that computes and samples.
  const absl::flat_hash_set<int64_t> samplers =
      forks.empty() ? absl::flat_hash_set<int64_t>()
                    : absl::flat_hash_set<int64_t>(computing_samplers.begin(), computing_samplers.end());
  for (const auto& [fork, parent] : forks) {
    if (!samplers.contains(parent)) {
      return PlanError(step, absl::StrCat("fork ", fork, " of ", parent,
                                          ": the parent does not sample in this plan"));
    }
  }
  if (total != plan.num_scheduled_tokens() || sampled != plan.num_sampled()) {
    return PlanError(step, absl::StrCat("plan says ", plan.num_scheduled_tokens(), " tokens and ",
                                        plan.num_sampled(), " samples; entries add up to ",
                                        total, " and ", sampled));
  }
  return absl::OkStatus();
}

absl::Status StateCache::CheckMask(int64_t step, int64_t seq_id, bool do_sample,
                                   const std::string& mask) const {
  if (mask.empty()) return absl::OkStatus();
  if (!do_sample) {
    return PlanError(step, absl::StrCat("sequence ", seq_id, " has a token mask but no sample"));
  }
  if (static_cast<int64_t>(mask.size()) != sampling::MaskBytes(vocab_size_)) {
    return PlanError(step, absl::StrCat("sequence ", seq_id, " token mask of ", mask.size(),
                                        " bytes; the vocabulary needs ",
                                        sampling::MaskBytes(vocab_size_)));
  }
  const auto* bits = reinterpret_cast<const uint8_t*>(mask.data());
  for (int32_t t = 0; t < vocab_size_; ++t) {
    if (bits[t >> 3] == 0) {
      t |= 7;  // skip the byte
      continue;
    }
    if (sampling::MaskAllows(bits, t)) return absl::OkStatus();
  }
  return PlanError(step, absl::StrCat("sequence ", seq_id, " token mask allows no token"));
}

absl::Status StateCache::Apply(const StepPlan& plan, StepBatch* batch) {
  WEFT_RETURN_IF_ERROR(Check(plan));
  ++next_step_id_;
  for (int64_t id : plan.finished_seq_ids()) seqs_.erase(id);
  for (int64_t id : plan.preempted_seq_ids()) seqs_.erase(id);
  batch->step_id = plan.step_id();
  batch->sequences.clear();
  batch->block_copies.clear();
  batch->dropped_seq_ids.assign(plan.finished_seq_ids().begin(), plan.finished_seq_ids().end());
  batch->dropped_seq_ids.insert(batch->dropped_seq_ids.end(), plan.preempted_seq_ids().begin(),
                                plan.preempted_seq_ids().end());
  batch->num_tokens = plan.num_scheduled_tokens();
  batch->num_sampled = plan.num_sampled();
  for (const auto& c : plan.block_copies()) batch->block_copies.emplace_back(c.src(), c.dst());
  // New sequences are inserted before any pointer into the map is taken (rehashing
  // would invalidate them).
  for (const auto& n : plan.new_sequences()) {
    WorkerSequence s;
    s.seq_id = n.seq_id();
    s.tokens.assign(n.token_ids().begin(), n.token_ids().end());
    s.num_prompt_tokens = n.num_prompt_tokens();
    s.num_computed_tokens = n.num_computed_tokens();
    s.block_ids.assign(n.block_ids().begin(), n.block_ids().end());
    s.sampling = FromSpec(n.sampling());
    s.sample_index = n.sampling().sample_index();
    s.num_output_tokens = n.num_output_tokens();
    seqs_[n.seq_id()] = std::move(s);
  }
  // seq id -> entry index, for forks to find their parents' entries: only kept when
  // the plan has forks (a map insert per sequence per step otherwise).
  bool has_forks = false;
  for (const auto& n : plan.new_sequences()) has_forks |= n.fork_parent_seq_id() != 0;
  absl::flat_hash_map<int64_t, int32_t> index_of;
  if (has_forks) index_of.reserve(plan.new_sequences_size() + plan.cached_sequences_size());
  batch->sequences.reserve(plan.new_sequences_size() + plan.cached_sequences_size());
  auto schedule = [&](WorkerSequence* s, int32_t n, bool sample, const std::string& mask,
                      bool is_new) {
    ScheduledSequence sc;
    sc.state = s;
    sc.is_new = is_new;
    sc.allowed_tokens = mask;
    sc.start_pos = s->num_computed_tokens;
    sc.num_tokens = n;
    sc.sample = sample;
    s->num_computed_tokens += n;
    if (has_forks) index_of[s->seq_id] = static_cast<int32_t>(batch->sequences.size());
    batch->sequences.push_back(sc);
  };
  for (const auto& n : plan.new_sequences()) {
    schedule(&seqs_[n.seq_id()], n.num_scheduled_tokens(), n.do_sample(), n.allowed_tokens(), true);
  }
  for (const auto& c : plan.cached_sequences()) {
    WorkerSequence* s = &seqs_[c.seq_id()];
    s->block_ids.insert(s->block_ids.end(), c.new_block_ids().begin(), c.new_block_ids().end());
    schedule(s, c.num_scheduled_tokens(), c.do_sample(), c.allowed_tokens(), false);
  }
  for (int i = 0; i < plan.new_sequences_size(); ++i) {  // forks: their parents' entries
    const int64_t parent = plan.new_sequences(i).fork_parent_seq_id();
    if (parent != 0) batch->sequences[i].logits_from = index_of.at(parent);
  }
  return absl::OkStatus();
}

void StateCache::AppendSampled(WorkerSequence* seq, int32_t token_id) {
  seq->tokens.push_back(token_id);
  ++seq->num_output_tokens;
}

void StateCache::Fail(const StepPlan& plan) {
  if (plan.step_id() == next_step_id_) ++next_step_id_;
  for (const auto& n : plan.new_sequences()) seqs_.erase(n.seq_id());
  for (const auto& c : plan.cached_sequences()) seqs_.erase(c.seq_id());
  for (int64_t id : plan.finished_seq_ids()) seqs_.erase(id);
  for (int64_t id : plan.preempted_seq_ids()) seqs_.erase(id);
}

}  // namespace weft
