/* transpose16_avx512.h - the 16 x 16 register transpose the native
 * kernels pack their panels with (gemm.c, gemm_bf16_avx512.c).  Include
 * after <immintrin.h> where AVX512 and INLINE are defined; the function
 * moves 32-bit lanes, so it serves float32 values and BF16 pairs alike.
 */
#ifndef TRANSPOSE16_AVX512_H
#define TRANSPOSE16_AVX512_H

/* 16 x 16 transpose: out[x] lane y = in[y] lane x. */
__attribute__((target("avx512f"))) static INLINE void
transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
  }
  for (int q = 0; q < 4; q++) {
    t[q] = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
    t[4 + q] = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
    t[8 + q] = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    t[12 + q] = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
  }
  for (int q = 0; q < 4; q++) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88);
    r[4 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(t[q], t[8 + q], 0xdd);
    r[12 + q] = _mm512_shuffle_f32x4(t[4 + q], t[12 + q], 0xdd);
  }
}

#endif /* TRANSPOSE16_AVX512_H */
