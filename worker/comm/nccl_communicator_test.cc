// NcclCommunicator in one process (GPU tests, skipped without a device): a group of one
// rank (every collective, Abort, timeouts) and a group whose second rank never comes
// (formation fails at the deadline instead of hanging). Two-rank tests that need two
// GPUs are in nccl_communicator_multi_test.cc.
#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"

namespace weft {
namespace {

using ::weft::testing::StatusIs;

#define SKIP_WITHOUT_CUDA()                                                       \
  do {                                                                            \
    if (kernels::cuda::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";  \
  } while (0)

std::unique_ptr<NcclCommunicator> MakeSingle() {
  auto id = NcclCommunicator::NewUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return nullptr;
  NcclCommunicatorOptions o;
  o.timeout = absl::Seconds(20);
  auto c = NcclCommunicator::Create(*id, o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

std::vector<float> Download(const float* d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(NcclCommunicatorTest, SingleRankCollectives) {
  SKIP_WITHOUT_CUDA();
  std::unique_ptr<NcclCommunicator> c = MakeSingle();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f};
  float* d = nullptr;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&d, v.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, v.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(c->AllReduceSum(d, v.size()).ok());
  EXPECT_EQ(Download(d, v.size()), v);
  ASSERT_TRUE(c->AllGatherV(d, v.size(), {v.size()}, out).ok());
  EXPECT_EQ(Download(out, v.size()), v);
  ASSERT_TRUE(c->Broadcast(d, v.size() * sizeof(float), 0).ok());
  EXPECT_THAT(c->Broadcast(d, 4, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(c->Barrier().ok());
  // The asynchronous path the backend uses.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_TRUE(c->AllReduceSumAsync(d, v.size(), s).ok());
  ASSERT_TRUE(c->Wait(s).ok());
  EXPECT_EQ(Download(d, v.size()), v);
  c->SetTimeout(absl::Seconds(3));
  EXPECT_EQ(c->timeout(), absl::Seconds(3));
  // Abort is sticky.
  c->Abort("test");
  const absl::Status a = c->AllReduceSum(d, v.size());
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kAborted)) << a;
  EXPECT_THAT(c->Barrier(), StatusIs(absl::StatusCode::kAborted));
  cudaStreamDestroy(s);
  cudaFree(d);
  cudaFree(out);
}

TEST(NcclCommunicatorTest, MissingPeerFailsAtTheDeadline) {
  SKIP_WITHOUT_CUDA();
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclCommunicatorOptions o;
  o.rank = 0;
  o.world_size = 2;  // rank 1 never joins
  o.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  auto c = NcclCommunicator::Create(*id, o);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kDeadlineExceeded)) << c.status();
  EXPECT_LT(took, absl::Seconds(10));
}

TEST(NcclCommunicatorTest, RejectsBadIds) {
  NcclCommunicatorOptions o;
  EXPECT_EQ(NcclCommunicator::Create("short", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.rank = 2;
  EXPECT_EQ(NcclCommunicator::Create(std::string(128, 'x'), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft
