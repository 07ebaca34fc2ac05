// Vector math for the AVX-512 translation units of kernels/cpu (and only those: every
// function here is inline and compiled with AVX-512 flags; a TU built without them must
// not include this header).
#ifndef WEFT_KERNELS_CPU_AVX512_MATH_H_
#define WEFT_KERNELS_CPU_AVX512_MATH_H_

#include <immintrin.h>

namespace weft::kernels::avx512 {

// exp(x), relative error ~2e-7, for x in [-87, 88] (clamped outside): Cephes'
// polynomial on r = x - n*ln2, |r| <= ln2/2, times 2^n.
inline __m512 ExpPoly(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

}  // namespace weft::kernels::avx512

#endif  // WEFT_KERNELS_CPU_AVX512_MATH_H_
