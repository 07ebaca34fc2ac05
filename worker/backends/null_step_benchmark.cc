// The worker's host work per step with the null backend (BENCHMARKS.md: ≤ 30 µs at 256
// sequences), in process: ModelExecutor::ExecuteInto of a decode plan for N sequences
// (StateCache apply, the step, the result, its hash), the vocabulary of the default model
// (49,152), on one thread. Two step paths over the same NullBackend:
//   BM_Step/N            NullBackend::Step: tokens from the StepBatch (issue 31 item 1)
//   BM_ForwardStepper/N  the generic path (ForwardStepper: ForwardBatch, Forward's one-hot
//                        logits, ValidateBatch, SampleOnDevice) — the step path before
//                        Backend::Step, kept as the CPU/CUDA backends' path
// Read the "CPU" column (the thread's CPU time). Run with --benchmark_repetitions and
// interleave the two (--benchmark_enable_random_interleaving) on a loaded machine.
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/gguf.h"
#include "glog/logging.h"
#include "weft/v1/worker.pb.h"
#include "worker/backends/forward_stepper.h"
#include "worker/backends/null_backend.h"
#include "worker/model/testing/tiny_llama.h"
#include "worker/service/model_executor.h"

namespace weft {
namespace {

constexpr int32_t kVocab = 49152;  // the default model's
constexpr int32_t kContext = 8192;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kPrompt = 32;
constexpr int32_t kSteps = 1024;  // per epoch: sequences restart before they grow long

// A NullBackend whose Step is the generic ForwardStepper over its Forward.
class GenericNull : public Backend {
 public:
  explicit GenericNull(std::unique_ptr<NullBackend> b) : b_(std::move(b)), stepper_(kVocab) {}
  const char* name() const override { return "null"; }
  std::string kernels() const override { return b_->kernels(); }
  const ModelConfig& config() const override { return b_->config(); }
  int32_t block_size() const override { return b_->block_size(); }
  int32_t num_kv_blocks() const override { return b_->num_kv_blocks(); }
  int64_t kv_pool_bytes() const override { return 0; }
  absl::Status Step(const StepBatch& batch, StepOutput* out) override {
    return stepper_.Step(*this, batch, out);
  }
  absl::Status Forward(const ForwardBatch& batch, ForwardOutput* out) override {
    return b_->Forward(batch, out);
  }
  absl::Status CopyBlock(int32_t src, int32_t dst) override { return b_->CopyBlock(src, dst); }
  absl::Status SampleOnDevice(absl::Span<const SampleRequest> requests,
                              std::vector<int32_t>* tokens) override {
    return b_->SampleOnDevice(requests, tokens);
  }

 private:
  std::unique_ptr<NullBackend> b_;
  ForwardStepper stepper_;
};

struct Model {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

const Model& TheModel() {
  static const Model* m = [] {
    testing::TinyLlamaSpec spec;
    spec.num_layers = 1;
    spec.hidden = 64;
    spec.ffn = 32;
    spec.vocab = kVocab;
    spec.context = kContext;
    auto* model = new Model;
    model->bytes = testing::BuildTinyLlama(spec);
    auto f = GgufFile::FromBuffer(model->bytes.data(), model->bytes.size());
    CHECK(f.ok()) << f.status();
    model->file = std::move(*f);
    return model;
  }();
  return *m;
}

// Drives one executor through epochs of: a prefill plan for n sequences, then decode
// plans (one token each), block ids handed out as the sequences grow.
class Driver {
 public:
  Driver(bool generic, int32_t n) : n_(n) {
    NullBackendOptions o;
    o.block_size = kBlockSize;
    o.num_kv_blocks = n * ((kPrompt + kSteps) / kBlockSize + 2);
    o.eog_token_ids = std::vector<int32_t>{};
    auto nb = NullBackend::Create(*TheModel().file, o);
    CHECK(nb.ok()) << nb.status();
    std::unique_ptr<Backend> b = std::move(*nb);
    if (generic) b = std::make_unique<GenericNull>(std::unique_ptr<NullBackend>(
                     static_cast<NullBackend*>(b.release())));
    auto e = ModelExecutor::Create(*TheModel().file, std::move(b), ModelExecutorOptions{});
    CHECK(e.ok()) << e.status();
    exec_ = std::move(*e);
    num_blocks_ = o.num_kv_blocks;
  }

  // Runs one decode step (starting a new epoch, untimed by the caller, when due).
  bool NeedsEpoch() const { return step_in_epoch_ == 0 || step_in_epoch_ >= kSteps; }
  void StartEpoch() {
    weft::v1::Welcome w;
    w.set_replica("r0");
    w.set_num_kv_blocks(num_blocks_);
    w.set_first_step_id(1);
    exec_->OnDetach();
    CHECK(exec_->OnWelcome(w).ok());
    next_step_ = 1;
    next_block_ = 0;
    plan_.Clear();
    plan_.set_step_id(next_step_++);
    for (int32_t i = 0; i < n_; ++i) {
      auto* s = plan_.add_new_sequences();
      s->set_seq_id(int64_t{i + 1} << 8);
      for (int32_t t = 0; t < kPrompt; ++t) s->add_token_ids(300 + (i * 7 + t) % 1000);
      s->set_num_prompt_tokens(kPrompt);
      s->set_num_scheduled_tokens(kPrompt);
      for (int32_t b = 0; b < kPrompt / kBlockSize; ++b) s->add_block_ids(next_block_++);
      s->set_do_sample(true);
      auto* sp = s->mutable_sampling();
      sp->set_temperature(0.8f);
      sp->set_top_p(0.95f);
      sp->set_repetition_penalty(1);
      sp->set_seed(i);
      sp->set_num_logprobs(-1);
    }
    plan_.set_num_scheduled_tokens(n_ * kPrompt);
    plan_.set_num_sampled(n_);
    exec_->ExecuteInto(plan_, &result_);
    CHECK(result_.error().empty()) << result_.error();
    length_ = kPrompt + 1;
    step_in_epoch_ = 1;
  }
  void Decode() {
    plan_.Clear();
    plan_.set_step_id(next_step_++);
    const bool new_block = (length_ - 1) % kBlockSize == 0;
    for (int32_t i = 0; i < n_; ++i) {
      auto* c = plan_.add_cached_sequences();
      c->set_seq_id(int64_t{i + 1} << 8);
      c->set_num_computed_tokens(length_ - 1);
      c->set_num_scheduled_tokens(1);
      c->set_do_sample(true);
      if (new_block) c->add_new_block_ids(next_block_++);
    }
    plan_.set_num_scheduled_tokens(n_);
    plan_.set_num_sampled(n_);
    exec_->ExecuteInto(plan_, &result_);
    CHECK(result_.error().empty()) << result_.error();
    ++length_;
    ++step_in_epoch_;
  }

 private:
  const int32_t n_;
  int32_t num_blocks_ = 0;
  std::unique_ptr<ModelExecutor> exec_;
  weft::v1::StepPlan plan_;
  weft::v1::StepResult result_;
  int64_t next_step_ = 1;
  int32_t next_block_ = 0;
  int32_t length_ = 0;
  int32_t step_in_epoch_ = 0;
};

void Run(benchmark::State& state, bool generic) {
  Driver d(generic, static_cast<int32_t>(state.range(0)));
  for (auto _ : state) {
    if (d.NeedsEpoch()) {
      state.PauseTiming();
      d.StartEpoch();
      state.ResumeTiming();
    }
    d.Decode();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_Step(benchmark::State& state) { Run(state, false); }
void BM_ForwardStepper(benchmark::State& state) { Run(state, true); }
BENCHMARK(BM_Step)->Arg(64)->Arg(256);
BENCHMARK(BM_ForwardStepper)->Arg(64)->Arg(256);

}  // namespace
}  // namespace weft

BENCHMARK_MAIN();
