#include "worker/comm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/fork_ranks.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

using ::weft::testing::ForkRanks;
using ::weft::testing::PipeEvents;
using ::weft::testing::UniqueName;
using ::weft::testing::WaitForChild;

bool Exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm/" + std::string(kShmNamePrefix) + name).c_str(), &st) == 0;
}

ShmSegmentOptions Options(const std::string& name, uint64_t generation = 1) {
  ShmSegmentOptions o;
  o.name = name;
  o.world_size = 2;
  o.slot_bytes = 8192;
  o.generation = generation;
  return o;
}

// Leaves behind a segment whose creator died without cleaning up (a crashed rank 0).
void CreateCrashedSegment(const std::string& name, uint64_t generation = 1) {
  const pid_t pid = ForkRanks(1, [&](int) {
    auto seg = ShmSegment::Create(Options(name, generation));
    if (!seg.ok()) return 1;
    _exit(0);  // no destructor: the segment stays, its creator is gone
  })[0];
  ASSERT_TRUE(WaitForChild(pid, absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(Exists(name));
}

TEST(ShmSegmentTest, ValidatesOptions) {
  ShmSegmentOptions o = Options("ok-name_1.2");
  EXPECT_TRUE(o.Validate().ok());
  o.name = "bad/name";
  EXPECT_FALSE(o.Validate().ok());
  o.name = "";
  EXPECT_FALSE(o.Validate().ok());
  o = Options("x");
  o.world_size = 0;
  EXPECT_FALSE(o.Validate().ok());
  o.world_size = kShmMaxWorldSize + 1;
  EXPECT_FALSE(o.Validate().ok());
  o = Options("x");
  o.slot_bytes = 0;
  EXPECT_FALSE(o.Validate().ok());
}

TEST(ShmSegmentTest, CreatorUnlinksOnDestructionAndLayoutIsAsDocumented) {
  const std::string name = UniqueName("seg");
  {
    auto seg = ShmSegment::Create(Options(name));
    ASSERT_TRUE(seg.ok()) << seg.status();
    EXPECT_TRUE(Exists(name));
    ShmSegment& s = **seg;
    EXPECT_TRUE(s.is_creator());
    EXPECT_EQ(s.slot_bytes(), 8192u);
    EXPECT_EQ(s.header()->magic, kShmMagic);
    EXPECT_EQ(s.header()->state.load(), static_cast<uint32_t>(ShmState::kReady));
    EXPECT_EQ(reinterpret_cast<char*>(s.control(1)) - reinterpret_cast<char*>(s.header()),
              static_cast<ptrdiff_t>(kShmPageBytes + 64));
    EXPECT_EQ(s.slot(1, 1) - s.slot(0, 0), static_cast<ptrdiff_t>(3 * 8192));
    auto attached = ShmSegment::Attach(Options(name), absl::Now() + absl::Seconds(1));
    ASSERT_TRUE(attached.ok()) << attached.status();
    (*attached)->slot(1, 0)[5] = 'x';
    EXPECT_EQ(s.slot(1, 0)[5], 'x');  // the same memory
  }
  EXPECT_FALSE(Exists(name));
}

TEST(ShmSegmentTest, LiveSegmentOfSameGenerationIsNotReplaced) {
  const std::string name = UniqueName("seg");
  auto first = ShmSegment::Create(Options(name));
  ASSERT_TRUE(first.ok());
  auto second = ShmSegment::Create(Options(name));
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kAlreadyExists)) << second.status();
  EXPECT_FALSE(*ShmSegment::RemoveIfStale(name));
}

TEST(ShmSegmentTest, CrashedCreatorSegmentIsReplaced) {
  const std::string name = UniqueName("seg");
  CreateCrashedSegment(name);
  auto seg = ShmSegment::Create(Options(name));
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*seg)->header()->creator_pid.load(), getpid());
}

TEST(ShmSegmentTest, StaleSegmentIsKeptWhenReplacementIsOff) {
  const std::string name = UniqueName("seg");
  CreateCrashedSegment(name);
  ShmSegmentOptions o = Options(name);
  o.replace_stale = false;
  auto seg = ShmSegment::Create(o);
  EXPECT_THAT(seg.status(), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_TRUE(absl::StrContains(seg.status().message(), "is gone")) << seg.status();
  EXPECT_TRUE(*ShmSegment::RemoveIfStale(name));
  EXPECT_FALSE(Exists(name));
}

TEST(ShmSegmentTest, CreatorInAnotherPidNamespaceIsNotDeclaredDead) {
  const std::string name = UniqueName("seg");
  CreateCrashedSegment(name);
  {  // Pretend the creator ran in another PID namespace: its pid means nothing here.
    const int fd = shm_open(ShmSegment::ShmNameFor(name).c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, kShmPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    static_cast<ShmHeader*>(p)->creator_pid_ns = PidNamespaceId() + 1;
    munmap(p, kShmPageBytes);
  }
  EXPECT_FALSE(*ShmSegment::RemoveIfStale(name));
  EXPECT_THAT(ShmSegment::Create(Options(name)).status(), StatusIs(absl::StatusCode::kAlreadyExists));
  // A new generation still replaces it.
  EXPECT_TRUE(ShmSegment::Create(Options(name, 2)).ok());
}

TEST(ShmSegmentTest, GarbageSegmentIsReplaced) {
  const std::string name = UniqueName("seg");
  const std::string shm_name = ShmSegment::ShmNameFor(name);
  const int fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not a segment", 13), 13);
  close(fd);
  auto seg = ShmSegment::Create(Options(name));
  ASSERT_TRUE(seg.ok()) << seg.status();
}

TEST(ShmSegmentTest, OtherGenerationIsReplacedAndOldOwnerDoesNotUnlinkTheNewOne) {
  const std::string name = UniqueName("seg");
  auto old_gen = ShmSegment::Create(Options(name, 1));
  ASSERT_TRUE(old_gen.ok());
  auto new_gen = ShmSegment::Create(Options(name, 2));
  ASSERT_TRUE(new_gen.ok()) << new_gen.status();
  old_gen->reset();
  EXPECT_TRUE(Exists(name));
  auto attached = ShmSegment::Attach(Options(name, 2), absl::Now() + absl::Seconds(1));
  EXPECT_TRUE(attached.ok()) << attached.status();
}

TEST(ShmSegmentTest, AttachWaitsForTheCreator) {
  const std::string name = UniqueName("seg");
  CreateCrashedSegment(name);  // must be skipped, not attached to
  const PipeEvents create, attached;
  const pid_t creator = ForkRanks(1, [&](int) {
    if (!create.WaitFor(1, absl::Now() + absl::Seconds(20))) return 2;
    auto seg = ShmSegment::Create(Options(name));
    if (!seg.ok()) return 1;
    // A live creator: it stays until the parent attached.
    return attached.WaitFor(1, absl::Now() + absl::Seconds(20)) ? 0 : 3;
  })[0];
  // Nothing to attach to yet (only the crashed segment)...
  EXPECT_THAT(ShmSegment::Attach(Options(name), absl::Now() + absl::Milliseconds(50)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  // ... until the creator makes it: the attach waits for it.
  create.Signal();
  auto seg = ShmSegment::Attach(Options(name), absl::Now() + absl::Seconds(20));
  attached.Signal();
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*seg)->header()->creator_pid.load(), creator);
  EXPECT_TRUE(WaitForChild(creator, absl::Now() + absl::Seconds(10)).ok());
}

TEST(ShmSegmentTest, AttachTimesOutNamingTheReason) {
  const std::string name = UniqueName("seg");
  const absl::Time start = absl::Now();
  auto seg = ShmSegment::Attach(Options(name), start + absl::Milliseconds(100));
  EXPECT_THAT(seg.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  CreateCrashedSegment(name);
  seg = ShmSegment::Attach(Options(name), absl::Now() + absl::Milliseconds(100));
  EXPECT_THAT(seg.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_TRUE(absl::StrContains(seg.status().message(), "is gone")) << seg.status();
  EXPECT_TRUE(*ShmSegment::RemoveIfStale(name));
}

TEST(ShmSegmentTest, AttachRejectsAnotherLayout) {
  const std::string name = UniqueName("seg");
  auto seg = ShmSegment::Create(Options(name));
  ASSERT_TRUE(seg.ok());
  ShmSegmentOptions o = Options(name);
  o.slot_bytes = 3 * 8192;
  auto attached = ShmSegment::Attach(o, absl::Now() + absl::Seconds(1));
  EXPECT_THAT(attached.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ShmSegmentTest, RemoveStaleSegmentsRemovesOnlyStaleOnes) {
  const std::string stale = UniqueName("seg");
  const std::string live = UniqueName("seg");
  CreateCrashedSegment(stale);
  auto seg = ShmSegment::Create(Options(live));
  ASSERT_TRUE(seg.ok());
  auto removed = ShmSegment::RemoveStaleSegments();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_GE(*removed, 1);
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(live));
  EXPECT_THAT(ShmSegment::RemoveIfStale(stale).status(), StatusIs(absl::StatusCode::kNotFound));
}

// A segment that another process is creating (opened, not yet sized, then sized with no
// pid written yet) is not stale to the sweep; the same leftover once old is. The sweep
// of one test process once removed another's segment mid-creation (a worker's startup
// sweep would do the same to a tensor-parallel group forming on the same host).
TEST(ShmSegmentTest, TheSweepSparesASegmentBeingCreated) {
  const std::string name = UniqueName("seg");
  const std::string shm_name = ShmSegment::ShmNameFor(name);
  const int fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(*ShmSegment::RemoveIfStale(name)) << "opened, size 0";
  ASSERT_EQ(ftruncate(fd, 2 * kShmPageBytes), 0);
  EXPECT_FALSE(*ShmSegment::RemoveIfStale(name)) << "sized, no pid yet";
  EXPECT_TRUE(Exists(name));
  // The creator died there: an hour later the leftover goes.
  const timespec times[2] = {{0, UTIME_OMIT}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(futimens(fd, times), 0);
  close(fd);
  EXPECT_TRUE(*ShmSegment::RemoveIfStale(name));
  EXPECT_FALSE(Exists(name));
}

TEST(ProcessAliveTest, SeesZombiesAsDead) {
  EXPECT_TRUE(ProcessAlive(getpid()));
  EXPECT_FALSE(ProcessAlive(0));
  const pid_t child = ForkRanks(1, [](int) { return 0; })[0];
  // Waits for its exit without reaping it: a zombie now.
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(ProcessAlive(child));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  EXPECT_TRUE(WaitForChild(child, deadline).ok());
  EXPECT_FALSE(ProcessAlive(child));
}

}  // namespace
}  // namespace weft
