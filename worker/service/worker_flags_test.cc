#include "worker/service/worker_flags.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, kv_dtype);
ABSL_DECLARE_FLAG(std::string, kernels);
ABSL_DECLARE_FLAG(int32_t, world_size);
ABSL_DECLARE_FLAG(int32_t, rank);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(int32_t, num_kv_blocks);
ABSL_DECLARE_FLAG(double, null_step_ms);
ABSL_DECLARE_FLAG(int64_t, kv_memory_bytes);
ABSL_DECLARE_FLAG(double, gpu_memory_utilization);
ABSL_DECLARE_FLAG(int32_t, max_graph_batch);
ABSL_DECLARE_FLAG(bool, graph_mixed_steps);
ABSL_DECLARE_FLAG(int32_t, max_graph_tokens);
ABSL_DECLARE_FLAG(int32_t, quant_gemm_max_rows);
ABSL_DECLARE_FLAG(std::string, worker_tls_cert);

namespace weft {
namespace {

class WorkerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override { absl::SetFlag(&FLAGS_model, "m.gguf"); }
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(WorkerFlagsTest, DefaultsAreTheCpuBackendWithTheDefaultKvType) {
  absl::StatusOr<WorkerBinaryOptions> o = OptionsFromFlags(8);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backend, BackendKind::kCpu);
  EXPECT_EQ(o->model_path, "m.gguf");
  EXPECT_EQ(o->cpu.model.kv_dtype, kDefaultKvDtype);
  EXPECT_EQ(o->cpu.model.num_threads, 8);  // --threads=0: the cores of this rank
  EXPECT_EQ(o->executor.world_size, 1);
  EXPECT_EQ(o->client.scheduler_address, "127.0.0.1:50052");
}

// Every backend gets the same pool and rank flags (one place copies them).
TEST_F(WorkerFlagsTest, KvPoolAndRankFlagsReachEveryBackend) {
  absl::SetFlag(&FLAGS_backend, "null");
  absl::SetFlag(&FLAGS_world_size, 2);
  absl::SetFlag(&FLAGS_rank, 1);
  absl::SetFlag(&FLAGS_num_kv_blocks, 77);
  absl::SetFlag(&FLAGS_kv_dtype, "int8");
  absl::SetFlag(&FLAGS_null_step_ms, 3);
  absl::StatusOr<WorkerBinaryOptions> o = OptionsFromFlags(8);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backend, BackendKind::kNull);
  EXPECT_EQ(o->cpu.model.num_threads, 4);  // 8 cores, 2 ranks
  for (int32_t rank : {o->cpu.rank, o->cuda.rank, o->null_backend.rank}) EXPECT_EQ(rank, 1);
  for (int32_t n : {o->cpu.num_kv_blocks, o->cuda.num_kv_blocks, o->null_backend.num_kv_blocks}) {
    EXPECT_EQ(n, 77);
  }
  for (KvDtype d : {o->cpu.model.kv_dtype, o->cuda.kv_dtype, o->null_backend.kv_dtype}) {
    EXPECT_EQ(d, KvDtype::kInt8);
  }
  EXPECT_EQ(o->null_backend.step_time, absl::Milliseconds(3));
}

// The CUDA pool: from --gpu_memory_utilization (0.9) unless --kv_memory_bytes is given;
// the host backends keep their 1 GiB default. Graphs up to --max_graph_batch (256).
TEST_F(WorkerFlagsTest, CudaPoolFromDeviceMemoryUnlessABudgetIsGiven) {
  absl::StatusOr<WorkerBinaryOptions> o = OptionsFromFlags(8);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cuda.kv_memory_bytes, 0);  // 0: from the device
  EXPECT_EQ(o->cuda.gpu_memory_utilization, 0.9);
  EXPECT_EQ(o->cuda.max_graph_batch, 256);
  EXPECT_TRUE(o->cuda.graph_mixed_steps);  // on since the H200 A/B (tools/bench/README.md)
  EXPECT_EQ(o->cuda.max_graph_tokens, 2048);  // the scheduler's default step budget
  EXPECT_EQ(o->cuda.quant_gemm_max_rows, 0);  // cuBLAS until a GPU run says otherwise
  EXPECT_EQ(o->cpu.kv_memory_bytes, kDefaultHostKvMemoryBytes);
  EXPECT_EQ(o->null_backend.kv_memory_bytes, kDefaultHostKvMemoryBytes);

  absl::SetFlag(&FLAGS_kv_memory_bytes, int64_t{3} << 30);
  absl::SetFlag(&FLAGS_gpu_memory_utilization, 0.5);
  absl::SetFlag(&FLAGS_max_graph_batch, 64);
  absl::SetFlag(&FLAGS_graph_mixed_steps, false);
  absl::SetFlag(&FLAGS_max_graph_tokens, 1024);
  absl::SetFlag(&FLAGS_quant_gemm_max_rows, 128);
  o = OptionsFromFlags(8);
  ASSERT_TRUE(o.ok()) << o.status();
  for (int64_t b : {o->cpu.kv_memory_bytes, o->cuda.kv_memory_bytes,
                    o->null_backend.kv_memory_bytes}) {
    EXPECT_EQ(b, int64_t{3} << 30);
  }
  EXPECT_EQ(o->cuda.gpu_memory_utilization, 0.5);
  EXPECT_EQ(o->cuda.max_graph_batch, 64);
  EXPECT_FALSE(o->cuda.graph_mixed_steps);
  EXPECT_EQ(o->cuda.max_graph_tokens, 1024);
  EXPECT_EQ(o->cuda.quant_gemm_max_rows, 128);
}

TEST_F(WorkerFlagsTest, BadFlagsAreInvalidArgument) {
  for (auto set : std::vector<void (*)()>{
           [] { absl::SetFlag(&FLAGS_model, ""); },
           [] { absl::SetFlag(&FLAGS_backend, "tpu"); },
           [] { absl::SetFlag(&FLAGS_kv_dtype, "fp8"); },
           [] { absl::SetFlag(&FLAGS_kernels, "magic"); },
           [] { absl::SetFlag(&FLAGS_rank, 2); },  // of a world of 1
           [] { absl::SetFlag(&FLAGS_worker_tls_cert, "c.pem"); },  // without key and CA
           [] { absl::SetFlag(&FLAGS_kv_memory_bytes, int64_t{-1}); },
           [] { absl::SetFlag(&FLAGS_gpu_memory_utilization, 0.0); },
           [] { absl::SetFlag(&FLAGS_gpu_memory_utilization, 1.5); },
           [] { absl::SetFlag(&FLAGS_max_graph_batch, 96); },    // not a power of two
           [] { absl::SetFlag(&FLAGS_max_graph_batch, 2048); },  // over 1024
           [] { absl::SetFlag(&FLAGS_max_graph_tokens, 8); },     // under 16
           [] { absl::SetFlag(&FLAGS_max_graph_tokens, 100); },   // not a power of two
           [] { absl::SetFlag(&FLAGS_max_graph_tokens, 8192); },  // over 4096
           [] { absl::SetFlag(&FLAGS_quant_gemm_max_rows, -1); },
           [] { absl::SetFlag(&FLAGS_quant_gemm_max_rows, 257); },  // over QuantGemm's 256
       }) {
    absl::FlagSaver saver;
    set();
    EXPECT_EQ(OptionsFromFlags(8).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weft
