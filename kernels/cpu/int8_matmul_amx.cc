// AMX kernel of the int8 matmul (contract, layout and per-output arithmetic in
// int8_matmul.h). The integer block sums q_w . q_x of 16 rows x 16 columns come from
// one tile multiply per 32-weight block (TDPBSUD: signed activations x unsigned Q4
// nibbles; TDPBSSD for Q8_0), exact in int32 like `vpdpbusd`; the per-block fp32
// epilogue then runs in AVX-512 in the contract's order. So every output has the bits
// of the scalar, AVX2 and VNNI paths — which is why the dispatcher may run the rows
// that do not fill a 16-row tile on the VNNI kernel.
//
// Tiles (one configuration per call): A = 16 activation rows x 32 bytes (one block),
// B = 8 rows x 64 bytes (for each of a panel's 16 columns, 4 consecutive weights per
// row: the B layout TDPB*D wants), C = 16 x 16 int32. Two of each alternate between
// even and odd blocks; products go to memory a group of blocks ahead of the epilogue. Q8_0 records are already in the B layout (int8_matmul.h); Q4 records are
// unpacked once per panel per call into the caller's scratch buffer (low nibbles are B
// rows 0..3, high nibbles rows 4..7) and reused by every 16-row tile.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels::amx {
namespace {

constexpr int64_t kPanel = kInt8PanelRows;
constexpr int kTileRows = 16;
// Blocks whose tile products are computed ahead of their epilogue.
constexpr int64_t kGroup = 4;
constexpr int64_t kBTileBytes = kAmxScratchBytesPerBlock;  // 8 rows x 64 bytes

enum Format { kQ4 = 0, kQ8 = 1 };

// LDTILECFG's 64-byte operand.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile numbers (gcc's tile intrinsics want literal numbers): C0 = 0, C1 = 1 accumulators;
// A0 = 2, A1 = 3 activations; B0 = 4, B1 = 5 weights. Set 0 (C0, A0, B0) takes even
// blocks, set 1 odd ones.
constexpr int kCTiles[] = {0, 1};
constexpr int kATiles[] = {2, 3};
constexpr int kBTiles[] = {4, 5};

void LoadConfig() {
  TileConfig cfg;
  for (int set = 0; set < 2; ++set) {
    cfg.colsb[kCTiles[set]] = 64;
    cfg.rows[kCTiles[set]] = kTileRows;
    cfg.colsb[kATiles[set]] = 32;
    cfg.rows[kATiles[set]] = kTileRows;
    cfg.colsb[kBTiles[set]] = 64;
    cfg.rows[kBTiles[set]] = 8;
  }
  _tile_loadconfig(&cfg);
}

template <int F>
constexpr int64_t RecordBytes() {
  return F == kQ8 ? kInt8Q8RecordBytes : kInt8Q4RecordBytes;
}

void UnpackQ4Panel(const uint8_t* panel, int64_t nb, uint8_t* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = panel + b * kInt8Q4RecordBytes + 64;
    uint8_t* t = out + b * kBTileBytes;
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_loadu_si512(rec + 64 * j);
      _mm512_store_si512(t + 64 * j, _mm512_and_si512(v, nib));
      _mm512_store_si512(t + 64 * (4 + j), _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
    }
  }
}

inline void Store(float* y, __m512 v, int64_t col0, int64_t n_begin, int64_t n_end) {
  const int64_t lo = n_begin > col0 ? n_begin - col0 : 0;
  const int64_t hi = n_end - col0 < kPanel ? n_end - col0 : kPanel;
  if (lo == 0 && hi == kPanel) {
    _mm512_storeu_ps(y + col0, v);
    return;
  }
  if (hi <= lo) return;
  const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  _mm512_mask_storeu_ps(y + col0, mask, v);
}

// Block products q_w . q_x of 16 rows x 16 columns, stored as int32 [16][16] at out.
template <int F, int Set>
inline void ProductToMemory(const int8_t* xq, int64_t k, const uint8_t* b_tile, int32_t* out) {
  if (Set == 0) {
    _tile_loadd(2, xq, k);
    _tile_loadd(4, b_tile, 64);
    _tile_zero(0);
    if (F == kQ4) {
      _tile_dpbsud(0, 2, 4);
    } else {
      _tile_dpbssd(0, 2, 4);
    }
    _tile_stored(0, out, 64);
  } else {
    _tile_loadd(3, xq, k);
    _tile_loadd(5, b_tile, 64);
    _tile_zero(1);
    if (F == kQ4) {
      _tile_dpbsud(1, 3, 5);
    } else {
      _tile_dpbssd(1, 3, 5);
    }
    _tile_stored(1, out, 64);
  }
}

// Blocks [b0, b0 + count) (count <= kGroup) into out[0 .. count).
template <int F>
inline void GroupProducts(const int8_t* xq, int64_t k, const uint8_t* b_tiles, int64_t b_stride,
                          int64_t b0, int64_t count, int32_t (*out)[kTileRows * 16]) {
  for (int64_t i = 0; i + 1 < count; i += 2) {
    ProductToMemory<F, 0>(xq + 32 * (b0 + i), k, b_tiles + (b0 + i) * b_stride, out[i]);
    ProductToMemory<F, 1>(xq + 32 * (b0 + i + 1), k, b_tiles + (b0 + i + 1) * b_stride, out[i + 1]);
  }
  if (count % 2 == 1) {
    ProductToMemory<F, 0>(xq + 32 * (b0 + count - 1), k, b_tiles + (b0 + count - 1) * b_stride,
                          out[count - 1]);
  }
}

// acc[t] += the contract's per-block terms for rows i0..i0+15, block b.
template <int F>
inline void Epilogue(const int32_t* c, const uint8_t* rec, const Q8Rows& x, int64_t i0,
                     int64_t nb, int64_t b, __m512* acc) {
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec)));
  __m512 mw = _mm512_setzero_ps();
  if (F == kQ4) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32)));
  const float* d = x.d + i0 * nb + b;
  const float* ds = x.ds + i0 * nb + b;
#pragma GCC unroll 16
  for (int t = 0; t < kTileRows; ++t) {
    const __m512 is = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t));
    acc[t] = _mm512_fmadd_ps(is, _mm512_mul_ps(dw, _mm512_set1_ps(d[t * nb])), acc[t]);
    if (F == kQ4) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ds[t * nb]), acc[t]);
  }
}

// Rows i0..i0+15 x panel p (B tiles at b_tiles + b * b_stride). The tile products of
// a group of kGroup blocks go to memory while AVX-512 scales the previous group's, so
// the tile unit and the vector units work side by side.
template <int F>
void RowTile(const uint8_t* panel, const uint8_t* b_tiles, int64_t b_stride, int64_t nb,
             const Q8Rows& x, int64_t i0, float* y, int64_t ldy, int64_t col0, int64_t n_begin,
             int64_t n_end) {
  alignas(64) int32_t c[2][kGroup][kTileRows * 16];
  __m512 acc[kTileRows];
#pragma GCC unroll 16
  for (int t = 0; t < kTileRows; ++t) acc[t] = _mm512_setzero_ps();
  const int8_t* xq = x.q + i0 * x.k;
  const int64_t k = x.k;
  GroupProducts<F>(xq, k, b_tiles, b_stride, 0, nb < kGroup ? nb : kGroup, c[0]);
  for (int64_t g0 = 0, parity = 0; g0 < nb; g0 += kGroup, parity ^= 1) {
    const int64_t next = g0 + kGroup;
    if (next < nb) {
      GroupProducts<F>(xq, k, b_tiles, b_stride, next, nb - next < kGroup ? nb - next : kGroup,
                       c[parity ^ 1]);
    }
    const int64_t count = nb - g0 < kGroup ? nb - g0 : kGroup;
    for (int64_t i = 0; i < count; ++i) {
      Epilogue<F>(c[parity][i], panel + (g0 + i) * RecordBytes<F>(), x, i0, nb, g0 + i, acc);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTileRows; ++t) Store(y + (i0 + t) * ldy, acc[t], col0, n_begin, n_end);
}

template <int F>
void Run(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
         int64_t n_begin, int64_t n_end, uint8_t* scratch) {
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = nb * RecordBytes<F>();
  const int64_t p_end = (n_end + kPanel - 1) / kPanel;
  uint8_t* buf = scratch;
  LoadConfig();
  for (int64_t p = n_begin / kPanel; p < p_end; ++p) {
    const uint8_t* panel = w.data + p * panel_bytes;
    const uint8_t* b_tiles = panel + 32;  // Q8_0: the 8 vectors after the scales
    int64_t b_stride = RecordBytes<F>();
    if (F == kQ4) {
      UnpackQ4Panel(panel, nb, buf);
      b_tiles = buf;
      b_stride = kBTileBytes;
    }
    for (int64_t i0 = 0; i0 + kTileRows <= m; i0 += kTileRows) {
      RowTile<F>(panel, b_tiles, b_stride, nb, x, i0, y, ldy, p * kPanel, n_begin, n_end);
    }
  }
  _tile_release();
}

}  // namespace

void Int8Matmul(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                int64_t n_begin, int64_t n_end, uint8_t* scratch) {
  if (w.type == GgmlType::kQ8_0) {
    Run<kQ8>(w, x, m, y, ldy, n_begin, n_end, scratch);
  } else {
    Run<kQ4>(w, x, m, y, ldy, n_begin, n_end, scratch);
  }
}

int64_t PeakLoop(int64_t iters) {
  alignas(64) int8_t a[kTileRows * 32] = {};
  alignas(64) uint8_t b[kBTileBytes] = {};
  alignas(64) int32_t c[kTileRows * 16];
  LoadConfig();
  _tile_loadd(2, a, 32);
  _tile_loadd(3, a, 32);
  _tile_loadd(4, b, 64);
  _tile_loadd(5, b, 64);
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbsud(0, 2, 4);
    _tile_dpbsud(1, 3, 5);
    _tile_dpbsud(0, 3, 4);
    _tile_dpbsud(1, 2, 5);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  volatile int32_t sink = c[0];
  (void)sink;
  return iters * 4 * kTileRows * 16 * 32;
}

}  // namespace weft::kernels::amx
