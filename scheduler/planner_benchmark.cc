// Scheduler microbenchmark (BENCHMARKS.md): the cost of planning one iteration and of
// applying one step's results, in decode steady state, with 64 / 256 / 1,024 / 4,096
// running sequences. Targets: plan + apply ≤ 20 µs at 256 and ≤ 100 µs at 1,024.
// Read the "CPU" column: Google Benchmark's CPU time is the calling thread's CPU time.
//
//   BM_PlanAndApply/N     one full iteration: Plan, results, ApplyResults, TakeOutputs
//                         (the results vector is filled in the loop: ~1 ns/sequence)
//   BM_Plan/N, BM_Apply/N the two halves alone (the other half runs with timing paused)
//   BM_PlanAndApplyBacklog/N/W   the same with W requests waiting behind a full batch:
//                         the cost must not grow with W (no scan of everything held)
//   BM_PlanAndApplyChurn/N  continuous batching with arrivals: requests of 64..191
//                         output tokens finish and are replaced as they go (admission,
//                         prefill, finish, erase inside the timed loop)
//
// Outputs carry text: a small TokenTextSource renders each token (as the service's
// detokenizer would), so the incremental-text path is part of the cost.
#include <limits>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "glog/logging.h"
#include "scheduler/scheduler.h"

namespace weft {
namespace {

class BenchText : public TokenTextSource {
 public:
  absl::string_view TokenBytes(int32_t t) const override {
    static const char* kText[] = {" the", "ing", " a", "s", " of", "\n", " and", "ed",
                                  " to", "er", " in", "ly", " is", ",", " that", "."};
    return kText[static_cast<uint32_t>(t) % 16];
  }
};

constexpr int32_t kPromptLen = 32;
constexpr int32_t kEpochSteps = 1024;  // rebuilt (untimed) before sequences grow long
constexpr int32_t kEos = 2;

// N sequences decoding on one replica, plus W waiting behind them.
class Fixture {
 public:
  Fixture(int32_t num_running, int32_t num_waiting, bool churn) : churn_(churn) {
    SchedulerOptions o;
    o.block_size = 16;
    o.max_num_batched_tokens = std::max(8192, num_running);
    o.max_num_seqs = num_running;
    o.limits.max_model_len = 1 << 16;
    o.limits.vocab_size = std::numeric_limits<int32_t>::max();  // prompts: 100 + 37 i + j
    o.limits.max_tokens = 1 << 15;
    o.limits.max_n = std::min(o.limits.max_n, o.max_num_seqs);
    o.admission_watermark = 0;
    o.max_waiting = num_running + num_waiting + 16;
    o.eos_token_ids = {kEos};
    scheduler_ = std::move(*Scheduler::Create(o, &text_));
    ReplicaOptions ro;
    ro.block_size = 16;
    ro.num_blocks = num_running * ((kPromptLen + kEpochSteps + 256) / 16 + 2) + 64;
    replica_ = *scheduler_->AddReplica(ro);
    for (int32_t i = 0; i < num_running + num_waiting; ++i) Add();
    // Warm up until every running sequence decodes.
    for (int i = 0; i < 64 && scheduler_->Metrics().replicas[0].num_running < num_running; ++i) {
      Step();
    }
    for (int i = 0; i < 64; ++i) Step();
  }

  void Add() {
    RequestSpec spec;
    for (int32_t j = 0; j < kPromptLen; ++j) spec.prompt_token_ids.push_back(100 + next_ * 37 + j);
    spec.stopping.max_tokens = churn_ ? 64 + next_ % 128 : 16384;
    spec.stopping.ignore_eos = true;
    ++next_;
    CHECK(scheduler_->AddRequest(*ValidateRequest(std::move(spec), scheduler_->options().limits), now_).ok());
  }

  void Plan() {
    CHECK(scheduler_->Plan(replica_, now_, &plan_).ok());
    results_.clear();
    for (const auto& e : plan_.new_sequences()) {
      const SequenceRef ref = SequenceRef::FromSeqId(e.seq_id());
      if (e.do_sample()) results_.push_back(StepToken{ref, 7 + ref.sample_index});
    }
    for (const auto& e : plan_.cached_sequences()) {
      const SequenceRef ref = SequenceRef::FromSeqId(e.seq_id());
      if (e.do_sample()) results_.push_back(StepToken{ref, 5 + e.num_computed_tokens() % 64});
    }
  }

  void Apply() {
    if (!PlanIsEmpty(plan_)) {
      CHECK(scheduler_->ApplyResults(replica_, StepId(plan_.step_id()), results_, now_).ok());
    }
    scheduler_->TakeOutputs(&outputs_);
    if (churn_) {
      for (const SequenceOutput& o : outputs_) {
        if (o.request_finished) Add();  // closed loop: a new request per finished one
      }
    }
    now_ += absl::Milliseconds(10);
  }

  void Step() {
    Plan();
    Apply();
  }

  int32_t scheduled_tokens() const { return plan_.num_scheduled_tokens(); }

 private:
  BenchText text_;
  bool churn_;
  std::unique_ptr<Scheduler> scheduler_;
  ReplicaId replica_;
  absl::Time now_ = absl::UnixEpoch();
  int64_t next_ = 0;
  StepPlan plan_;
  std::vector<StepToken> results_;
  std::vector<SequenceOutput> outputs_;
};

enum class Part { kBoth, kPlan, kApply };

void Run(benchmark::State& state, int32_t running, int32_t waiting, bool churn, Part part) {
  auto fixture = std::make_unique<Fixture>(running, waiting, churn);
  int32_t steps = 0;
  int64_t tokens = 0;
  for (auto _ : state) {
    if (!churn && ++steps > kEpochSteps) {
      state.PauseTiming();
      fixture = std::make_unique<Fixture>(running, waiting, churn);
      steps = 1;
      state.ResumeTiming();
    }
    switch (part) {
      case Part::kBoth:
        fixture->Step();
        break;
      case Part::kPlan:
        fixture->Plan();
        state.PauseTiming();
        fixture->Apply();
        state.ResumeTiming();
        break;
      case Part::kApply:
        state.PauseTiming();
        fixture->Plan();
        state.ResumeTiming();
        fixture->Apply();
        break;
    }
    tokens += fixture->scheduled_tokens();
  }
  state.counters["running"] = running;
  state.counters["tokens/step"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kAvgIterations);
  state.SetItemsProcessed(state.iterations() * running);
}

void BM_PlanAndApply(benchmark::State& s) { Run(s, s.range(0), 0, false, Part::kBoth); }
void BM_Plan(benchmark::State& s) { Run(s, s.range(0), 0, false, Part::kPlan); }
void BM_Apply(benchmark::State& s) { Run(s, s.range(0), 0, false, Part::kApply); }
void BM_PlanAndApplyBacklog(benchmark::State& s) {
  Run(s, s.range(0), s.range(1), false, Part::kBoth);
}
void BM_PlanAndApplyChurn(benchmark::State& s) { Run(s, s.range(0), 0, true, Part::kBoth); }

#define WEFT_SIZES ->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_PlanAndApply) WEFT_SIZES;
BENCHMARK(BM_Plan) WEFT_SIZES;
BENCHMARK(BM_Apply) WEFT_SIZES;
BENCHMARK(BM_PlanAndApplyBacklog)
    ->Args({1024, 0})
    ->Args({1024, 16384})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanAndApplyChurn) WEFT_SIZES;
#undef WEFT_SIZES

}  // namespace
}  // namespace weft

// Own main: Debian's libbenchmark-dev has no pkg-config file for benchmark_main.
BENCHMARK_MAIN();
