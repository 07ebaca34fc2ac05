// AVX-512 SwiGLU (contract in swiglu.h): silu(g) * u with the polynomial exp of
// avx512_math.h (relative error ~2e-7) and an IEEE division.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx512_math.h"

namespace weft::kernels::avx512 {

void SwiGlu(const float* gate, const float* up, int64_t count, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i < count; i += 16) {
    const __mmask16 m = count - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                        : static_cast<__mmask16>((1u << (count - i)) - 1u);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = ExpPoly(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu, u));
  }
}

}  // namespace weft::kernels::avx512
