// Multi-process tests of ShmCommunicator: every rank is a forked child; a child reports
// failure through its exit code (printing the reason to stderr).
#include "worker/comm/shm_communicator.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/fork_ranks.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::weft::testing::ChildResult;
using ::weft::testing::ForkRanks;
using ::weft::testing::PipeEvents;
using ::weft::testing::RunRanks;
using ::weft::testing::UniqueName;
using ::weft::testing::WaitForChild;
using ::weft::testing::WaitForChildren;

// In a child: print why and leave the rank function with `code`.
#define RANK_CHECK(cond, code, ...)                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: rank check failed: %s: %s\n", __FILE__, __LINE__, \
                   #cond, absl::StrCat(__VA_ARGS__).c_str());                     \
      return code;                                                                \
    }                                                                             \
  } while (0)

ShmCommunicatorOptions Options(const std::string& name, int rank, int world_size) {
  ShmCommunicatorOptions o;
  o.name = name;
  o.rank = rank;
  o.world_size = world_size;
  o.max_bytes = 256 << 10;  // small, so that MB-sized calls take several rounds
  o.timeout = absl::Seconds(10);
  o.attach_timeout = absl::Seconds(10);
  return o;
}

// Deterministic test data: value i of tensor `tag` on rank `rank` (same in every process).
float Value(uint64_t tag, int rank, size_t i) {
  uint64_t z = tag * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ull +
               i * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // 24 random bits at a random scale in [2^-6, 2^6): sums round often, so a changed
  // summation order shows in the bits.
  const float mantissa = static_cast<float>(static_cast<int64_t>(z >> 40) - (1 << 23)) / (1 << 23);
  return std::ldexp(mantissa, static_cast<int>(z & 15) - 8);
}

std::vector<float> Tensor(uint64_t tag, int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Value(tag, rank, i);
  return v;
}

void Hash(uint64_t* h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) *h = (*h ^ p[i]) * 0x100000001B3ull;  // FNV-1a
}

enum class Op { kAllReduce, kAllGather, kAllGatherV, kBroadcast, kBarrier };

struct Step {
  Op op;
  size_t size;
  uint64_t tag;
};

// The same random sequence on every rank (seeded), covering every op x every size.
std::vector<Step> Sequence(int world_size, uint64_t seed) {
  const size_t sizes[] = {1, 7, 576, 49152 / static_cast<size_t>(world_size), 70001,
                          (3 << 20) / 4};  // the last is 3 MB
  std::vector<Step> steps;
  uint64_t tag = seed * 1000;
  for (Op op : {Op::kAllReduce, Op::kAllGather, Op::kAllGatherV, Op::kBroadcast, Op::kBarrier}) {
    for (size_t size : sizes) steps.push_back({op, size, ++tag});
  }
  uint64_t state = seed;
  for (size_t i = steps.size() - 1; i > 0; --i) {  // Fisher-Yates with an LCG
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(steps[i], steps[(state >> 33) % (i + 1)]);
  }
  return steps;
}

size_t CountOf(const Step& s, int rank) {  // uneven shards for AllGatherV (zeros too)
  return (s.size * (rank + 1) + s.tag) % (s.size + 1);
}

// One step on this rank: runs it, checks it against the serial result, hashes the output.
int RunStep(ShmCommunicator& comm, const Step& s, uint64_t* hash) {
  const int rank = comm.rank(), w = comm.world_size();
  if (s.op == Op::kAllReduce) {
    std::vector<float> data = Tensor(s.tag, rank, s.size);
    const absl::Status st = comm.AllReduceSum(data.data(), data.size());
    RANK_CHECK(st.ok(), 10, st.ToString());
    for (size_t i = 0; i < s.size; ++i) {
      float in_order = Value(s.tag, 0, i);
      double exact = in_order;
      for (int r = 1; r < w; ++r) {
        in_order += Value(s.tag, r, i);
        exact += Value(s.tag, r, i);
      }
      RANK_CHECK(std::fabs(data[i] - exact) <= 1e-4 * w, 11, "i=", i, " got ", data[i]);
      RANK_CHECK(data[i] == in_order, 12, "i=", i, " not the rank-order fp32 sum");
    }
    Hash(hash, data.data(), data.size() * sizeof(float));
  } else if (s.op == Op::kAllGather || s.op == Op::kAllGatherV) {
    std::vector<size_t> counts(w, s.size);
    if (s.op == Op::kAllGatherV) {
      for (int r = 0; r < w; ++r) counts[r] = CountOf(s, r);
    }
    size_t total = 0;
    for (size_t c : counts) total += c;
    const std::vector<float> in = Tensor(s.tag, rank, counts[rank]);
    std::vector<float> out(total, NAN);
    const absl::Status st = s.op == Op::kAllGather
                                ? comm.AllGather(in.data(), s.size, out.data())
                                : comm.AllGatherV(in.data(), counts[rank], counts, out.data());
    RANK_CHECK(st.ok(), 20, st.ToString());
    size_t at = 0;
    for (int r = 0; r < w; ++r) {
      for (size_t i = 0; i < counts[r]; ++i, ++at) {
        RANK_CHECK(out[at] == Value(s.tag, r, i), 21, "from rank ", r, " i=", i);
      }
    }
    Hash(hash, out.data(), out.size() * sizeof(float));
  } else if (s.op == Op::kBroadcast) {
    const int root = static_cast<int>(s.tag % w);
    const size_t bytes = s.size * sizeof(float) - (s.size > 1 ? 3 : 0);  // odd sizes too
    std::vector<float> data = Tensor(s.tag, rank, s.size);
    const absl::Status st = comm.Broadcast(data.data(), bytes, root);
    RANK_CHECK(st.ok(), 30, st.ToString());
    const std::vector<float> want = Tensor(s.tag, root, s.size);
    RANK_CHECK(std::memcmp(data.data(), want.data(), bytes) == 0, 31, "root ", root);
    Hash(hash, data.data(), bytes);
  } else {
    const absl::Status st = comm.Barrier();
    RANK_CHECK(st.ok(), 40, st.ToString());
  }
  return 0;
}

// Runs the sequence on every rank; rank r writes its output hash to hash_files[r].
std::string RunSequence(int world_size, uint64_t seed, const std::string& hash_prefix) {
  const std::string name = UniqueName("seq");
  return RunRanks(world_size, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name, rank, world_size));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const Step& s : Sequence(world_size, seed)) {
      const int code = RunStep(**comm, s, &hash);
      if (code != 0) return code;
    }
    std::ofstream(absl::StrCat(hash_prefix, rank)) << hash;
    return 0;
  }, absl::Seconds(60));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class ShmCommunicatorWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmCommunicatorWorldTest, RandomSequenceEqualsSerialAndIsBitwiseRepeatable) {
  const int w = GetParam();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string run1 = absl::StrCat(dir, "/hash-", w, "-run1-");
  const std::string run2 = absl::StrCat(dir, "/hash-", w, "-run2-");
  ASSERT_EQ(RunSequence(w, /*seed=*/7, run1), "");
  ASSERT_EQ(RunSequence(w, /*seed=*/7, run2), "");
  const std::string hash = ReadFile(run1 + "0");
  ASSERT_FALSE(hash.empty());
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(ReadFile(absl::StrCat(run1, r)), hash) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(ReadFile(absl::StrCat(run2, r)), hash) << "rank " << r << " differs in run 2";
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmCommunicatorWorldTest, ::testing::Values(2, 3, 4));

// Ranks other than `victim` loop on all-reduces until one fails; the failing call must
// return an error (not hang) well within 5x the deadline. `victim` just loops. Every rank
// signals `ready` after its first collective (the parent waits for all of them before it
// harms one).
int LoopUntilError(const std::string& name, int rank, int world_size, int victim,
                   absl::Duration timeout, const PipeEvents& ready) {
  ShmCommunicatorOptions o = Options(name, rank, world_size);
  o.timeout = timeout;
  auto comm = ShmCommunicator::Create(o);
  RANK_CHECK(comm.ok(), 2, comm.status().ToString());
  std::vector<float> data(576, 1.f);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  for (bool signalled = false; absl::Now() < give_up;) {
    const absl::Time start = absl::Now();
    const absl::Status st = (*comm)->AllReduceSum(data.data(), data.size());
    if (st.ok()) {
      if (!signalled) ready.Signal();
      signalled = true;
      continue;
    }
    const absl::Duration took = absl::Now() - start;
    std::fprintf(stderr, "rank %d failed after %s: %s\n", rank,
                 absl::FormatDuration(took).c_str(), st.ToString().c_str());
    RANK_CHECK(took < 5 * timeout, 3, "took ", absl::FormatDuration(took));
    RANK_CHECK(absl::IsDeadlineExceeded(st) || absl::IsUnavailable(st) || absl::IsAborted(st), 4,
               st.ToString());
    // Sticky: the next call fails at once.
    RANK_CHECK(!(*comm)->Barrier().ok(), 5, "failure is not sticky");
    return rank == victim ? 6 : 0;
  }
  return 7;  // never failed
}

TEST(ShmCommunicatorFailureTest, KilledPeerFailsTheOthersWithinTheDeadline) {
  const std::string name = UniqueName("kill");
  const absl::Duration timeout = absl::Seconds(1);
  const PipeEvents ready;
  std::vector<pid_t> pids =
      ForkRanks(3, [&](int rank) { return LoopUntilError(name, rank, 3, 2, timeout, ready); });
  const bool looping = ready.WaitFor(3, absl::Now() + absl::Seconds(20));
  ASSERT_EQ(kill(pids[2], SIGKILL), 0);
  ASSERT_TRUE(looping) << "the ranks never got through a collective";
  const absl::Time killed = absl::Now();
  // Reap the survivors first: the victim stays a zombie meanwhile (pid still exists).
  const std::vector<ChildResult> survivors =
      WaitForChildren({pids[0], pids[1]}, killed + 5 * timeout);
  const absl::Duration took = absl::Now() - killed;
  const ChildResult victim = WaitForChild(pids[2], absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(survivors[0].ok()) << survivors[0].Describe();
  EXPECT_TRUE(survivors[1].ok()) << survivors[1].Describe();
  EXPECT_EQ(victim.term_signal, SIGKILL);
  EXPECT_LT(took, 5 * timeout);
}

TEST(ShmCommunicatorFailureTest, StoppedPeerFailsTheOthersWithinTheDeadline) {
  const std::string name = UniqueName("stop");
  const absl::Duration timeout = absl::Seconds(1);
  const PipeEvents ready;
  std::vector<pid_t> pids =
      ForkRanks(3, [&](int rank) { return LoopUntilError(name, rank, 3, 1, timeout, ready); });
  ASSERT_TRUE(ready.WaitFor(3, absl::Now() + absl::Seconds(20)))
      << "the ranks never got through a collective";
  ASSERT_EQ(kill(pids[1], SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  const std::vector<ChildResult> survivors =
      WaitForChildren({pids[0], pids[2]}, stopped + 5 * timeout);
  const absl::Duration took = absl::Now() - stopped;
  ASSERT_EQ(kill(pids[1], SIGCONT), 0);
  // Resumed, the stopped rank finds the segment aborted and fails too (exit code 6).
  const ChildResult victim = WaitForChild(pids[1], absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(survivors[0].ok()) << survivors[0].Describe();
  EXPECT_TRUE(survivors[1].ok()) << survivors[1].Describe();
  EXPECT_EQ(victim.exit_code, 6) << victim.Describe();
  EXPECT_LT(took, 5 * timeout);
}

// Rank 1 aborts once the others are about to enter their next collective: whether it
// finds them waiting in it or not yet there, that call ends Aborted (and every later one).
TEST(ShmCommunicatorFailureTest, AbortPropagatesToEveryRank) {
  const std::string name = UniqueName("abort");
  const PipeEvents calling;
  const std::string failures = RunRanks(3, [&](int rank) {
    ShmCommunicatorOptions o = Options(name, rank, 3);
    o.timeout = absl::Seconds(30);  // the abort, not the deadline, must end the wait
    auto comm = ShmCommunicator::Create(o);
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    std::vector<float> data(1000, 1.f);
    for (int i = 0; i < 5; ++i) {
      RANK_CHECK((*comm)->AllReduceSum(data.data(), data.size()).ok(), 3, "op ", i);
    }
    const absl::Time start = absl::Now();
    if (rank == 1) {
      RANK_CHECK(calling.WaitFor(2, start + absl::Seconds(20)), 8, "the others never called");
      (*comm)->Abort("scheduler fenced the replica");
    } else {
      calling.Signal();
    }
    const absl::Status st = (*comm)->AllReduceSum(data.data(), data.size());
    RANK_CHECK(absl::IsAborted(st), 4, st.ToString());
    RANK_CHECK(absl::StrContains(st.message(), "fenced"), 5, st.ToString());
    RANK_CHECK(absl::Now() - start < absl::Seconds(5), 6, "abort took too long");
    RANK_CHECK(absl::IsAborted((*comm)->Barrier()), 7, "abort is not sticky");
    return 0;
  }, absl::Seconds(30));
  EXPECT_EQ(failures, "");
}

// Rank 0's call waits for a peer that joins only after it; another thread aborts it.
TEST(ShmCommunicatorFailureTest, AbortFromAnotherThreadEndsAPendingCall) {
  const std::string name = UniqueName("thread");
  const PipeEvents aborted;  // rank 0's call returned: the peer may call now
  const pid_t peer = ForkRanks(1, [&](int) {
    auto comm = ShmCommunicator::Create(Options(name, 1, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    RANK_CHECK(aborted.WaitFor(1, absl::Now() + absl::Seconds(20)), 4, "rank 0 never returned");
    float x = 1.f;
    const absl::Status st = (*comm)->AllReduceSum(&x, 1);
    RANK_CHECK(absl::IsAborted(st), 3, st.ToString());
    return 0;
  })[0];
  ShmCommunicatorOptions o = Options(name, 0, 2);
  o.timeout = absl::Seconds(30);
  auto comm = ShmCommunicator::Create(o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const PipeEvents calling;
  std::thread watchdog([&] {
    ASSERT_TRUE(calling.WaitFor(1, absl::Now() + absl::Seconds(20)));
    (*comm)->SetTimeout(absl::Seconds(20));
    (*comm)->Abort("step deadline missed");
  });
  float x = 1.f;
  const absl::Time start = absl::Now();
  calling.Signal();
  const absl::Status st = (*comm)->AllReduceSum(&x, 1);
  watchdog.join();
  aborted.Signal();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kAborted)) << st;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ((*comm)->timeout(), absl::Seconds(20));
  EXPECT_TRUE(WaitForChild(peer, absl::Now() + absl::Seconds(10)).ok());
}

TEST(ShmCommunicatorFailureTest, PeerThatClosesMakesWaitersFailUnavailable) {
  const std::string name = UniqueName("close");
  const std::string failures = RunRanks(2, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name, rank, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    if (rank == 1) return 0;  // leaves without joining the collective
    float x = 1.f;
    const absl::Status st = (*comm)->AllReduceSum(&x, 1);
    RANK_CHECK(absl::IsUnavailable(st), 3, st.ToString());
    RANK_CHECK(absl::StrContains(st.message(), "rank 1"), 4, st.ToString());
    return 0;
  }, absl::Seconds(30));
  EXPECT_EQ(failures, "");
}

TEST(ShmCommunicatorFailureTest, MismatchedCollectivesFailInsteadOfMixingData) {
  const std::string name = UniqueName("mismatch");
  const std::string failures = RunRanks(2, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name, rank, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    std::vector<float> data(600, 1.f);
    RANK_CHECK((*comm)->AllReduceSum(data.data(), 576).ok(), 3, "");
    // Same op, other sizes (rank 1 got its shard size wrong).
    absl::Status st = (*comm)->AllReduceSum(data.data(), rank == 0 ? 576 : 577);
    RANK_CHECK(absl::IsFailedPrecondition(st), 4, st.ToString());
    RANK_CHECK(absl::StrContains(st.message(), "with other sizes"), 5, st.ToString());
    return 0;
  }, absl::Seconds(30));
  EXPECT_EQ(failures, "");
  const std::string name2 = UniqueName("mismatch");
  const std::string failures2 = RunRanks(2, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name2, rank, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    float x = 1.f;
    absl::Status st = rank == 0 ? (*comm)->Broadcast(&x, sizeof(x), 0) : (*comm)->Barrier();
    RANK_CHECK(absl::IsFailedPrecondition(st), 4, st.ToString());
    RANK_CHECK(absl::StrContains(st.message(), rank == 0 ? "called Barrier" : "called Broadcast"),
               5, st.ToString());
    return 0;
  }, absl::Seconds(30));
  EXPECT_EQ(failures2, "");
}

TEST(ShmCommunicatorSetupTest, StaleSegmentFromACrashedRunIsReplaced) {
  const std::string name = UniqueName("stale");
  // A run that crashes (no destructors) after working once.
  std::string failures = RunRanks(2, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name, rank, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    RANK_CHECK((*comm)->Barrier().ok(), 3, "");
    _exit(0);
  }, absl::Seconds(30));
  ASSERT_EQ(failures, "");
  // The next run (same name, same generation) replaces it and works.
  failures = RunRanks(2, [&](int rank) {
    auto comm = ShmCommunicator::Create(Options(name, rank, 2));
    RANK_CHECK(comm.ok(), 2, comm.status().ToString());
    float x = static_cast<float>(rank + 1);
    RANK_CHECK((*comm)->AllReduceSum(&x, 1).ok(), 3, "");
    RANK_CHECK(x == 3.f, 4, x);
    return 0;
  }, absl::Seconds(30));
  EXPECT_EQ(failures, "");
  EXPECT_THAT(ShmCommunicator::RemoveIfStale(name).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ShmCommunicatorSetupTest, MissingPeerMakesCreateTimeOut) {
  ShmCommunicatorOptions o = Options(UniqueName("missing"), 0, 2);
  o.attach_timeout = absl::Milliseconds(200);
  auto comm = ShmCommunicator::Create(o);
  EXPECT_THAT(comm.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(absl::StrContains(comm.status().message(), "rank(s) 1")) << comm.status();
  o.rank = 1;
  comm = ShmCommunicator::Create(o);
  EXPECT_THAT(comm.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(ShmCommunicatorSetupTest, ValidatesOptions) {
  ShmCommunicatorOptions o = Options("x", 2, 2);
  EXPECT_THAT(ShmCommunicator::Create(o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  o = Options("x", 0, 2);
  o.timeout = absl::ZeroDuration();
  EXPECT_THAT(ShmCommunicator::Create(o).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace weft
