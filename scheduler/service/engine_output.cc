// Engine, continued: streaming the core's outputs to clients, timers, metrics and health.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/service/engine.h"

namespace weft {
namespace {

absl::Status StatusForReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kCancelled:
      return absl::CancelledError("cancelled");
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError("deadline exceeded");
    case FinishReason::kUnavailable:
      return absl::UnavailableError("no live replica could finish the request");
    case FinishReason::kError:
      return absl::InternalError("a worker failed while running the request");
    default:
      return absl::OkStatus();
  }
}

weft::v1::FinishReason ApiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return weft::v1::FINISH_REASON_LENGTH;
    case FinishReason::kStopEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return weft::v1::FINISH_REASON_STOP;
    default:
      return weft::v1::FINISH_REASON_UNSPECIFIED;
  }
}

double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }

void FillUsage(const RequestUsage& u, weft::v1::Usage* out) {
  out->set_prompt_tokens(u.num_prompt_tokens);
  out->set_cached_prompt_tokens(u.num_cached_prompt_tokens);
  out->set_completion_tokens(u.num_completion_tokens);
  out->set_num_preemptions(u.num_preemptions);
  if (u.first_scheduled_time != absl::InfiniteFuture()) {
    out->set_queue_time_seconds(Secs(u.first_scheduled_time - u.arrival_time));
  }
  if (u.first_token_time != absl::InfiniteFuture()) {
    out->set_time_to_first_token_seconds(Secs(u.first_token_time - u.arrival_time));
  }
}

}  // namespace

void Engine::Deliver(absl::Time now) {
  core_->TakeOutputs(&outputs_);
  for (const SequenceOutput& out : outputs_) {
    auto it = requests_.find(out.seq.request_id);
    if (it == requests_.end()) continue;
    ActiveRequest& ar = it->second;
    weft::v1::GenerateResponse resp;
    resp.set_index(out.seq.sample_index);
    if (!ar.sent_first) {
      resp.set_seed(ar.seed);
      resp.set_request_id(absl::StrCat(out.seq.request_id.value()));
      ar.sent_first = true;
    }
    for (int32_t t : out.new_token_ids) resp.add_token_ids(t);
    resp.set_text(out.text_delta);
    if (ar.num_logprobs >= 0 && out.token_aux >= 0 &&
        out.token_aux < static_cast<int32_t>(step_logprobs_.size())) {
      const TokenLogprobs& lp = step_logprobs_[out.token_aux];
      weft::v1::Logprobs* l = resp.add_logprobs();
      l->set_logprob(lp.logprob);
      for (const auto& [id, p] : lp.top) {
        weft::v1::TokenLogprob* e = l->add_top();
        e->set_token_id(id);
        e->set_logprob(p);
        if (text_ != nullptr) {
          const absl::string_view b = text_->DisplayBytes(id);
          e->set_token_bytes(b.data(), b.size());
        }
      }
    }
    if (!out.new_token_ids.empty()) {
      metrics_->generated_tokens.Increment(static_cast<double>(out.new_token_ids.size()));
      absl::Time& last = ar.last_token_time[out.seq.sample_index];
      if (!ar.got_first_token) {
        metrics_->time_to_first_token.Observe(Secs(now - ar.arrival));
        ar.got_first_token = true;
      } else if (last != absl::InfinitePast()) {
        metrics_->inter_token_latency.Observe(Secs(now - last));
      }
      last = now;
    }
    resp.set_finish_reason(ApiFinishReason(out.finish_reason));
    if (out.request_finished && out.usage) FillUsage(*out.usage, resp.mutable_usage());
    const bool has_content = !out.new_token_ids.empty() || !out.text_delta.empty() ||
                             resp.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED ||
                             resp.has_usage() || resp.has_seed();
    if (has_content && !ar.outbox->Push(std::move(resp)) && !out.request_finished) {
      // Gone (client left) or over the byte cap (not reading): end it, free its blocks.
      const bool gone = ar.outbox->Closed();
      (void)core_->AbortRequest(out.seq.request_id, FinishReason::kCancelled, now);
      if (!gone) {
        ar.ended_with = absl::ResourceExhaustedError("stream buffer full: the client is not reading");
        ar.outbox->Abort(*ar.ended_with);
      }
    }
    if (out.request_finished) {
      const absl::Status st = ar.ended_with.value_or(StatusForReason(out.finish_reason));
      metrics_->Finished(std::string(FinishReasonApiName(out.finish_reason))).Increment();
      metrics_->ByStatus(absl::StatusCodeToString(st.code())).Increment();
      metrics_->e2e_latency.Observe(Secs(now - ar.arrival));
      if (out.usage && out.usage->first_scheduled_time != absl::InfiniteFuture()) {
        metrics_->queue_time.Observe(Secs(out.usage->first_scheduled_time - ar.arrival));
      }
      ar.outbox->Finish(st);
      // Its last responses may still wait for a client that stopped reading: keep
      // watching the stream so that it still ends (CheckTimers).
      if (!ar.outbox->Done()) lingering_.push_back(ar.outbox);
      by_key_.erase(ar.key);
      requests_.erase(it);
    }
  }
  outputs_.clear();
  step_logprobs_.clear();
}

void Engine::CheckTimers(absl::Time now) {
  core_->ExpireDeadlines(now);
  std::vector<std::string> late;
  for (auto& [name, rs] : replicas_) {
    if (rs.tracker->CheckDeadline(now)) late.push_back(name);
  }
  for (const std::string& name : late) {
    Fence(name,
          absl::StrCat("missed ", options_.step_deadline.max_misses, " step deadlines"),
          registry_.Fence(name).other_ranks, now);
  }
  if (now - last_stall_check_ < absl::Milliseconds(100)) return;
  last_stall_check_ = now;
  const absl::Status stalled =
      absl::ResourceExhaustedError("client did not read its stream in time");
  // The largest per-stream buffer, sampled here (every 100 ms) rather than every loop:
  // reading it locks each open stream.
  size_t buffered = 0;
  for (auto& [id, ar] : requests_) {
    buffered = std::max(buffered, ar.outbox->queued_bytes());
    if (ar.outbox->Stalled(now, options_.stall_timeout)) {
      LOG(WARNING) << "request " << id.value() << ": client not reading for "
                   << absl::FormatDuration(options_.stall_timeout) << "; ending it";
      // Abort, not Finish: a client that never reads holds a write in flight forever,
      // and a Finish would wait behind it (the call would never end).
      ar.ended_with = stalled;
      ar.outbox->Abort(stalled);
      (void)core_->AbortRequest(id, FinishReason::kCancelled, now);
    }
  }
  // Finished requests whose streams still wait for their client (bounded by the number
  // of open streams): end those that stalled, forget those that are over.
  lingering_.erase(std::remove_if(lingering_.begin(), lingering_.end(),
                                  [](const std::shared_ptr<Outbox>& o) { return o->Done(); }),
                   lingering_.end());
  for (const std::shared_ptr<Outbox>& o : lingering_) {
    buffered = std::max(buffered, o->queued_bytes());
    if (o->Stalled(now, options_.stall_timeout)) o->Abort(stalled);
  }
  metrics_->stream_buffer_max_bytes.Set(static_cast<double>(buffered));
}

void Engine::AbortAll(FinishReason reason, absl::Time now) {
  std::vector<RequestId> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, ar] : requests_) ids.push_back(id);
  for (RequestId id : ids) (void)core_->AbortRequest(id, reason, now);
  Deliver(now);
  // Anything the core no longer knows still gets its stream ended.
  for (auto& [id, ar] : requests_) ar.outbox->Finish(absl::UnavailableError("server stopping"));
  requests_.clear();
  by_key_.clear();
}

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
  metrics_->replicas.Set(static_cast<double>(replicas_.size()));
  metrics_->worker_ranks_pending.Set(static_cast<double>(registry_.num_pending_ranks()));
  metrics_->preemptions.Increment(
      std::max<double>(0, m.counters.preemptions_total - metrics_->preemptions.Value()));
  metrics_->prefix_cache_hit_tokens.Increment(std::max<double>(
      0, m.counters.prefix_cache_hit_tokens_total - metrics_->prefix_cache_hit_tokens.Value()));
  metrics_->replicas_draining.Set(static_cast<double>(drains_.size()));
  // Progress: SERVING (= ready) needs a replica that does not drain and whose steps are
  // not overdue, and no drain of the scheduler itself.
  bool progressing = false;
  for (const auto& [name, rs] : replicas_) {
    progressing |= rs.tracker->misses() == 0 && !drains_.Contains(name);
  }
  const bool serving = !draining_.load() && progressing;
  if (set_health_ && (!health_set_ || serving != last_health_)) {
    set_health_(serving);
    last_health_ = serving;
    health_set_ = true;
  }
  MutexLock l(&mu_);
  unfinished_ = static_cast<int64_t>(requests_.size());
  if (unfinished_ == 0) drained_cv_.SignalAll();
}

}  // namespace weft
