// Packing and the scalar reference kernel of the int8 matmul's K formats (layout and
// per-output arithmetic in int8_matmul.h, byte offsets in int8_kformats.h).
#include "kernels/cpu/int8_kformats.h"

#include <cmath>
#include <cstring>

#include "glog/logging.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/int8_matmul_isa.h"

namespace weft::kernels {
namespace kformat {

int FormatOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ5_0:
      return kQ5_0;
    case GgmlType::kQ5_1:
      return kQ5_1;
    case GgmlType::kQ4_K:
      return kQ4K;
    case GgmlType::kQ5_K:
      return kQ5K;
    case GgmlType::kQ6_K:
      return kQ6K;
    default:
      return -1;
  }
}

}  // namespace kformat

namespace {

using kformat::Layout;

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One row's share of a group, decoded from the GGUF: its fp16 scale(s), and per block
// the unsigned quants and the sub-block scale bytes.
struct RowGroup {
  uint16_t d = 0;
  uint16_t second = 0;  // Q5_1 m, Q4_K / Q5_K dmin
  uint8_t q[8][32] = {};
  uint8_t scales[8][2] = {};  // Q4_K / Q5_K: sc, mn; Q6_K: sc0, sc1 (int8 bits)
};

template <typename Block>
Block Load(const uint8_t* row, int64_t index) {
  Block b;
  std::memcpy(&b, row + index * sizeof(Block), sizeof(Block));
  return b;
}

RowGroup DecodeGroup(GgmlType type, const uint8_t* row, int64_t g) {
  RowGroup out;
  switch (type) {
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const bool q51 = type == GgmlType::kQ5_1;
      const auto b0 = q51 ? BlockQ5_0{} : Load<BlockQ5_0>(row, g);
      const auto b1 = q51 ? Load<BlockQ5_1>(row, g) : BlockQ5_1{};
      uint32_t qh;
      std::memcpy(&qh, q51 ? b1.qh : b0.qh, 4);
      out.d = q51 ? b1.d : b0.d;
      out.second = q51 ? b1.m : 0;
      for (int i = 0; i < 32; ++i) {
        out.q[0][i] = static_cast<uint8_t>(Q5Quant(q51 ? b1.qs : b0.qs, qh, i));
      }
      break;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool q5 = type == GgmlType::kQ5_K;
      const auto k4 = q5 ? BlockQ4_K{} : Load<BlockQ4_K>(row, g);
      const auto k5 = q5 ? Load<BlockQ5_K>(row, g) : BlockQ5_K{};
      out.d = q5 ? k5.d : k4.d;
      out.second = q5 ? k5.dmin : k4.dmin;
      for (int t = 0; t < 8; ++t) {
        KQuantScaleMin(q5 ? k5.scales : k4.scales, t, &out.scales[t][0], &out.scales[t][1]);
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = (q5 ? k5.qs : k4.qs)[32 * (t / 2) + l];
          int q = t % 2 == 0 ? byte & 0x0F : byte >> 4;
          if (q5) q |= ((k5.qh[l] >> t) & 1) << 4;
          out.q[t][l] = static_cast<uint8_t>(q);
        }
      }
      break;
    }
    case GgmlType::kQ6_K: {
      const auto blk = Load<BlockQ6_K>(row, g);
      out.d = blk.d;
      for (int t = 0; t < 8; ++t) {
        out.scales[t][0] = static_cast<uint8_t>(blk.scales[2 * t]);
        out.scales[t][1] = static_cast<uint8_t>(blk.scales[2 * t + 1]);
        for (int i = 0; i < 32; ++i) out.q[t][i] = static_cast<uint8_t>(Q6KQuant(blk, 32 * t + i));
      }
      break;
    }
    default:
      LOG(FATAL) << "not a K format: " << GgmlTypeName(static_cast<uint32_t>(type));
  }
  return out;
}

// Row r's 32 quants into block bytes `blk` (nibbles and high-bit planes).
void PutQuants(const Layout& l, const uint8_t* q, int r, uint8_t* blk) {
  uint8_t* nib = blk + kformat::NibbleOffset(l);
  uint8_t* hb = blk + kformat::HighBitsOffset(l);
  for (int i = 0; i < 16; ++i) {
    const int j = i / 4, c = i % 4;
    nib[64 * j + 4 * r + c] = static_cast<uint8_t>((q[i] & 0x0F) | (q[i + 16] & 0x0F) << 4);
    if (l.bits == 5) {
      hb[4 * r + c] |= static_cast<uint8_t>(((q[i] >> 4) & 1) << (2 * j) |
                                            ((q[i + 16] >> 4) & 1) << (2 * j + 1));
    } else if (l.bits == 6) {
      const int u = j % 2;
      hb[64 * (j / 2) + 4 * r + c] |= static_cast<uint8_t>(((q[i] >> 4) & 3) << (4 * u) |
                                                           ((q[i + 16] >> 4) & 3) << (4 * u + 2));
    }
  }
}

// Quant i (0..31) of row r in block bytes `blk`: the inverse of PutQuants.
int GetQuant(const Layout& l, const uint8_t* blk, int r, int i) {
  const int ii = i % 16, j = ii / 4, c = ii % 4;
  const bool high = i >= 16;
  const uint8_t byte = blk[kformat::NibbleOffset(l) + 64 * j + 4 * r + c];
  int q = high ? byte >> 4 : byte & 0x0F;
  const uint8_t* hb = blk + kformat::HighBitsOffset(l);
  if (l.bits == 5) {
    q |= ((hb[4 * r + c] >> (2 * j + (high ? 1 : 0))) & 1) << 4;
  } else if (l.bits == 6) {
    q |= ((hb[64 * (j / 2) + 4 * r + c] >> (4 * (j % 2) + (high ? 2 : 0))) & 3) << 4;
  }
  return q;
}

}  // namespace

void PackInt8KFormat(const QuantMatrix& src, uint8_t* dst) {
  const int f = kformat::FormatOf(src.type);
  CHECK_GE(f, 0) << "int8 K-format packing of " << GgmlTypeName(static_cast<uint32_t>(src.type));
  const Layout& l = kformat::kLayouts[f];
  const int64_t groups = src.k / (32 * l.blocks);
  const int64_t panels = (src.n + kInt8PanelRows - 1) / kInt8PanelRows;
  const int64_t group_bytes = kformat::GroupBytes(l);
  std::memset(dst, 0, static_cast<size_t>(panels * groups * group_bytes));
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* grp = dst + (p * groups + g) * group_bytes;
      for (int r = 0; r < kInt8PanelRows && p * kInt8PanelRows + r < src.n; ++r) {
        const uint8_t* row = src.data + (p * kInt8PanelRows + r) * src.row_stride;
        const RowGroup rg = DecodeGroup(src.type, row, g);
        Put16(grp + 2 * r, rg.d);
        if (l.header_bytes > 32) Put16(grp + 32 + 2 * r, rg.second);
        for (int t = 0; t < l.blocks; ++t) {
          uint8_t* blk = grp + l.header_bytes + t * kformat::BlockBytes(l);
          if (l.scale_bytes > 0) {
            blk[r] = rg.scales[t][0];
            blk[16 + r] = rg.scales[t][1];
          }
          PutQuants(l, rg.q[t], r, blk);
        }
      }
    }
  }
}

void HalfBlockSums(const Q8Rows& x, int64_t m, int32_t* out) {
  const int64_t halves = x.k / 16;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t h = 0; h < halves; ++h) {
      int32_t s = 0;
      for (int c = 0; c < 16; ++c) s += x.q[i * x.k + 16 * h + c];
      out[i * halves + h] = s;
    }
  }
}

namespace scalar {

void Int8MatmulK(const Int8PackedMatrix& w, const Q8Rows& x, int64_t m, float* y, int64_t ldy,
                 int64_t n_begin, int64_t n_end) {
  const int f = kformat::FormatOf(w.type);
  const Layout& l = kformat::kLayouts[f];
  const int64_t nb = w.k / 32;
  const int64_t panel_bytes = Int8PanelBytes(w.type, w.k);
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* xq = x.q + i * x.k;
    for (int64_t j = n_begin; j < n_end; ++j) {
      const uint8_t* panel = w.data + (j / kInt8PanelRows) * panel_bytes;
      const int r = static_cast<int>(j % kInt8PanelRows);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* grp = panel + (b / l.blocks) * kformat::GroupBytes(l);
        const uint8_t* blk = grp + l.header_bytes + (b % l.blocks) * kformat::BlockBytes(l);
        const int8_t* xb = xq + 32 * b;
        int32_t isum[2] = {0, 0}, xsum[2] = {0, 0};
        for (int c = 0; c < 32; ++c) {
          isum[c / 16] += GetQuant(l, blk, r, c) * xb[c];
          xsum[c / 16] += xb[c];
        }
        const float d = Fp16ToFp32(Get16(grp + 2 * r));
        const float dx = x.d[i * nb + b], ds = x.ds[i * nb + b];
        switch (f) {
          case kformat::kQ5_0:
            acc = std::fma(static_cast<float>(isum[0] + isum[1] - 16 * x.qsum[i * nb + b]),
                           d * dx, acc);
            break;
          case kformat::kQ5_1:
            acc = std::fma(static_cast<float>(isum[0] + isum[1]), d * dx, acc);
            acc = std::fma(Fp16ToFp32(Get16(grp + 32 + 2 * r)), ds, acc);
            break;
          case kformat::kQ4K:
          case kformat::kQ5K: {
            const float dw = d * static_cast<float>(blk[r]);
            const float mw = -(Fp16ToFp32(Get16(grp + 32 + 2 * r)) * static_cast<float>(blk[16 + r]));
            acc = std::fma(static_cast<float>(isum[0] + isum[1]), dw * dx, acc);
            acc = std::fma(mw, ds, acc);
            break;
          }
          default: {  // Q6_K
            const int32_t sc0 = static_cast<int8_t>(blk[r]), sc1 = static_cast<int8_t>(blk[16 + r]);
            const int32_t s = sc0 * (isum[0] - 32 * xsum[0]) + sc1 * (isum[1] - 32 * xsum[1]);
            acc = std::fma(static_cast<float>(s), d * dx, acc);
            break;
          }
        }
      }
      y[i * ldy + j] = acc;
    }
  }
}

}  // namespace scalar
}  // namespace weft::kernels
