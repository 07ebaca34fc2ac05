// End to end, real processes: RELIABILITY.md's slow_reader. One client never reads its
// stream (its HTTP/2 window is tiny and it never asks for a message, so the server's
// writes to it cannot complete) while 15 normal streams run beside it. The never-reader
// ends RESOURCE_EXHAUSTED once the stall timeout passes, its request stops holding KV
// blocks, and every other stream keeps receiving tokens and finishes with exactly the
// tokens it gets when nothing misbehaves.
#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"
#include "tests/e2e/test_prompts.h"

namespace weft::e2e {
namespace {

constexpr int kNormal = 15;
constexpr int kTokens = 48;

// A Generate call that does not read: it asks only for the final status until the test
// lets it read (HTTP/2 delivers the status only after the data before it is consumed, so
// the client can observe how its call ended only by reading).
class NeverReader {
 public:
  NeverReader(const Cluster& cluster, const weft::v1::GenerateRequest& request) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);               // no window auto-tuning
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 5);  // the smallest stream window
    channel_ = cluster.NewChannel(args);
    stub_ = weft::v1::Generation::NewStub(channel_);
    context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(180)));  // hang guard
    reader_ = stub_->PrepareAsyncGenerate(&context_, request, &cq_);
    reader_->StartCall(Tag(kStart));
    reader_->Finish(&status_, Tag(kFinish));
  }
  ~NeverReader() {
    context_.TryCancel();
    ReadToEnd(absl::Seconds(30));
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  // Starts reading now: reads every message there is, then the status. True when the
  // call ended within `timeout`.
  bool ReadToEnd(absl::Duration timeout) {
    const absl::Time end = absl::Now() + timeout;
    if (!read_pending_ && !reads_done_) {
      reader_->Read(&response_, Tag(kRead));
      read_pending_ = true;
    }
    while (!finished_) {
      void* tag = nullptr;
      bool ok = false;
      if (cq_.AsyncNext(&tag, &ok, absl::ToChronoTime(end)) != grpc::CompletionQueue::GOT_EVENT) break;
      if (tag == Tag(kFinish)) finished_ = true;
      if (tag == Tag(kRead)) {
        read_pending_ = false;
        if (ok) {
          ++num_read_;
          reader_->Read(&response_, Tag(kRead));
          read_pending_ = true;
        } else {
          reads_done_ = true;
        }
      }
    }
    return finished_;
  }
  const grpc::Status& status() const { return status_; }
  int num_read() const { return num_read_; }

 private:
  enum TagKind : intptr_t { kStart = 1, kFinish = 2, kRead = 3 };
  static void* Tag(TagKind k) { return reinterpret_cast<void*>(static_cast<intptr_t>(k)); }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<weft::v1::Generation::Stub> stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::ClientAsyncReader<weft::v1::GenerateResponse>> reader_;
  weft::v1::GenerateResponse response_;
  grpc::Status status_;
  bool read_pending_ = false;
  bool reads_done_ = false;
  bool finished_ = false;
  int num_read_ = 0;
};

TEST(SlowReaderE2eTest, NeverReaderEndsResourceExhaustedAndOthersKeepGoing) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  const std::vector<std::string>& prompts = TestPrompts();
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler({"--stall_timeout_s=2"}).ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 192;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  // What each normal stream must produce: the same requests with nobody misbehaving.
  std::vector<std::vector<int32_t>> want(kNormal);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kNormal; ++i) {
      threads.emplace_back([&, i] {
        want[i] = Generate(cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens)).token_ids;
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kNormal; ++i) ASSERT_EQ(want[i].size(), static_cast<size_t>(kTokens)) << cluster.Logs();
  }

  // The normal streams first; once each is running, the never-reader joins them.
  std::vector<std::unique_ptr<BackgroundStream>> normal;
  for (int i = 0; i < kNormal; ++i) {
    normal.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(prompts[i % prompts.size()], kTokens)));
  }
  for (auto& s : normal) ASSERT_TRUE(s->WaitTokens(1)) << cluster.Logs();
  std::vector<int> tokens_before;
  for (auto& s : normal) tokens_before.push_back(s->num_tokens());
  const double steps_before = cluster.Steps();
  NeverReader never(cluster, GreedyRequest("Tell me a very long story about a dragon.", 2000));

  // The scheduler ends it RESOURCE_EXHAUSTED (stall timeout 2 s; the guard is generous)
  // without the client reading anything.
  double max_buffered = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto m = cluster.Metrics();
        if (!m.ok()) return false;
        max_buffered = std::max(max_buffered, m->Get("weft_stream_buffer_max_bytes"));
        return m->Get("weft_requests_status_total{code=\"RESOURCE_EXHAUSTED\"}") == 1;
      },
      absl::Seconds(60), absl::Milliseconds(20)))
      << "the scheduler did not end the never-reading client's call\n" << cluster.Logs();
  // Its responses queued up on the server while it stalled, within the default 4 MiB cap.
  EXPECT_GT(max_buffered, 0);
  EXPECT_LE(max_buffered, 4 << 20);
  // Its stream slot is given back at once, while the others still run.
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_streams_open") <= kNormal; }, absl::Seconds(30)))
      << "streams open " << cluster.Metric("weft_streams_open");
  // Meanwhile steps went on and every normal stream still running received tokens.
  EXPECT_GT(cluster.Steps(), steps_before);
  for (int i = 0; i < kNormal; ++i) {
    EXPECT_TRUE(normal[i]->done() || normal[i]->num_tokens() > tokens_before[i])
        << "stream " << i << " received nothing while the never-reader stalled";
  }

  // When the client finally looks, its call has ended RESOURCE_EXHAUSTED after at most
  // the few bytes its window let through.
  ASSERT_TRUE(never.ReadToEnd(absl::Seconds(30))) << "the never-reader's call did not end";
  EXPECT_EQ(CodeName(never.status().error_code()), "RESOURCE_EXHAUSTED")
      << never.status().error_message();
  EXPECT_NE(never.status().error_message().find("did not read"), std::string::npos)
      << never.status().error_message();
  EXPECT_LE(never.num_read(), 1);

  for (int i = 0; i < kNormal; ++i) {
    SCOPED_TRACE(absl::StrCat("normal stream ", i));
    StreamResult r = normal[i]->Join();
    ASSERT_TRUE(r.status.ok()) << CodeName(r.status.error_code()) << " " << r.status.error_message();
    EXPECT_EQ(absl::StrJoin(r.token_ids, " "), absl::StrJoin(want[i], " "));
  }
  // Its blocks were freed: idle means zero referenced blocks.
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)))
      << "blocks used " << cluster.Metric("weft_kv_blocks_used");
  EXPECT_EQ(cluster.Metric("weft_requests_running"), 0);
  // The stream slot was given back too.
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_streams_open") == 0; }, absl::Seconds(30)))
      << "streams open " << cluster.Metric("weft_streams_open");
}

// The other guard: with a small per-stream buffer (and a stall timeout too long to
// matter) the never-reader's queued responses hit the cap; it ends RESOURCE_EXHAUSTED
// at that point and its buffer never holds more than the cap. The scheduler samples the
// largest buffer every 100 ms: the worker is the null backend with 50 ms steps (one
// message of a few dozen bytes per step), so the buffer spends over half a second
// between half the cap and the cap, where the samples must see it, on any machine (the
// model's steps take a few ms on a fast one: the whole fill could fall between samples).
TEST(SlowReaderE2eTest, NeverReaderIsEndedAtItsBufferCap) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  constexpr int kCap = 1024;
  Cluster cluster(model);
  ASSERT_TRUE(cluster
                  .StartScheduler({absl::StrCat("--stream_buffer_bytes=", kCap),
                                   "--stall_timeout_s=600"})
                  .ok())
      << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 192;
  w.extra_flags = {"--backend=null", "--null_step_ms=50"};
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  NeverReader never(cluster, GreedyRequest("Tell me a very long story about a dragon.", 2000));
  std::vector<std::unique_ptr<BackgroundStream>> normal;
  for (int i = 0; i < 3; ++i) {
    normal.push_back(std::make_unique<BackgroundStream>(
        cluster.stub(), GreedyRequest(TestPrompts()[i], kTokens)));
  }
  double max_buffered = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto m = cluster.Metrics();
        if (!m.ok()) return false;
        max_buffered = std::max(max_buffered, m->Get("weft_stream_buffer_max_bytes"));
        return m->Get("weft_requests_status_total{code=\"RESOURCE_EXHAUSTED\"}") == 1;
      },
      absl::Seconds(120), absl::Milliseconds(20)))
      << "the never-reader was not ended at its buffer cap\n" << cluster.Logs();
  EXPECT_GT(max_buffered, kCap / 2);
  EXPECT_LE(max_buffered, kCap);
  ASSERT_TRUE(never.ReadToEnd(absl::Seconds(30)));
  EXPECT_EQ(CodeName(never.status().error_code()), "RESOURCE_EXHAUSTED")
      << never.status().error_message();
  EXPECT_NE(never.status().error_message().find("buffer full"), std::string::npos)
      << never.status().error_message();
  for (auto& s : normal) {
    StreamResult r = s->Join();
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.token_ids.size(), static_cast<size_t>(kTokens));
  }
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_streams_open") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e
