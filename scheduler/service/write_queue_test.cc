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

}  // namespace
}  // namespace weft
