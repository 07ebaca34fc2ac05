#include "scheduler/testing/harness.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "scheduler/stop_checker.h"

namespace weft {
namespace {

std::string Name(SequenceRef r) {
  return r.sample_index == 0 ? absl::StrCat(r.request_id.value())
                             : absl::StrCat(r.request_id.value(), ".", r.sample_index);
}

}  // namespace

std::string Describe(const StepPlan& plan) {
  std::vector<std::string> parts;
  auto name = [](int64_t seq_id) { return Name(SequenceRef::FromSeqId(seq_id)); };
  for (const auto& e : plan.new_sequences()) {
    parts.push_back(absl::StrCat("*", name(e.seq_id()), ":", e.num_scheduled_tokens()));
  }
  for (const auto& e : plan.cached_sequences()) {
    parts.push_back(absl::StrCat(name(e.seq_id()), ":", e.num_scheduled_tokens()));
  }
  for (int64_t id : plan.preempted_seq_ids()) parts.push_back(absl::StrCat("-", name(id)));
  for (int64_t id : plan.finished_seq_ids()) parts.push_back(absl::StrCat("x", name(id)));
  for (const auto& c : plan.block_copies()) {
    parts.push_back(absl::StrCat("c", c.src(), ">", c.dst()));
  }
  return absl::StrJoin(parts, " ");
}

TestHarness::TestHarness(SchedulerOptions options, const std::vector<int32_t>& replica_blocks,
                         bool text)
    : options_(std::move(options)), model_(kVocab, {kEos}), text_enabled_(text) {
  options_.eos_token_ids = {kEos};
  options_.limits.vocab_size = kVocab;
  // As weft-scheduler's flags do: no more samples than a replica runs at once.
  options_.limits.max_n = std::min(options_.limits.max_n, options_.max_num_seqs);
  auto s = Scheduler::Create(options_, text ? &text_ : nullptr);
  CHECK(s.ok()) << s.status();
  scheduler_ = std::move(*s);
  for (int32_t blocks : replica_blocks) AddReplica(blocks);
}

ReplicaId TestHarness::AddReplica(int32_t num_blocks, int32_t max_steps_in_flight) {
  ReplicaOptions ro;
  ro.num_blocks = num_blocks;
  ro.max_steps_in_flight = max_steps_in_flight;
  ro.block_size = options_.block_size;
  auto id = scheduler_->AddReplica(ro);
  CHECK(id.ok()) << id.status();
  replica_ids_.push_back(*id);
  replicas_[*id].worker = std::make_unique<FakeWorker>(num_blocks, options_.block_size, &model_);
  return *id;
}

absl::Status TestHarness::RemoveReplica(ReplicaId r) {
  replicas_.erase(r);
  for (auto it = replica_ids_.begin(); it != replica_ids_.end(); ++it) {
    if (*it == r) {
      replica_ids_.erase(it);
      break;
    }
  }
  return scheduler_->RemoveReplica(r, now_);
}

absl::StatusOr<RequestId> TestHarness::Add(
    const RequestSpec& spec, std::shared_ptr<const SequenceGrammarFactory> grammar) {
  absl::StatusOr<ValidRequest> valid = ValidateRequest(spec, options_.limits);
  if (!valid.ok()) return valid.status();
  absl::StatusOr<RequestId> id = scheduler_->AddRequest(*valid, now_, std::move(grammar));
  if (!id.ok()) return id;
  specs_[*id] = spec;
  return id;
}

RequestId TestHarness::AddSimple(int32_t prompt_len, int32_t max_tokens, int32_t priority,
                                 int32_t n, int32_t first_token) {
  RequestSpec spec;
  for (int32_t i = 0; i < prompt_len; ++i) {
    spec.prompt_token_ids.push_back((first_token + i) % kVocab);
  }
  spec.stopping.max_tokens = max_tokens;
  spec.stopping.ignore_eos = true;
  spec.priority = priority;
  spec.n = n;
  auto id = Add(spec);
  CHECK(id.ok()) << id.status();
  return *id;
}

absl::StatusOr<std::string> TestHarness::PlanAndExecute(ReplicaId r) {
  if (absl::Status s = scheduler_->Plan(r, now_, &plan_); !s.ok()) return s;
  if (PlanIsEmpty(plan_)) return std::string();
  ReplicaState& state = replicas_.at(r);
  if (absl::Status s = state.worker->Execute(plan_, &sampled_); !s.ok()) {
    return absl::InternalError(absl::StrCat(s.message(), "\n", plan_.DebugString()));
  }
  state.results.emplace_back(StepId(plan_.step_id()), sampled_);
  return Describe(plan_);
}

absl::Status TestHarness::ApplyOldest(ReplicaId r) {
  ReplicaState& state = replicas_.at(r);
  if (state.results.empty()) return absl::FailedPreconditionError("no results queued");
  auto [step, tokens] = std::move(state.results.front());
  state.results.pop_front();
  if (absl::Status s = scheduler_->ApplyResults(r, step, tokens, now_); !s.ok()) return s;
  return Collect();
}

absl::StatusOr<int> TestHarness::FailOldest(ReplicaId r) {
  ReplicaState& state = replicas_.at(r);
  if (state.results.empty()) return absl::FailedPreconditionError("no results queued");
  const StepId step = state.results.front().first;
  state.results.pop_front();
  absl::StatusOr<int> ended = scheduler_->FailStep(r, step, now_);
  if (!ended.ok()) return ended;
  if (absl::Status s = Collect(); !s.ok()) return s;
  return ended;
}

size_t TestHarness::NumQueuedResults(ReplicaId r) const {
  return replicas_.at(r).results.size();
}

std::string TestHarness::Step(int index) {
  const ReplicaId r = replica_ids_.at(index);
  absl::StatusOr<std::string> d = PlanAndExecute(r);
  CHECK(d.ok()) << d.status();
  if (!PlanIsEmpty(plan_)) {
    absl::Status s = ApplyOldest(r);
    CHECK(s.ok()) << s;
  }
  absl::Status s = Collect();
  CHECK(s.ok()) << s;
  s = scheduler_->CheckInvariants();
  CHECK(s.ok()) << s;
  return *d;
}

absl::Status TestHarness::Collect() {
  scheduler_->TakeOutputs(&scratch_);
  for (const SequenceOutput& o : scratch_) {
    CollectedOutput& c = outputs_[o.seq];
    if (c.num_finishes > 0) {
      return absl::InternalError(absl::StrCat("output after finish for ", Name(o.seq)));
    }
    c.tokens.insert(c.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    c.text += o.text_delta;
    if (o.finish_reason != FinishReason::kNone) {
      c.finish_reason = o.finish_reason;
      ++c.num_finishes;
      newly_finished_.push_back(o.seq);
    }
    if (o.request_finished) {
      c.request_finished = true;
      if (o.usage) c.usage = *o.usage;
    }
  }
  return absl::OkStatus();
}

absl::Status TestHarness::VerifyFinished() const {
  for (const auto& [ref, out] : outputs_) {
    if (out.num_finishes == 0) continue;
    if (absl::Status s = VerifyOne(ref, out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TestHarness::VerifyNewlyFinished() {
  std::vector<SequenceRef> refs;
  refs.swap(newly_finished_);
  for (SequenceRef ref : refs) {
    if (absl::Status s = VerifyOne(ref, outputs_.at(ref)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TestHarness::VerifyAllFinishedOnce() const {
  for (const auto& [id, spec] : specs_) {
    for (int32_t j = 0; j < spec.n; ++j) {
      auto it = outputs_.find(SequenceRef{id, j});
      if (it == outputs_.end() || it->second.num_finishes != 1) {
        return absl::InternalError(absl::StrCat(Name(SequenceRef{id, j}), " finished ",
                                                it == outputs_.end() ? 0 : it->second.num_finishes,
                                                " times"));
      }
    }
  }
  return absl::OkStatus();
}

size_t TestHarness::NumQueuedResultsTotal() const {
  size_t n = 0;
  for (const auto& e : replicas_) n += e.second.results.size();
  return n;
}

absl::Status TestHarness::VerifyOne(SequenceRef ref, const CollectedOutput& out) const {
  const RequestSpec& spec = specs_.at(ref.request_id);
  if (spec.constraint) return absl::OkStatus();  // masks change its tokens (scheduler_grammar_test)
  const ReferenceOutput want =
      model_.Reference(spec.prompt_token_ids, spec.sampling.seed, ref.sample_index,
                       spec.stopping, text_enabled_ ? &text_ : nullptr);
  const std::string who = Name(ref);
  const bool aborted = out.finish_reason == FinishReason::kCancelled ||
                       out.finish_reason == FinishReason::kDeadline ||
                       out.finish_reason == FinishReason::kUnavailable ||
                       out.finish_reason == FinishReason::kError;
  if (aborted) {
    if (out.tokens.size() > want.tokens.size() ||
        !std::equal(out.tokens.begin(), out.tokens.end(), want.tokens.begin())) {
      return absl::InternalError(absl::StrCat(who, ": aborted tokens not a prefix of reference"));
    }
    // Held text (a possible stop-string start, a partial character) is flushed at an
    // abort, so only validity is checked, not a prefix of the reference text.
    if (!IsValidUtf8(out.text)) return absl::InternalError(who + ": invalid UTF-8");
    return absl::OkStatus();
  }
  if (out.tokens != want.tokens) {
    return absl::InternalError(absl::StrCat(who, ": tokens [", absl::StrJoin(out.tokens, ","),
                                            "] != reference [", absl::StrJoin(want.tokens, ","),
                                            "]"));
  }
  if (out.finish_reason != want.finish_reason) {
    return absl::InternalError(absl::StrCat(who, ": finish ", FinishReasonName(out.finish_reason),
                                            " != ", FinishReasonName(want.finish_reason)));
  }
  if (text_enabled_ && out.text != want.text) {
    return absl::InternalError(absl::StrCat(who, ": text '", out.text, "' != '", want.text, "'"));
  }
  return absl::OkStatus();
}

}  // namespace weft
