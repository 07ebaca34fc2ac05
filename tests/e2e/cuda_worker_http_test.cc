// The --config=cuda weft-worker, run with --backend=cpu (no GPU needed). It links the
// CUDA runtime, cuBLAS(Lt) and NCCL, whose static thread-local storage (154 KB) lives on
// every thread's stack: an HTTP server with small fixed-stack threads (civetweb's
// 100 KiB) cannot start in it, and the worker used to exit at start with
// --metrics_port. Here it must start, serve /livez /startupz /readyz and /metrics, attach,
// generate, and drain on SIGTERM. Built and run only in --config=cuda (tag "cuda").
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

TEST(CudaWorkerHttpTest, CudaBuildServesMetricsAndProbesWithTheCpuBackend) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.replica = "r0";
  w.extra_flags = {"--backend=cpu"};
  ASSERT_TRUE(cluster.StartReplica(w).ok()) << cluster.Logs();
  ChildProcess* worker = cluster.worker("r0");
  // This is the CUDA build: the CUDA libraries are loaded (a default build would make
  // the test prove nothing).
  const std::string maps = ReadFile(absl::StrCat("/proc/", worker->pid(), "/maps"));
  EXPECT_NE(maps.find("libcublasLt.so"), std::string::npos) << "not a --config=cuda weft-worker";
  EXPECT_NE(maps.find("libcudart.so"), std::string::npos);

  const int port = cluster.worker_metrics_port("r0");
  ASSERT_GT(port, 0);
  EXPECT_EQ(HttpStatus(port, "/livez"), 200);
  EXPECT_EQ(HttpStatus(port, "/startupz"), 200) << "the ports file is written once started";
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  EXPECT_TRUE(WaitFor([&] { return HttpStatus(port, "/readyz") == 200; }, absl::Seconds(30)));

  StreamResult r = Generate(cluster.stub(), GreedyRequest("The capital of France is", 8));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Logs();
  EXPECT_EQ(r.token_ids.size(), 8u);
  auto m = cluster.WorkerMetrics("r0");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GE(m->Get("weft_worker_steps_total"), 1);
  EXPECT_EQ(m->Get("weft_worker_attached"), 1);
  EXPECT_NE(m->text().find("# TYPE weft_worker_step_seconds histogram"), std::string::npos);
  // The byte counters are exported by the CUDA build too; the CPU backend copies nothing
  // between devices (the CUDA backend's bound is cuda_backend_test's, on a GPU).
  EXPECT_EQ(m->Get("weft_worker_device_to_host_bytes_total"), 0) << m->text();
  EXPECT_EQ(m->Get("weft_worker_host_to_device_bytes_total"), 0);

  ASSERT_TRUE(worker->Signal(SIGTERM));
  ASSERT_TRUE(worker->Wait(absl::Seconds(60)).has_value()) << cluster.Logs();
  EXPECT_EQ(worker->exit_code(), 0) << worker->LogTail();
}

}  // namespace
}  // namespace weft::e2e
