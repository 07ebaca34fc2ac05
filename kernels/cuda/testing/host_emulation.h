// A CPU emulation of the CUDA execution model, just enough to run this directory's
// kernels on a machine without a GPU and compare them with their CPU twins: the kernel's
// own source (a .cu file included with WEFT_CUDA_HOST_EMULATION defined, which hides its
// launch code) runs with every CUDA thread as a fiber of one OS thread, blocks one after
// another. On x86-64 a fiber switch is host_emulation_switch.cc's few instructions (glibc's
// swapcontext made a sigprocmask system call on every switch: half of these tests' CPU
// time); elsewhere ucontext. What it models:
//   * threadIdx / blockIdx / blockDim / gridDim, __syncthreads (a block barrier), warp
//     collectives (__shfl_xor_sync, __shfl_up_sync, ldmatrix, mma.sync m16n8k16) as
//     barriers of the warp's live lanes, exited threads leaving their barriers;
//   * __shared__ variables (static: blocks never overlap), dynamic shared memory
//     (WEFT_DYNAMIC_SMEM, filled with garbage), cp.async groups (a copy lands when a
//     wait retires its group: reading a stage too early reads stale data), atomics;
//   * the IEEE intrinsics (__fadd_rn, ...) as plain host arithmetic (compile with
//     -ffp-contract=off), fp16/bf16 through cuda_fp16.h / cuda_bf16.h's host code.
// What it does not model: timing, memory ordering between blocks running at once,
// bank conflicts, the hardware's exact fp32 accumulation order inside mma (done here in
// k order) and its approximate transcendental functions (host expf/exp2f instead).
// A barrier that can never complete (e.g. __syncthreads in divergent code, or a warp
// collective some live lanes skip) aborts with a message, where a GPU would hang or
// misbehave. Deterministic: one schedule, round-robin.
// Use: EmulateLaunch(grid, block, dynamic_smem_bytes, [&] { Kernel<...>(args...); }).
// Thread-safety: one launch at a time per process.
#ifndef WEFT_KERNELS_CUDA_TESTING_HOST_EMULATION_H_
#define WEFT_KERNELS_CUDA_TESTING_HOST_EMULATION_H_

#ifndef WEFT_CUDA_HOST_EMULATION
#define WEFT_CUDA_HOST_EMULATION 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>
#include <vector_types.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

// ---- CUDA keywords (crt/host_defines.h already made __global__, __device__ and
// __host__ empty for a host compiler, and __align__ / __forceinline__ attributes) -----
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#if defined(__x86_64__)
#define WEFT_EMU_FAST_SWITCH 1
// Saves the callee-saved registers on the current stack and the stack pointer in *save_sp,
// then resumes the fiber whose stack pointer is load_sp (host_emulation_switch.cc).
extern "C" void weft_emu_switch(void** save_sp, void* load_sp);
#endif

namespace weft::emu {

// One 16-byte cp.async, performed when its group is waited for.
struct AsyncCopy {
  void* dst;
  const void* src;
  bool valid;
};

struct Fiber {
  std::vector<AsyncCopy> open;               // issued since the last commit
  std::vector<std::vector<AsyncCopy>> groups;  // committed, oldest first
#if WEFT_EMU_FAST_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  std::unique_ptr<char[]> stack;
  uint3 tid;
  int warp = 0;
  bool done = false;
  int waiting = 0;  // 0: runnable, 1: block barrier, 2: warp barrier
};

struct WarpState {
  int live = 0, arrived = 0;
  uint64_t buf[32];
  const void* ptr[32];
  uint32_t regs[32][8];  // mma operands: a[4], b[2]; ldmatrix results
  float acc[32][4];
};

struct BlockState {
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  int live = 0, arrived = 0;
  int current = -1;
#if WEFT_EMU_FAST_SWITCH
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
  std::vector<unsigned char> smem;
  std::function<void()> body;
};

inline BlockState*& Block() {
  static BlockState* b = nullptr;
  return b;
}

}  // namespace weft::emu

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace weft::emu {

inline Fiber& Me() { return Block()->fibers[Block()->current]; }
inline int LaneId() { return static_cast<int>(Me().tid.x % 32); }

// From the running fiber back to the block's scheduler loop (Launch).
inline void Yield() {
  BlockState* b = Block();
#if WEFT_EMU_FAST_SWITCH
  weft_emu_switch(&b->fibers[b->current].sp, b->scheduler_sp);
#else
  swapcontext(&b->fibers[b->current].ctx, &b->scheduler);
#endif
}

inline void BlockBarrier() {
  Me().waiting = 1;
  ++Block()->arrived;
  Yield();
}

inline void WarpBarrier() {
  Fiber& f = Me();
  f.waiting = 2;
  ++Block()->warps[f.warp].arrived;
  Yield();
}

inline WarpState& MyWarp() { return Block()->warps[Me().warp]; }

template <typename T>
T* DynamicSmem() {
  return reinterpret_cast<T*>(Block()->smem.data());
}

inline void Perform(const std::vector<AsyncCopy>& group) {
  for (const AsyncCopy& c : group) {
    if (c.valid) {
      std::memcpy(c.dst, c.src, 16);
    } else {
      std::memset(c.dst, 0, 16);
    }
  }
}

// cp.async: the copy lands only when a CpAsyncWait retires its group, so a kernel that
// reads a stage before waiting for it reads the stage's previous contents here too.
inline void CpAsync(void* dst, const void* src, bool valid) {
  Me().open.push_back({dst, src, valid});
}
inline void CpAsyncCommit() {
  Fiber& f = Me();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
inline void CpAsyncWait(int pending) {
  Fiber& f = Me();
  while (static_cast<int>(f.groups.size()) > pending) {
    Perform(f.groups.front());
    f.groups.erase(f.groups.begin());
  }
}

inline void FiberMain() {
  BlockState* b = Block();
  b->body();
  Fiber& f = b->fibers[b->current];
  for (const auto& g : f.groups) Perform(g);  // the hardware completes them eventually
  Perform(f.open);
  f.done = true;
  --b->live;
  --b->warps[f.warp].live;
  Yield();  // never resumed
  std::abort();
}

// A fiber's first frame: FiberMain on its own stack (never returns).
inline void StartFiber(Fiber& f, size_t stack_bytes) {
  f.stack.reset(new char[stack_bytes]);
#if WEFT_EMU_FAST_SWITCH
  // weft_emu_switch pops six registers and returns: into FiberEntry, with the stack as
  // after a call (rsp = 8 mod 16 at entry; a zero return address above it).
  auto top = reinterpret_cast<uintptr_t>(f.stack.get() + stack_bytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;  // FiberEntry's return address: it never returns
  *--sp = reinterpret_cast<void*>(+[] { FiberMain(); });
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12-r15
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = stack_bytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, FiberMain, 0);
#endif
}

// Runs `body` as every thread of every block of the grid.
inline void Launch(dim3 grid, dim3 block, size_t smem_bytes, std::function<void()> body) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockState st;
        Block() = &st;
        st.body = body;
        st.smem.assign(smem_bytes + 16, 0xcd);  // garbage, as on a GPU
        st.fibers.resize(threads);
        st.warps.resize((threads + 31) / 32);
        st.live = threads;
        constexpr size_t kStack = 256 * 1024;
        for (int t = 0; t < threads; ++t) {
          Fiber& f = st.fibers[t];
          f.tid = {static_cast<unsigned>(t % block.x),
                   static_cast<unsigned>((t / block.x) % block.y),
                   static_cast<unsigned>(t / (block.x * block.y))};
          f.warp = t / 32;
          ++st.warps[f.warp].live;
          StartFiber(f, kStack);
        }
        blockIdx = {bx, by, bz};
        blockDim = block;
        gridDim = grid;
        while (st.live > 0) {
          bool ran = false;
          for (int t = 0; t < threads; ++t) {
            Fiber& f = st.fibers[t];
            if (f.done || f.waiting != 0) continue;
            st.current = t;
            threadIdx = f.tid;
#if WEFT_EMU_FAST_SWITCH
            weft_emu_switch(&st.scheduler_sp, f.sp);
#else
            swapcontext(&st.scheduler, &f.ctx);
#endif
            ran = true;
          }
          // Release complete barriers (exited threads no longer count).
          bool released = false;
          if (st.arrived > 0 && st.arrived == st.live) {
            for (Fiber& f : st.fibers) {
              if (f.waiting == 1) f.waiting = 0;
            }
            st.arrived = 0;
            released = true;
          }
          for (size_t w = 0; w < st.warps.size(); ++w) {
            WarpState& ws = st.warps[w];
            if (ws.arrived > 0 && ws.arrived == ws.live) {
              for (int l = 0; l < 32 && 32 * static_cast<int>(w) + l < threads; ++l) {
                Fiber& f = st.fibers[32 * w + l];
                if (f.waiting == 2) f.waiting = 0;
              }
              ws.arrived = 0;
              released = true;
            }
          }
          if (!ran && !released && st.live > 0) {
            std::fprintf(stderr,
                         "host emulation: deadlock in block (%u, %u, %u): %d live threads, "
                         "%d at __syncthreads, the rest at warp collectives their warp "
                         "does not complete\n",
                         bx, by, bz, st.live, st.arrived);
            std::abort();
          }
        }
        Block() = nullptr;
      }
    }
  }
}

// Warp exchange of one value: every live lane publishes, then reads lane `src(lane)`.
template <typename T, typename Src>
T Exchange(T v, Src src) {
  static_assert(sizeof(T) <= 8, "one register");
  WarpState& w = MyWarp();
  const int lane = LaneId();
  std::memcpy(&w.buf[lane], &v, sizeof(T));
  WarpBarrier();
  T r;
  std::memcpy(&r, &w.buf[src(lane)], sizeof(T));
  WarpBarrier();
  return r;
}

template <typename T>
float ToF(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else {
    return __bfloat162float(x);
  }
}

// Element (row, col) of the b16 value packed in a register (lo = lower column).
template <typename T>
float Lo(uint32_t r) {
  T v;
  const uint16_t bits = static_cast<uint16_t>(r & 0xffff);
  std::memcpy(static_cast<void*>(&v), &bits, 2);
  return ToF(v);
}
template <typename T>
float Hi(uint32_t r) {
  T v;
  const uint16_t bits = static_cast<uint16_t>(r >> 16);
  std::memcpy(static_cast<void*>(&v), &bits, 2);
  return ToF(v);
}

inline void LdMatrix(const void* row_addr, uint32_t* r, bool trans) {
  WarpState& w = MyWarp();
  const int lane = LaneId();
  w.ptr[lane] = row_addr;
  WarpBarrier();
  auto elem = [&](int m, int row, int col) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(w.ptr[8 * m + row]) + 2 * col, 2);
    return static_cast<uint32_t>(v);
  };
  for (int m = 0; m < 4; ++m) {
    if (!trans) {
      r[m] = elem(m, lane / 4, 2 * (lane % 4)) | (elem(m, lane / 4, 2 * (lane % 4) + 1) << 16);
    } else {
      r[m] = elem(m, 2 * (lane % 4), lane / 4) | (elem(m, 2 * (lane % 4) + 1, lane / 4) << 16);
    }
  }
  WarpBarrier();
}

// d += a b (m16n8k16, fragments as in mma.cuh), accumulated in k order.
template <typename T>
void Mma(const uint32_t* a, const uint32_t* b, float* d) {
  WarpState& w = MyWarp();
  const int lane = LaneId();
  for (int i = 0; i < 4; ++i) w.regs[lane][i] = a[i];
  w.regs[lane][4] = b[0];
  w.regs[lane][5] = b[1];
  WarpBarrier();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    const uint32_t* ra = w.regs[l];
    A[g][2 * t] = Lo<T>(ra[0]), A[g][2 * t + 1] = Hi<T>(ra[0]);
    A[g + 8][2 * t] = Lo<T>(ra[1]), A[g + 8][2 * t + 1] = Hi<T>(ra[1]);
    A[g][2 * t + 8] = Lo<T>(ra[2]), A[g][2 * t + 9] = Hi<T>(ra[2]);
    A[g + 8][2 * t + 8] = Lo<T>(ra[3]), A[g + 8][2 * t + 9] = Hi<T>(ra[3]);
    B[2 * t][g] = Lo<T>(ra[4]), B[2 * t + 1][g] = Hi<T>(ra[4]);
    B[2 * t + 8][g] = Lo<T>(ra[5]), B[2 * t + 9][g] = Hi<T>(ra[5]);
  }
  WarpBarrier();
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[e] = s;
  }
}

}  // namespace weft::emu

// ---- CUDA built-ins (global, as in CUDA) ------------------------------------------------
inline void __syncthreads() { weft::emu::BlockBarrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { weft::emu::WarpBarrier(); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
  return weft::emu::Exchange(v, [mask](int lane) { return lane ^ mask; });
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int = 32) {
  const int d = static_cast<int>(delta);
  return weft::emu::Exchange(v, [d](int lane) { return lane >= d ? lane - d : lane; });
}

template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMin(int* p, int v) {
  int old = *p;
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {
  }
  return old;
}

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline uint32_t __float_as_uint(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= ((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
inline int __ffs(int x) { return __builtin_ffs(x); }
using std::isnan;

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }

#define WEFT_DYNAMIC_SMEM(T, name) T* name = ::weft::emu::DynamicSmem<T>()

// EmulateLaunch(grid, block, smem, body): see the top.
inline void EmulateLaunch(dim3 grid, dim3 block, size_t smem_bytes, std::function<void()> body) {
  weft::emu::Launch(grid, block, smem_bytes, std::move(body));
}

#endif  // WEFT_KERNELS_CUDA_TESTING_HOST_EMULATION_H_
