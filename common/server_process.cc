#include "common/server_process.h"

#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "glog/logging.h"

namespace weft {
namespace {

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void InitServerProcess(int argc, char** argv, absl::string_view usage) {
  const sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex lock (gRPC's locks are
  // absl::Mutex) would run the debug deadlock detector: a global graph lock and lookups
  // on each acquisition, ~140 ns a nested lock pair here. Weft's own locks are std::mutex
  // (common/mutex.h); the detector stays on in tests, which do not call this.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // glog stamps every line with the local time (localtime_r + mktime); with TZ unset,
  // glibc re-reads /etc/localtime's status on each of those calls (a path lookup and a
  // stat per log line: ~a third of the scheduler's per-request access-log line). The
  // same zone, named: looked up once.
  if (std::getenv("TZ") == nullptr) setenv("TZ", ":/etc/localtime", /*overwrite=*/0);
  ParseFlags(argc, argv, usage);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
}

int WaitForStopSignal(absl::Duration timeout) {
  const sigset_t set = StopSignals();
  if (timeout == absl::InfiniteDuration()) {
    int sig = 0;
    return sigwait(&set, &sig) == 0 ? sig : 0;
  }
  const timespec ts = absl::ToTimespec(timeout);
  while (true) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno != EINTR) return 0;  // EAGAIN: the timeout passed
  }
}

absl::Status SetThisThreadClass(ThreadClass thread_class) {
  sched_param param{};
  param.sched_priority = 0;  // the only priority of SCHED_OTHER and SCHED_BATCH
  const int policy = thread_class == ThreadClass::kBatch ? SCHED_BATCH : SCHED_OTHER;
  // Linux: pid 0 is the calling thread (not the whole process).
  if (sched_setscheduler(0, policy, &param) != 0) {
    const int err = errno;
    return absl::InternalError(
        absl::StrCat("sched_setscheduler(", policy, "): ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace weft
