// NcclCommunicator across two processes, one GPU each (skipped with fewer than two
// devices): the sum and gather results, and a dead rank — rank 1 leaves right after the
// group forms — making rank 0's collective fail at its deadline instead of hanging.
// CUDA is only ever touched in the forked children (a parent that initialized CUDA
// cannot hand it to its children).
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/testing/fork_ranks.h"

namespace weft {
namespace {

// cudaGetDeviceCount in a child, so that this process stays CUDA-free.
int DeviceCountInChild() {
  const pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

// Rank 0 makes the unique id and passes it to rank 1 through a pipe.
struct IdPipe {
  int fds[2];
  IdPipe() { EXPECT_EQ(pipe(fds), 0); }
  std::string Exchange(int rank) {
    if (rank == 0) {
      auto id = NcclCommunicator::NewUniqueId();
      if (!id.ok()) return "";
      if (write(fds[1], id->data(), id->size()) != static_cast<ssize_t>(id->size())) return "";
      return *id;
    }
    std::string id(128, '\0');
    size_t got = 0;
    while (got < id.size()) {
      const ssize_t r = read(fds[0], &id[got], id.size() - got);
      if (r <= 0) return "";
      got += static_cast<size_t>(r);
    }
    return id;
  }
};

std::unique_ptr<NcclCommunicator> Join(IdPipe* pipe, int rank, absl::Duration timeout) {
  const std::string id = pipe->Exchange(rank);
  NcclCommunicatorOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.device = rank;
  o.timeout = timeout;
  auto c = NcclCommunicator::Create(id, o);
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(NcclTwoRanksTest, AllReduceAndGather) {
  if (DeviceCountInChild() < 2) GTEST_SKIP() << "needs two CUDA devices";
  IdPipe pipe;
  const std::string failures = testing::RunRanks(
      2,
      [&](int rank) -> int {
        std::unique_ptr<NcclCommunicator> c = Join(&pipe, rank, absl::Seconds(30));
        if (c == nullptr) return 10;
        std::vector<float> v = {1.0f + rank, 10.0f * rank, -3.0f};
        float* d = nullptr;
        float* out = nullptr;
        if (cudaMalloc(&d, 3 * sizeof(float)) != cudaSuccess) return 11;
        if (cudaMalloc(&out, 5 * sizeof(float)) != cudaSuccess) return 11;
        cudaMemcpy(d, v.data(), 3 * sizeof(float), cudaMemcpyHostToDevice);
        if (!c->AllReduceSum(d, 3).ok()) return 12;
        cudaMemcpy(v.data(), d, 3 * sizeof(float), cudaMemcpyDeviceToHost);
        if (v != std::vector<float>{3.0f, 10.0f, -6.0f}) return 13;
        // rank 0 gives 2 values, rank 1 gives 3.
        const std::vector<size_t> counts = {2, 3};
        if (!c->AllGatherV(d, counts[rank], counts, out).ok()) return 14;
        std::vector<float> g(5);
        cudaMemcpy(g.data(), out, 5 * sizeof(float), cudaMemcpyDeviceToHost);
        if (g != std::vector<float>{3.0f, 10.0f, 3.0f, 10.0f, -6.0f}) return 15;
        return c->Barrier().ok() ? 0 : 16;
      },
      absl::Seconds(120));
  EXPECT_EQ(failures, "");
}

TEST(NcclTwoRanksTest, DeadPeerFailsAtTheDeadline) {
  if (DeviceCountInChild() < 2) GTEST_SKIP() << "needs two CUDA devices";
  IdPipe pipe;
  const std::string failures = testing::RunRanks(
      2,
      [&](int rank) -> int {
        std::unique_ptr<NcclCommunicator> c = Join(&pipe, rank, absl::Seconds(30));
        if (c == nullptr) return 10;
        if (rank == 1) _exit(0);  // dies without a word
        c->SetTimeout(absl::Seconds(3));
        float* d = nullptr;
        if (cudaMalloc(&d, 1024 * sizeof(float)) != cudaSuccess) return 11;
        const absl::Time start = absl::Now();
        const absl::Status s = c->AllReduceSum(d, 1024);
        const absl::Duration took = absl::Now() - start;
        if (s.ok()) return 12;
        if (s.code() != absl::StatusCode::kDeadlineExceeded &&
            s.code() != absl::StatusCode::kUnavailable) {
          return 13;
        }
        if (took > absl::Seconds(15)) return 14;
        // Sticky: the next call fails at once.
        return c->Barrier().ok() ? 15 : 0;
      },
      absl::Seconds(120));
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace weft
