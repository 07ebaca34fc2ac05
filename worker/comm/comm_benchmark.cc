// comm_benchmark: latency and bandwidth of ShmCommunicator collectives per world size.
//
// This process is rank 0 of one group per world size; it forks ranks 1..W-1 itself. The
// children follow commands that rank 0 broadcasts (op, count, iterations) and run the
// same collectives, so the time rank 0 measures is the time of the whole collective.
// Groups are created on first use and shut down at exit.
//
//   bazel run -c opt //worker/comm:comm_benchmark -- --benchmark_filter=AllReduce
//
// Note: on a machine with fewer cores than ranks the ranks time-share cores, so the
// numbers there measure scheduling as much as the collective.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "worker/comm/shm_communicator.h"
#include "worker/comm/testing/fork_ranks.h"

namespace weft {
namespace {

constexpr size_t kMaxBytes = 16 << 20;  // one slot holds the largest call: one round
constexpr absl::Duration kOpTimeout = absl::Seconds(30);
constexpr absl::Duration kIdleTimeout = absl::Hours(24);  // peers waiting for a command

enum class Op : int64_t { kQuit = 0, kAllReduce = 1, kAllGather = 2 };

struct Command {
  Op op;
  int64_t count;  // floats (per rank for kAllGather)
  int64_t iterations;
};

ShmCommunicatorOptions Options(const std::string& name, int rank, int world_size) {
  ShmCommunicatorOptions o;
  o.name = name;
  o.rank = rank;
  o.world_size = world_size;
  o.max_bytes = kMaxBytes;
  o.timeout = kOpTimeout;
  return o;
}

absl::Status RunOp(Communicator& comm, const Command& cmd, std::vector<float>& in,
                   std::vector<float>& out) {
  if (cmd.op == Op::kAllReduce) return comm.AllReduceSum(in.data(), cmd.count);
  return comm.AllGather(in.data(), cmd.count, out.data());
}

// Ranks 1..W-1: follow rank 0's commands until kQuit or an error.
int PeerMain(const std::string& name, int rank, int world_size) {
  auto comm = ShmCommunicator::Create(Options(name, rank, world_size));
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    return 1;
  }
  std::vector<float> in, out;
  while (true) {
    Command cmd;
    (*comm)->SetTimeout(kIdleTimeout);
    absl::Status status = (*comm)->Broadcast(&cmd, sizeof(cmd), 0);
    (*comm)->SetTimeout(kOpTimeout);
    if (!status.ok() || cmd.op == Op::kQuit) return status.ok() ? 0 : 2;
    in.assign(cmd.count, 0.f);
    out.assign(cmd.count * world_size, 0.f);
    for (int64_t i = 0; i < cmd.iterations && status.ok(); ++i) {
      status = RunOp(**comm, cmd, in, out);
    }
    if (!status.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
      return 3;
    }
  }
}

// Rank 0's handle on one group of forked peers. Groups live until ShutdownAll().
class Group {
 public:
  static Group* Get(int world_size) {
    std::unique_ptr<Group>& group = Registry()[world_size];
    if (group == nullptr) group.reset(new Group(world_size));
    return group.get();
  }

  // Tells every group's peers to quit and reaps them.
  static void ShutdownAll() {
    for (auto& [world_size, group] : Registry()) {
      const absl::Status status = group->Send(Command{Op::kQuit, 0, 0});
      if (!status.ok()) std::fprintf(stderr, "quit: %s\n", status.ToString().c_str());
      testing::WaitForChildren(group->pids_, absl::Now() + absl::Seconds(10));
    }
    Registry().clear();
  }

  ShmCommunicator* comm() const { return comm_.get(); }
  absl::Status Send(Command cmd) { return comm_->Broadcast(&cmd, sizeof(cmd), 0); }

 private:
  static std::map<int, std::unique_ptr<Group>>& Registry() {
    static auto* groups = new std::map<int, std::unique_ptr<Group>>();
    return *groups;
  }

  explicit Group(int world_size) {
    const std::string name = testing::UniqueName(absl::StrCat("bench-w", world_size));
    pids_ = testing::ForkRanks(world_size - 1,
                               [&](int r) { return PeerMain(name, r + 1, world_size); });
    auto comm = ShmCommunicator::Create(Options(name, 0, world_size));
    if (!comm.ok()) {
      std::fprintf(stderr, "rank 0: %s\n", comm.status().ToString().c_str());
      std::abort();
    }
    comm_ = std::move(*comm);
  }

  std::unique_ptr<ShmCommunicator> comm_;
  std::vector<pid_t> pids_;
};

void RunCollective(benchmark::State& state, Op op, int64_t count, int64_t bytes_per_call) {
  const int world_size = static_cast<int>(state.range(0));
  Group* group = Group::Get(world_size);
  std::vector<float> in(count, 0.f), out(count * world_size, 0.f);
  const Command cmd{op, count, static_cast<int64_t>(state.max_iterations)};
  absl::Status status = group->Send(cmd);
  for (auto _ : state) {
    if (status.ok()) status = RunOp(*group->comm(), cmd, in, out);
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  state.SetBytesProcessed(state.iterations() * bytes_per_call);
  state.counters["floats"] = static_cast<double>(count);
}

// Latency: args {world_size, floats}.
void BM_AllReduceLatency(benchmark::State& state) {
  RunCollective(state, Op::kAllReduce, state.range(1), state.range(1) * sizeof(float));
}

// Bandwidth: args {world_size, megabytes}.
void BM_AllReduceBandwidth(benchmark::State& state) {
  const int64_t bytes = state.range(1) << 20;
  RunCollective(state, Op::kAllReduce, bytes / sizeof(float), bytes);
}

// Vocabulary-parallel gather: args {world_size, floats per rank}.
void BM_AllGatherLatency(benchmark::State& state) {
  RunCollective(state, Op::kAllGather, state.range(1),
                state.range(1) * state.range(0) * sizeof(float));
}

void LatencyArgs(benchmark::internal::Benchmark* b) {
  for (int w : {2, 3, 4}) {
    b->Args({w, 576});       // one token's hidden state
    b->Args({w, 49152 / w});  // the brief's per-rank shard
  }
}

void BandwidthArgs(benchmark::internal::Benchmark* b) {
  for (int w : {2, 3, 4}) {
    for (int mb : {1, 2, 4, 8, 16}) b->Args({w, mb});
  }
}

BENCHMARK(BM_AllReduceLatency)->Apply(LatencyArgs)->ArgNames({"world", "floats"})->UseRealTime();
BENCHMARK(BM_AllReduceBandwidth)
    ->Apply(BandwidthArgs)
    ->ArgNames({"world", "MB"})
    ->UseRealTime();
BENCHMARK(BM_AllGatherLatency)->Apply(LatencyArgs)->ArgNames({"world", "floats"})->UseRealTime();

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  weft::Group::ShutdownAll();
  benchmark::Shutdown();
  return 0;
}
