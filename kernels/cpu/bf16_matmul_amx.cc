// AMX kernel of bf16_matmul.h. Per call: the columns are taken two 16-column panels at a
// time; each panel's packed records are dequantized into bf16 B tiles (the records hold
// the quants in tile order, so a tile row is one zero-extension, two converts, two FMAs
// and one bf16 pack), then every
// 16-row tile of x runs over them: for 2 row tiles x 2 panels, four C tiles accumulate
// TDPBF16PS over the K chunks in order and are stored once at the end. The activations
// are already in row tiles (bf16_matmul.h), so every tile load is 1 KB in a row; rows
// past m in the last tile are computed and dropped (rows are independent).
//
// Tiles: C = 0..3 (C[rt][pt] = 2 * rt + pt), A = 4, 5 (row tiles), B = 6, 7 (panels);
// all 16 rows x 64 bytes. gcc's tile intrinsics take literal tile numbers only.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16_matmul_amx.h"

namespace weft::kernels::amx_bf16 {
namespace {

constexpr int64_t kPanel = 16;
constexpr int kRows = 16;
constexpr int64_t kTileBytes = 1024;
// Calls of at most this many rows take the AVX-512 twin of the tile arithmetic (no tile
// per 16 rows to fill, no B tile stores and loads).
constexpr int64_t kMaxEmulatedRows = 2;
constexpr int kPrefetchBytes = 4096;

enum Format { kQ4 = 0, kQ8 = 1 };

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void LoadConfig() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kRows;
  }
  _tile_loadconfig(&cfg);
}

// fp32 lane duplication of 16 column scales: lane l of the low half takes column l / 2,
// of the high half column 8 + l / 2 (the tile words of bf16_matmul.h's records).
struct Consts {
  __m512i dup_lo, dup_hi;
};

Consts MakeConsts() {
  Consts k;
  k.dup_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  k.dup_hi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  return k;
}

// One packed record -> its 16 B tile rows (32 bf16 each), handed to sink(r, row).
template <int F, typename Sink>
inline void DequantRows(const uint8_t* rec, const Consts& k, Sink&& sink) {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
  const __m512 d_lo = _mm512_permutexvar_ps(k.dup_lo, dw);
  const __m512 d_hi = _mm512_permutexvar_ps(k.dup_hi, dw);
  if (F == kQ4) {
    const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
    const __m512 m_lo = _mm512_permutexvar_ps(k.dup_lo, mw);
    const __m512 m_hi = _mm512_permutexvar_ps(k.dup_hi, mw);
    const __m512i nib = _mm512_set1_epi32(0x0F);
    const uint8_t* rows = rec + 64;
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      // Byte i: low nibble = tile word i, high nibble = word 16 + i.
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + 16 * r)));
      const __m512 w0 = _mm512_fmadd_ps(d_lo, _mm512_cvtepi32_ps(_mm512_and_si512(v, nib)), m_lo);
      const __m512 w1 = _mm512_fmadd_ps(d_hi, _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), m_hi);
      sink(r, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(w1, w0)));
    }
  } else {
    const uint8_t* rows = rec + 32;
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const __m128i* p = reinterpret_cast<const __m128i*>(rows + 32 * r);
      const __m512 w0 = _mm512_mul_ps(d_lo, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p))));
      const __m512 w1 = _mm512_mul_ps(d_hi, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p + 1))));
      sink(r, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(w1, w0)));
    }
  }
}

// One packed record -> one B tile (16 rows x 32 bf16).
template <int F>
void DequantRecord(const uint8_t* rec, uint16_t* bt, const Consts& k) {
  DequantRows<F>(rec, k, [bt](int r, __m512i row) { _mm512_store_si512(bt + 32 * r, row); });
}

template <int F>
constexpr int64_t RecordBytes() {
  return F == kQ8 ? 544 : 320;  // Bf16RecordBytes
}

// Where C tile rows r0.. and columns col0..col0+15 go: straight into y when all 16 rows
// are < m and the columns in [n_begin, n_end); else *tmp (then CopyTile).
inline bool DirectStore(int64_t r0, int64_t m, int64_t col0, int64_t n_begin, int64_t n_end) {
  return r0 + kRows <= m && col0 >= n_begin && col0 + kPanel <= n_end;
}

// The rows < m and columns in [n_begin, n_end) of a C tile stored at tmp.
void CopyTile(const float* tmp, float* y, int64_t ldy, int64_t r0, int64_t m, int64_t col0,
              int64_t n_begin, int64_t n_end) {
  const int64_t rows = m - r0 < kRows ? m - r0 : kRows;
  const int64_t lo = n_begin > col0 ? n_begin - col0 : 0;
  const int64_t hi = n_end - col0 < kPanel ? n_end - col0 : kPanel;
  if (hi <= lo) return;
  const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  for (int64_t r = 0; r < rows; ++r) {
    _mm512_mask_storeu_ps(y + (r0 + r) * ldy + col0, mask, _mm512_load_ps(tmp + 16 * r));
  }
}

// _tile_stored needs a literal tile number.
#define WEFT_STORE_TILE(c, r0, col0)                                          \
  do {                                                                         \
    if (DirectStore(r0, m, col0, n_begin, n_end)) {                            \
      _tile_stored(c, y + (r0) * ldy + (col0), ldy * 4);                       \
    } else {                                                                   \
      alignas(64) float tmp[kRows * kPanel];                                   \
      _tile_stored(c, tmp, 64);                                                \
      CopyTile(tmp, y, ldy, r0, m, col0, n_begin, n_end);                      \
    }                                                                          \
  } while (0)

// NT (1 or 2) row tiles (their chunks from a[0], a[1], 1 KB each) times NP
// (1 or 2) dequantized panels b[0], b[1]; results for rows r0.. and columns col0...
template <int NT, int NP>
void Tiles(const uint16_t* const* a, const uint8_t* const* b, int64_t nb,
           float* y, int64_t ldy, int64_t r0, int64_t m, int64_t col0, int64_t n_begin,
           int64_t n_end) {
  _tile_zero(0);
  if (NP == 2) _tile_zero(1);
  if (NT == 2) _tile_zero(2);
  if (NT == 2 && NP == 2) _tile_zero(3);
  for (int64_t c = 0; c < nb; ++c) {
    _tile_loadd(6, b[0] + c * kTileBytes, 64);
    if (NP == 2) _tile_loadd(7, b[1] + c * kTileBytes, 64);
    _tile_loadd(4, a[0] + 512 * c, 64);
    if (NT == 2) _tile_loadd(5, a[1] + 512 * c, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (NP == 2) _tile_dpbf16ps(1, 4, 7);
    if (NT == 2) _tile_dpbf16ps(2, 5, 6);
    if (NT == 2 && NP == 2) _tile_dpbf16ps(3, 5, 7);
  }
  WEFT_STORE_TILE(0, r0, col0);
  if (NP == 2) WEFT_STORE_TILE(1, r0, col0 + kPanel);
  if (NT == 2) WEFT_STORE_TILE(2, r0 + kRows, col0);
  if (NT == 2 && NP == 2) WEFT_STORE_TILE(3, r0 + kRows, col0 + kPanel);
}

template <int NP>
void RowTiles(const Bf16Rows& x, int64_t m, const uint8_t* const* b, int64_t nb, float* y,
              int64_t ldy, int64_t col0, int64_t n_begin, int64_t n_end) {
  const int64_t tiles = (m + kRows - 1) / kRows;
  const int64_t tile_elems = nb * kRows * 32;  // one row tile, all chunks
  int64_t t = 0;
  for (; t + 2 <= tiles; t += 2) {
    const uint16_t* a[2] = {x.data + t * tile_elems, x.data + (t + 1) * tile_elems};
    Tiles<2, NP>(a, b, nb, y, ldy, t * kRows, m, col0, n_begin, n_end);
  }
  if (t < tiles) {
    const uint16_t* a[2] = {x.data + t * tile_elems, nullptr};
    Tiles<1, NP>(a, b, nb, y, ldy, t * kRows, m, col0, n_begin, n_end);
  }
}

// Rows 0..M-1 (M <= kMaxEmulatedRows) of x times the panels of [n_begin, n_end) in
// AVX-512 with TDPBF16PS's arithmetic (bf16_matmul.h), lanes = a panel's 16 columns: a B
// tile row's dword c holds column c's two bf16 weights (even K in the low half), so
// shifting and masking give the even and odd weights as fp32. `af`: the rows' bf16 values
// as fp32, row i at af + i * k. MXCSR's FTZ and DAZ are set meanwhile, as the tiles flush.
template <int F, int M>
void EmulatedRows(const Bf16PackedMatrix& w, const float* af, float* y, int64_t ldy,
                  int64_t n_begin, int64_t n_end) {
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  const Consts k = MakeConsts();
  const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ | DAZ
  const int64_t p_end = (n_end + kPanel - 1) / kPanel;
  for (int64_t p = n_begin / kPanel; p < p_end; ++p) {
    const uint8_t* panel = w.data + p * panel_bytes;
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nb; ++c) {
      __m512 se[M], so[M];
      for (int i = 0; i < M; ++i) se[i] = so[i] = _mm512_setzero_ps();
      const float* a = af + 32 * c;
      const char* rec = reinterpret_cast<const char*>(panel + c * RecordBytes<F>());
      // The weights stream from memory once per call: fetch ahead (records are contiguous
      // across blocks and panels).
      for (int l = 0; l < RecordBytes<F>(); l += 64) _mm_prefetch(rec + kPrefetchBytes + l, _MM_HINT_T0);
      DequantRows<F>(panel + c * RecordBytes<F>(), k, [&](int r, __m512i row) {
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(row, 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(row, hi_half));
#pragma GCC unroll 2
        for (int i = 0; i < M; ++i) {
          // Products of bf16 values are exact in fp32: fma rounds once, as the tile's add.
          se[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * w.k + 2 * r]), even, se[i]);
          so[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * w.k + 2 * r + 1]), odd, so[i]);
        }
      });
      for (int i = 0; i < M; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_add_ps(se[i], so[i]));
    }
    const int64_t col0 = p * kPanel;
    const int64_t lo = n_begin > col0 ? n_begin - col0 : 0;
    const int64_t hi = n_end - col0 < kPanel ? n_end - col0 : kPanel;
    const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    for (int i = 0; i < M; ++i) _mm512_mask_storeu_ps(y + i * ldy + col0, mask, acc[i]);
  }
  _mm_setcsr(csr);
}

// x's rows 0..m-1 as fp32 (their bf16 values) into af (row i at af + i * k).
void RowsToFp32(const Bf16Rows& x, int64_t m, float* af) {
  const int64_t nb = x.k / 32;
  for (int64_t i = 0; i < m; ++i) {
    const uint16_t* src = x.data + (i / kRows) * nb * kRows * 32 + (i % kRows) * 32;
    for (int64_t c = 0; c < nb; ++c) {
      const __m512i v = _mm512_loadu_si512(src + c * kRows * 32);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
      const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
      _mm512_storeu_ps(af + i * x.k + 32 * c, _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)));
      _mm512_storeu_ps(af + i * x.k + 32 * c + 16, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
    }
  }
}

template <int F>
void Run(const Bf16PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
         int64_t n_begin, int64_t n_end, uint8_t* scratch) {
  if (m <= kMaxEmulatedRows) {
    float* af = reinterpret_cast<float*>(scratch);
    RowsToFp32(x, m, af);
    if (m == 1) return EmulatedRows<F, 1>(w, af, y, ldy, n_begin, n_end);
    return EmulatedRows<F, 2>(w, af, y, ldy, n_begin, n_end);
  }
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  uint8_t* bt[2] = {scratch, scratch + nb * kTileBytes};
  const Consts k = MakeConsts();
  LoadConfig();
  const int64_t p_end = (n_end + kPanel - 1) / kPanel;
  for (int64_t p = n_begin / kPanel; p < p_end; p += 2) {
    const int np = p + 1 < p_end ? 2 : 1;
    for (int i = 0; i < np; ++i) {
      const uint8_t* panel = w.data + (p + i) * panel_bytes;
      for (int64_t c = 0; c < nb; ++c) {
        DequantRecord<F>(panel + c * RecordBytes<F>(),
                         reinterpret_cast<uint16_t*>(bt[i] + c * kTileBytes), k);
      }
    }
    const uint8_t* b[2] = {bt[0], bt[1]};
    if (np == 2) {
      RowTiles<2>(x, m, b, nb, y, ldy, p * kPanel, n_begin, n_end);
    } else {
      RowTiles<1>(x, m, b, nb, y, ldy, p * kPanel, n_begin, n_end);
    }
  }
  _tile_release();
}

#undef WEFT_STORE_TILE

}  // namespace

int64_t ScratchBytes(int64_t k) { return 2 * (k / 32) * kTileBytes; }

void ConvertRowsBf16(const float* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                     Bf16Rows* out) {
  const int64_t nb = out->k / 32;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const float* src = x + i * ldx;
    uint16_t* dst = out->data + (i / kRows) * nb * kRows * 32 + (i % kRows) * 32;
    for (int64_t c = 0; c < nb; ++c) {
      const __m512 lo = _mm512_loadu_ps(src + 32 * c), hi = _mm512_loadu_ps(src + 32 * c + 16);
      _mm512_storeu_si512(dst + c * kRows * 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

void Bf16Matmul(const Bf16PackedMatrix& w, const Bf16Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end, uint8_t* scratch) {
  if (w.type == GgmlType::kQ8_0) {
    Run<kQ8>(w, x, m, y, ldy, n_begin, n_end, scratch);
  } else {
    Run<kQ4>(w, x, m, y, ldy, n_begin, n_end, scratch);
  }
}

int64_t PeakLoop(int64_t iters) {
  alignas(64) uint16_t a[kRows * 32] = {};
  alignas(64) float c[kRows * 16];
  LoadConfig();
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, a, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  volatile float sink = c[0];
  (void)sink;
  return iters * 4 * kRows * 16 * 32;
}

}  // namespace weft::kernels::amx_bf16
