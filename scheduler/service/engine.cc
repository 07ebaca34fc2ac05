#include "scheduler/service/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/plan/step_plan.h"
#include "glog/logging.h"

namespace weft {
namespace {

RequestSpec SpecFrom(const ResolvedRequest& r, absl::Time deadline) {
  RequestSpec spec;
  spec.prompt_token_ids = r.prompt_token_ids;
  spec.sampling = r.sampling;
  spec.stopping.max_tokens = r.max_tokens;
  spec.stopping.ignore_eos = r.ignore_eos;
  spec.stopping.stop_token_ids = r.stop_token_ids;
  spec.stopping.stop_strings = r.stop_strings;
  spec.n = r.n;
  spec.priority = r.priority;
  spec.deadline = deadline;
  return spec;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

absl::Status EngineOptions::Validate() const {
  if (auto s = core.Validate(); !s.ok()) return s;
  if (auto s = step_deadline.Validate(); !s.ok()) return s;
  if (stall_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("stall timeout must be > 0");
  if (max_inbox_submissions == 0) return absl::InvalidArgumentError("inbox bound must be > 0");
  if (worker_drain_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("worker drain timeout must be > 0");
  }
  return absl::OkStatus();
}

Engine::Engine(EngineOptions options, ExpectedModel model, weft::v1::ModelInfo info,
               const TokenTextSource* text, ServiceMetrics* metrics, HealthFn set_health)
    : options_(std::move(options)),
      model_(model),
      info_(std::move(info)),
      text_(text),
      metrics_(metrics),
      set_health_(std::move(set_health)),
      // Epochs unique across scheduler restarts (see ReplicaRegistry).
      registry_(std::move(model), absl::ToUnixMicros(absl::Now())),
      drains_(options_.worker_drain_timeout) {}

Engine::~Engine() { Stop(); }

absl::Status Engine::Start() {
  if (auto s = options_.Validate(); !s.ok()) return s;
  auto core = Scheduler::Create(options_.core, text_);
  if (!core.ok()) return core.status();
  core_ = std::move(*core);
  UpdateGaugesAndHealth();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Engine::Stop() {
  {
    MutexLock l(&mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void Engine::BeginDrain() {
  if (draining_.exchange(true)) return;
  LOG(INFO) << "draining: new calls get UNAVAILABLE; running streams finish";
  metrics_->draining.Set(1);
  if (set_health_) set_health_(false);
  MutexLock l(&mu_);
  wake_.SignalAll();
}

int Engine::WaitDrained(absl::Time deadline) {
  int64_t left = 0;
  {
    MutexLock l(&mu_);
    while (unfinished_ > 0 && absl::Now() < deadline && !stop_) {
      drained_cv_.WaitWithTimeout(&mu_, std::min(deadline - absl::Now(), absl::Milliseconds(100)));
    }
    left = unfinished_;
  }
  if (left == 0) return 0;
  LOG(WARNING) << "drain timeout: ending " << left << " requests UNAVAILABLE";
  Push(AbortAllEvent{FinishReason::kUnavailable});
  MutexLock l(&mu_);
  const absl::Time hard = absl::Now() + absl::Seconds(5);
  while (unfinished_ > 0 && absl::Now() < hard && !stop_) {
    drained_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
  }
  return static_cast<int>(left);
}

// --- Inbox (any thread) ---------------------------------------------------------------

bool Engine::Push(Event event) {
  MutexLock l(&mu_);
  if (stop_) return false;  // the loop has stopped: nobody reads the inbox any more
  inbox_.push_back(std::move(event));
  wake_.Signal();
  return true;
}

absl::Status Engine::Submit(Submission submission) {
  if (draining_.load()) return absl::UnavailableError("the server is draining (shutting down)");
  if (num_replicas_.load() == 0) {
    return absl::UnavailableError("no worker replica is attached to this scheduler");
  }
  MutexLock l(&mu_);
  if (stop_) return absl::UnavailableError("the server is stopping");
  if (inbox_submissions_ >= options_.max_inbox_submissions) {
    return absl::ResourceExhaustedError("admission queue is full; retry later");
  }
  ++inbox_submissions_;
  inbox_.push_back(SubmitEvent{std::move(submission)});
  wake_.Signal();
  return absl::OkStatus();
}

void Engine::Cancel(int64_t key) { Push(CancelEvent{key}); }

void Engine::OnWorkerMessage(const std::shared_ptr<WorkerHandle>& worker,
                             weft::v1::WorkerMessage message) {
  if (Push(MessageEvent{worker, std::move(message)})) return;
  // The loop has stopped: nobody will ever answer this worker (typically one that
  // re-attached during shutdown). End its stream now, or the server's Shutdown would
  // wait for it until its deadline.
  worker->Close(absl::UnavailableError("scheduler stopping"));
}

void Engine::OnWorkerGone(const std::shared_ptr<WorkerHandle>& worker) { Push(GoneEvent{worker}); }

weft::v1::ModelInfo Engine::ModelInfo() const {
  weft::v1::ModelInfo info = info_;
  info.set_num_replicas(num_replicas_.load());
  return info;
}

// --- The planning thread --------------------------------------------------------------

absl::Time Engine::NextWake(absl::Time now) const {
  absl::Time wake = now + absl::Seconds(1);
  if (!requests_.empty()) wake = std::min(wake, now + options_.tick);
  for (const auto& [name, rs] : replicas_) wake = std::min(wake, rs.tracker->NextDeadline());
  return std::min(wake, drains_.NextDeadline());
}

void Engine::Loop() {
  std::deque<Event> events;
  while (true) {
    {
      MutexLock l(&mu_);
      if (inbox_.empty() && !stop_) {
        const absl::Time now = absl::Now();
        const absl::Time wake = NextWake(now);
        if (wake > now) wake_.WaitWithTimeout(&mu_, wake - now);
      }
      events.swap(inbox_);
      inbox_submissions_ = 0;
      if (stop_) break;
    }
    const absl::Time now = absl::Now();
    for (Event& e : events) Handle(e, now);
    events.clear();
    CheckTimers(now);
    PlanReplicas(now);
    CheckDrains(now);
    Deliver(now);
    UpdateGaugesAndHealth();
  }
  // Stopping: end whatever is still open, including the calls whose events the inbox
  // still held (nothing is queued after stop_).
  for (Event& e : events) {
    const absl::Status stopping = absl::UnavailableError("scheduler stopping");
    if (auto* s = std::get_if<SubmitEvent>(&e)) s->submission.outbox->Finish(stopping);
    if (auto* m = std::get_if<MessageEvent>(&e)) m->worker->Close(stopping);
  }
  AbortAll(FinishReason::kUnavailable, absl::Now());
  for (auto& [name, rs] : replicas_) {
    for (auto& h : rs.ranks) h->Close(absl::UnavailableError("scheduler stopping"));
  }
  MutexLock l(&mu_);
  unfinished_ = 0;
  drained_cv_.SignalAll();
}

void Engine::Handle(Event& event, absl::Time now) {
  if (auto* s = std::get_if<SubmitEvent>(&event)) {
    HandleSubmit(s->submission, now);
  } else if (auto* c = std::get_if<CancelEvent>(&event)) {
    auto it = by_key_.find(c->key);
    if (it != by_key_.end()) (void)core_->AbortRequest(it->second, FinishReason::kCancelled, now);
  } else if (auto* m = std::get_if<MessageEvent>(&event)) {
    if (m->message.has_hello()) {
      HandleHello(m->worker, m->message.hello(), now);
    } else if (m->message.has_result()) {
      HandleResult(m->worker, m->message.result(), now);
    } else if (m->message.has_drain()) {
      HandleDrainRequest(m->worker, m->message.drain(), now);
    }
  } else if (auto* g = std::get_if<GoneEvent>(&event)) {
    FenceOutcome f = registry_.OnGone(g->worker);
    if (!f.replica.empty()) {
      Fence(f.replica, absl::StrCat("worker stream ", g->worker->id(), " (", g->worker->peer(), ") ended"),
            std::move(f.other_ranks), now);
    }
  } else if (auto* a = std::get_if<AbortAllEvent>(&event)) {
    AbortAll(a->reason, now);
  }
}

void Engine::HandleSubmit(Submission& s, absl::Time now) {
  if (s.outbox->Closed()) return;  // the client left before we got to it
  auto id = core_->AddRequest(SpecFrom(s.request, s.deadline), now);
  if (!id.ok()) {
    metrics_->ByStatus(absl::StatusCodeToString(id.status().code())).Increment();
    s.outbox->Finish(id.status());
    return;
  }
  ActiveRequest ar;
  ar.key = s.key;
  ar.outbox = std::move(s.outbox);
  ar.num_logprobs = s.request.sampling.num_logprobs;
  ar.seed = s.request.sampling.seed;
  ar.arrival = s.arrival;
  ar.last_token_time.assign(s.request.n, absl::InfinitePast());
  metrics_->prompt_tokens.Increment(static_cast<double>(s.request.prompt_token_ids.size()));
  by_key_[s.key] = *id;
  requests_.emplace(*id, std::move(ar));
}

void Engine::HandleHello(const std::shared_ptr<WorkerHandle>& w, const weft::v1::WorkerHello& h,
                         absl::Time now) {
  HelloOutcome out = registry_.OnHello(w, h, now);
  for (auto& old : out.displaced) {
    old->Close(absl::UnavailableError("displaced by a newer process for the same rank"));
  }
  if (!out.displaced_replica.empty() && replicas_.count(out.displaced_replica) > 0) {
    Fence(out.displaced_replica, "a rank re-attached", {}, now);
  }
  auto reject = [&](const std::shared_ptr<WorkerHandle>& handle, const std::string& reason) {
    metrics_->workers_rejected.Increment();
    LOG(WARNING) << "rejecting worker " << handle->peer() << " (replica '" << h.replica()
                 << "'): " << reason;
    weft::v1::SchedulerMessage m;
    m.mutable_reject()->set_reason(reason);
    handle->Send(std::move(m));
    handle->Close(absl::FailedPreconditionError(reason));
  };
  for (auto& loser : out.losers) reject(loser, out.losers_reason);
  if (out.kind == HelloOutcome::kRejected) {
    LOG(WARNING) << "worker " << h.worker_id() << " is rank " << h.rank() << " of "
                 << h.world_size();
    reject(w, out.reject_reason);
    return;
  }
  if (out.kind == HelloOutcome::kPending) {
    LOG(INFO) << "replica '" << h.replica() << "': rank " << h.rank() << " of " << h.world_size()
              << " attached (" << h.worker_id() << "); waiting for the others";
    return;
  }
  const AdmittedReplica& r = *out.replica;
  auto id = core_->AddReplica(ReplicaOptions{r.num_kv_blocks, model_.block_size});
  if (!id.ok()) {
    LOG(ERROR) << "cannot add replica '" << r.name << "': " << id.status();
    FenceOutcome f = registry_.Fence(r.name);
    for (auto& handle : f.other_ranks) handle->Close(id.status());
    return;
  }
  ReplicaState rs;
  rs.name = r.name;
  rs.id = *id;
  rs.tracker = std::make_unique<StepTracker>(options_.step_deadline, r.world_size);
  rs.steps = &metrics_->Steps(r.name);
  for (const RankInfo& rank : r.ranks) {
    rs.ranks.push_back(rank.handle);
    weft::v1::SchedulerMessage m;
    weft::v1::Welcome* wl = m.mutable_welcome();
    wl->set_replica(r.name);
    wl->set_num_kv_blocks(r.num_kv_blocks);
    wl->set_first_step_id(1);
    wl->set_comm_init(r.comm_init);
    wl->set_epoch(r.epoch);
    rank.handle->Send(std::move(m));
  }
  LOG(INFO) << "replica '" << r.name << "' admitted: TP " << r.world_size << ", "
            << r.num_kv_blocks << " KV blocks, epoch " << r.epoch << ", backend "
            << r.ranks[0].hello.backend() << " (" << r.ranks[0].hello.kernels() << ")";
  replicas_.emplace(r.name, std::move(rs));
  num_replicas_.store(static_cast<int>(replicas_.size()));
}

Engine::ReplicaState* Engine::FindByHandle(int64_t handle_id) {
  const AdmittedReplica* r = registry_.FindByHandle(handle_id);
  if (r == nullptr) return nullptr;
  auto it = replicas_.find(r->name);
  return it == replicas_.end() ? nullptr : &it->second;
}

void Engine::HandleResult(const std::shared_ptr<WorkerHandle>& w, const weft::v1::StepResult& r,
                          absl::Time now) {
  ReplicaState* rs = FindByHandle(w->id());
  if (rs == nullptr) return;  // a fenced replica's late answer
  for (StepTracker::ResultOutcome& o : rs->tracker->OnResult(r, now)) {
    if (o.outcome == StepTracker::Outcome::kUnexpected ||
        o.outcome == StepTracker::Outcome::kDisagree) {
      Fence(rs->name, o.message, registry_.Fence(rs->name).other_ranks, now);
      return;
    }
    InFlightPlan plan = std::move(rs->in_flight.front());
    rs->in_flight.pop_front();
    if (o.outcome == StepTracker::Outcome::kError) {
      FailStep(rs, plan, o.message, now);
    } else {
      ApplyStep(rs, plan, o.result, now);
    }
    if (replicas_.count(rs->name) == 0) return;  // fenced while applying
  }
}

void Engine::ApplyStep(ReplicaState* rs, const InFlightPlan& plan, const weft::v1::StepResult& r,
                       absl::Time now) {
  const absl::Time start = absl::Now();
  metrics_->worker_forward_seconds.Increment(std::max(0.0, r.forward_seconds()));
  metrics_->worker_execute_seconds.Increment(std::max(0.0, r.execute_seconds()));
  // The core checks the tokens against the plan (count, order, vocabulary).
  tokens_scratch_.clear();
  for (const weft::v1::SampledToken& t : r.tokens()) {
    tokens_scratch_.push_back(SampledToken{SequenceRef::FromSeqId(t.seq_id()), t.token_id()});
    auto it = requests_.find(tokens_scratch_.back().seq.request_id);
    if (it == requests_.end() || it->second.num_logprobs < 0) continue;  // none asked for
    TokenLogprobs lp;
    lp.logprob = t.logprob();
    for (const auto& e : t.top()) lp.top.emplace_back(e.token_id(), e.logprob());
    tokens_scratch_.back().aux = static_cast<int32_t>(step_logprobs_.size());
    step_logprobs_.push_back(std::move(lp));
  }
  absl::Status s = core_->ApplyResults(rs->id, StepId(plan.step_id), tokens_scratch_, now);
  if (!s.ok()) {
    Fence(rs->name, absl::StrCat("bad result: ", s.message()), registry_.Fence(rs->name).other_ranks, now);
    return;
  }
  rs->steps->Increment();
  steps_completed_.fetch_add(1);
  metrics_->step_duration.Observe(Seconds(now - plan.sent));
  metrics_->plan_seconds.Increment(Seconds(absl::Now() - start));
}

void Engine::FailStep(ReplicaState* rs, const InFlightPlan& plan, const std::string& why,
                      absl::Time now) {
  LOG(WARNING) << "replica '" << rs->name << "' failed step " << plan.step_id << ": " << why
               << "; ending its " << plan.requests.size() << " requests";
  for (RequestId id : plan.requests) (void)core_->AbortRequest(id, FinishReason::kError, now);
  // The core still expects this step's tokens; they belong to finished sequences now
  // and are discarded.
  tokens_scratch_.clear();
  for (SequenceRef ref : plan.sample_order) tokens_scratch_.push_back(SampledToken{ref, 0, -1});
  absl::Status s = core_->ApplyResults(rs->id, StepId(plan.step_id), tokens_scratch_, now);
  if (!s.ok()) {
    Fence(rs->name, absl::StrCat("cannot retire failed step: ", s.message()),
          registry_.Fence(rs->name).other_ranks, now);
  }
}

void Engine::Fence(const std::string& name, const std::string& reason,
                   std::vector<std::shared_ptr<WorkerHandle>> other_ranks, absl::Time now) {
  auto it = replicas_.find(name);
  if (it == replicas_.end()) return;
  LOG(WARNING) << "fencing replica '" << name << "': " << reason;
  metrics_->Fenced(reason.substr(0, reason.find(':'))).Increment();
  for (auto& h : other_ranks) {
    h->Close(absl::UnavailableError(absl::StrCat("replica fenced: ", reason)));
  }
  DropReplica(it, now);
}

int64_t Engine::DropReplica(std::map<std::string, ReplicaState>::iterator it, absl::Time now) {
  const int64_t before = core_->counters().retries_total;
  absl::Status s = core_->RemoveReplica(it->second.id, now);
  if (!s.ok()) LOG(ERROR) << "removing replica '" << it->first << "' from the core: " << s;
  const int64_t requeued = core_->counters().retries_total - before;
  metrics_->requeued_requests.Increment(static_cast<double>(requeued));
  drains_.End(it->first);
  replicas_.erase(it);
  num_replicas_.store(static_cast<int>(replicas_.size()));
  return requeued;
}

void Engine::PlanReplicas(absl::Time now) {
  for (auto& [name, rs] : replicas_) {
    while (core_->CanPlan(rs.id)) {
      const absl::Time start = absl::Now();
      StepPlan& plan = *plan_message_.mutable_plan();  // reused: keeps its capacity
      absl::Status s = core_->Plan(rs.id, now, &plan);
      if (!s.ok()) {
        LOG(ERROR) << "planning replica '" << name << "': " << s;
        break;
      }
      if (PlanIsEmpty(plan)) break;
      InFlightPlan inflight;
      inflight.step_id = plan.step_id();
      inflight.sent = now;
      SampledSequences(plan, &inflight.sample_order);
      for (const auto& n : plan.new_sequences()) {
        inflight.requests.push_back(SequenceRef::FromSeqId(n.seq_id()).request_id);
      }
      for (const auto& c : plan.cached_sequences()) {
        inflight.requests.push_back(SequenceRef::FromSeqId(c.seq_id()).request_id);
      }
      std::sort(inflight.requests.begin(), inflight.requests.end());
      inflight.requests.erase(std::unique(inflight.requests.begin(), inflight.requests.end()),
                              inflight.requests.end());
      const grpc::ByteBuffer bytes = WorkerHandle::Encode(plan_message_);  // once for all ranks
      for (const auto& rank : rs.ranks) rank->Send(bytes);
      rs.tracker->OnPlanSent(inflight.step_id, plan.num_scheduled_tokens(), now);
      rs.in_flight.push_back(std::move(inflight));
      metrics_->plan_seconds.Increment(Seconds(absl::Now() - start));
    }
  }
}

}  // namespace weft
