#include "kernels/cpu/bf16_matmul.h"

#include <cstdint>
#include <vector>

#include "glog/logging.h"
#include "kernels/cpu/bf16_matmul_amx.h"
#include "kernels/cpu/cpu_features.h"

namespace weft::kernels {
namespace {

// Per-thread scratch of the AMX kernel, 64-byte aligned; zero-filled when it grows (the
// padded row tile's unused rows then hold zeros or earlier rows: finite either way).
uint8_t* Scratch(int64_t bytes) {
  thread_local std::vector<uint8_t> buf;
  const size_t need = static_cast<size_t>(bytes + 64);
  if (buf.size() < need) buf.resize(need);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

}  // namespace

int64_t Bf16RowsElements(int64_t rows, int64_t k) { return (rows + 15) / 16 * 16 * k; }

bool Bf16MatmulSupported() { return CpuFeatures::Get().HasAmxBf16(); }

void ConvertRowsBf16(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                     Bf16Rows* out) {
  DCHECK(Bf16MatmulSupported());
  DCHECK_EQ(out->k % 32, 0);
  amx_bf16::ConvertRowsBf16(x, ldx, row_begin, row_end, out);
}

void Bf16Matmul(const Int8PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  DCHECK(Bf16MatmulSupported());
  DCHECK_EQ(x.k, w.k);
  if (n_begin >= n_end || m <= 0) return;
  amx_bf16::Bf16Matmul(w, x, m, y, ldy, n_begin, n_end, Scratch(amx_bf16::ScratchBytes(w.k)));
}

int64_t Bf16PeakLoop(int64_t iters) {
  return Bf16MatmulSupported() ? amx_bf16::PeakLoop(iters) : 0;
}

}  // namespace weft::kernels
