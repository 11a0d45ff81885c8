/* bf16_pack_avx512.h - BF16 mode's operand packing in AVX-512, shared by
 * the AVX512-BF16 kernels (gemm_bf16_avx512.c) and the AMX ones
 * (gemm_bf16_amx.c), so that both read the same BF16 numbers: float32
 * rounded as attn__bf16_round does (VCVTNE2PS2BF16 after saturating to
 * BF16's largest finite), BF16 bits used as sent.
 *
 * Pair layout: a 32-bit word holds the pair (x[2p], x[2p + 1]) of one
 * column, the layout VDPBF16PS and TDPBF16PS multiply.
 *   keys:   pk[p * 64 + c] = (b[c][2p], b[c][2p + 1]), 64 keys a panel;
 *   values: vp[p * ldp + c] = (v[2p][c], v[2p + 1][c]).
 *
 * Include after <immintrin.h>, with INLINE and transpose16 defined (the
 * functions carry their own target attribute).
 */
#ifndef BF16_PACK_AVX512_H
#define BF16_PACK_AVX512_H

#define BF16_PACK __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* Keys a panel (the tile width of gemm_bf16_avx512.c). */
enum { BF16_PANEL = 64 };

/* Lanes [0, k) of 16; none for k <= 0. */
static inline __mmask16 bf16_lanes(int k) {
  return (__mmask16)(k <= 0 ? 0u : attn__lanes16(k));
}

/* Elements [off, off + cnt) of a float32 or BF16 tensor (cnt <= 32) as
 * 32 BF16 values, zero beyond cnt. */
BF16_PACK static INLINE __m512i bf16_load32(const void *src, int dt,
                                            size_t off, int cnt) {
  if (dt == ATTN_DTYPE_BF16) {
    __mmask32 mk = cnt >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << cnt) - 1;
    return _mm512_maskz_loadu_epi16(mk, (const uint16_t *)src + off);
  }
  const float *f = (const float *)src + off;
  const __m512 top = _mm512_set1_ps(ATTN__BF16_MAX);
  const __m512 bot = _mm512_set1_ps(-ATTN__BF16_MAX);
  __m512 lo = _mm512_maskz_loadu_ps(bf16_lanes(cnt), f);
  __m512 hi = _mm512_maskz_loadu_ps(bf16_lanes(cnt - 16), f + 16);
  lo = _mm512_min_ps(_mm512_max_ps(lo, bot), top);
  hi = _mm512_min_ps(_mm512_max_ps(hi, bot), top);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* The key panel of keys [0, w) (w <= 64) of b (k values each, leading
 * dimension ldb): pairs p < np are written, np >= (k + 1) / 2 (pairs
 * from (k + 1) / 2 on are 0, up to the next multiple of 16 at most);
 * lanes of a 16-key group beyond w are 0, groups beyond it are not
 * written. */
BF16_PACK static void bf16_pack_keys(const void *b, int dt, size_t ldb,
                                     int w, int k, uint32_t *pk, int np) {
  for (int c0 = 0; c0 < w; c0 += 16) {
    int rows = w - c0 < 16 ? w - c0 : 16;
    for (int d0 = 0; d0 < k; d0 += 32) {
      int cnt = k - d0 < 32 ? k - d0 : 32, p0 = d0 / 2;
      int nx = np - p0 < 16 ? np - p0 : 16;
      __m512 r[16];
      for (int y = 0; y < 16; y++)
        r[y] = y < rows ? _mm512_castsi512_ps(bf16_load32(
                              b, dt, (size_t)(c0 + y) * ldb + d0, cnt))
                        : _mm512_setzero_ps();
      transpose16(r);
      for (int x = 0; x < nx; x++)
        _mm512_storeu_ps(pk + (size_t)(p0 + x) * BF16_PANEL + c0, r[x]);
    }
  }
}

/* vp[p * ldp + c] = the pair (v[2p][c], v[2p + 1][c]) for p < (kb + 1)
 * / 2 and c < ldp (dv rounded up to 16; columns from dv on are 0), the
 * second half 0 for an odd kb's last pair. */
BF16_PACK static void bf16_pack_values(const void *v, int dt, size_t ldv,
                                       int kb, int dv, uint32_t *vp,
                                       int ldp) {
  const __m512i lo_idx = _mm512_set_epi16(
      47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
      38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  for (int p = 0; p < (kb + 1) / 2; p++) {
    uint32_t *row = vp + (size_t)p * ldp;
    int two = 2 * p + 1 < kb;
    for (int c0 = 0; c0 < dv; c0 += 32) {
      int cnt = dv - c0 < 32 ? dv - c0 : 32;
      __m512i a = bf16_load32(v, dt, (size_t)(2 * p) * ldv + c0, cnt);
      __m512i b = two ? bf16_load32(v, dt, (size_t)(2 * p + 1) * ldv + c0,
                                    cnt)
                      : _mm512_setzero_si512();
      _mm512_storeu_si512(row + c0, _mm512_permutex2var_epi16(a, lo_idx, b));
      if (c0 + 16 < ldp)
        _mm512_storeu_si512(row + c0 + 16,
                            _mm512_permutex2var_epi16(a, hi_idx, b));
    }
  }
}

#endif /* BF16_PACK_AVX512_H */
