#include "tools/simulate/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "scheduler/scheduler.h"

namespace weft::sim {
namespace {

// Per-request timing on the virtual clock.
struct Track {
  double arrival_s = 0;
  double last_token_s = -1;
  int32_t num_tokens = 0;
};

class Run {
 public:
  Run(const std::vector<TraceRequest>& trace, const SimulatorOptions& options)
      : trace_(trace), options_(options), rng_(options.seed) {}

  absl::StatusOr<SimResult> Go() {
    WEFT_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(options_.scheduler, nullptr));
    ReplicaOptions ro;
    ro.num_blocks = options_.num_blocks;
    ro.block_size = options_.scheduler.block_size;
    WEFT_ASSIGN_OR_RETURN(replica_, scheduler_->AddReplica(ro));
    const int32_t n = static_cast<int32_t>(trace_.size());
    if (options_.concurrency > 0) {
      while (next_ < n && next_ < options_.concurrency) WEFT_RETURN_IF_ERROR(Submit(0));
    }
    while (finished_ < n) {
      if (options_.concurrency == 0) {
        while (next_ < n && trace_[next_].arrival_s <= now_s_) {
          WEFT_RETURN_IF_ERROR(Submit(trace_[next_].arrival_s));
        }
      }
      WEFT_RETURN_IF_ERROR(scheduler_->Plan(replica_, Now(), &plan_));
      if (PlanIsEmpty(plan_)) {
        if (options_.concurrency == 0 && next_ < n) {
          now_s_ = std::max(now_s_, trace_[next_].arrival_s);
          continue;
        }
        return absl::InternalError(absl::StrCat("no progress with ", n - finished_,
                                                " requests unfinished"));
      }
      WEFT_RETURN_IF_ERROR(Step());
    }
    return Finish();
  }

 private:
  absl::Time Now() const { return absl::UnixEpoch() + absl::Seconds(now_s_); }

  absl::Status Submit(double arrival_s) {
    const TraceRequest& t = trace_[next_];
    RequestSpec spec;
    spec.prompt_token_ids = t.prompt_token_ids;
    spec.stopping.max_tokens = t.output_len;
    spec.stopping.ignore_eos = true;
    spec.sampling.seed = static_cast<uint64_t>(next_);
    // Closed loop: the request arrives now (its client just got its previous answer).
    WEFT_ASSIGN_OR_RETURN(ValidRequest valid, ValidateRequest(std::move(spec), options_.scheduler.limits));
    WEFT_ASSIGN_OR_RETURN(RequestId id, scheduler_->AddRequest(valid, Now()));
    tracks_[id] = Track{std::max(arrival_s, now_s_)};
    result_.prompt_tokens += static_cast<int64_t>(t.prompt_token_ids.size());
    ++next_;
    return absl::OkStatus();
  }

  absl::Status Step() {
    now_s_ += options_.cost.StepSeconds(plan_);
    ++result_.steps;
    seqs_ += plan_.new_sequences_size() + plan_.cached_sequences_size();
    tokens_ += plan_.num_scheduled_tokens();
    result_.peak_kv_blocks_used =
        std::max(result_.peak_kv_blocks_used, scheduler_->Metrics().kv_blocks_used);
    sampled_.clear();
    std::uniform_int_distribution<int32_t> token(300, 39999);
    SampledSequences(plan_, &sample_order_);
    for (SequenceRef ref : sample_order_) sampled_.push_back(StepToken{ref, token(rng_)});
    WEFT_RETURN_IF_ERROR(
        scheduler_->ApplyResults(replica_, StepId(plan_.step_id()), sampled_, Now()));
    scheduler_->TakeOutputs(&outputs_);
    for (const SequenceOutput& o : outputs_) WEFT_RETURN_IF_ERROR(Record(o));
    return absl::OkStatus();
  }

  absl::Status Record(const SequenceOutput& o) {
    auto it = tracks_.find(o.seq.request_id);
    if (it == tracks_.end()) return absl::InternalError("output for an unknown request");
    Track& t = it->second;
    for (size_t k = 0; k < o.new_token_ids.size(); ++k) {
      if (t.num_tokens++ == 0) {
        ttft_.push_back(now_s_ - t.arrival_s);
      } else {
        itl_.push_back(now_s_ - t.last_token_s);
      }
      t.last_token_s = now_s_;
      ++result_.output_tokens;
    }
    if (!o.request_finished) return absl::OkStatus();
    if (o.finish_reason != FinishReason::kLength) {
      return absl::InternalError(absl::StrCat("unexpected finish: ",
                                              FinishReasonName(o.finish_reason)));
    }
    e2e_.push_back(now_s_ - t.arrival_s);
    tracks_.erase(it);
    ++finished_;
    if (options_.concurrency > 0 && next_ < static_cast<int32_t>(trace_.size())) {
      return Submit(now_s_);
    }
    return absl::OkStatus();
  }

  SimResult Finish() {
    SimResult& r = result_;
    r.policy = std::string(PolicyKindName(options_.scheduler.policy));
    r.num_requests = static_cast<int32_t>(trace_.size());
    r.duration_s = now_s_;
    r.output_tokens_per_s = r.output_tokens / now_s_;
    r.total_tokens_per_s = (r.output_tokens + r.prompt_tokens) / now_s_;
    r.requests_per_s = r.num_requests / now_s_;
    r.ttft = Summarize(&ttft_);
    r.itl = Summarize(&itl_);
    r.e2e = Summarize(&e2e_);
    r.mean_seqs_per_step = static_cast<double>(seqs_) / std::max<int64_t>(1, r.steps);
    r.mean_tokens_per_step = static_cast<double>(tokens_) / std::max<int64_t>(1, r.steps);
    r.preemptions = scheduler_->counters().preemptions_total;
    return r;
  }

  const std::vector<TraceRequest>& trace_;
  const SimulatorOptions& options_;
  std::mt19937_64 rng_;
  std::unique_ptr<Scheduler> scheduler_;
  ReplicaId replica_;
  double now_s_ = 0;
  int32_t next_ = 0;
  int32_t finished_ = 0;
  int64_t seqs_ = 0;
  int64_t tokens_ = 0;
  absl::flat_hash_map<RequestId, Track> tracks_;
  StepPlan plan_;
  std::vector<SequenceRef> sample_order_;
  std::vector<StepToken> sampled_;
  std::vector<SequenceOutput> outputs_;
  std::vector<double> ttft_, itl_, e2e_;
  SimResult result_;
};

}  // namespace

absl::Status SimulatorOptions::Validate() const {
  WEFT_RETURN_IF_ERROR(scheduler.Validate());
  WEFT_RETURN_IF_ERROR(cost.Validate());
  if (num_blocks < 1) return absl::InvalidArgumentError("num_blocks must be >= 1");
  if (concurrency < 0) return absl::InvalidArgumentError("concurrency must be >= 0");
  return absl::OkStatus();
}

LatencyStats Summarize(std::vector<double>* samples) {
  LatencyStats s;
  if (samples->empty()) return s;
  std::sort(samples->begin(), samples->end());
  auto rank = [&](double q) {
    const size_t i = static_cast<size_t>(std::ceil(q * samples->size()));
    return (*samples)[std::min(samples->size() - 1, i == 0 ? 0 : i - 1)];
  };
  double sum = 0;
  for (double v : *samples) sum += v;
  s.mean_s = sum / samples->size();
  s.p50_s = rank(0.5);
  s.p90_s = rank(0.9);
  s.p99_s = rank(0.99);
  return s;
}

std::string SimResult::ToJson() const {
  auto lat = [](const LatencyStats& l) {
    return absl::StrFormat(R"({"mean_s": %.6f, "p50_s": %.6f, "p90_s": %.6f, "p99_s": %.6f})",
                           l.mean_s, l.p50_s, l.p90_s, l.p99_s);
  };
  return absl::StrCat(
      "{", absl::StrFormat(R"("policy": "%s", "num_requests": %d, "duration_s": %.4f, )", policy,
                           num_requests, duration_s),
      absl::StrFormat(R"("prompt_tokens": %d, "output_tokens": %d, )", prompt_tokens,
                      output_tokens),
      absl::StrFormat(R"("output_tokens_per_s": %.3f, "total_tokens_per_s": %.3f, )",
                      output_tokens_per_s, total_tokens_per_s),
      absl::StrFormat(R"("requests_per_s": %.4f, )", requests_per_s), R"("ttft": )", lat(ttft),
      R"(, "itl": )", lat(itl), R"(, "e2e": )", lat(e2e),
      absl::StrFormat(R"(, "steps": %d, "mean_seqs_per_step": %.3f, )", steps,
                      mean_seqs_per_step),
      absl::StrFormat(R"("mean_tokens_per_step": %.3f, "preemptions": %d, )",
                      mean_tokens_per_step, preemptions),
      absl::StrFormat(R"("peak_kv_blocks_used": %d})", peak_kv_blocks_used));
}

absl::StatusOr<SimResult> Simulate(const std::vector<TraceRequest>& trace,
                                   const SimulatorOptions& options) {
  WEFT_RETURN_IF_ERROR(options.Validate());
  if (trace.empty()) return absl::InvalidArgumentError("empty trace");
  Run run(trace, options);
  return run.Go();
}

}  // namespace weft::sim
