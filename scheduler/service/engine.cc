#include "scheduler/service/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/server_process.h"
#include "glog/logging.h"

namespace weft {

absl::Status EngineOptions::Validate() const {
  if (auto s = core.Validate(); !s.ok()) return s;
  if (auto s = step_deadline.Validate(); !s.ok()) return s;
  if (stall_timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("stall timeout must be > 0");
  if (max_inbox_submissions == 0) return absl::InvalidArgumentError("inbox bound must be > 0");
  if (auto s = stream_interval.Validate(); !s.ok()) return s;
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
      set_health_(std::move(set_health)) {}

Engine::~Engine() { Stop(); }

absl::Status Engine::Start() {
  if (auto s = options_.Validate(); !s.ok()) return s;
  auto core = Scheduler::Create(options_.core, text_);
  if (!core.ok()) return core.status();
  core_ = std::move(*core);
  streams_ = std::make_unique<ClientStreams>(core_.get(), text_, metrics_, options_.stall_timeout);
  streams_->set_stream_interval(options_.stream_interval);
  replicas_ = std::make_unique<ReplicaSupervisor>(core_.get(), model_, options_.step_deadline,
                                                  options_.worker_drain_timeout, metrics_);
  replicas_->set_steps_in_flight_by_backend(options_.steps_in_flight_by_backend);
  steps_ = std::make_unique<StepDispatcher>(core_.get(), streams_.get(), metrics_);
  grammars_ = std::make_unique<GrammarAdmission>(
      grammar_service_,
      [this] {
        MutexLock l(&mu_);
        grammar_ready_ = true;
        wake_.Signal();
      },
      metrics_);
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
    iteration_cv_.SignalAll();
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
  if (streams_->size() > 0) wake = std::min(wake, now + options_.tick);
  wake = std::min(wake, grammars_->NextDeadline());  // a finished compile wakes it sooner
  return std::min(wake, replicas_->NextDeadline());
}

void Engine::Loop() {
  // Latency-critical whatever its creator's class (--batch_io_threads).
  if (absl::Status s = SetThisThreadClass(ThreadClass::kNormal); !s.ok()) {
    LOG(WARNING) << "planning thread: " << s.message();
  }
  std::deque<Event> events;
  while (true) {
    {
      MutexLock l(&mu_);
      if (inbox_.empty() && !grammar_ready_ && !stop_) {
        const absl::Time now = absl::Now();
        const absl::Time wake = NextWake(now);
        if (wake > now) wake_.WaitWithTimeout(&mu_, wake - now);
      }
      grammar_ready_ = false;
      events.swap(inbox_);
      inbox_submissions_ = 0;
      if (stop_) break;
    }
    const absl::Time now = absl::Now();
    for (Event& e : events) Handle(e, now);
    events.clear();
    grammars_->Poll(now, [&](Submission& s, std::shared_ptr<const SequenceGrammarFactory> g) {
      streams_->Admit(s, now, std::move(g));
    });
    streams_->CheckTimers(now);
    replicas_->CheckStepDeadlines(now);
    for (auto& [name, rs] : replicas_->replicas()) steps_->PlanSteps(rs, now);
    replicas_->CheckDrains(now);
    streams_->Deliver(now);
    UpdateGaugesAndHealth();
  }
  EndEverything(events);
}

void Engine::EndEverything(std::deque<Event>& events) {
  const absl::Status stopping = absl::UnavailableError("scheduler stopping");
  grammars_->EndAll(stopping);
  // Nothing is queued after stop_: these are the last events, never handled.
  for (Event& e : events) {
    if (auto* s = std::get_if<SubmitEvent>(&e)) {
      EndSubmission(s->submission, stopping, absl::Now(), metrics_);
    }
    if (auto* m = std::get_if<MessageEvent>(&e)) m->worker->Close(stopping);
  }
  streams_->EndAll(FinishReason::kUnavailable, absl::Now());
  replicas_->CloseAll(stopping);
  MutexLock l(&mu_);
  unfinished_ = 0;
  drained_cv_.SignalAll();
}

void Engine::Handle(Event& event, absl::Time now) {
  if (auto* s = std::get_if<SubmitEvent>(&event)) {
    if (grammars_->Park(s->submission, now)) return;  // waits for its grammar
    streams_->Admit(s->submission, now);
  } else if (auto* c = std::get_if<CancelEvent>(&event)) {
    streams_->Cancel(c->key, now);
  } else if (auto* m = std::get_if<MessageEvent>(&event)) {
    HandleWorkerMessage(m->worker, m->message, now);
  } else if (auto* g = std::get_if<GoneEvent>(&event)) {
    replicas_->OnGone(g->worker, now);
  } else if (auto* a = std::get_if<AbortAllEvent>(&event)) {
    streams_->EndAll(a->reason, now);
  }
}

void Engine::HandleWorkerMessage(const std::shared_ptr<WorkerHandle>& w,
                                 weft::v1::WorkerMessage& m, absl::Time now) {
  if (m.has_hello()) {
    replicas_->OnHello(w, m.hello(), now);
  } else if (m.has_result()) {
    ReplicaState* rs = replicas_->FindByHandle(w->id());
    if (rs == nullptr) return;  // a fenced replica's late answer
    if (absl::Status s = steps_->OnResult(*rs, std::move(*m.mutable_result()), now); !s.ok()) {
      replicas_->Fence(rs->name, ReplicaSupervisor::kFenceStepError, std::string(s.message()),
                       now);
    }
  } else if (m.has_drain()) {
    replicas_->OnDrainRequest(w, m.drain(), now);
  }
}

namespace {

// Raises a Prometheus counter to a monotonic total kept elsewhere.
void ExportTotal(prometheus::Counter& c, double total) {
  c.Increment(std::max<double>(0, total - c.Value()));
}

}  // namespace

void Engine::UpdateGaugesAndHealth() {
  const weft::SchedulerMetrics m = core_->Metrics();
  if (const absl::Time now = absl::Now(); m.num_running > 0 && now >= next_occupancy_sample_) {
    next_occupancy_sample_ = now + absl::Milliseconds(500);
    const KvOccupancy o = core_->Occupancy();
    metrics_->kv_tokens_sampled.Increment(static_cast<double>(o.tokens));
    metrics_->kv_slots_sampled.Increment(static_cast<double>(o.slots));
  }
  metrics_->requests_running.Set(m.num_running);
  metrics_->requests_waiting.Set(m.num_waiting);
  metrics_->kv_blocks_used.Set(m.kv_blocks_used);
  metrics_->kv_blocks_cached.Set(m.kv_blocks_cached);
  metrics_->kv_blocks_total.Set(m.kv_blocks_total);
  metrics_->kv_usage_ratio.Set(m.kv_blocks_total > 0 ? double(m.kv_blocks_used) / m.kv_blocks_total : 0);
  const size_t num_replicas = replicas_->replicas().size();
  num_replicas_.store(static_cast<int>(num_replicas));
  metrics_->replicas.Set(static_cast<double>(num_replicas));
  metrics_->worker_ranks_pending.Set(static_cast<double>(replicas_->num_pending_ranks()));
  metrics_->preemptions.Increment(
      std::max<double>(0, m.counters.preemptions_total - metrics_->preemptions.Value()));
  metrics_->grammar_masks.Increment(
      std::max<double>(0, m.counters.grammar_masks_total - metrics_->grammar_masks.Value()));
  metrics_->grammar_mask_seconds.Increment(std::max<double>(
      0, m.counters.grammar_mask_seconds_total - metrics_->grammar_mask_seconds.Value()));
  metrics_->grammar_violations.Increment(std::max<double>(
      0, m.counters.grammar_violations_total - metrics_->grammar_violations.Value()));
  ExportTotal(metrics_->grammar_mask_waits, m.counters.grammar_mask_waits_total);
  if (grammar_service_ != nullptr) {
    const GrammarCompileTotals t = grammar_service_->totals();
    ExportTotal(metrics_->grammar_compiles, t.compiles);
    ExportTotal(metrics_->grammar_compile_seconds, t.compile_seconds);
    ExportTotal(metrics_->grammar_compile_refusals, t.refused);
    ExportTotal(metrics_->grammar_compile_cache_hits, t.cache_hits);
  }
  metrics_->prefix_cache_hit_tokens.Increment(std::max<double>(
      0, m.counters.prefix_cache_hit_tokens_total - metrics_->prefix_cache_hit_tokens.Value()));
  metrics_->replicas_draining.Set(static_cast<double>(replicas_->num_draining()));
  // SERVING (= ready) needs a replica that makes progress (does not drain, steps not
  // overdue) and no drain of the scheduler itself.
  const bool serving = !draining_.load() && replicas_->Progressing();
  if (set_health_ && (!health_set_ || serving != last_health_)) {
    set_health_(serving);
    last_health_ = serving;
    health_set_ = true;
  }
  MutexLock l(&mu_);
  unfinished_ = static_cast<int64_t>(streams_->size());
  if (unfinished_ == 0) drained_cv_.SignalAll();
  ++iterations_;
  iteration_cv_.SignalAll();
}

bool Engine::WaitUntil(const std::function<bool()>& done, absl::Time deadline) {
  while (true) {
    uint64_t seen;
    {
      MutexLock l(&mu_);
      seen = iterations_;
    }
    if (done()) return true;
    bool last = false;  // nothing will change any more, or the hang guard passed
    {
      MutexLock l(&mu_);
      while (iterations_ == seen && !last) {
        last = stop_ || absl::Now() >= deadline;
        if (!last) iteration_cv_.WaitWithTimeout(&mu_, deadline - absl::Now());
      }
    }
    if (last) return done();
  }
}

}  // namespace weft
