// Load generation: runs a trace against one target and returns one record per request.
//
//   closed loop  `concurrency` threads; each sends the next unsent request as soon as
//                its previous one ends, until the trace is done.
//   open loop    each request is sent at its arrival_s (Poisson from --rate, or the
//                trace file's times), however many are in flight. A dispatcher thread
//                sleeps until each arrival and hands the request to an idle stream
//                thread, starting a new one only when none is idle, so threads never
//                outnumber the requests in flight at the peak.
// Threads block in the target's stream reads; nothing spins.
// Thread-safety: RunLoad() is a blocking call; the target must allow concurrent Run().
#ifndef WEFT_TOOLS_BENCH_RUNNER_H_
#define WEFT_TOOLS_BENCH_RUNNER_H_

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tools/bench/progress.h"
#include "tools/bench/stats.h"
#include "tools/bench/target.h"
#include "tools/bench/trace.h"

namespace weft {
namespace bench {

enum class LoadMode { kClosed, kPoisson, kReplay };

struct LoadLevel {
  LoadMode mode = LoadMode::kClosed;
  double value = 1;  // kClosed: concurrency; kPoisson: requests/s; kReplay: unused

  // "c=16", "rate=2/s", "replay".
  std::string Label() const;
};

// Runs `trace` (arrival_s must be set for open-loop levels) against `target`.
// Records are in trace order. `progress` may be null.
std::vector<RequestRecord> RunLoad(Target& target, absl::Span<const TraceRequest> trace,
                                   const LoadLevel& level, Progress* progress);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_TOOLS_BENCH_RUNNER_H_
