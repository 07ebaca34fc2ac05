#include "kernels/cpu/packed_matmul.h"

#include <cstring>

#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/packed_matmul_avx512.h"

namespace weft::kernels {
namespace {


void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One record: block b of rows [16p, 16p + 16) (rows >= n stay zero).
void PackRecord(const QuantMatrix& src, int64_t p, int64_t b, uint8_t* rec) {
  const int64_t rows = std::min<int64_t>(kPanelRows, src.n - p * kPanelRows);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src.data + (p * kPanelRows + r) * src.row_stride;
    switch (src.type) {
      case GgmlType::kQ4_0: {
        const uint8_t* blk = row + b * 18;
        const uint16_t d = Get16(blk);
        Put16(rec + 2 * r, d);
        Put16(rec + 32 + 2 * r, Fp32ToFp16(-8.0f * Fp16ToFp32(d)));  // exact
        for (int g = 0; g < 16; ++g) rec[64 + 16 * g + r] = blk[2 + g];
        break;
      }
      case GgmlType::kQ4_1: {
        const uint8_t* blk = row + b * 20;
        Put16(rec + 2 * r, Get16(blk));
        Put16(rec + 32 + 2 * r, Get16(blk + 2));
        for (int g = 0; g < 16; ++g) rec[64 + 16 * g + r] = blk[4 + g];
        break;
      }
      case GgmlType::kQ8_0: {
        const uint8_t* blk = row + b * 34;
        Put16(rec + 2 * r, Get16(blk));
        for (int g = 0; g < 32; ++g) rec[32 + 16 * g + r] = blk[2 + g];
        break;
      }
      default:
        LOG(FATAL) << "cannot pack " << GgmlTypeName(static_cast<uint32_t>(src.type));
    }
  }
}

}  // namespace

bool PackedMatmulSupported(GgmlType type, int64_t k) {
  const bool type_ok =
      type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0;
  return type_ok && k > 0 && k % 32 == 0 && k <= kPackedMaxK && CpuFeatures::Get().HasAvx512();
}

int64_t PackedRecordBytes(GgmlType type) { return type == GgmlType::kQ8_0 ? 544 : 320; }

int64_t PackedPanelBytes(GgmlType type, int64_t k) { return k / 32 * PackedRecordBytes(type); }

int64_t PackedBytes(GgmlType type, int64_t n, int64_t k) {
  return (n + kPanelRows - 1) / kPanelRows * PackedPanelBytes(type, k);
}

void PackWeights(const QuantMatrix& src, uint8_t* dst) {
  const int64_t panels = (src.n + kPanelRows - 1) / kPanelRows;
  const int64_t nb = src.k / 32;
  const int64_t rec_bytes = PackedRecordBytes(src.type);
  std::memset(dst, 0, PackedBytes(src.type, src.n, src.k));
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      PackRecord(src, p, b, dst + p * PackedPanelBytes(src.type, src.k) + b * rec_bytes);
    }
  }
}

void PackedMatmul(const PackedMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                  int64_t ldy, int64_t n_begin, int64_t n_end) {
  DCHECK(PackedMatmulSupported(w.type, w.k));
  DCHECK(0 <= n_begin && n_begin <= n_end && n_end <= w.n);
  if (m <= 0 || n_begin >= n_end) return;
  const avx512::PackedFormat format =
      w.type == GgmlType::kQ8_0 ? avx512::kPackedQ8 : avx512::kPackedQ4;
  avx512::PackedMatmul(format, w.data, w.n, w.k, x, ldx, m, y, ldy, n_begin, n_end);
}

}  // namespace weft::kernels
