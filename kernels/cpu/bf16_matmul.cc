#include "kernels/cpu/bf16_matmul.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

bool IsQ4(GgmlType t) { return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1; }

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Column c's block b: fp16 d, fp16 m (Q4; Q4_0: -8 d) and the 32 quants.
struct Block {
  uint16_t d = 0, m = 0;
  int q[32] = {};
};

Block ReadBlock(const QuantMatrix& src, int64_t row, int64_t b) {
  const uint8_t* blk = src.data + row * src.row_stride;
  Block out;
  switch (src.type) {
    case GgmlType::kQ4_0: {
      BlockQ4_0 q;
      std::memcpy(&q, blk + b * sizeof(q), sizeof(q));
      out.d = q.d;
      out.m = Fp32ToFp16(-8.0f * Fp16ToFp32(q.d));  // exact
      for (int j = 0; j < 16; ++j) {
        out.q[j] = q.qs[j] & 0x0F;
        out.q[j + 16] = q.qs[j] >> 4;
      }
      break;
    }
    case GgmlType::kQ4_1: {
      BlockQ4_1 q;
      std::memcpy(&q, blk + b * sizeof(q), sizeof(q));
      out.d = q.d;
      out.m = q.m;
      for (int j = 0; j < 16; ++j) {
        out.q[j] = q.qs[j] & 0x0F;
        out.q[j + 16] = q.qs[j] >> 4;
      }
      break;
    }
    case GgmlType::kQ8_0: {
      BlockQ8_0 q;
      std::memcpy(&q, blk + b * sizeof(q), sizeof(q));
      out.d = q.d;
      for (int j = 0; j < 32; ++j) out.q[j] = q.qs[j];
      break;
    }
    default:
      LOG(FATAL) << "bf16 packing of type " << static_cast<int>(src.type);
  }
  return out;
}

// The column and weight of tile word w (0..31) of row r (bf16_matmul.h).
int WordColumn(int w) { return w < 16 ? w / 2 : 8 + (w - 16) / 2; }
int WordWeight(int r, int w) { return 2 * r + w % 2; }

}  // namespace

bool Bf16PackSupported(GgmlType type, int64_t k) {
  return (IsQ4(type) || type == GgmlType::kQ8_0) && k > 0 && k % 32 == 0;
}

int64_t Bf16RecordBytes(GgmlType type) { return IsQ4(type) ? 320 : 544; }

int64_t Bf16PanelBytes(GgmlType type, int64_t k) { return (k / 32) * Bf16RecordBytes(type); }

int64_t Bf16PackedBytes(GgmlType type, int64_t n, int64_t k) {
  return (n + 15) / 16 * Bf16PanelBytes(type, k);
}

void PackBf16Weights(const QuantMatrix& src, uint8_t* dst) {
  CHECK(Bf16PackSupported(src.type, src.k)) << "bf16 packing of this matrix";
  const int64_t nb = src.k / 32;
  const int64_t rec_bytes = Bf16RecordBytes(src.type);
  const int64_t panels = (src.n + 15) / 16;
  const bool q4 = IsQ4(src.type);
  std::memset(dst, 0, static_cast<size_t>(Bf16PackedBytes(src.type, src.n, src.k)));
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + (p * nb + b) * rec_bytes;
      Block blocks[16];
      for (int c = 0; c < 16 && p * 16 + c < src.n; ++c) {
        blocks[c] = ReadBlock(src, p * 16 + c, b);
        Put16(rec + 2 * c, blocks[c].d);
        if (q4) Put16(rec + 32 + 2 * c, blocks[c].m);
      }
      // Columns past n keep zero scales and quants (their outputs are never stored).
      uint8_t* rows = rec + (q4 ? 64 : 32);
      for (int r = 0; r < 16; ++r) {
        for (int w = 0; w < 32; ++w) {
          const int q = blocks[WordColumn(w)].q[WordWeight(r, w)];
          if (q4) {
            rows[16 * r + w % 16] |= static_cast<uint8_t>(w < 16 ? q : q << 4);
          } else {
            rows[32 * r + w] = static_cast<uint8_t>(static_cast<int8_t>(q));
          }
        }
      }
    }
  }
}

namespace {

// As VCVTNEPS2BF16: denormals to (signed) zero, then round to nearest even.
float RoundBf16(float x) {
  if (std::fabs(x) < std::numeric_limits<float>::min()) return std::copysign(0.0f, x);
  return Bf16ToFp32(Fp32ToBf16(x));
}

// Tile word w of row r of a record, as fp32 (the dequantized bf16 weight).
float RecordWeight(GgmlType type, const uint8_t* rec, int r, int w) {
  const int col = WordColumn(w);
  uint16_t d16, m16 = 0;
  std::memcpy(&d16, rec + 2 * col, 2);
  if (IsQ4(type)) {
    std::memcpy(&m16, rec + 32 + 2 * col, 2);
    const uint8_t byte = rec[64 + 16 * r + w % 16];
    const int q = w < 16 ? byte & 0x0F : byte >> 4;
    return RoundBf16(std::fma(Fp16ToFp32(d16), static_cast<float>(q), Fp16ToFp32(m16)));
  }
  const int q = static_cast<int8_t>(rec[32 + 32 * r + w]);
  return RoundBf16(Fp16ToFp32(d16) * static_cast<float>(q));
}

}  // namespace

void Bf16MatmulReference(const Bf16PackedMatrix& w, const float* x, int64_t ldx, int64_t m,
                         float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  const int64_t nb = w.k / 32;
  const int64_t rec_bytes = Bf16RecordBytes(w.type);
  std::vector<float> a(w.k), wj(w.k);
  for (int64_t j = n_begin; j < n_end; ++j) {
    const uint8_t* panel = w.data + (j / 16) * Bf16PanelBytes(w.type, w.k);
    const int col = static_cast<int>(j % 16);
    const int word0 = col < 8 ? 2 * col : 16 + 2 * (col - 8);  // its even weight's word
    for (int64_t c = 0; c < w.k; ++c) {
      wj[c] = RecordWeight(w.type, panel + (c / 32) * rec_bytes, static_cast<int>(c % 32) / 2,
                           word0 + static_cast<int>(c % 2));
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < w.k; ++c) a[c] = RoundBf16(x[i * ldx + c]);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        float se = 0.0f, so = 0.0f;
        for (int t = 0; t < 16; ++t) {
          se = se + a[32 * b + 2 * t] * wj[32 * b + 2 * t];
          so = so + a[32 * b + 2 * t + 1] * wj[32 * b + 2 * t + 1];
        }
        acc = acc + (se + so);
      }
      y[i * ldy + j] = acc;
    }
  }
}

int64_t Bf16RowsElements(int64_t rows, int64_t k) { return (rows + 15) / 16 * 16 * k; }

bool Bf16MatmulSupported() { return CpuFeatures::Get().HasAmxBf16(); }

void ConvertRowsBf16(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                     Bf16Rows* out) {
  DCHECK(Bf16MatmulSupported());
  DCHECK_EQ(out->k % 32, 0);
  amx_bf16::ConvertRowsBf16(x, ldx, row_begin, row_end, out);
}

void Bf16Matmul(const Bf16PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
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
