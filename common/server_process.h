// The start and the stop signal every long-running Weft binary (weft-scheduler,
// weft-worker) shares.
//
// InitServerProcess, first thing in main: blocks SIGTERM and SIGINT in this thread and
// so in every thread started later (they are taken only by WaitForStopSignal, never
// delivered asynchronously), ignores SIGPIPE (a peer that closed its socket is an error
// return, not a death), turns off Abseil's debug-build mutex deadlock detector (it runs
// on every absl::Mutex lock, gRPC's included: see the .cc), parses the flags (common/flags.h: a bad one exits 2) and sends
// glog to stderr.
// Thread-safety: InitServerProcess once from main before any thread starts;
// WaitForStopSignal from one thread at a time.
#ifndef WEFT_COMMON_SERVER_PROCESS_H_
#define WEFT_COMMON_SERVER_PROCESS_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weft {

void InitServerProcess(int argc, char** argv, absl::string_view usage);

// The next SIGTERM or SIGINT (its number), or 0 once `timeout` passed without one.
int WaitForStopSignal(absl::Duration timeout = absl::InfiniteDuration());

}  // namespace weft

#endif  // WEFT_COMMON_SERVER_PROCESS_H_
