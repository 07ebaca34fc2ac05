#include "scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/router.h"
#include "scheduler/stop_checker.h"

namespace weft {
namespace {

bool IsAbortReason(FinishReason r) {
  return r == FinishReason::kCancelled || r == FinishReason::kDeadline ||
         r == FinishReason::kError || r == FinishReason::kUnavailable;
}

absl::Status CheckTokenId(int32_t token, int32_t vocab_size, const char* what) {
  if (token < 0 || token >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", token, " out of range"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerOptions& options,
                                                             const TokenTextSource* text) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<Scheduler>(new Scheduler(options, MakePolicy(options.policy), text));
}

Scheduler::Scheduler(const SchedulerOptions& options, std::unique_ptr<SchedulingPolicy> policy,
                     const TokenTextSource* text)
    : options_(options),
      policy_(std::move(policy)),
      text_(text),
      stop_context_{options_.eos_token_ids, text},
      mask_threads_(options_.grammar_mask_threads),
      planner_(&options_, policy_.get(), &counters_) {}

// --- Replicas ---------------------------------------------------------------------

absl::StatusOr<ReplicaId> Scheduler::AddReplica(const ReplicaOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  if (options.block_size != options_.block_size) {
    return absl::InvalidArgumentError(absl::StrCat("replica block size ", options.block_size,
                                                   " != scheduler block size ",
                                                   options_.block_size));
  }
  KvCacheManagerOptions kv;
  kv.num_blocks = options.num_blocks;
  kv.block_size = options.block_size;
  kv.enable_prefix_caching = options_.enable_prefix_caching;
  WEFT_ASSIGN_OR_RETURN(KvCacheManager manager, KvCacheManager::Create(kv));
  const ReplicaId id(next_replica_id_++);
  const int32_t steps = options.max_steps_in_flight > 0 ? options.max_steps_in_flight
                                                        : options_.max_steps_in_flight;
  replicas_.emplace(id, std::make_unique<Replica>(id, std::move(manager), steps));
  RerouteWaiting(nullptr);  // scale-up: the new replica takes its share of the queue now
  return id;
}

absl::Status Scheduler::DrainReplica(ReplicaId id) {
  Replica* replica = FindReplica(id);
  if (replica == nullptr) return absl::NotFoundError(absl::StrCat("no replica ", id.value()));
  if (replica->draining()) return absl::OkStatus();
  replica->set_draining();
  // Its queue moves to the replicas that take work (and, if this was the last of them,
  // the other draining replicas' queues stay where they are).
  RerouteWaiting(replica);
  return absl::OkStatus();
}

bool Scheduler::ReplicaDrained(ReplicaId id) const {
  const Replica* replica = FindReplica(id);
  return replica != nullptr && replica->draining() && replica->Empty();
}

absl::Status Scheduler::RemoveReplica(ReplicaId id, absl::Time now) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return absl::NotFoundError(absl::StrCat("no replica ", id.value()));
  std::unique_ptr<Replica> replica = std::move(it->second);
  replicas_.erase(it);
  // Results of its steps in flight will never arrive.
  std::vector<Request*> touched;
  for (InFlightStep& step : replica->in_flight()) {
    for (Sequence* seq : step.samplers) {
      --seq->num_pending_samples;
      touched.push_back(seq->request);
    }
  }
  replica->in_flight().clear();
  std::vector<Sequence*> displaced;
  for (const auto& e : replica->running()) displaced.push_back(e.second);
  for (const auto& e : replica->waiting()) displaced.push_back(e.second);
  for (Sequence* seq : displaced) {
    if (seq->state == SequenceState::kRunning) {
      replica->kv().Free(&seq->blocks);
      replica->RemoveRunning(seq);
      seq->state = SequenceState::kPreempted;  // resumes by recompute elsewhere
    } else {
      replica->RemoveWaiting(seq);
    }
    seq->num_computed_tokens = 0;
    seq->num_blocks_sent = 0;
    seq->known_to_worker = false;
  }
  // Erase zombies (finished, were only waiting for these results) first: ids, since
  // erasing invalidates.
  std::vector<RequestId> touched_ids;
  for (Request* r : touched) touched_ids.push_back(r->id);
  std::sort(touched_ids.begin(), touched_ids.end());
  touched_ids.erase(std::unique(touched_ids.begin(), touched_ids.end()), touched_ids.end());
  RequeueDisplaced(displaced, now);
  for (RequestId rid : touched_ids) {
    auto r = requests_.find(rid);
    if (r != requests_.end()) MaybeErase(r->second.get());
  }
  return absl::OkStatus();
}

void Scheduler::RequeueDisplaced(const std::vector<Sequence*>& displaced, absl::Time now) {
  // One retry per request, in request-id order (deterministic).
  std::vector<std::pair<RequestId, Sequence*>> by_request;
  for (Sequence* seq : displaced) by_request.emplace_back(seq->request->id, seq);
  std::stable_sort(by_request.begin(), by_request.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < by_request.size();) {
    size_t j = i;
    Request* request = by_request[i].second->request;
    ++request->num_retries;
    ++request->usage.num_retries;
    ++counters_.retries_total;
    const bool give_up = request->num_retries > options_.max_retries || replicas_.empty();
    for (; j < by_request.size() && by_request[j].first == by_request[i].first; ++j) {
      Sequence* seq = by_request[j].second;
      if (seq->finished()) continue;
      Replica* target = give_up ? nullptr : Route(*seq);
      if (target != nullptr) {
        target->AddWaiting(seq);
      } else {
        FinishSequence(seq, FinishReason::kUnavailable, now, &outbox_.emplace_back());
      }
    }
    if (give_up) AbortInternal(request, FinishReason::kUnavailable, now);  // the rest
    MaybeErase(request);
    i = j;
  }
}

// --- Requests -----------------------------------------------------------------------

absl::StatusOr<RequestId> Scheduler::AddRequest(
    const ValidRequest& valid, absl::Time now,
    std::shared_ptr<const SequenceGrammarFactory> grammar) {
  const RequestSpec& spec = valid.spec();
  if (!spec.stopping.stop_strings.empty() && text_ == nullptr) {
    return absl::InvalidArgumentError("stop strings need a tokenizer");
  }
  if (spec.constraint.has_value() != (grammar != nullptr)) {
    return absl::InvalidArgumentError(spec.constraint
                                          ? "constraint: structured output is not enabled here"
                                          : "a grammar was given for a request without constraint");
  }
  if (replicas_.empty()) return absl::UnavailableError("no replica attached");
  const int32_t prompt = static_cast<int32_t>(spec.prompt_token_ids.size());
  const int32_t blocks_alone =
      (prompt + spec.stopping.max_tokens + options_.block_size - 1) / options_.block_size;
  int32_t largest = 0;
  for (const auto& e : replicas_) largest = std::max(largest, e.second->kv().pool().num_blocks());
  if (blocks_alone > largest) {
    return absl::InvalidArgumentError(absl::StrCat("request needs ", blocks_alone,
                                                   " KV blocks alone; the largest replica has ",
                                                   largest));
  }
  if (NumWaiting() >= options_.max_waiting) {
    return absl::ResourceExhaustedError("waiting queue full");
  }
  auto request = std::make_unique<Request>();
  Request* r = request.get();
  r->id = RequestId(next_request_id_++);
  r->num_prompt_tokens = prompt;
  r->sampling = spec.sampling;
  r->stopping = spec.stopping;
  r->priority = spec.priority;
  r->arrival = now;
  r->deadline = spec.deadline;
  r->num_unfinished = spec.n;
  r->num_awaiting_fork = spec.n - 1;
  r->usage.num_prompt_tokens = prompt;
  r->usage.seed = r->sampling.seed;
  r->usage.arrival_time = now;
  r->grammar = std::move(grammar);
  r->tool_call_text = spec.constraint.has_value() && IsToolCallGrammar(*spec.constraint);
  for (int32_t j = 0; j < spec.n; ++j) {
    auto seq = std::make_unique<Sequence>(r, j, &r->stopping.stop_strings);
    seq->token_ids = spec.prompt_token_ids;
    seq->awaiting_fork = j > 0;
    if (r->grammar) {
      seq->grammar = std::make_unique<AsyncGrammar>(r->grammar->NewSequence(), &mask_threads_);
    }
    r->seqs.push_back(std::move(seq));
  }
  Sequence* first = r->seqs[0].get();
  if (options_.enable_prefix_caching) {
    UpdateBlockHashes(first->token_ids, options_.block_size, &first->block_hashes);
    for (int32_t j = 1; j < spec.n; ++j) r->seqs[j]->block_hashes = first->block_hashes;
  }
  Replica* target = Route(*first);
  CHECK(target != nullptr) << "a replica fits (checked above)";
  target->AddWaiting(first);
  if (r->deadline != absl::InfiniteFuture()) deadlines_.emplace(r->deadline, r->id);
  requests_.emplace(r->id, std::move(request));
  ++num_unfinished_requests_;
  ++counters_.requests_added_total;
  return r->id;
}

absl::Status Scheduler::AbortRequest(RequestId id, FinishReason reason, absl::Time now) {
  if (!IsAbortReason(reason)) {
    return absl::InvalidArgumentError(absl::StrCat("not an abort reason: ",
                                                   FinishReasonName(reason)));
  }
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->num_unfinished == 0) {
    return absl::NotFoundError(absl::StrCat("no unfinished request ", id.value()));
  }
  Request* request = it->second.get();
  AbortInternal(request, reason, now);
  MaybeErase(request);
  return absl::OkStatus();
}

void Scheduler::AbortInternal(Request* request, FinishReason reason, absl::Time now) {
  for (const auto& seq : request->seqs) {
    if (!seq->finished()) FinishSequence(seq.get(), reason, now, &outbox_.emplace_back());
  }
}

void Scheduler::ExpireDeadlines(absl::Time now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const RequestId id = deadlines_.begin()->second;
    Request* request = requests_.at(id).get();
    AbortInternal(request, FinishReason::kDeadline, now);  // erases the deadline entry
    MaybeErase(request);
  }
}

void Scheduler::FinishSequence(Sequence* seq, FinishReason reason, absl::Time now,
                               SequenceOutput* out) {
  CHECK(!seq->finished());
  Request* request = seq->request;
  Replica* replica = seq->replica;
  switch (seq->state) {
    case SequenceState::kRunning:
      replica->kv().Free(&seq->blocks);
      replica->RemoveRunning(seq);
      if (seq->known_to_worker) replica->pending_finished().push_back(seq->ref());
      break;
    case SequenceState::kWaiting:
    case SequenceState::kPreempted:
      if (seq->awaiting_fork) {
        seq->awaiting_fork = false;
        --request->num_awaiting_fork;
      } else if (replica != nullptr) {
        replica->RemoveWaiting(seq);
      }
      break;
    case SequenceState::kFinished:
      break;
  }
  seq->known_to_worker = false;
  seq->num_computed_tokens = 0;
  seq->state = SequenceState::kFinished;
  seq->finish_reason = reason;
  out->seq = seq->ref();
  out->finish_reason = reason;
  if (reason != FinishReason::kStopString) seq->stop_checker.Flush(&out->text_delta);
  if (--request->num_unfinished > 0) return;
  RequestUsage& usage = request->usage;
  usage.finish_time = now;
  usage.num_completion_tokens = 0;
  for (const auto& s : request->seqs) usage.num_completion_tokens += s->num_completion_tokens();
  out->request_finished = true;
  out->usage = usage;
  deadlines_.erase({request->deadline, request->id});
  --num_unfinished_requests_;
  ++counters_.requests_finished_total;
}

void Scheduler::MaybeErase(Request* request) {
  if (request->Quiescent()) requests_.erase(request->id);
}

// --- Steps --------------------------------------------------------------------------

bool Scheduler::CanPlan(ReplicaId id) const {
  Replica* replica = FindReplica(id);
  return replica != nullptr &&
         static_cast<int32_t>(replica->in_flight().size()) < replica->max_steps_in_flight();
}

absl::Status Scheduler::Plan(ReplicaId id, absl::Time now, StepPlan* plan) {
  Replica* replica = FindReplica(id);
  if (replica == nullptr) return absl::NotFoundError(absl::StrCat("no replica ", id.value()));
  if (static_cast<int32_t>(replica->in_flight().size()) >= replica->max_steps_in_flight()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", id.value(), " has ", replica->in_flight().size(), " steps in flight"));
  }
  ExpireDeadlines(now);
  planner_.Plan(replica, now, plan);
  // A draining replica's preempted sequences (and forks it had no room for) move on.
  if (replica->draining() && replica->num_waiting() > 0) RerouteWaiting(replica);
  return absl::OkStatus();
}

absl::Status Scheduler::ApplyResults(ReplicaId id, StepId step,
                                     absl::Span<const StepToken> tokens, absl::Time now) {
  Replica* replica = FindReplica(id);
  if (replica == nullptr) return absl::NotFoundError(absl::StrCat("no replica ", id.value()));
  if (replica->in_flight().empty() || replica->in_flight().front().step_id != step) {
    return absl::FailedPreconditionError(
        absl::StrCat("results for step ", step.value(), " of replica ", id.value(),
                     " but the oldest step in flight is ",
                     replica->in_flight().empty() ? 0 : replica->in_flight().front().step_id.value()));
  }
  const std::vector<Sequence*>& samplers = replica->in_flight().front().samplers;
  if (tokens.size() != samplers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step.value(), ": ", tokens.size(),
                                                   " results for ", samplers.size(),
                                                   " sampled sequences"));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (samplers[i]->ref() != tokens[i].seq) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.value(), ": result ", i,
                                                     " is for the wrong sequence"));
    }
    WEFT_RETURN_IF_ERROR(CheckTokenId(tokens[i].token_id, options_.limits.vocab_size, "sampled token"));
  }
  InFlightStep done = std::move(replica->in_flight().front());
  replica->in_flight().pop_front();
  for (size_t i = 0; i < tokens.size(); ++i) {
    Sequence* seq = done.samplers[i];
    --seq->num_pending_samples;
    if (seq->finished()) {  // finished while this step was in flight
      ++counters_.discarded_tokens_total;
      MaybeErase(seq->request);
      continue;
    }
    ApplyToken(seq, tokens[i].token_id, tokens[i].aux, now);
  }
  replica->ReturnSpareVector(std::move(done.samplers));
  return absl::OkStatus();
}

absl::StatusOr<int> Scheduler::FailStep(ReplicaId id, StepId step, absl::Time now) {
  Replica* replica = FindReplica(id);
  if (replica == nullptr) return absl::NotFoundError(absl::StrCat("no replica ", id.value()));
  if (replica->in_flight().empty() || replica->in_flight().front().step_id != step) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step.value(), " of replica ", id.value(),
                     " is not the oldest step in flight"));
  }
  InFlightStep failed = std::move(replica->in_flight().front());
  replica->in_flight().pop_front();
  int ended = 0;
  for (RequestId rid : failed.requests) {
    auto it = requests_.find(rid);
    if (it == requests_.end() || it->second->num_unfinished == 0) continue;
    AbortInternal(it->second.get(), FinishReason::kError, now);
    ++ended;
  }
  // Its samples never come: the sequences owe nothing more to this step.
  for (Sequence* seq : failed.samplers) --seq->num_pending_samples;
  for (RequestId rid : failed.requests) {
    auto it = requests_.find(rid);
    if (it != requests_.end()) MaybeErase(it->second.get());
  }
  replica->ReturnSpareVector(std::move(failed.samplers));
  return ended;
}

void Scheduler::ApplyToken(Sequence* seq, int32_t token, int32_t aux, absl::Time now) {
  Request* request = seq->request;
  if (seq->grammar != nullptr) {
    if (absl::Status s = seq->grammar->Accept(token); !s.ok()) {
      // The worker sampled outside the mask it was sent: never stream such a token.
      LOG(ERROR) << "request " << request->id.value() << " sample " << seq->sample_index << ": "
                 << s.message();
      ++counters_.grammar_violations_total;
      SequenceOutput& out = outbox_.emplace_back();
      out.seq = seq->ref();
      FinishSequence(seq, FinishReason::kError, now, &out);
      MaybeErase(request);
      return;
    }
  }
  SequenceOutput& out = outbox_.emplace_back();
  out.seq = seq->ref();
  out.new_token_ids.push_back(token);
  out.token_aux = aux;
  const FinishReason reason = AppendTokenAndCheckStop(seq, token, stop_context_, &out.text_delta);
  if (reason == FinishReason::kStopEos) {  // not returned (generate.proto), nor counted
    out.new_token_ids.clear();
    out.token_aux = -1;
  }
  if (seq->num_output_tokens() == 1 && request->usage.first_token_time == absl::InfiniteFuture()) {
    request->usage.first_token_time = now;
  }
  const int32_t bs = options_.block_size;
  if (options_.enable_prefix_caching && seq->num_tokens() % bs == 0) {
    UpdateBlockHashes(seq->token_ids, bs, &seq->block_hashes);
    if (seq->state == SequenceState::kRunning) {
      // The block just completed may already be computed (pipelining): register it.
      const int32_t full = std::min(seq->num_computed_tokens, seq->num_tokens()) / bs;
      if (full > seq->blocks.num_hashed_blocks) {
        seq->replica->kv().Commit(seq->block_hashes, full, &seq->blocks);
      }
    }
  }
  if (reason == FinishReason::kNone) return;
  DCHECK(seq->sample_index != 0 || request->num_awaiting_fork == 0);
  FinishSequence(seq, reason, now, &out);
  MaybeErase(request);
}

void Scheduler::TakeOutputs(std::vector<SequenceOutput>* out) {
  out->clear();
  out->swap(outbox_);
}

// --- Helpers --------------------------------------------------------------------------

Replica* Scheduler::FindReplica(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? nullptr : it->second.get();
}

Replica* Scheduler::Route(const Sequence& seq) const {
  // Replicas that take work first. A sequence none of them fits (all drain, or only a
  // draining one is large enough) waits in a draining replica's queue, which admits
  // nothing: for a replica to be added, or for that drain to end (then it is re-queued).
  std::vector<RouteCandidate> candidates;
  candidates.reserve(replicas_.size());
  const int32_t max_total = seq.num_prompt_tokens() + seq.request->stopping.max_tokens;
  for (const bool draining : {false, true}) {
    candidates.clear();
    for (const auto& [id, replica] : replicas_) {
      if (replica->draining() != draining) continue;
      const KvCacheManager& kv = replica->kv();
      RouteCandidate c;
      c.replica = id;
      c.prefix_hit_blocks = kv.FindCachedPrefix(seq.block_hashes, seq.logical_length()).num_blocks;
      c.free_blocks = kv.num_free_blocks() - replica->waiting_demand_blocks();
      c.fits = kv.BlocksFor(max_total) <= kv.pool().num_blocks();
      candidates.push_back(c);
    }
    if (std::optional<ReplicaId> pick = PickReplica(candidates)) return FindReplica(*pick);
  }
  return nullptr;
}

void Scheduler::RerouteWaiting(Replica* only) {
  std::vector<std::pair<Sequence*, Replica*>> moving;  // and the replica it waited on
  for (const auto& [id, replica] : replicas_) {
    if (only != nullptr && replica.get() != only) continue;
    for (const auto& e : replica->waiting()) moving.emplace_back(e.second, replica.get());
  }
  if (moving.empty()) return;
  std::sort(moving.begin(), moving.end(),
            [](const auto& a, const auto& b) { return a.first->key() < b.first->key(); });
  for (auto& [seq, from] : moving) from->RemoveWaiting(seq);
  for (auto& [seq, from] : moving) {
    Replica* to = Route(*seq);
    (to != nullptr ? to : from)->AddWaiting(seq);
  }
}

int32_t Scheduler::NumWaiting() const {
  int32_t n = 0;
  for (const auto& e : replicas_) n += e.second->num_waiting();
  return n;
}

std::vector<ReplicaId> Scheduler::replica_ids() const {
  std::vector<ReplicaId> ids;
  for (const auto& e : replicas_) ids.push_back(e.first);
  return ids;
}

const Sequence* Scheduler::FindSequence(SequenceRef ref) const {
  auto it = requests_.find(ref.request_id);
  if (it == requests_.end()) return nullptr;
  const auto& seqs = it->second->seqs;
  if (ref.sample_index < 0 || ref.sample_index >= static_cast<int32_t>(seqs.size())) {
    return nullptr;
  }
  return seqs[ref.sample_index].get();
}

SchedulerMetrics Scheduler::Metrics() const {
  SchedulerMetrics m;
  m.num_requests = num_unfinished_requests_;
  m.counters = counters_;
  for (const auto& [id, replica] : replicas_) {
    ReplicaMetrics r;
    r.replica = id;
    r.num_running = replica->num_running();
    r.num_waiting = replica->num_waiting();
    const BlockPool& pool = replica->kv().pool();
    r.kv_blocks_used = pool.num_referenced();
    r.kv_blocks_cached = pool.num_cached_free();
    r.kv_blocks_total = pool.num_blocks();
    r.steps_in_flight = static_cast<int32_t>(replica->in_flight().size());
    r.steps_planned = replica->next_step_id().value() - 1;
    r.draining = replica->draining();
    m.num_draining_replicas += r.draining ? 1 : 0;
    m.num_running += r.num_running;
    m.num_waiting += r.num_waiting;
    m.kv_blocks_used += r.kv_blocks_used;
    m.kv_blocks_cached += r.kv_blocks_cached;
    m.kv_blocks_total += r.kv_blocks_total;
    m.replicas.push_back(r);
  }
  return m;
}

KvOccupancy Scheduler::Occupancy() const {
  KvOccupancy o;
  const int64_t bs = options_.block_size;
  for (const auto& [id, replica] : replicas_) {
    for (const auto& [key, seq] : replica->running()) {
      const int64_t slots = static_cast<int64_t>(seq->blocks.block_ids.size()) * bs;
      o.slots += slots;
      o.tokens += std::min<int64_t>(seq->num_tokens(), slots);
    }
  }
  return o;
}

// --- Invariants (tests) -----------------------------------------------------------------

#define WEFT_INVARIANT(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) return absl::InternalError(absl::StrCat(#cond, ": ", __VA_ARGS__)); \
  } while (0)

absl::Status Scheduler::CheckReplica(const Replica& replica) const {
  const KvCacheManager& kv = replica.kv();
  const BlockPool& pool = kv.pool();
  WEFT_RETURN_IF_ERROR(pool.CheckInvariants());
  std::vector<int32_t> owners(pool.num_blocks(), 0);
  int32_t prefilling = 0;
  for (const auto& [key, seq] : replica.running()) {
    const std::string who = absl::StrCat("seq ", seq->request->id.value(), ".", seq->sample_index);
    WEFT_INVARIANT(seq->state == SequenceState::kRunning && seq->replica == &replica, who);
    WEFT_INVARIANT(seq->num_uncomputed() >= 1 && seq->num_computed_tokens >= 0, who);
    const int32_t size = static_cast<int32_t>(seq->blocks.block_ids.size());
    WEFT_INVARIANT(size >= kv.BlocksFor(seq->num_computed_tokens), who, " holds ", size);
    if (policy_->kind() != PolicyKind::kStatic) {
      // No waste beyond the last partial block (KV waste target).
      WEFT_INVARIANT(size == kv.BlocksFor(seq->num_computed_tokens), who, " holds ", size);
    }
    if (seq->known_to_worker) WEFT_INVARIANT(seq->num_blocks_sent == size, who);
    for (BlockId b : seq->blocks.block_ids) ++owners[b.value()];
    prefilling += seq->num_uncomputed() >= 2 ? 1 : 0;
    WEFT_INVARIANT(seq->counted_prefilling == (seq->num_uncomputed() >= 2), who);
  }
  WEFT_INVARIANT(prefilling == replica.num_prefilling(), prefilling);
  WEFT_INVARIANT(replica.num_running() <= options_.max_num_seqs, replica.num_running());
  int64_t demand = 0;
  for (const auto& [key, seq] : replica.waiting()) {
    const std::string who = absl::StrCat("seq ", seq->request->id.value(), ".", seq->sample_index);
    WEFT_INVARIANT(seq->state == SequenceState::kWaiting || seq->state == SequenceState::kPreempted,
                   who);
    WEFT_INVARIANT(seq->replica == &replica && seq->blocks.block_ids.empty(), who);
    WEFT_INVARIANT(seq->num_computed_tokens == 0 && !seq->known_to_worker, who);
    demand += seq->queued_demand_blocks;
  }
  WEFT_INVARIANT(demand == replica.waiting_demand_blocks(), demand);
  for (int32_t b = 0; b < pool.num_blocks(); ++b) {
    WEFT_INVARIANT(pool.ref_count(BlockId(b)) == owners[b], "block ", b, " has ", owners[b],
                   " owners");
  }
  if (replica.num_running() == 0) WEFT_INVARIANT(pool.num_referenced() == 0, "idle replica");
  for (const InFlightStep& step : replica.in_flight()) {
    for (const Sequence* seq : step.samplers) WEFT_INVARIANT(seq->num_pending_samples > 0, "");
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckInvariants() const {
  for (const auto& [id, replica] : replicas_) WEFT_RETURN_IF_ERROR(CheckReplica(*replica));
  int32_t unfinished_requests = 0;
  for (const auto& [id, request] : requests_) {
    int32_t unfinished = 0;
    int32_t awaiting = 0;
    for (const auto& seq : request->seqs) {
      const std::string who = absl::StrCat("seq ", id.value(), ".", seq->sample_index);
      if (!seq->finished()) ++unfinished;
      if (seq->awaiting_fork) {
        ++awaiting;
        WEFT_INVARIANT(seq->replica == nullptr && seq->state == SequenceState::kWaiting, who);
      }
      if (seq->finished()) {
        WEFT_INVARIANT(seq->replica == nullptr && seq->blocks.block_ids.empty(), who);
      } else if (!seq->awaiting_fork) {
        WEFT_INVARIANT(seq->replica != nullptr, who, " is nowhere");
      }
      WEFT_INVARIANT(seq->num_pending_samples >= 0, who);
    }
    WEFT_INVARIANT(unfinished == request->num_unfinished, id.value());
    WEFT_INVARIANT(awaiting == request->num_awaiting_fork, id.value());
    WEFT_INVARIANT(!request->Quiescent(), "request ", id.value(), " should have been erased");
    if (unfinished > 0) ++unfinished_requests;
    const bool has_deadline = request->deadline != absl::InfiniteFuture() && unfinished > 0;
    WEFT_INVARIANT(has_deadline == deadlines_.contains({request->deadline, id}), id.value());
  }
  WEFT_INVARIANT(unfinished_requests == num_unfinished_requests_, unfinished_requests);
  return absl::OkStatus();
}

#undef WEFT_INVARIANT

}  // namespace weft
