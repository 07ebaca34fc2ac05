// WriteQueue driven through a fake WriteTarget (the reactor boundary): no gRPC threads,
// so TSan sees every thread involved. Typed over both message kinds the scheduler's
// reactors write (Generate responses, pre-serialized worker messages).
#include "scheduler/service/write_queue.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::weft::testing::IsOk;
using ::weft::testing::StatusIs;

weft::v1::GenerateResponse Make(weft::v1::GenerateResponse*, int i) {
  weft::v1::GenerateResponse r;
  r.add_token_ids(i);
  return r;
}
grpc::ByteBuffer Make(grpc::ByteBuffer*, int i) {
  const std::string s = std::to_string(i);
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}
int Id(const weft::v1::GenerateResponse& r) { return r.token_ids(0); }
int Id(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string s;
  for (const grpc::Slice& sl : slices) s.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return std::stoi(s);
}

// Records what the queue asks of the call. Thread-safe: the queue calls it from
// whichever thread pumps.
template <typename Message>
class FakeCall : public WriteTarget<Message> {
 public:
  void WriteMessage(const Message* m) override {
    MutexLock l(&mu_);
    ++writes_started;
    written.push_back(Id(*m));
    write_pending = true;
    cv_.SignalAll();
  }
  void FinishCall(const absl::Status& s) override {
    MutexLock l(&mu_);
    ++finishes;
    status = s;
    cv_.SignalAll();
  }
  void CancelCall(const absl::Status&) override {
    MutexLock l(&mu_);
    ++cancels;
  }
  // Waits for a write or the finish to be asked for; true for a write.
  bool WaitForWriteOrFinish() {
    MutexLock l(&mu_);
    while (!write_pending && finishes == 0) cv_.Wait(&mu_);
    const bool write = write_pending;
    write_pending = false;
    return write;
  }

  Mutex mu_;
  CondVar cv_;
  int writes_started ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> written ABSL_GUARDED_BY(mu_);
  bool write_pending ABSL_GUARDED_BY(mu_) = false;
  int finishes ABSL_GUARDED_BY(mu_) = 0;
  int cancels ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status ABSL_GUARDED_BY(mu_);
};

template <typename Message>
class WriteQueueTest : public ::testing::Test {
 protected:
  using Queue = WriteQueue<Message>;
  static Message M(int i) { return Make(static_cast<Message*>(nullptr), i); }

  Queue queue_{typename Queue::Options()};
  std::shared_ptr<FakeCall<Message>> call_ = std::make_shared<FakeCall<Message>>();
};

using MessageKinds = ::testing::Types<weft::v1::GenerateResponse, grpc::ByteBuffer>;
TYPED_TEST_SUITE(WriteQueueTest, MessageKinds);

TYPED_TEST(WriteQueueTest, WritesOneAtATimeInOrderThenFinishesOnce) {
  auto& q = this->queue_;
  auto& call = *this->call_;
  ASSERT_TRUE(q.Push(this->M(1)));  // queued before the call exists
  q.Attach(this->call_);
  ASSERT_TRUE(q.Push(this->M(2)));
  ASSERT_TRUE(q.Push(this->M(3)));
  q.Finish(absl::OkStatus());
  EXPECT_FALSE(q.Push(this->M(4)));  // after the finish was asked for
  {
    MutexLock l(&call.mu_);
    EXPECT_EQ(call.writes_started, 1);  // never two in flight
    EXPECT_EQ(call.finishes, 0);        // not before what was queued
  }
  q.OnWriteDone(true);
  q.OnWriteDone(true);
  q.OnWriteDone(true);
  MutexLock l(&call.mu_);
  EXPECT_EQ(call.written, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(call.finishes, 1);
  EXPECT_THAT(call.status, IsOk());
}

// The defect that WorkerHandle had after Outbox was fixed: a close (here the cancel
// gRPC reports) while a write is in flight, then that write fails. The finish must
// still start, or the call never ends and the server's Shutdown waits for it.
TYPED_TEST(WriteQueueTest, CloseDuringAWriteThatFailsStillFinishesTheCall) {
  auto& q = this->queue_;
  auto& call = *this->call_;
  q.Attach(this->call_);
  ASSERT_TRUE(q.Push(this->M(1)));
  ASSERT_TRUE(q.Push(this->M(2)));
  q.Finish(absl::CancelledError("cancelled"));
  q.OnWriteDone(false);  // the call broke under the write
  {
    MutexLock l(&call.mu_);
    EXPECT_EQ(call.written, std::vector<int>{1});  // the rest is dropped
    EXPECT_EQ(call.finishes, 1);
    EXPECT_THAT(call.status, StatusIs(absl::StatusCode::kCancelled));
  }
  q.OnCallDone();
  EXPECT_TRUE(q.Done());
  EXPECT_FALSE(q.Push(this->M(3)));
}

TYPED_TEST(WriteQueueTest, ErrorFinishWritesQueuedUnlessAskedToDrop) {
  using Queue = typename TestFixture::Queue;
  for (bool drop : {false, true}) {
    typename Queue::Options o;
    o.error_drops_queued = drop;
    Queue q(o);
    auto owned = std::make_shared<FakeCall<TypeParam>>();
    FakeCall<TypeParam>& call = *owned;
    q.Attach(owned);
    ASSERT_TRUE(q.Push(this->M(1)));
    ASSERT_TRUE(q.Push(this->M(2)));  // a worker's Reject, say
    q.Finish(absl::FailedPreconditionError("rejected"));
    q.OnWriteDone(true);
    if (!drop) q.OnWriteDone(true);
    MutexLock l(&call.mu_);
    EXPECT_EQ(call.written, drop ? std::vector<int>{1} : (std::vector<int>{1, 2})) << drop;
    EXPECT_EQ(call.finishes, 1);
  }
}

TYPED_TEST(WriteQueueTest, AbortCutsAPendingWriteShortAndFinishesAfterIt) {
  auto& q = this->queue_;
  auto& call = *this->call_;
  q.Attach(this->call_);
  ASSERT_TRUE(q.Push(this->M(1)));  // in flight, never completed by a client that does not read
  ASSERT_TRUE(q.Push(this->M(2)));
  q.Abort(absl::ResourceExhaustedError("not reading"));
  {
    MutexLock l(&call.mu_);
    EXPECT_EQ(call.cancels, 1);
    EXPECT_EQ(call.finishes, 0);  // not while the write is in flight
  }
  q.OnWriteDone(false);  // the cancel completes it
  MutexLock l(&call.mu_);
  EXPECT_EQ(call.written, std::vector<int>{1});
  EXPECT_EQ(call.finishes, 1);
  EXPECT_THAT(call.status, StatusIs(absl::StatusCode::kResourceExhausted));
}

TYPED_TEST(WriteQueueTest, ByteCapAndStall) {
  using Queue = typename TestFixture::Queue;
  typename Queue::Options o;
  o.max_bytes = 2 * WireBytes(this->M(7));
  Queue q(o);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(q.Push(this->M(7)));
  ASSERT_TRUE(q.Push(this->M(7)));
  EXPECT_FALSE(q.Push(this->M(7)));  // over the cap: dropped
  EXPECT_EQ(q.queued_bytes(), o.max_bytes);
  EXPECT_FALSE(q.Stalled(start, absl::Seconds(1)));
  EXPECT_TRUE(q.Stalled(absl::Now() + absl::Seconds(2), absl::Seconds(1)));
  q.Attach(this->call_);
  q.OnWriteDone(true);
  q.OnWriteDone(true);
  EXPECT_EQ(q.queued_bytes(), 0u);
  EXPECT_FALSE(q.Stalled(absl::Now() + absl::Seconds(2), absl::Seconds(1)));
}

// The queue holds its target until the call is done, so a transport that ends the call
// on its own thread (an HTTP client leaving) cannot free the target under a write that
// another thread is starting; after OnCallDone the target is released.
TYPED_TEST(WriteQueueTest, HoldsItsTargetUntilTheCallIsDone) {
  auto& q = this->queue_;
  std::weak_ptr<FakeCall<TypeParam>> target = this->call_;
  q.Attach(std::move(this->call_));
  ASSERT_FALSE(target.expired());  // the queue's is the only reference
  ASSERT_TRUE(q.Push(this->M(1)));
  q.OnWriteDone(true);
  q.Finish(absl::OkStatus());
  EXPECT_FALSE(target.expired());
  q.OnCallDone();
  EXPECT_TRUE(target.expired());
}

// Several producers (the planning thread, gRPC reactions) against one transport thread
// that completes each write and reports the call done: every message is written once,
// each producer's in its order, and the call is finished exactly once.
TYPED_TEST(WriteQueueTest, ConcurrentProducersAndTransport) {
  constexpr int kProducers = 3;
  constexpr int kEach = 300;
  auto& q = this->queue_;
  auto& call = *this->call_;
  q.Attach(this->call_);
  std::thread transport([&] {
    while (call.WaitForWriteOrFinish()) q.OnWriteDone(true);
    q.OnCallDone();
  });
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i) ASSERT_TRUE(q.Push(this->M(p * kEach + i)));
    });
  }
  for (std::thread& t : producers) t.join();
  q.Finish(absl::OkStatus());
  transport.join();
  EXPECT_TRUE(q.Done());
  MutexLock l(&call.mu_);
  EXPECT_EQ(call.finishes, 1);
  ASSERT_EQ(call.written.size(), static_cast<size_t>(kProducers * kEach));
  std::vector<int> last(kProducers, -1);
  for (int id : call.written) {
    EXPECT_GT(id, last[id / kEach]) << "producer " << id / kEach << " out of order";
    last[id / kEach] = id;
  }
}

// Coalescing (what a Generate call's Outbox does): records every response written whole.
class ResponseCall : public WriteTarget<weft::v1::GenerateResponse> {
 public:
  void WriteMessage(const weft::v1::GenerateResponse* m) override { written.push_back(*m); }
  void FinishCall(const absl::Status& s) override {
    ++finishes;
    status = s;
  }
  void CancelCall(const absl::Status&) override {}
  // Every token of sample `index`, over all responses, in order.
  std::vector<int> Tokens(int index = 0) const {
    std::vector<int> out;
    for (const auto& r : written) {
      if (r.index() == index) out.insert(out.end(), r.token_ids().begin(), r.token_ids().end());
    }
    return out;
  }
  std::vector<weft::v1::GenerateResponse> written;
  int finishes = 0;
  absl::Status status;
};

weft::v1::GenerateResponse Token(int id, int index = 0) {
  weft::v1::GenerateResponse r;
  r.set_index(index);
  r.add_token_ids(id);
  r.set_text(std::string(1, static_cast<char>('a' + id % 26)));
  return r;
}

class CoalescingTest : public ::testing::Test {
 protected:
  using Queue = WriteQueue<weft::v1::GenerateResponse>;
  static Queue::Options Coalescing() {
    Queue::Options o;
    o.coalesce = true;
    return o;
  }
  Queue queue_{Coalescing()};
  std::shared_ptr<ResponseCall> call_ = std::make_shared<ResponseCall>();
};

// A reader that keeps up (each write completes before the next token): one message per
// token, nothing merged.
TEST_F(CoalescingTest, AReaderThatKeepsUpGetsOneMessagePerPush) {
  queue_.Attach(call_);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(queue_.Push(Token(i)));
    ASSERT_EQ(call_->written.size(), static_cast<size_t>(i + 1));  // written at once
    queue_.OnWriteDone(true);
  }
  queue_.Finish(absl::OkStatus());
  EXPECT_EQ(call_->written.size(), 10u);
  EXPECT_EQ(queue_.coalesced(), 0u);
  EXPECT_EQ(call_->Tokens(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(call_->finishes, 1);
}

// A reader that lags (a write in flight while tokens arrive): every token, in order, in
// fewer messages; the text follows its tokens; the finish comes after all of it.
TEST_F(CoalescingTest, ASlowReaderGetsEveryTokenInOrderInFewerMessages) {
  queue_.Attach(call_);
  ASSERT_TRUE(queue_.Push(Token(0)));  // written at once; the reader does not take it yet
  for (int i = 1; i < 10; ++i) ASSERT_TRUE(queue_.Push(Token(i)));
  EXPECT_EQ(call_->written.size(), 1u);
  EXPECT_EQ(queue_.coalesced(), 8u);  // 1..9 are one message
  weft::v1::GenerateResponse last = Token(10);
  last.set_finish_reason(weft::v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_completion_tokens(11);
  ASSERT_TRUE(queue_.Push(last));  // the last message merges too
  queue_.Finish(absl::OkStatus());
  EXPECT_EQ(call_->finishes, 0);  // not before what is queued is written
  queue_.OnWriteDone(true);
  ASSERT_EQ(call_->written.size(), 2u);
  const weft::v1::GenerateResponse& merged = call_->written[1];
  EXPECT_EQ(merged.token_ids_size(), 10);
  EXPECT_EQ(merged.text(), "bcdefghijk");
  EXPECT_EQ(merged.finish_reason(), weft::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(merged.usage().completion_tokens(), 11);
  queue_.OnWriteDone(true);
  EXPECT_EQ(call_->Tokens(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(call_->finishes, 1);
  EXPECT_THAT(call_->status, IsOk());
}

// What must stay its own message: a sample's end is never followed by more of it, a
// stream's first message (seed, request id) is never merged into an earlier one,
// samples do not mix, and tokens with logprobs do not merge with tokens without.
TEST_F(CoalescingTest, MergesOnlyWithinOneSampleAndNeverPastItsEnd) {
  queue_.Attach(call_);
  ASSERT_TRUE(queue_.Push(Token(0)));  // in flight
  ASSERT_TRUE(queue_.Push(Token(1, /*index=*/0)));
  ASSERT_TRUE(queue_.Push(Token(2, /*index=*/1)));  // another sample: its own message
  weft::v1::GenerateResponse end = Token(3, 1);
  end.set_finish_reason(weft::v1::FINISH_REASON_STOP);
  ASSERT_TRUE(queue_.Push(end));  // merges into sample 1's message
  ASSERT_TRUE(queue_.Push(Token(4, 1)));  // after sample 1's end: not merged
  weft::v1::GenerateResponse first = Token(5, 1);
  first.set_seed(7);
  ASSERT_TRUE(queue_.Push(first));  // a first message: not merged
  weft::v1::GenerateResponse with_logprobs = Token(6, 1);
  with_logprobs.add_logprobs()->set_logprob(-1.f);
  ASSERT_TRUE(queue_.Push(with_logprobs));  // logprobs where the last had none
  weft::v1::GenerateResponse more = Token(7, 1);
  more.add_logprobs()->set_logprob(-2.f);
  ASSERT_TRUE(queue_.Push(more));  // merges: both carry logprobs
  for (int i = 0; i < 6; ++i) queue_.OnWriteDone(true);
  ASSERT_EQ(call_->written.size(), 6u);
  EXPECT_EQ(queue_.coalesced(), 2u);
  EXPECT_EQ(call_->Tokens(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(call_->Tokens(1), (std::vector<int>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(call_->written[2].finish_reason(), weft::v1::FINISH_REASON_STOP);
  EXPECT_EQ(call_->written[2].token_ids_size(), 2);
  ASSERT_EQ(call_->written[5].logprobs_size(), 2);
  EXPECT_EQ(call_->written[5].logprobs(1).logprob(), -2.f);
}

// An error finish (a cancelled or failed request) still drops what is queued, merged or
// not, when the queue is asked to; an OK finish writes all of it first.
TEST_F(CoalescingTest, CancelDropsMergedMessagesLikeAnyOther) {
  Queue::Options o = Coalescing();
  o.error_drops_queued = true;
  Queue q(o);
  q.Attach(call_);
  ASSERT_TRUE(q.Push(Token(0)));
  ASSERT_TRUE(q.Push(Token(1)));
  ASSERT_TRUE(q.Push(Token(2)));
  q.Finish(absl::CancelledError("cancelled"));
  q.OnWriteDone(true);
  EXPECT_EQ(call_->Tokens(), std::vector<int>{0});
  EXPECT_EQ(call_->finishes, 1);
  EXPECT_THAT(call_->status, StatusIs(absl::StatusCode::kCancelled));
}

// The byte cap counts the merged message: a merge still fails past the cap.
TEST_F(CoalescingTest, ByteCapHoldsForMergedMessages) {
  Queue::Options o = Coalescing();
  o.max_bytes = 6 * WireBytes(Token(1));
  Queue q(o);
  q.Attach(call_);
  ASSERT_TRUE(q.Push(Token(0)));  // in flight (no longer counted)
  int pushed = 1;
  while (q.Push(Token(pushed))) ++pushed;
  EXPECT_GE(pushed, 6);  // merging saves the per-message fields
  EXPECT_LE(q.queued_bytes(), o.max_bytes);
  q.OnWriteDone(true);
  q.OnWriteDone(true);
  std::vector<int> want;
  for (int i = 0; i < pushed; ++i) want.push_back(i);
  EXPECT_EQ(call_->Tokens(), want);
}

}  // namespace
}  // namespace weft
