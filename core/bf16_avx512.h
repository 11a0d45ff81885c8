/* bf16_avx512.h - attn__bf16_round (attn_impl.h) over sixteen float32
 * lanes in AVX-512F, for the files that round to BF16 in registers
 * (gemm_bf16_avx512.c, vexp.c).  Include after <immintrin.h>.
 */
#ifndef BF16_AVX512_H
#define BF16_AVX512_H

/* The same integer steps as attn__bf16_round, so the same bits. */
__attribute__((target("avx512f"))) static inline __m512i
attn__bf16_round16(__m512i u) {
  const __m512i one = _mm512_set1_epi32(1);
  __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __m512i sign = _mm512_andnot_si512(mag, u);
  __m512i r = _mm512_add_epi32(
      u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                          _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
  r = _mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u));
  __mmask16 tiny =
      _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(0x00800000));
  __mmask16 huge =
      _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(0x7f7f8000));
  r = _mm512_mask_mov_epi32(r, tiny, sign);
  return _mm512_mask_or_epi32(r, huge, sign, _mm512_set1_epi32(0x7f7f0000));
}

#endif /* BF16_AVX512_H */
