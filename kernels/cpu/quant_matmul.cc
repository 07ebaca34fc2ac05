#include "kernels/cpu/quant_matmul.h"

#include <algorithm>

#include "glog/logging.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_matmul_avx512.h"

namespace weft::kernels {
namespace {

// Reference tiling: kTile tokens share one dequantized chunk of kChunk weights of a row.
// The accumulator of output (i, j) lives in Y between chunks (an fp32 store and reload
// changes nothing), so the sum for every output is exactly
//   ((0 + w0*x0) + w1*x1) + ... + w[k-1]*x[k-1]
// whichever tile it falls in.
constexpr int64_t kTile = 8;
constexpr int64_t kChunk = 256;

// Every type DequantizeRow supports, rows a whole number of its blocks (the chunks of
// ReferenceTile, kChunk weights, are then whole blocks too: 256 is a multiple of every
// block size).
bool ReferenceSupports(GgmlType type, int64_t k) {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(static_cast<uint32_t>(type));
  return t != nullptr && t->dequantizable && k > 0 && k % t->block_size == 0;
}

// Bytes of `count` weights of `type` (count block-aligned for block types).
int64_t WeightBytes(GgmlType type, int64_t count) { return RowBytes(type, count); }

// Columns [n_begin, n_end) of a tile of `mt` (<= T) tokens starting at x.
template <int64_t T>
void ReferenceTile(const QuantMatrix& w, const float* x, int64_t ldx, int64_t mt, float* y,
                   int64_t ldy, int64_t n_begin, int64_t n_end) {
  float xt[kChunk][T];  // X chunk, transposed: xt[c][t] = X[t][c0 + c]
  float wbuf[kChunk];
  for (int64_t c0 = 0; c0 < w.k; c0 += kChunk) {
    const int64_t kc = std::min(kChunk, w.k - c0);
    for (int64_t c = 0; c < kc; ++c) {
      for (int64_t t = 0; t < T; ++t) xt[c][t] = t < mt ? x[t * ldx + c0 + c] : 0.0f;
    }
    const int64_t chunk_offset = WeightBytes(w.type, c0);
    for (int64_t j = n_begin; j < n_end; ++j) {
      const uint8_t* row = w.data + j * w.row_stride + chunk_offset;
      CHECK(DequantizeRow(w.type, row, wbuf, kc).ok());
      float acc[T];
      for (int64_t t = 0; t < T; ++t) acc[t] = (c0 == 0 || t >= mt) ? 0.0f : y[t * ldy + j];
      for (int64_t c = 0; c < kc; ++c) {
        const float wc = wbuf[c];
        for (int64_t t = 0; t < T; ++t) acc[t] = acc[t] + wc * xt[c][t];
      }
      for (int64_t t = 0; t < mt; ++t) y[t * ldy + j] = acc[t];
    }
  }
}

// The types the AVX-512 kernel decodes (no AVX-512 code is written for the 5-bit types
// and the K-quants: they take the reference kernel on the fp32 paths).
bool HasAvx512Format(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ8_0:
      return true;
    default:
      return false;
  }
}

avx512::WeightFormat ToAvx512Format(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return avx512::kFormatF32;
    case GgmlType::kF16:
      return avx512::kFormatF16;
    case GgmlType::kBF16:
      return avx512::kFormatBf16;
    case GgmlType::kQ4_0:
      return avx512::kFormatQ4_0;
    case GgmlType::kQ4_1:
      return avx512::kFormatQ4_1;
    case GgmlType::kQ8_0:
      return avx512::kFormatQ8_0;
    default:
      LOG(FATAL) << "no AVX-512 matmul for " << GgmlTypeName(static_cast<uint32_t>(type));
  }
}


}  // namespace

const char* MatmulImplName(MatmulImpl impl) {
  switch (impl) {
    case MatmulImpl::kReference:
      return "reference";
    case MatmulImpl::kAvx512:
      return "avx512";
  }
  return "?";
}

bool MatmulSupported(MatmulImpl impl, GgmlType type, int64_t k) {
  if (!ReferenceSupports(type, k)) return false;
  switch (impl) {
    case MatmulImpl::kReference:
      return true;
    case MatmulImpl::kAvx512:
      return CpuFeatures::Get().HasAvx512() && k % 32 == 0 && HasAvx512Format(type);
  }
  return false;
}

MatmulImpl BestMatmulImpl(GgmlType type, int64_t k) {
  return MatmulSupported(MatmulImpl::kAvx512, type, k) ? MatmulImpl::kAvx512
                                                        : MatmulImpl::kReference;
}

void MatmulReference(const QuantMatrix& w, const float* x, int64_t ldx, int64_t m, float* y,
                     int64_t ldy, int64_t n_begin, int64_t n_end) {
  DCHECK(ReferenceSupports(w.type, w.k));
  for (int64_t i0 = 0; i0 < m; i0 += kTile) {
    const int64_t mt = std::min(kTile, m - i0);
    if (mt == 1) {
      ReferenceTile<1>(w, x + i0 * ldx, ldx, 1, y + i0 * ldy, ldy, n_begin, n_end);
    } else {
      ReferenceTile<kTile>(w, x + i0 * ldx, ldx, mt, y + i0 * ldy, ldy, n_begin, n_end);
    }
  }
}

void Matmul(MatmulImpl impl, const QuantMatrix& w, const float* x, int64_t ldx, int64_t m,
            float* y, int64_t ldy, int64_t n_begin, int64_t n_end) {
  DCHECK(MatmulSupported(impl, w.type, w.k)) << MatmulImplName(impl);
  DCHECK(0 <= n_begin && n_begin <= n_end && n_end <= w.n);
  if (m <= 0 || n_begin >= n_end) return;
  switch (impl) {
    case MatmulImpl::kReference:
      MatmulReference(w, x, ldx, m, y, ldy, n_begin, n_end);
      return;
    case MatmulImpl::kAvx512:
      avx512::Matmul(ToAvx512Format(w.type), w.data, w.row_stride, w.k, x, ldx, m, y, ldy,
                     n_begin, n_end);
      return;
  }
}

}  // namespace weft::kernels
