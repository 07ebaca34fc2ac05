// End to end, real processes: the scheduler reads only the GGUF's header, metadata and
// tensor table (GgufFile::OpenMetadata), never its weights, so its memory and its pod's
// download do not grow with the model. After it has served a generation (tokenizer and
// detokenizer used), its /proc/<pid>/maps holds no mapping of the model file and the
// bytes it read (/proc/<pid>/io rchar, every read syscall of the process: the GGUF
// header and everything else) stay under a quarter of the file. The worker, which needs
// the weights, maps the file: the control that shows the maps check can see a mapping.
// Also: a second scheduler on a port the first holds exits instead of sharing it.
#include <sys/stat.h>
#include <sys/types.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/model_path.h"
#include "gtest/gtest.h"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {
namespace {

// The lines of /proc/<pid>/maps that map the file with inode `ino` (device aside: the
// inode of one regular file on one filesystem is enough here).
std::vector<std::string> MappingsOf(pid_t pid, ino_t ino) {
  std::vector<std::string> out;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset dev inode [path]
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 5 && f[4] == std::to_string(ino)) out.push_back(line);
  }
  return out;
}

// /proc/<pid>/io's rchar: bytes the process asked read(2)-like calls for; -1 if unread.
int64_t BytesRead(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return -1;
}

TEST(SchedulerMetadataOnlyE2eTest, TheSchedulerNeitherMapsNorReadsTheWeights) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  struct stat st;
  ASSERT_EQ(stat(model.c_str(), &st), 0) << model;
  Cluster cluster(model);
  ASSERT_TRUE(cluster.StartScheduler().ok()) << cluster.Logs();
  WorkerSpec w;
  w.num_kv_blocks = 16;
  ASSERT_TRUE(cluster.StartWorker(w).ok()) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitReplicas(1).ok()) << cluster.Logs();
  StreamResult r = Generate(cluster.stub(), GreedyRequest("The capital of France is", 4));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Logs();
  ASSERT_EQ(r.token_ids.size(), 4u);
  EXPECT_FALSE(r.text.empty());  // the scheduler detokenized

  const pid_t scheduler = cluster.scheduler()->pid();
  EXPECT_EQ(MappingsOf(scheduler, st.st_ino), std::vector<std::string>{})
      << "the scheduler maps the model file";
  const int64_t read = BytesRead(scheduler);
  ASSERT_GE(read, 0) << "cannot read /proc/" << scheduler << "/io";
  EXPECT_LT(read, st.st_size / 4) << "the scheduler read " << read << " bytes of a "
                                  << st.st_size << "-byte model's process";
  std::cout << "scheduler read " << read << " bytes in all; model file " << st.st_size
            << " bytes\n";

  // Control: the worker maps the weights, and the check above sees such a mapping.
  EXPECT_FALSE(MappingsOf(cluster.worker("r0")->pid(), st.st_ino).empty())
      << "the worker's mapping of the model was not found: the check cannot see one";
}

// A second scheduler asked for a port that a running one holds exits with the reason
// instead of sharing it (gRPC's default SO_REUSEPORT would let both bind, and the new
// one would take part of the first one's connections); the first keeps serving.
TEST(SchedulerPortsE2eTest, ASecondSchedulerOnATakenPortExitsAndTheFirstServesOn) {
  WEFT_REQUIRE_DEFAULT_MODEL(model);
  Cluster first(model);
  ASSERT_TRUE(first.StartScheduler().ok()) << first.Logs();
  for (const std::string flag : {"--port", "--worker_port"}) {
    Cluster second(model);
    const int taken = flag == "--port" ? first.port() : first.worker_port();
    const absl::Status s = second.StartScheduler({absl::StrCat(flag, "=", taken)});
    EXPECT_FALSE(s.ok()) << flag << ": a second scheduler bound port " << taken;
    ASSERT_NE(second.scheduler(), nullptr);
    ASSERT_TRUE(second.scheduler()->Wait(absl::Seconds(60)).has_value()) << second.Logs();
    EXPECT_EQ(second.scheduler()->exit_code(), 1) << second.Logs();
    EXPECT_NE(second.scheduler()->LogTail().find("cannot bind the gRPC ports"),
              std::string::npos) << second.Logs();
  }
  EXPECT_EQ(first.Health(), "NOT_SERVING");  // it answers (no worker attached: not serving)
  EXPECT_TRUE(first.scheduler()->Running());
}

}  // namespace
}  // namespace weft::e2e
