#include "worker/comm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace weft {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  // FUTEX_WAIT takes a relative timeout.
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace weft
