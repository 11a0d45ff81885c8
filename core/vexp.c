/* vexp.c - the softmax's hot row loops written for AVX2 + FMA with
 * intrinsics, next to the portable versions in rowops.c.
 *
 * Which one runs is decided per call from the CPU's feature bits
 * (__builtin_cpu_supports reads what libgcc found at start-up), so one
 * binary built for baseline x86-64 uses eight-lane FMA code where the CPU
 * has it (sixteen lanes for exp-and-sum with AVX-512F) and the SSE2
 * clones elsewhere.  The FMA code rounds differently
 * from the portable code (a fused multiply-add rounds once), so the two
 * may differ in the last bit; each is within 2 ulp of exp (test_core_kernels.c
 * checks both), far inside the contract's 1e-5.  On a given CPU the
 * choice never changes, so results stay bit-identical however the tasks
 * are split.
 *
 * exp here only ever sees x = s - m <= 0 (m is the row maximum), so it
 * needs no overflow clamp: arguments below ln(FLT_MIN) = -87.33 and -inf
 * give exactly 0, as attn__expf does.
 */
#include "attn_impl.h"

#if ATTN__HAVE_AVX2_FMA
#include <immintrin.h>

#define AVX2_FMA __attribute__((target("avx2,fma")))
#include "bf16_avx512.h"

/* exp(x) for x <= 0 in eight lanes.  x log2(e) + (1.5 * 2^23 + 127)
 * rounds to the nearest integer n in its low bits (one FMA): those bits,
 * shifted into the exponent field, are 2^n, and subtracting the constant
 * back gives n as a float.  r = x - n ln2 (Cody-Waite, two FMAs) lies in
 * [-ln2/2, ln2/2], where a degree-6 polynomial, fitted for relative error
 * (1.9e-9 before rounding), gives e^r to about 1 ulp.  No clamp: below
 * the cut-off the bits are garbage and the final mask makes them 0. */
AVX2_FMA static inline __m256 exp8(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f + 127.0f);
  __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
  __m256 n = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.3836845756e-3f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3748158067e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1668225080e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666419804e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.9999991059e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  /* exactly 0 below the cut-off, for -inf and for NaN */
  return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(ATTN__EXP_LO),
                                        _CMP_GE_OQ));
}

AVX2_FMA static float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
                        _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX2_FMA static float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v),
                        _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Lanes [0, k) of a vector are live (0 <= k <= 8). */
AVX2_FMA static __m256i tail_mask(int k) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), idx);
}

/* The same exp-and-sum in sixteen lanes where the CPU has AVX-512F:
 * the masked loads and stores handle the tail, and a zero-masking
 * multiply applies the cut-off (fewer instructions per element, which is
 * what counts where 512-bit operations run as two 256-bit halves). */
#define AVX512 __attribute__((target("avx512f")))

/* x = n ln2 + r: n = round(x / ln2) (the magic number rounds it). */
AVX512 static inline __m512 exp16_n(__m512 x) {
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
  return _mm512_sub_ps(t, magic);
}

/* y 2^n from exp16_n's n, and 0 where x is below float's range.
 * VSCALEFPS multiplies by 2^n in one instruction, with the one rounding
 * the product by a power of two built in the exponent bits has: the
 * same bits for every n >= -126 the cut-off lets through. */
AVX512 static inline __m512 exp16_scale(__m512 y, __m512 n, __m512 x) {
  __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTN__EXP_LO),
                                    _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(ok, y, n);
}

AVX512 static inline __m512 exp16(__m512 x) {
  __m512 n = exp16_n(x);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.3836845756e-3f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3748158067e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1668225080e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666419804e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.9999991059e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return exp16_scale(y, n, x);
}

/* exp(x) for x <= 0 to BF16's accuracy, for BF16 mode's probabilities
 * (they are rounded to BF16, relative error up to 2^-9, before they
 * multiply V): the same 2^n split, one Cody-Waite step (r off by at most
 * 126 times float ln2's error, 2.4e-7) and a degree-4 polynomial fitted
 * for relative error on [-ln2/2, ln2/2] (5.3e-6): within 2^-17 of exp,
 * for four FMAs where exp16 takes eight. */
AVX512 static inline __m512 exp16_bf16(__m512 x) {
  __m512 n = exp16_n(x);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.69314718056f), x);
  __m512 y = _mm512_set1_ps(4.1277717799e-02f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6753515601e-01f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0005114079e-01f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  return exp16_scale(y, n, x);
}

/* exp16, or exp16_bf16 when bf16 (a constant after inlining). */
AVX512 static inline __m512 exp16_of(__m512 x, const int bf16) {
  return bf16 ? exp16_bf16(x) : exp16(x);
}

/* e rounded to BF16 (bf16_avx512.h). */
AVX512 static inline __m512 round_ps(__m512 e) {
  return _mm512_castsi512_ps(attn__bf16_round16(_mm512_castps_si512(e)));
}

/* Lanes [0, k) live (k >= 1; 16 and more is all of them). */
AVX512 static inline __mmask16 live16(int k) {
  return (__mmask16)attn__lanes16(k);
}

/* s[c, c + 16) = exp(s - m) (times f) on the live lanes, added to acc;
 * the dead lanes add 0. */
AVX512 static inline __m512 exp_step16(float *s, const float *f, int c,
                                       __mmask16 live, __m512 vm,
                                       __m512 acc, const int bf16,
                                       const int round) {
  __m512 x = _mm512_maskz_loadu_ps(live, s + c);
  __m512 e = exp16_of(_mm512_sub_ps(x, vm), bf16);
  if (f) e = _mm512_mul_ps(e, _mm512_maskz_loadu_ps(live, f + c));
  _mm512_mask_storeu_ps(s + c, live, round ? round_ps(e) : e);
  return _mm512_mask_add_ps(acc, live, acc, e);
}

/* Whole vectors first, with every lane live (which costs no mask
 * instruction), then the tail; each lane sums the same terms in the same
 * order either way. */
AVX512 static inline float exp_sum16(float *s, const float *f, int a,
                                     int z, float m, const int bf16,
                                     const int round) {
  __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
  int c = a;
  for (; c + 16 <= z; c += 16)
    acc = exp_step16(s, f, c, 0xffff, vm, acc, bf16, round);
  if (c < z) acc = exp_step16(s, f, c, live16(z - c), vm, acc, bf16, round);
  return _mm512_reduce_add_ps(acc);
}

AVX512 float attn__exp_sum_avx512(float *s, const float *f, int a, int z,
                                  float m) {
  return exp_sum16(s, f, a, z, m, 0, 0);
}

/* attn__max_avx2 in sixteen lanes, the tail by mask: dead lanes keep the
 * running maximum, so they change nothing.  An inf or NaN shows as a NaN
 * in z = z + x * 0 (one FMA a vector, where a compare of |x| and an OR
 * of masks took three instructions on the FMA ports). */
AVX512 static inline float max16(const float *s, int a, int z,
                                 int *finite) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 mx0 = _mm512_set1_ps(-FLT_MAX), mx1 = mx0, z0 = zero, z1 = zero;
  int c = a;
  for (; c + 32 <= z; c += 32) {
    __m512 x0 = _mm512_loadu_ps(s + c), x1 = _mm512_loadu_ps(s + c + 16);
    mx0 = _mm512_max_ps(mx0, x0);
    mx1 = _mm512_max_ps(mx1, x1);
    z0 = _mm512_fmadd_ps(x0, zero, z0);
    z1 = _mm512_fmadd_ps(x1, zero, z1);
  }
  for (; c < z; c += 16) {
    __m512 x = _mm512_mask_loadu_ps(mx0, live16(z - c), s + c);
    mx0 = _mm512_max_ps(mx0, x);
    z0 = _mm512_fmadd_ps(x, zero, z0);
  }
  *finite = _mm512_cmp_ps_mask(_mm512_add_ps(z0, z1), zero, _CMP_EQ_OQ) ==
            0xffff;
  return _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
}

AVX512 float attn__max_avx512(const float *s, int a, int z, int *finite) {
  return max16(s, a, z, finite);
}

/* s[c0, c1) = 0. */
AVX512 static void zero16(float *s, int c0, int c1) {
  for (int c = c0; c < c1; c += 16)
    _mm512_mask_storeu_ps(s + c, live16(c1 - c), _mm512_setzero_ps());
}

/* One call per row instead of four: what the short rows of small
 * problems spend their time on is the calls.  A span of at most 16 keys
 * stays in one register from load to store.  mx: the span's maximum as
 * max16 gave it, found ahead (NULL: found here).  bf16: exp16_bf16;
 * round: the stored probabilities rounded to BF16 (the sum is of the
 * unrounded). */
AVX512 static inline int softmax_span16(float *s, int n, int a, int z,
                                        float floor, const float *mx,
                                        float *m_out, float *sum,
                                        const int bf16, const int round) {
  const __m512 big = _mm512_set1_ps(FLT_MAX);
  float m;
  if (z - a <= 16) {
    __mmask16 live = live16(z - a);
    __m512 x = _mm512_maskz_loadu_ps(live, s + a);
    if (_mm512_mask_cmp_ps_mask(live, _mm512_abs_ps(x), big, _CMP_NLE_UQ))
      return 0;
    m = _mm512_mask_reduce_max_ps(live, x);
    m = m > floor ? m : floor;
    __m512 e = exp16_of(_mm512_sub_ps(x, _mm512_set1_ps(m)), bf16);
    e = _mm512_maskz_mov_ps(live, e);
    _mm512_mask_storeu_ps(s + a, live, round ? round_ps(e) : e);
    *sum = _mm512_reduce_add_ps(e);
  } else {
    int finite = 1;
    m = mx ? *mx : max16(s, a, z, &finite);
    if (!finite) return 0;
    m = m > floor ? m : floor;
    *sum = exp_sum16(s, NULL, a, z, m, bf16, round);
  }
  zero16(s, 0, a);
  zero16(s, z, n);
  *m_out = m;
  return 1;
}

AVX512 int attn__softmax_span_avx512(float *s, int n, int a, int z,
                                     float floor, const float *mx,
                                     float *m_out, float *sum) {
  return softmax_span16(s, n, a, z, floor, mx, m_out, sum, 0, 0);
}

AVX512 int attn__softmax_span_bf16_avx512(float *s, int n, int a, int z,
                                          float floor, const float *mx,
                                          float *m_out, float *sum,
                                          int round) {
  if (round) return softmax_span16(s, n, a, z, floor, mx, m_out, sum, 1, 1);
  return softmax_span16(s, n, a, z, floor, mx, m_out, sum, 1, 0);
}

/* Soft-capping in sixteen lanes: s = cap * tanh(s / cap), NaN as 0 and
 * +-inf as +-cap (as attn__sanitize first would give).  tanh as
 * attn__tanhf: the Cephes odd polynomial below |y| = 0.625, and
 * (1 - e) / (1 + e) with e = exp(-2|y|) <= 1 above (exp16 wants a
 * non-positive argument), the sign of y put back.  A vector whose lanes
 * all lie below 0.625 (scores under 0.625 cap: the usual case, the cap
 * being there for outliers) takes the polynomial alone; each lane's
 * value is the same either way. */
AVX512 static inline __m512 tanh_small16(__m512 y) {
  __m512 z = _mm512_mul_ps(y, y);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  return _mm512_fmadd_ps(_mm512_mul_ps(p, z), y, y);
}

/* Lanes lo take the polynomial, the others (1 - e) / (1 + e). */
AVX512 static inline __m512 tanh16(__m512 y, __mmask16 lo) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 ay = _mm512_abs_ps(y);
  __m512 small = tanh_small16(_mm512_maskz_mov_ps(lo, y));
  __m512 e = exp16(_mm512_mul_ps(ay, _mm512_set1_ps(-2.0f)));
  /* 1 / (1 + e) by rcp14 and one Newton step (about 1 ulp; a divide
   * would cost more than the rest of the loop) */
  __m512 d = _mm512_add_ps(one, e), r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  __m512 large = _mm512_mul_ps(_mm512_sub_ps(one, e), r);
  /* copysign(large, y) */
  large = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(large), _mm512_castps_si512(y),
      _mm512_set1_epi32(0x7fffffff), 0xe4));
  return _mm512_mask_mov_ps(large, lo, small);
}

AVX512 void attn__softcap_avx512(float *s, int a, int z, float cap) {
  const __m512 lim = _mm512_set1_ps(0.625f);
  __m512 vc = _mm512_set1_ps(cap), vi = _mm512_set1_ps(1.0f / cap);
  for (int c = a; c < z; c += 16) {
    __mmask16 live = live16(z - c);
    __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, s + c), vi);
    /* NaN compares false: it takes the full path, and becomes 0 */
    __mmask16 lo = _mm512_cmp_ps_mask(_mm512_abs_ps(y), lim, _CMP_LT_OQ);
    __m512 t;
    if ((lo & live) == live) {
      t = tanh_small16(y);
    } else {
      t = tanh16(y, lo);
      t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), t);
    }
    _mm512_mask_storeu_ps(s + c, live, _mm512_mul_ps(vc, t));
  }
}

/* ALiBi in sixteen lanes: s -= slope * |base - c|; the distances are
 * whole floats counted down sixteen at a time (exact below 2^24). */
AVX512 void attn__alibi_avx512(float *s, int a, int z, float slope,
                               int base) {
  const __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                     12, 13, 14, 15);
  __m512 vs = _mm512_set1_ps(slope), step = _mm512_set1_ps(16.0f);
  __m512 d = _mm512_sub_ps(_mm512_set1_ps((float)(base - a)), lane);
  for (int c = a; c < z; c += 16) {
    __mmask16 live = live16(z - c);
    __m512 x = _mm512_maskz_loadu_ps(live, s + c);
    x = _mm512_fnmadd_ps(vs, _mm512_abs_ps(d), x);
    _mm512_mask_storeu_ps(s + c, live, x);
    d = _mm512_sub_ps(d, step);
  }
}

/* w[c0, c1) = src * g, or 0 when src is NULL; masked tail. */
AVX512 static void put_span16(float *w, int c0, int c1, const float *src,
                              float g) {
  __m512 vg = _mm512_set1_ps(g);
  for (int c = c0; c < c1; c += 16) {
    __mmask16 live = live16(c1 - c);
    __m512 x = src ? _mm512_mul_ps(_mm512_maskz_loadu_ps(live, src + (c - c0)),
                                   vg)
                   : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(w + c, live, x);
  }
}

AVX512 void attn__write_row_avx512(float *w, int lk, int klo, int khi,
                                   const float *s, float inv) {
  put_span16(w, 0, klo, NULL, 0.0f);
  put_span16(w, klo, khi, s, inv);
  put_span16(w, khi, lk, NULL, 0.0f);
}

/* x[0, n) *= g, sixteen lanes at a time (the same products). */
AVX512 void attn__scale_avx512(float *x, size_t n, float g) {
  const __m512 vg = _mm512_set1_ps(g);
  for (size_t c = 0; c < n; c += 16) {
    __mmask16 live = live16(n - c < 16 ? (int)(n - c) : 16);
    _mm512_mask_storeu_ps(
        x + c, live, _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + c), vg));
  }
}

/* attn__scale_sanitize: VFIXUPIMMPS maps +-inf to +-FLT_MAX and NaN to
 * +0 and leaves every other value alone, in one instruction (the token
 * of each class, four bits each from QNaN up: +0, +0, src, src, -MAX,
 * +MAX, src, src).  The clipped lanes (|x| > FLT_MAX or NaN) are OR-ed
 * into one mask. */
AVX512 int attn__scale_sanitize_avx512(float *dst, const float *src, int n,
                                       float g) {
  const __m512 vg = _mm512_set1_ps(g), big = _mm512_set1_ps(FLT_MAX);
  const __m512i fix = _mm512_set1_epi32(0x11EF1188);
  __mmask16 clipped = 0;
  for (int c = 0; c < n; c += 16) {
    __mmask16 live = live16(n - c);
    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, src + c), vg);
    clipped |= _mm512_mask_cmp_ps_mask(live, _mm512_abs_ps(x), big,
                                       _CMP_NLE_UQ);
    x = _mm512_fixupimm_ps(x, x, fix, 0);
    _mm512_mask_storeu_ps(dst + c, live, x);
  }
  return clipped == 0;
}

AVX2_FMA float attn__exp_sum_avx2(float *s, const float *f, int a, int z,
                                  float m) {
  __m256 vm = _mm256_set1_ps(m), acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int c = a;
  for (; c + 16 <= z; c += 16) {
    __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c), vm));
    __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + c + 8), vm));
    if (f) {
      e0 = _mm256_mul_ps(e0, _mm256_loadu_ps(f + c));
      e1 = _mm256_mul_ps(e1, _mm256_loadu_ps(f + c + 8));
    }
    _mm256_storeu_ps(s + c, e0);
    _mm256_storeu_ps(s + c + 8, e1);
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
  }
  for (; c < z; c += 8) {
    __m256i live = tail_mask(z - c);
    __m256 x = _mm256_maskload_ps(s + c, live);
    __m256 e = exp8(_mm256_sub_ps(x, vm));
    if (f) e = _mm256_mul_ps(e, _mm256_maskload_ps(f + c, live));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(live));
    _mm256_maskstore_ps(s + c, live, e);
    acc0 = _mm256_add_ps(acc0, e);
  }
  return hsum8(_mm256_add_ps(acc0, acc1));
}

/* Maximum of s[a, z) (a < z); *finite = 0 when some entry is +-inf or
 * NaN (then the maximum is meaningless and the caller sanitizes). */
AVX2_FMA float attn__max_avx2(const float *s, int a, int z, int *finite) {
  const __m256 big = _mm256_set1_ps(FLT_MAX);
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mx0 = _mm256_set1_ps(-FLT_MAX), mx1 = mx0;
  __m256 bad = _mm256_setzero_ps();
  int c = a;
  for (; c + 16 <= z; c += 16) {
    __m256 x0 = _mm256_loadu_ps(s + c), x1 = _mm256_loadu_ps(s + c + 8);
    mx0 = _mm256_max_ps(mx0, x0);
    mx1 = _mm256_max_ps(mx1, x1);
    /* |x| > FLT_MAX or unordered: inf or NaN */
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(x0, absm), big,
                                          _CMP_NLE_UQ));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(x1, absm), big,
                                          _CMP_NLE_UQ));
  }
  for (; c < z; c += 8) {
    __m256i live = tail_mask(z - c);
    __m256 x = _mm256_maskload_ps(s + c, live); /* dead lanes read 0 */
    x = _mm256_blendv_ps(mx0, x, _mm256_castsi256_ps(live));
    mx0 = _mm256_max_ps(mx0, x);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(x, absm), big,
                                          _CMP_NLE_UQ));
  }
  *finite = _mm256_movemask_ps(bad) == 0;
  return hmax8(_mm256_max_ps(mx0, mx1));
}

/* w[c] = x for c in [c0, c1): plain stores, or streaming stores from
 * the first 32-byte boundary on.  src NULL writes zeros, else src * g. */
AVX2_FMA static void put_span(float *w, int c0, int c1, const float *src,
                              float g, int stream) {
  __m256 vg = _mm256_set1_ps(g), zero = _mm256_setzero_ps();
  int c = c0;
  if (stream) {
    for (; c < c1 && ((uintptr_t)(w + c) & 31) != 0; c++)
      w[c] = src ? src[c - c0] * g : 0.0f;
    for (; c + 8 <= c1; c += 8)
      _mm256_stream_ps(w + c, src ? _mm256_mul_ps(_mm256_loadu_ps(
                                        src + (c - c0)), vg) : zero);
  } else {
    for (; c + 8 <= c1; c += 8)
      _mm256_storeu_ps(w + c, src ? _mm256_mul_ps(_mm256_loadu_ps(
                                        src + (c - c0)), vg) : zero);
  }
  for (; c < c1; c++) w[c] = src ? src[c - c0] * g : 0.0f;
}

AVX2_FMA void attn__write_row_avx2(float *w, int lk, int klo, int khi,
                                   const float *s, float inv, int stream) {
  put_span(w, 0, klo, NULL, 0.0f, stream);
  put_span(w, klo, khi, s, inv, stream);
  put_span(w, khi, lk, NULL, 0.0f, stream);
}

AVX2_FMA void attn__sfence_avx2(void) { _mm_sfence(); }

#endif /* ATTN__HAVE_AVX2_FMA */
