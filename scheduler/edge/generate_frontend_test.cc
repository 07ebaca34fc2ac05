// GenerateFrontend without a transport (FakeEngine behind it, no gRPC or HTTP threads),
// so that it runs under TSan too: the open-call cap shared by concurrent callers, the
// request contract before submission, cancellation, and the slots given back.
#include "scheduler/edge/generate_frontend.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/field_error.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "scheduler/edge/testing/byte_encoder.h"
#include "scheduler/service/testing/fake_engine.h"

namespace weft {
namespace {

using testing::ByteEncoder;
using testing::FakeEngine;

class GenerateFrontendTest : public ::testing::Test {
 protected:
  GenerateFrontendTest() {
    RequestLimits lim;
    lim.vocab_size = 256;
    lim.max_model_len = 128;
    lim.max_n = 4;
    FrontendOptions fo;
    fo.model_name = "fake";
    fo.max_streams = kMaxStreams;
    frontend_ = std::make_unique<GenerateFrontend>(fo, lim, &encoder_, &engine_, &metrics_);
  }
  static weft::v1::GenerateRequest Request(const std::string& text) {
    weft::v1::GenerateRequest r;
    r.set_text(text);
    r.mutable_stopping()->set_max_tokens(4);
    return r;
  }

  static constexpr int kMaxStreams = 8;
  ByteEncoder encoder_;
  FakeEngine engine_;
  ServiceMetrics metrics_;
  std::unique_ptr<GenerateFrontend> frontend_;
};

TEST_F(GenerateFrontendTest, ConcurrentCallersShareTheStreamCap) {
  constexpr int kThreads = 4, kEach = 6;
  std::atomic<int> admitted{0}, refused{0};
  Mutex mu;
  std::vector<std::unique_ptr<GenerateFrontend::Call>> calls;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        CallContext context;
        context.deadline = absl::Now() + absl::Hours(1);
        auto call = frontend_->Start(Request(absl::StrCat("t", t, "i", i)), context);
        if (!call.ok()) {
          EXPECT_EQ(call.status().code(), absl::StatusCode::kResourceExhausted) << call.status();
          ++refused;
          continue;
        }
        ++admitted;
        MutexLock l(&mu);
        calls.push_back(*std::move(call));
      }
    });
  }
  for (std::thread& t : ts) t.join();
  EXPECT_EQ(admitted.load(), kMaxStreams);
  EXPECT_EQ(refused.load(), kThreads * kEach - kMaxStreams);
  EXPECT_EQ(frontend_->open_streams(), kMaxStreams);
  EXPECT_EQ(metrics_.streams_open.Value(), kMaxStreams);
  EXPECT_EQ(metrics_.ByStatus("RESOURCE_EXHAUSTED").Value(), kThreads * kEach - kMaxStreams);
  {
    MutexLock l(&engine_.mu_);
    ASSERT_EQ(engine_.subs_.size(), static_cast<size_t>(kMaxStreams));
    for (const Submission& s : engine_.subs_) {
      ASSERT_TRUE(s.request.has_value());
      EXPECT_EQ(s.request->spec().stopping.max_tokens, 4);
      EXPECT_NE(s.request->spec().sampling.seed, 0u);  // drawn: none was given
      EXPECT_GT(s.request->spec().deadline, absl::Now());
    }
  }
  // Cancelled from several threads at once (each call once, twice is harmless), then
  // gone: every slot comes back.
  std::vector<std::thread> cancellers;
  for (int t = 0; t < 2; ++t) {
    cancellers.emplace_back([&] {
      for (auto& c : calls) c->Cancel();
    });
  }
  for (std::thread& t : cancellers) t.join();
  {
    MutexLock l(&engine_.mu_);
    EXPECT_EQ(engine_.cancelled_.size(), static_cast<size_t>(kMaxStreams));
  }
  calls.clear();
  EXPECT_EQ(frontend_->open_streams(), 0);
  EXPECT_EQ(metrics_.streams_open.Value(), 0);
}

// A refused request never reaches the engine, gives its slot back, and carries its field.
TEST_F(GenerateFrontendTest, TheRequestContractRunsBeforeSubmission) {
  weft::v1::GenerateRequest r = Request("hi");
  r.set_n(5);  // over max_n
  auto call = frontend_->Start(r, CallContext());
  ASSERT_FALSE(call.ok());
  const std::optional<FieldError> e = GetFieldError(call.status(), kRequestFieldSchema);
  ASSERT_TRUE(e.has_value()) << call.status();
  EXPECT_EQ(e->field, "n");
  EXPECT_EQ(e->reason, "must be in [1, 4]");
  r.set_n(1);
  r.set_model("other");
  EXPECT_EQ(frontend_->Start(r, CallContext()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(frontend_->open_streams(), 0);
  MutexLock l(&engine_.mu_);
  EXPECT_TRUE(engine_.subs_.empty());
  EXPECT_EQ(metrics_.ByStatus("INVALID_ARGUMENT").Value(), 1);
  EXPECT_EQ(metrics_.ByStatus("NOT_FOUND").Value(), 1);
}

}  // namespace
}  // namespace weft
