// The start and the stop signal every long-running Weft binary (weft-scheduler,
// weft-worker) shares.
//
// InitServerProcess, first thing in main: blocks SIGTERM and SIGINT in this thread and
// so in every thread started later (they are taken only by WaitForStopSignal, never
// delivered asynchronously), ignores SIGPIPE (a peer that closed its socket is an error
// return, not a death), turns off Abseil's debug-build mutex deadlock detector (it runs
// on every absl::Mutex lock, gRPC's included: see the .cc), names the local time zone
// when TZ is unset (TZ=:/etc/localtime, the zone glibc would use anyway: it then stops
// re-checking the file on every glog line's timestamp), parses the flags
// (common/flags.h: a bad one exits 2) and sends glog to stderr.
// SetThisThreadClass: the kernel scheduling class of the calling thread, which threads it
// starts later inherit. A server's I/O threads (gRPC's pollers and the callback threads
// woken once per stream write to run its completion) do short work on every wake-up;
// kBatch (SCHED_BATCH) keeps such a thread from preempting the thread that woke it (the
// kernel never preempts on the wake-up of a batch thread: it runs on an idle core, or
// at the waker's next tick or sleep), so a thread that writes to many streams in a row
// (the scheduler's planning thread, kNormal = SCHED_OTHER) is not switched out and back
// once per write on a busy machine. Neither needs a privilege; nice values are kept.
// Thread-safety: InitServerProcess once from main before any thread starts;
// WaitForStopSignal from one thread at a time; SetThisThreadClass from any thread.
#ifndef WEFT_COMMON_SERVER_PROCESS_H_
#define WEFT_COMMON_SERVER_PROCESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weft {

void InitServerProcess(int argc, char** argv, absl::string_view usage);

// The next SIGTERM or SIGINT (its number), or 0 once `timeout` passed without one.
int WaitForStopSignal(absl::Duration timeout = absl::InfiniteDuration());

enum class ThreadClass { kNormal, kBatch };
absl::Status SetThisThreadClass(ThreadClass thread_class);

}  // namespace weft

#endif  // WEFT_COMMON_SERVER_PROCESS_H_
