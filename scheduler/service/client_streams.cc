#include "scheduler/service/client_streams.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace weft {
namespace {

// The status a call ends with when its request finished for `reason`.
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

ClientStreams::ClientStreams(Scheduler* core, const TokenTextSource* text,
                             ServiceMetrics* metrics, absl::Duration stall_timeout)
    : core_(core), text_(text), metrics_(metrics), stall_timeout_(stall_timeout) {}

void ClientStreams::Admit(Submission& s, absl::Time now,
                          std::shared_ptr<const SequenceGrammarFactory> grammar) {
  if (s.outbox->Closed()) {  // the client left before we got to it
    EndSubmission(s, absl::CancelledError("the client left"), now, metrics_);
    return;
  }
  const RequestSpec& spec = s.request->spec();
  auto id = core_->AddRequest(*s.request, now, std::move(grammar));
  if (!id.ok()) {
    EndSubmission(s, id.status(), now, metrics_);
    return;
  }
  ActiveRequest ar;
  ar.key = s.key;
  ar.outbox = std::move(s.outbox);
  ar.num_logprobs = spec.sampling.num_logprobs;
  ar.seed = spec.sampling.seed;
  ar.arrival = s.arrival;
  ar.who = std::move(s.who);
  ar.last_token_time.assign(spec.n, absl::InfinitePast());
  metrics_->prompt_tokens.Increment(static_cast<double>(spec.prompt_token_ids.size()));
  if (ar.num_logprobs >= 0) ++num_logprobs_requests_;
  by_key_[s.key] = *id;
  requests_.emplace(*id, std::move(ar));
}

void ClientStreams::Cancel(int64_t key, absl::Time now) {
  auto it = by_key_.find(key);
  if (it != by_key_.end()) (void)core_->AbortRequest(it->second, FinishReason::kCancelled, now);
}

int32_t ClientStreams::KeepLogprobs(const weft::v1::SampledToken& t) {
  if (num_logprobs_requests_ == 0) return -1;  // the usual case: no lookup per token
  auto it = requests_.find(SequenceRef::FromSeqId(t.seq_id()).request_id);
  if (it == requests_.end() || it->second.num_logprobs < 0) return -1;  // none asked for
  TokenLogprobs& lp = step_logprobs_.emplace_back();
  lp.logprob = t.logprob();
  for (const auto& e : t.top()) lp.top.emplace_back(e.token_id(), e.logprob());
  return static_cast<int32_t>(step_logprobs_.size() - 1);
}

weft::v1::GenerateResponse ClientStreams::Response(const SequenceOutput& out, ActiveRequest& ar,
                                                   absl::Time now) {
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
  return resp;
}

namespace {
bool Empty(const weft::v1::GenerateResponse& r) {
  return r.token_ids_size() == 0 && r.text().empty() && r.logprobs_size() == 0;
}
}  // namespace

bool ClientStreams::ReleaseNow(ActiveRequest& ar, const SequenceOutput& out, int streams_fed,
                               absl::Duration gap, absl::Time now,
                               weft::v1::GenerateResponse* resp) {
  const size_t sample = static_cast<size_t>(out.seq.sample_index);
  const bool has_held = sample < ar.held.size() && !Empty(ar.held[sample]);
  const bool ends = out.finish_reason != FinishReason::kNone || out.request_finished;
  const absl::Duration held_for =
      ar.held_since == absl::InfiniteFuture() ? absl::ZeroDuration() : now - ar.held_since;
  if (!has_held) {
    // The stream's first message (seed) and a sample's last are never held.
    if (ends || resp->has_seed() ||
        !interval_.Hold(streams_fed, resp->token_ids_size(), gap, held_for)) {
      return true;
    }
    if (ar.held.empty()) ar.held.resize(ar.last_token_time.size());
    ar.held[sample] = std::move(*resp);
    ar.held_since = std::min(ar.held_since, now);
    if (!ar.listed_holding) {
      ar.listed_holding = true;
      holding_.push_back(out.seq.request_id);
    }
    return false;
  }
  weft::v1::GenerateResponse& held = ar.held[sample];
  // `held` is earlier and never ends its sample, so this merge always succeeds.
  const bool merged = Coalesce(&held, resp);
  DCHECK(merged);
  if (!merged) return true;
  if (!ends && interval_.Hold(streams_fed, held.token_ids_size(), gap, held_for)) return false;
  *resp = std::move(held);
  held.Clear();
  if (std::all_of(ar.held.begin(), ar.held.end(), Empty)) ar.held_since = absl::InfiniteFuture();
  return true;
}

void ClientStreams::PushHeld(ActiveRequest& ar, RequestId id, bool request_finished,
                             int except_sample, absl::Time now) {
  for (size_t i = 0; i < ar.held.size(); ++i) {
    if (static_cast<int>(i) == except_sample) continue;
    weft::v1::GenerateResponse& h = ar.held[i];
    if (!Empty(h)) PushOrEnd(ar, id, request_finished, std::move(h), now);
    h.Clear();
  }
  if (except_sample < 0) ar.held_since = absl::InfiniteFuture();
}

void ClientStreams::FlushOverdue(absl::Time now) {
  // Checked a few times per max_hold: a token waits at most ~1.25 x max_hold.
  if (holding_.empty() || now - last_hold_check_ < interval_.max_hold() / 4) return;
  last_hold_check_ = now;
  size_t kept = 0;
  for (RequestId id : holding_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // finished: its held tokens went with its end
    ActiveRequest& ar = it->second;
    if (ar.held_since != absl::InfiniteFuture() && interval_.Overdue(ar.held_since, now)) {
      PushHeld(ar, id, /*request_finished=*/false, /*except_sample=*/-1, now);
    }
    if (ar.held_since == absl::InfiniteFuture()) {
      ar.listed_holding = false;
    } else {
      holding_[kept++] = id;
    }
  }
  holding_.resize(kept);
}

void ClientStreams::PushOrEnd(ActiveRequest& ar, RequestId id, bool request_finished,
                              weft::v1::GenerateResponse resp, absl::Time now) {
  if (ar.outbox->Push(std::move(resp))) {
    metrics_->stream_messages.Increment();
    return;
  }
  // Gone (client left) or over the byte cap (not reading): end it, free its blocks. A
  // finished request's last message that does not fit ends the call in error too: an OK
  // end would tell the client it has everything when its last tokens were dropped.
  const bool gone = ar.outbox->Closed();
  if (!request_finished) (void)core_->AbortRequest(id, FinishReason::kCancelled, now);
  if (!gone) {
    ar.ended_with = absl::ResourceExhaustedError(
        request_finished
            ? "stream buffer full: the stream's last message did not fit (the client is not "
              "reading)"
            : "stream buffer full: the client is not reading");
    ar.outbox->Abort(*ar.ended_with);
  }
}

void ClientStreams::Deliver(absl::Time now) {
  core_->TakeOutputs(&outputs_);
  int streams_fed = 0;  // the batch this pass delivers (the stream interval's measure)
  for (const SequenceOutput& out : outputs_) streams_fed += out.new_token_ids.empty() ? 0 : 1;
  for (const SequenceOutput& out : outputs_) {
    auto it = requests_.find(out.seq.request_id);
    if (it == requests_.end()) continue;
    ActiveRequest& ar = it->second;
    const absl::Time previous = ar.last_token_time[out.seq.sample_index];
    weft::v1::GenerateResponse resp = Response(out, ar, now);
    const bool has_content = !out.new_token_ids.empty() || !out.text_delta.empty() ||
                             resp.finish_reason() != weft::v1::FINISH_REASON_UNSPECIFIED ||
                             resp.has_usage() || resp.has_seed();
    if (out.request_finished && !ar.held.empty()) {
      // Other samples' held tokens go out before the stream's last message (this
      // sample's merge into it; all go out when there is no such message).
      PushHeld(ar, out.seq.request_id, /*request_finished=*/true,
               has_content ? out.seq.sample_index : -1, now);
    }
    const absl::Duration gap =
        previous == absl::InfinitePast() ? absl::InfiniteDuration() : now - previous;
    if (has_content && ((!interval_.enabled() && ar.held.empty()) ||
                        ReleaseNow(ar, out, streams_fed, gap, now, &resp))) {
      PushOrEnd(ar, out.seq.request_id, out.request_finished, std::move(resp), now);
    }
    if (out.request_finished) EndRequest(it, out, now);
  }
  outputs_.clear();
  step_logprobs_.clear();
}

void ClientStreams::EndRequest(absl::flat_hash_map<RequestId, ActiveRequest>::iterator it,
                               const SequenceOutput& out, absl::Time now) {
  ActiveRequest& ar = it->second;
  const absl::Status st = ar.ended_with.value_or(StatusForReason(out.finish_reason));
  metrics_->Finished(std::string(FinishReasonApiName(out.finish_reason))).Increment();
  metrics_->ByStatus(absl::StatusCodeToString(st.code())).Increment();
  metrics_->e2e_latency.Observe(Secs(now - ar.arrival));
  if (out.usage && out.usage->first_scheduled_time != absl::InfiniteFuture()) {
    metrics_->queue_time.Observe(Secs(out.usage->first_scheduled_time - ar.arrival));
  }
  ar.outbox->Finish(st);
  AccessRecord rec;
  rec.who = std::move(ar.who);
  rec.code = st.code();
  rec.duration = now - ar.arrival;
  if (out.usage) {
    rec.prompt_tokens = out.usage->num_prompt_tokens;
    rec.completion_tokens = out.usage->num_completion_tokens;
    if (out.usage->first_token_time != absl::InfiniteFuture()) {
      rec.ttft = out.usage->first_token_time - ar.arrival;
    }
  }
  LogAccess(rec);
  // Its last responses may still wait for a client that stopped reading: keep
  // watching the call so that it still ends (CheckStalls).
  if (!ar.outbox->Done()) lingering_.push_back(ar.outbox);
  if (ar.num_logprobs >= 0) --num_logprobs_requests_;
  by_key_.erase(ar.key);
  requests_.erase(it);
}

void ClientStreams::CheckTimers(absl::Time now) {
  core_->ExpireDeadlines(now);
  FlushOverdue(now);
  if (now - last_stall_check_ < absl::Milliseconds(100)) return;
  last_stall_check_ = now;
  CheckStalls(now);
}

void ClientStreams::CheckStalls(absl::Time now) {
  const absl::Status stalled =
      absl::ResourceExhaustedError("client did not read its stream in time");
  // The largest per-call buffer, sampled here (every 100 ms) rather than every loop:
  // reading it locks each open call.
  size_t buffered = 0;
  for (auto& [id, ar] : requests_) {
    buffered = std::max(buffered, ar.outbox->queued_bytes());
    if (ar.outbox->Stalled(now, stall_timeout_)) {
      LOG(WARNING) << "request " << id.value() << ": client not reading for "
                   << absl::FormatDuration(stall_timeout_) << "; ending it";
      // Abort, not Finish: a client that never reads holds a write in flight forever,
      // and a Finish would wait behind it (the call would never end).
      ar.ended_with = stalled;
      ar.outbox->Abort(stalled);
      (void)core_->AbortRequest(id, FinishReason::kCancelled, now);
    }
  }
  // Finished requests whose calls still wait for their client (bounded by the number
  // of open calls): end those that stalled, forget those that are over.
  lingering_.erase(std::remove_if(lingering_.begin(), lingering_.end(),
                                  [](const std::shared_ptr<Outbox>& o) { return o->Done(); }),
                   lingering_.end());
  for (const std::shared_ptr<Outbox>& o : lingering_) {
    buffered = std::max(buffered, o->queued_bytes());
    if (o->Stalled(now, stall_timeout_)) o->Abort(stalled);
  }
  metrics_->stream_buffer_max_bytes.Set(static_cast<double>(buffered));
}

void ClientStreams::EndAll(FinishReason reason, absl::Time now) {
  std::vector<RequestId> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, ar] : requests_) ids.push_back(id);
  for (RequestId id : ids) (void)core_->AbortRequest(id, reason, now);
  Deliver(now);
  // Anything the core no longer knows still gets its call ended, and its line.
  const absl::Status stopping = absl::UnavailableError("server stopping");
  for (auto& [id, ar] : requests_) {
    ar.outbox->Finish(stopping);
    AccessRecord rec;
    rec.who = std::move(ar.who);
    rec.code = stopping.code();
    rec.duration = now - ar.arrival;
    LogAccess(rec);
  }
  requests_.clear();
  by_key_.clear();
  num_logprobs_requests_ = 0;
}

}  // namespace weft
