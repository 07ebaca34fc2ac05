// End to end: the Python example in README.md works as written. The test takes the
// ```python block after the "python-example" marker, points it at a real scheduler and
// worker (the address and the client's directory are the only substitutions) and runs it
// with Debian's /usr/bin/python3 (python3-grpcio): it must exit 0 and print the served
// model's name and the same greedy text as the C++ client gets.
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

// The first ```python block after `marker`, or "".
std::string PythonBlock(const std::string& markdown, const std::string& marker) {
  const size_t at = markdown.find(marker);
  if (at == std::string::npos) return "";
  const size_t open = markdown.find("```python\n", at);
  if (open == std::string::npos) return "";
  const size_t start = open + 10;
  const size_t close = markdown.find("\n```", start);
  return close == std::string::npos ? "" : markdown.substr(start, close - start + 1);
}

TEST(ReadmePythonE2eTest, TheReadmeExampleRuns) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  if (::access(kPython, X_OK) != 0 ||
      RunToEnd({kPython, "-I", "-c", "import grpc, google.protobuf"}, absl::Seconds(60)).code !=
          0) {
    GTEST_SKIP() << kPython << " with python3-grpcio is needed (tools/bootstrap.sh)";
  }
  std::string code = PythonBlock(ReadFile(Runfile("README.md")), "python-example");
  ASSERT_FALSE(code.empty()) << "no python example in README.md";
  ASSERT_TRUE(absl::StrContains(code, "\"127.0.0.1:50051\"")) << code;
  ASSERT_TRUE(absl::StrContains(code, "\"clients/python\"")) << code;

  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 64;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();

  code =
      absl::StrReplaceAll(code, {{"\"127.0.0.1:50051\"", "\"" + cluster.address() + "\""},
                                 {"\"clients/python\"", "\"" + Runfile("clients/python") + "\""}});
  const std::string script = cluster.dir() + "/readme_example.py";
  std::ofstream(script) << code;
  RunResult py = RunToEnd({kPython, "-I", script}, absl::Seconds(120));
  ASSERT_EQ(py.code, 0) << py.log << py.out << "\n" << code;

  StreamResult cc = Generate(cluster.stub(), [] {
    weft::v1::GenerateRequest r;
    r.set_text("The capital of France is");
    r.mutable_sampling()->set_temperature(0);
    r.mutable_stopping()->set_max_tokens(16);
    return r;
  }());
  ASSERT_TRUE(cc.status.ok()) << cc.status.error_message();
  EXPECT_EQ(py.out, "smollm2-135m-instruct.q4_1\n" + cc.text + "\n");
}

}  // namespace
}  // namespace weft::e2e
