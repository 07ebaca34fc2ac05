// End to end, real processes: a Python client (Debian's /usr/bin/python3 with its
// python3-grpcio, stubs generated from proto/ by protoc + grpc_python_plugin) drives
// ListModels, health and Generate against a real scheduler and worker
// (interop_client.py asserts each call), and its greedy tokens equal the C++ client's.
// Skips, saying why, only when /usr/bin/python3 or its grpc module is missing.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

constexpr absl::Duration kPythonTimeout = absl::Seconds(180);

TEST(PythonInteropE2eTest, DebianPythonGrpcClientDrivesTheApi) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  if (::access(kPython, X_OK) != 0) {
    GTEST_SKIP() << kPython << " not found: install Debian's python3 and python3-grpcio "
                               "(tools/bootstrap.sh)";
  }
  RunResult probe = RunToEnd({kPython, "-I", "-c", "import grpc, google.protobuf"}, kPythonTimeout);
  if (probe.code != 0) {
    GTEST_SKIP() << kPython << " cannot import grpc/protobuf (install python3-grpcio and "
                               "python3-protobuf; tools/bootstrap.sh): " << probe.log;
  }

  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 96;
  w.threads = 2;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  const std::string prompt = "The quick brown fox";
  const int max_tokens = 12;
  RunResult py = RunToEnd({kPython, "-I", Runfile("tests/e2e/interop_client.py"),
                      absl::StrCat("--stubs=", Runfile("tests/e2e/py")),
                      absl::StrCat("--server=", cluster.address()), absl::StrCat("--prompt=", prompt),
                      absl::StrCat("--max_tokens=", max_tokens)},
                      kPythonTimeout);
  ASSERT_EQ(py.code, 0) << "interop_client.py failed:\n" << py.log << py.out << "\n" << cluster.Logs();
  EXPECT_NE(py.log.find("interop: all checks passed"), std::string::npos) << py.log;

  std::string py_tokens;
  for (absl::string_view line : absl::StrSplit(py.out, '\n')) {
    if (absl::ConsumePrefix(&line, "greedy_tokens: ")) py_tokens = std::string(line);
  }
  StreamResult cc = Generate(cluster.stub(), GreedyRequest(prompt, max_tokens));
  ASSERT_TRUE(cc.status.ok()) << cc.status.error_message();
  EXPECT_EQ(py_tokens, absl::StrJoin(cc.token_ids, " "));
  // The Python calls really reached the server: 3 good Generate calls + the C++ one, one
  // cancelled, two INVALID_ARGUMENT and one NOT_FOUND.
  auto m = cluster.Metrics();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"OK\"}"), 4);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"INVALID_ARGUMENT\"}"), 2);
  EXPECT_EQ(m->Get("weft_requests_status_total{code=\"NOT_FOUND\"}"), 1);
  EXPECT_TRUE(WaitFor([&] { return cluster.Metric("weft_kv_blocks_used") == 0; }, absl::Seconds(30)));
}

}  // namespace
}  // namespace weft::e2e
