#include "kernels/cpu/int8_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/int8_kformats.h"
#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels {
namespace {

constexpr int64_t kAmxTileRows = 16;

// Per-thread scratch of the AMX kernel, 64-byte aligned.
uint8_t* AmxScratch(int64_t blocks) {
  thread_local std::vector<uint8_t> buf;
  const size_t need = static_cast<size_t>(blocks * amx::kAmxScratchBytesPerBlock + 64);
  if (buf.size() < need) buf.resize(need);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

bool IsQ4(GgmlType t) { return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1; }

// Per-thread buffer of a K-format call's HalfBlockSums.
int32_t* HalfSumScratch(int64_t count) {
  thread_local std::vector<int32_t> buf;
  if (buf.size() < static_cast<size_t>(count)) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One row's block b as (dw, mw, 16 GGUF nibble bytes) or (dw, 32 int8).
void PackRecord(const QuantMatrix& src, int64_t row, int64_t b, uint8_t* rec, int r) {
  const uint8_t* blk = src.data + row * src.row_stride;
  switch (src.type) {
    case GgmlType::kQ4_0: {
      const auto* q = reinterpret_cast<const BlockQ4_0*>(blk) + b;
      Put16(rec + 2 * r, q->d);
      Put16(rec + 32 + 2 * r, Fp32ToFp16(-8.0f * Fp16ToFp32(q->d)));  // exact
      for (int j = 0; j < 4; ++j) std::memcpy(rec + 64 + 64 * j + 4 * r, q->qs + 4 * j, 4);
      break;
    }
    case GgmlType::kQ4_1: {
      const auto* q = reinterpret_cast<const BlockQ4_1*>(blk) + b;
      Put16(rec + 2 * r, q->d);
      Put16(rec + 32 + 2 * r, q->m);
      for (int j = 0; j < 4; ++j) std::memcpy(rec + 64 + 64 * j + 4 * r, q->qs + 4 * j, 4);
      break;
    }
    case GgmlType::kQ8_0: {
      const auto* q = reinterpret_cast<const BlockQ8_0*>(blk) + b;
      Put16(rec + 2 * r, q->d);
      for (int g = 0; g < 8; ++g) std::memcpy(rec + 32 + 64 * g + 4 * r, q->qs + 4 * g, 4);
      break;
    }
    default:
      LOG(FATAL) << "int8 packing of type " << static_cast<int>(src.type);
  }
}

}  // namespace

namespace scalar {

void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end, Q8Rows* out) {
  const int64_t nb = out->blocks();
  for (int64_t i = row_begin; i < row_end; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + i * ldx + 32 * b;
      float amax = 0;
      for (int c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(xb[c]));
      const float d = amax / 127.0f;
      const float id = amax != 0 ? 127.0f / amax : 0.0f;
      int8_t* q = out->q + i * out->k + 32 * b;
      int32_t sum = 0;
      for (int c = 0; c < 32; ++c) {
        const float v = std::nearbyint(xb[c] * id);  // round to nearest even
        const int32_t qi = static_cast<int32_t>(std::min(127.0f, std::max(-127.0f, v)));
        q[c] = static_cast<int8_t>(qi);
        sum += qi;
      }
      out->d[i * nb + b] = d;
      out->qsum[i * nb + b] = sum;
      out->ds[i * nb + b] = d * static_cast<float>(sum);
    }
  }
}

void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end) {
  const int64_t nb = w.k / 32;
  const int64_t rec_bytes = Int8RecordBytes(w.type);
  const int64_t panel_bytes = Int8PanelBytes(w.type, w.k);
  const bool q4 = IsQ4(w.type);
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* xq = x.q + i * x.k;
    for (int64_t j = n_begin; j < n_end; ++j) {
      const uint8_t* panel = w.data + (j / 16) * panel_bytes;
      const int r = static_cast<int>(j % 16);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = panel + b * rec_bytes;
        const int8_t* xb = xq + 32 * b;
        int32_t isum = 0;
        if (q4) {
          for (int jj = 0; jj < 4; ++jj) {
            for (int c = 0; c < 4; ++c) {
              const uint8_t v = rec[64 + 64 * jj + 4 * r + c];
              isum += (v & 0x0F) * xb[4 * jj + c] + (v >> 4) * xb[16 + 4 * jj + c];
            }
          }
        } else {
          for (int g = 0; g < 8; ++g) {
            for (int c = 0; c < 4; ++c) {
              isum += static_cast<int8_t>(rec[32 + 64 * g + 4 * r + c]) * xb[4 * g + c];
            }
          }
        }
        const float dw = Fp16ToFp32(Get16(rec + 2 * r));
        const float dx = x.d[i * nb + b];
        acc = std::fma(static_cast<float>(isum), dw * dx, acc);
        if (q4) acc = std::fma(Fp16ToFp32(Get16(rec + 32 + 2 * r)), x.ds[i * nb + b], acc);
      }
      y[i * ldy + j] = acc;
    }
  }
}

}  // namespace scalar

const char* Int8IsaName(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kScalar:
      return "scalar";
    case Int8Isa::kAvx2:
      return "avx2";
    case Int8Isa::kAvx512Vnni:
      return "avx512vnni";
    case Int8Isa::kAmx:
      return "amx_int8";
  }
  return "?";
}

bool Int8IsaSupported(Int8Isa isa) {
  const CpuFeatures& f = CpuFeatures::Get();
  switch (isa) {
    case Int8Isa::kScalar:
      return true;
    case Int8Isa::kAvx2:
      return f.HasAvx2();
    case Int8Isa::kAvx512Vnni:
      return f.HasAvx512Vnni();
    case Int8Isa::kAmx:
      return f.HasAmxInt8();
  }
  return false;
}

void QuantizeRowsQ8(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                    Q8Rows* out) {
  DCHECK_EQ(out->k % 32, 0);
  if (CpuFeatures::Get().HasAvx512Vnni()) {  // the function lives in the VNNI unit
    avx512vnni::QuantizeRowsQ8(x, ldx, row_begin, row_end, out);
  } else {
    scalar::QuantizeRowsQ8(x, ldx, row_begin, row_end, out);
  }
}

bool IsInt8KFormat(GgmlType type) { return kformat::FormatOf(type) >= 0; }

bool Int8MatmulSupported(GgmlType type, int64_t k) {
  if (k <= 0) return false;
  if (IsInt8KFormat(type)) return k % (32 * kformat::kLayouts[kformat::FormatOf(type)].blocks) == 0;
  return (IsQ4(type) || type == GgmlType::kQ8_0) && k % 32 == 0;
}

int64_t Int8RecordBytes(GgmlType type) { return IsQ4(type) ? kInt8Q4RecordBytes : kInt8Q8RecordBytes; }

int64_t Int8GroupBytes(GgmlType type) {
  DCHECK(IsInt8KFormat(type));
  return kformat::GroupBytes(kformat::kLayouts[kformat::FormatOf(type)]);
}

int64_t Int8KBlockBytes(GgmlType type) {
  DCHECK(IsInt8KFormat(type));
  return kformat::BlockBytes(kformat::kLayouts[kformat::FormatOf(type)]);
}

int64_t Int8PanelBytes(GgmlType type, int64_t k) {
  if (IsInt8KFormat(type)) {
    return k / (32 * kformat::kLayouts[kformat::FormatOf(type)].blocks) * Int8GroupBytes(type);
  }
  return (k / 32) * Int8RecordBytes(type);
}

Int8Isa Int8IsaFor(Int8Isa isa, GgmlType type) {
  if (IsInt8KFormat(type) && (isa == Int8Isa::kAvx512Vnni || isa == Int8Isa::kAmx)) {
    return Int8Isa::kAvx2;
  }
  return isa;
}

int64_t Int8PackedBytes(GgmlType type, int64_t n, int64_t k) {
  return (n + kInt8PanelRows - 1) / kInt8PanelRows * Int8PanelBytes(type, k);
}

void PackInt8Weights(const QuantMatrix& src, uint8_t* dst) {
  CHECK(Int8MatmulSupported(src.type, src.k)) << "int8 packing of this matrix";
  if (IsInt8KFormat(src.type)) return PackInt8KFormat(src, dst);
  const int64_t nb = src.k / 32;
  const int64_t rec_bytes = Int8RecordBytes(src.type);
  const int64_t panels = (src.n + kInt8PanelRows - 1) / kInt8PanelRows;
  std::memset(dst, 0, static_cast<size_t>(Int8PackedBytes(src.type, src.n, src.k)));
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + (p * nb + b) * rec_bytes;
      for (int r = 0; r < kInt8PanelRows && p * kInt8PanelRows + r < src.n; ++r) {
        PackRecord(src, p * kInt8PanelRows + r, b, rec, r);
      }
    }
  }
}

namespace {

// The K formats: the scalar reference or AVX2 (int8_matmul.h: the only kernels they have).
void Int8MatmulK(Int8Isa isa, const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y,
                 int64_t ldy, int64_t n_begin, int64_t n_end) {
  if (isa == Int8Isa::kScalar) return scalar::Int8MatmulK(w, x, m, y, ldy, n_begin, n_end);
  DCHECK(isa == Int8Isa::kAvx2) << Int8IsaName(isa);
  int32_t* s16 = nullptr;
  if (w.type == GgmlType::kQ6_K) {
    s16 = HalfSumScratch(m * (x.k / 16));
    HalfBlockSums(x, m, s16);
  }
  avx2::Int8MatmulK(w, x, s16, m, y, ldy, n_begin, n_end);
}

}  // namespace

void Int8Matmul(Int8Isa isa, const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y,
                int64_t ldy, int64_t n_begin, int64_t n_end) {
  DCHECK_EQ(x.k, w.k);
  if (n_begin >= n_end || m <= 0) return;
  if (IsInt8KFormat(w.type)) return Int8MatmulK(Int8IsaFor(isa, w.type), w, x, m, y, ldy, n_begin, n_end);
  switch (isa) {
    case Int8Isa::kAmx: {
      // Whole 16-row tiles on AMX, the rest on VNNI: the same bits either way.
      const int64_t tiled = m / kAmxTileRows * kAmxTileRows;
      if (tiled > 0) amx::Int8Matmul(w, x, tiled, y, ldy, n_begin, n_end, AmxScratch(w.k / 32));
      if (tiled == m) return;
      const int64_t nb = x.blocks();
      const Q8Rows rest{x.k, x.q + tiled * x.k, x.d + tiled * nb, x.ds + tiled * nb,
                        x.qsum + tiled * nb};
      return avx512vnni::Int8Matmul(w, rest, m - tiled, y + tiled * ldy, ldy, n_begin, n_end);
    }
    case Int8Isa::kAvx512Vnni:
      return avx512vnni::Int8Matmul(w, x, m, y, ldy, n_begin, n_end);
    case Int8Isa::kAvx2:
      return avx2::Int8Matmul(w, x, m, y, ldy, n_begin, n_end);
    case Int8Isa::kScalar:
      return scalar::Int8Matmul(w, x, m, y, ldy, n_begin, n_end);
  }
}

}  // namespace weft::kernels

namespace weft::kernels {

int64_t Int8PeakLoop(Int8Isa isa, int64_t iters) {
  if (!Int8IsaSupported(isa)) return 0;
  switch (isa) {
    case Int8Isa::kAvx512Vnni:
      return avx512vnni::PeakLoop(iters);
    case Int8Isa::kAmx:
      return amx::PeakLoop(iters);
    default:
      return 0;
  }
}

}  // namespace weft::kernels
