// Futex helpers for process-shared 32-bit words (Linux only).
//
// The words live in MAP_SHARED memory, so the non-private futex operations are used
// (the kernel keys them by the backing page, which works across processes and across
// different mappings of the same segment).
// Thread-safety: the functions are thread-safe; they only touch the word atomically.
#ifndef WEFT_WORKER_COMM_FUTEX_H_
#define WEFT_WORKER_COMM_FUTEX_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace weft {

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be lock-free (address-free) atomics");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word size");

// Sleeps while `*word == expected`, for at most `timeout` (rounded to the kernel's
// timer slack). Returns on a wake-up, a value mismatch, a signal or the timeout; the
// caller always re-checks its condition (spurious returns are allowed).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout);

// Wakes every waiter sleeping on `word`.
void FutexWakeAll(std::atomic<uint32_t>* word);

// A hint to the CPU inside spin loops.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace weft

#endif  // WEFT_WORKER_COMM_FUTEX_H_
