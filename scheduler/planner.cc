#include "scheduler/planner.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "glog/logging.h"

namespace weft {

void Planner::Plan(Replica* replica, absl::Time now, StepPlan* plan) {
  plan->Clear();
  Step st{replica, plan, replica->next_step_id().value(), options_->max_num_batched_tokens};
  st.now = now;
  st.mask_deadline = absl::Now() + options_->grammar_mask_wait;
  // Finishes that happened since the last plan (the workers still hold those states).
  for (SequenceRef ref : replica->pending_finished()) plan->add_finished_seq_ids(ref.seq_id());
  replica->pending_finished().clear();
  order_.clear();
  scheduled_.clear();
  new_samplers_.clear();
  cached_samplers_.clear();
  for (const auto& entry : replica->running()) order_.push_back(entry.second);
  st.victim_cursor = order_.size();
  RunPasses(st);
  if (scheduled_.empty() && st.masks_late > 0) {
    // Nothing else would run: waiting for the late masks stalls no other stream (and
    // nothing else would wake the loop when they are ready).
    st.mask_deadline = absl::InfiniteFuture();
    st.masks_late = 0;
    RunPasses(st);
  }
  counters_->grammar_mask_waits_total += st.masks_late;
  Finalize(st);
}

void Planner::RunPasses(Step& st) {
  for (PlanPass pass : policy_->passes()) {
    switch (pass) {
      case PlanPass::kRunningDecodes:
        RunDecodes(st);
        break;
      case PlanPass::kRunningPrefills:
        RunPrefills(st);
        break;
      case PlanPass::kWaiting:
        AdmitWaiting(st);
        break;
    }
  }
}

bool Planner::OutputLimitReached(const Sequence& seq) const {
  return seq.num_output_tokens() + seq.num_pending_samples >= seq.max_tokens;
}

bool Planner::AwaitsGrammarToken(const Sequence& seq) const {
  // Its next mask depends on the token a step in flight samples: no pipelining.
  return seq.grammar != nullptr && seq.num_pending_samples > 0;
}

bool Planner::MaskLate(Step& st, Sequence* seq) {
  if (seq->grammar == nullptr || seq->grammar->WaitReady(st.mask_deadline)) return false;
  ++st.masks_late;
  return true;
}

void Planner::FillMask(Sequence* seq, std::string* mask) {
  ++counters_->grammar_masks_total;
  counters_->grammar_mask_seconds_total += seq->grammar->TakeMask(mask);
}

int32_t Planner::WatermarkBlocks(const Replica& replica) const {
  return static_cast<int32_t>(options_->admission_watermark * replica.kv().pool().num_blocks());
}

void Planner::RunDecodes(Step& st) {
  for (size_t i = 0; i < order_.size() && st.budget > 0; ++i) {
    Sequence* seq = order_[i];
    if (seq->state != SequenceState::kRunning || seq->last_scheduled_step == st.step) continue;
    if (seq->num_uncomputed() != 1 || OutputLimitReached(*seq)) continue;
    if (AwaitsGrammarToken(*seq) || MaskLate(st, seq)) continue;
    ScheduleRunning(st, seq, i, 1);
  }
}

void Planner::RunPrefills(Step& st) {
  if (st.replica->num_prefilling() == 0) return;
  for (size_t i = 0; i < order_.size() && st.budget > 0; ++i) {
    Sequence* seq = order_[i];
    if (seq->state != SequenceState::kRunning || seq->last_scheduled_step == st.step) continue;
    const int32_t uncomputed = seq->num_uncomputed();
    if (uncomputed < 2 || AwaitsGrammarToken(*seq)) continue;
    const int32_t n = std::min(uncomputed, st.budget);
    if (n == uncomputed && MaskLate(st, seq)) continue;  // this chunk would sample
    ScheduleRunning(st, seq, i, n);
  }
}

bool Planner::ScheduleRunning(Step& st, Sequence* seq, size_t index, int32_t n) {
  const int32_t target = seq->num_computed_tokens + n;
  while (!st.replica->kv().Grow(target, &seq->blocks)) {
    Sequence* victim = PickVictim(st, index);
    if (victim == nullptr) return false;  // nobody may yield: wait for blocks
    Preempt(st, victim);
    if (victim == seq) return false;
  }
  Commit(st, seq, n);
  return true;
}

bool Planner::IsVictimCandidate(const Step& st, const Sequence* seq) const {
  return seq->state == SequenceState::kRunning && seq->last_scheduled_step != st.step &&
         seq->num_preemptions < options_->max_preemptions_per_sequence;
}

Sequence* Planner::PickVictim(Step& st, size_t requester_index) {
  // order_ is sorted best-first, so candidates after the requester are lower priority
  // or later arrivals. Elements the cursor passes can never become candidates again
  // in this iteration (finished, preempted, scheduled or exempt).
  while (st.victim_cursor > requester_index + 1) {
    Sequence* seq = order_[st.victim_cursor - 1];
    if (IsVictimCandidate(st, seq)) return seq;
    --st.victim_cursor;
  }
  Sequence* self = order_[requester_index];
  if (IsVictimCandidate(st, self)) return self;
  // Only sequences at their preemption cap are left. If nothing was scheduled yet in
  // this iteration, waiting could stall everyone forever: take the cap off (rare, O(n)).
  if (!scheduled_.empty()) return nullptr;
  for (size_t j = order_.size(); j-- > requester_index;) {
    Sequence* seq = order_[j];
    if (seq->state == SequenceState::kRunning && seq->last_scheduled_step != st.step) {
      return seq;
    }
  }
  return nullptr;
}

void Planner::Preempt(Step& st, Sequence* victim) {
  Replica* replica = st.replica;
  replica->kv().Free(&victim->blocks);
  replica->RemoveRunning(victim);
  victim->num_computed_tokens = 0;
  victim->num_blocks_sent = 0;
  victim->state = SequenceState::kPreempted;
  ++victim->num_preemptions;
  ++victim->request->usage.num_preemptions;
  ++counters_->preemptions_total;
  if (victim->known_to_worker) {
    st.plan->add_preempted_seq_ids(victim->ref().seq_id());
    victim->known_to_worker = false;
  }
  // Back to the waiting queue, keeping its tokens (recomputed when resumed). If a step
  // in flight samples for it, that token is still applied when its results arrive.
  replica->AddWaiting(victim);
  st.preempted = true;
}

void Planner::AdmitWaiting(Step& st) {
  Replica* replica = st.replica;
  // An iteration that had to preempt is short of blocks: admit nothing (as vLLM v1).
  // A draining replica takes no new sequence (its queue waits for another replica).
  if (st.preempted || replica->draining() || !policy_->MayAdmit(replica->num_running())) return;
  const Replica::SeqMap& waiting = replica->waiting();
  auto it = waiting.begin();
  while (it != waiting.end()) {
    if (st.budget == 0 && !policy_->AdmitsWithoutBudget()) break;
    Sequence* seq = it->second;
    if (seq->num_pending_samples > 0) {  // a step in flight still samples for it
      ++it;
      continue;
    }
    const int32_t group =
        1 + (seq->sample_index == 0 ? seq->request->num_awaiting_fork : 0);
    if (replica->num_running() + group > options_->max_num_seqs) break;
    if (MaskLate(st, seq)) break;  // its first mask: it (and, FCFS, those after) wait a step
    const SeqKey key = it->first;
    if (!TryAdmit(st, seq)) break;  // FCFS: nobody overtakes a sequence that does not fit
    it = waiting.upper_bound(key);
  }
}

bool Planner::TryAdmit(Step& st, Sequence* seq) {
  Replica* replica = st.replica;
  KvCacheManager& kv = replica->kv();
  const int32_t length = seq->logical_length();
  const PrefixHit hit = kv.FindCachedPrefix(seq->block_hashes, length);
  const int32_t cached = hit.num_blocks * kv.block_size();
  const int32_t n = std::min(length - cached, st.budget);
  const int32_t max_total = seq->num_prompt_tokens() + seq->request->stopping.max_tokens;
  const int32_t hold = policy_->TokensToHold(cached + n, max_total);
  const int32_t needed = kv.BlocksNeededToAdmit(hit, hold);
  if (needed > kv.num_free_blocks()) return false;
  if (replica->num_running() > 0 && kv.num_free_blocks() - needed < WatermarkBlocks(*replica)) {
    return false;
  }
  CHECK(kv.Admit(seq->block_hashes, hit, hold, &seq->blocks));
  replica->RemoveWaiting(seq);
  seq->state = SequenceState::kRunning;
  seq->num_computed_tokens = cached;
  seq->num_blocks_sent = 0;
  replica->AddRunning(seq);
  seq->last_scheduled_step = st.step;

  Request* request = seq->request;
  counters_->prefix_cache_query_tokens_total += length;
  counters_->prefix_cache_hit_tokens_total += cached;
  if (!request->cached_prompt_recorded) {
    request->usage.num_cached_prompt_tokens = std::min(cached, request->num_prompt_tokens);
    request->cached_prompt_recorded = true;
  }
  if (request->usage.first_scheduled_time == absl::InfiniteFuture()) {
    request->usage.first_scheduled_time = st.now;
  }
  // A static batch member admitted beyond the budget holds its blocks but is not sent
  // until its first tokens are scheduled: a plan entry always computes at least one
  // token (the worker refuses a new sequence with none).
  if (n > 0) Commit(st, seq, n);
  return true;
}

void Planner::Commit(Step& st, Sequence* seq, int32_t n) {
  const int32_t before = seq->num_computed_tokens;
  seq->num_computed_tokens += n;
  st.budget -= n;
  st.plan->set_num_scheduled_tokens(st.plan->num_scheduled_tokens() + n);
  seq->last_scheduled_step = st.step;
  scheduled_.push_back(seq);
  const bool sample = seq->num_computed_tokens == seq->logical_length();
  if (sample) ++seq->num_pending_samples;
  st.replica->UpdatePrefilling(seq);
  Emit(st, seq, before, n, sample);
  if (sample && seq->sample_index == 0 && seq->request->num_awaiting_fork > 0) {
    ForkSiblings(st, seq);
  }
}

void Planner::Emit(Step& st, Sequence* seq, int32_t num_computed_before, int32_t n,
                   bool sample) {
  if (!seq->known_to_worker) {
    EmitNew(st, seq, num_computed_before, n, sample, nullptr);
    return;
  }
  const std::vector<BlockId>& ids = seq->blocks.block_ids;
  weft::v1::CachedSequence* e = st.plan->add_cached_sequences();
  e->set_seq_id(seq->ref().seq_id());
  for (auto b = ids.begin() + seq->num_blocks_sent; b != ids.end(); ++b) {
    e->add_new_block_ids(b->value());
  }
  e->set_num_computed_tokens(num_computed_before);
  e->set_num_scheduled_tokens(n);
  e->set_do_sample(sample);
  if (sample && seq->grammar != nullptr) FillMask(seq, e->mutable_allowed_tokens());
  if (sample) cached_samplers_.push_back(seq);
  seq->num_blocks_sent = static_cast<int32_t>(ids.size());
}

void Planner::EmitNew(Step& st, Sequence* seq, int32_t num_computed_before, int32_t n,
                      bool sample, const Sequence* fork_parent) {
  weft::v1::NewSequence* e = st.plan->add_new_sequences();
  e->set_seq_id(seq->ref().seq_id());
  e->mutable_token_ids()->Add(seq->token_ids.begin(), seq->token_ids.end());
  e->set_num_prompt_tokens(seq->num_prompt_tokens());
  e->mutable_block_ids()->Reserve(static_cast<int>(seq->blocks.block_ids.size()));
  for (BlockId b : seq->blocks.block_ids) e->add_block_ids(b.value());
  e->set_num_computed_tokens(num_computed_before);
  e->set_num_scheduled_tokens(n);
  ToSpec(seq->request->sampling, seq->sample_index, e->mutable_sampling());
  e->set_num_output_tokens(seq->num_output_tokens());
  e->set_do_sample(sample);
  if (sample && seq->grammar != nullptr) FillMask(seq, e->mutable_allowed_tokens());
  if (fork_parent != nullptr) e->set_fork_parent_seq_id(fork_parent->ref().seq_id());
  e->set_resumed(seq->ever_sent);
  seq->known_to_worker = true;
  seq->ever_sent = true;
  seq->num_blocks_sent = static_cast<int32_t>(seq->blocks.block_ids.size());
  if (sample) new_samplers_.push_back(seq);
}

void Planner::ForkSiblings(Step& st, Sequence* parent) {
  Request* request = parent->request;
  DCHECK_EQ(parent->num_output_tokens(), 0);
  for (const auto& owned : request->seqs) {
    Sequence* child = owned.get();
    if (!child->awaiting_fork) continue;
    child->awaiting_fork = false;
    --request->num_awaiting_fork;
    // Without room for it now, the sample runs later as a standalone sequence (its
    // prompt mostly from the prefix cache).
    if (!ForkOne(st, parent, child)) st.replica->AddWaiting(child);
  }
}

bool Planner::ForkOne(Step& st, Sequence* parent, Sequence* child) {
  Replica* replica = st.replica;
  KvCacheManager& kv = replica->kv();
  if (replica->num_running() >= options_->max_num_seqs) return false;
  const int32_t prompt = parent->num_prompt_tokens();
  DCHECK_EQ(parent->num_computed_tokens, prompt);
  std::optional<KvBlockCopy> copy;
  if (!kv.Fork(parent->blocks, prompt, &child->blocks, &copy)) return false;
  const int32_t hold =
      policy_->TokensToHold(prompt, prompt + child->request->stopping.max_tokens);
  if (!kv.Grow(hold, &child->blocks)) {
    kv.Free(&child->blocks);
    return false;
  }
  child->block_hashes = parent->block_hashes;
  child->num_computed_tokens = prompt;
  child->num_pending_samples = 1;  // sampled in this step from the parent's logits
  child->state = SequenceState::kRunning;
  replica->AddRunning(child);
  child->last_scheduled_step = st.step;
  if (copy) {
    weft::v1::BlockCopy* c = st.plan->add_block_copies();
    c->set_src(copy->src.value());
    c->set_dst(copy->dst.value());
  }
  EmitNew(st, child, prompt, 0, /*sample=*/true, parent);
  return true;
}

void Planner::Finalize(Step& st) {
  Replica* replica = st.replica;
  KvCacheManager& kv = replica->kv();
  if (kv.prefix_caching()) {
    // Blocks whose tokens are all known and whose KV this or an earlier step computes.
    for (Sequence* seq : scheduled_) {
      const int32_t full =
          std::min(seq->num_computed_tokens, seq->num_tokens()) / kv.block_size();
      if (full > seq->blocks.num_hashed_blocks) kv.Commit(seq->block_hashes, full, &seq->blocks);
    }
  }
  StepPlan* plan = st.plan;
  if (PlanIsEmpty(*plan)) return;  // step_id stays 0: nothing to send
  plan->set_step_id(replica->next_step_id().value());
  InFlightStep record;
  record.step_id = replica->next_step_id();
  replica->ConsumeStepId();
  record.samplers = replica->TakeSpareVector();
  record.samplers.insert(record.samplers.end(), new_samplers_.begin(), new_samplers_.end());
  record.samplers.insert(record.samplers.end(), cached_samplers_.begin(), cached_samplers_.end());
  plan->set_num_sampled(static_cast<int32_t>(record.samplers.size()));
  for (const auto& e : plan->new_sequences()) {
    record.requests.push_back(SequenceRef::FromSeqId(e.seq_id()).request_id);
  }
  for (const auto& e : plan->cached_sequences()) {
    record.requests.push_back(SequenceRef::FromSeqId(e.seq_id()).request_id);
  }
  std::sort(record.requests.begin(), record.requests.end());
  record.requests.erase(std::unique(record.requests.begin(), record.requests.end()),
                        record.requests.end());
  replica->in_flight().push_back(std::move(record));
  ++counters_->steps_total;
  counters_->scheduled_tokens_total += plan->num_scheduled_tokens();
}

}  // namespace weft
