/* gemm_bf16_avx512.c - the products of BF16 mode on AVX512-BF16
 * (VDPBF16PS: sixteen float32 sums, each adding two products of BF16
 * pairs, twice the multiply-adds of an FMA per instruction).
 *
 *   NT  C (m, n) = alpha * A (m, k) B (n, k)^T   scores Q K^T
 *   NN  C (m, n) = A (m, k) B (k, n) + beta C     P V
 *
 * Operands come as float32 (rounded here to BF16, nearest even, values
 * beyond BF16's largest finite saturated to it) or as BF16 bits used as
 * they are (enum attn_dtype).  Both kernels first put their operands in
 * pair order: A's rows as BF16 with the k axis padded to even (a 32-bit
 * word holds the pair k = 2p, 2p + 1), and B as [k / 2][columns] words,
 * each word the pair (B[2p][c], B[2p + 1][c]): NT packs 64 keys at a
 * time (a 16 x 16 transpose of words), NN a block of up to ATTN__KBLOCK
 * value rows (an interleave of two rows).  The tile then is gemm.c's:
 * up to 6 rows by 64 columns or 12 by 32 in 24 accumulators; per pair
 * it loads up to four vectors of B, broadcasts one word of A per row and
 * issues one VDPBF16PS per accumulator (tile_avx512.h holds what the two
 * kernels share).  NN sums 128 pairs (256 keys) in
 * one chain and adds that to C, as gemm.c does with 256 keys, so the
 * answer does not depend on where a row falls in the tiling, nor on m.
 *
 * VDPBF16PS ignores the MXCSR: it treats BF16 subnormals as 0, flushes
 * subnormal results to 0 and rounds to nearest even; bf16.c's portable
 * rounding treats subnormals the same way.  No globals, no allocation:
 * the pair buffers live in the task's scratch (attn__scratch.b16a, b16b).
 */
#include "attn_impl.h"

#if ATTN__HAVE_AVX2_FMA
#include <immintrin.h>

#define BF16K __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))
#define INLINE inline __attribute__((always_inline))
#include "transpose16_avx512.h"
#include "bf16_avx512.h"
#define TILE_TARGET BF16K
#define TILE_ELEM uint32_t
#include "tile_avx512.h"

/* Lanes [0, k) of 16; none for k <= 0. */
static inline __mmask16 lanes(int k) {
  return (__mmask16)(k <= 0 ? 0u : attn__lanes16(k));
}

/* Elements [off, off + cnt) of a float32 or BF16 tensor (cnt <= 32) as
 * 32 BF16 values, zero beyond cnt. */
BF16K static INLINE __m512i load32(const void *src, int dt, size_t off,
                                   int cnt) {
  if (dt == ATTN_DTYPE_BF16) {
    __mmask32 mk = cnt >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << cnt) - 1;
    return _mm512_maskz_loadu_epi16(mk, (const uint16_t *)src + off);
  }
  const float *f = (const float *)src + off;
  const __m512 top = _mm512_set1_ps(ATTN__BF16_MAX);
  const __m512 bot = _mm512_set1_ps(-ATTN__BF16_MAX);
  __m512 lo = _mm512_maskz_loadu_ps(lanes(cnt), f);
  __m512 hi = _mm512_maskz_loadu_ps(lanes(cnt - 16), f + 16);
  lo = _mm512_min_ps(_mm512_max_ps(lo, bot), top);
  hi = _mm512_min_ps(_mm512_max_ps(hi, bot), top);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* dst row r (kp words) = src row r (k values, leading dimension ld) as
 * BF16 pairs, the last pair's second half 0 when k is odd. */
BF16K static void to_pairs(const void *src, int dt, size_t ld, int m, int k,
                           uint32_t *dst, int kp) {
  for (int r = 0; r < m; r++) {
    uint16_t *d = (uint16_t *)(dst + (size_t)r * kp);
    for (int c0 = 0; c0 < k; c0 += 32) {
      int cnt = k - c0 < 32 ? k - c0 : 32, pad = (cnt + 1) & ~1;
      __mmask32 mk = pad >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << pad) - 1;
      _mm512_mask_storeu_epi16(d + c0, mk,
                               load32(src, dt, (size_t)r * ld + c0, cnt));
    }
  }
}

/* pk[p * 64 + c] = the pair (b[c][2p], b[c][2p + 1]) for keys c < w (<=
 * 64) and pairs p < kp; lanes of a 16-key group beyond w are 0, groups
 * beyond it are not written (the tile's masks never read them). */
BF16K static void pack_keys(const void *b, int dt, size_t ldb, int w, int k,
                            uint32_t *pk) {
  int kp = (k + 1) / 2;
  for (int c0 = 0; c0 < w; c0 += 16) {
    int rows = w - c0 < 16 ? w - c0 : 16;
    for (int d0 = 0; d0 < k; d0 += 32) {
      int cnt = k - d0 < 32 ? k - d0 : 32, p0 = d0 / 2;
      int np = kp - p0 < 16 ? kp - p0 : 16;
      __m512 r[16];
      for (int y = 0; y < 16; y++)
        r[y] = y < rows ? _mm512_castsi512_ps(load32(
                              b, dt, (size_t)(c0 + y) * ldb + d0, cnt))
                        : _mm512_setzero_ps();
      transpose16(r);
      for (int x = 0; x < np; x++)
        _mm512_storeu_ps(pk + (size_t)(p0 + x) * TILE_NC + c0, r[x]);
    }
  }
}

/* vp[p * ldp + c] = the pair (v[2p][c], v[2p + 1][c]) for p < (kb + 1)
 * / 2 and c < ldp (dv rounded up to 16; columns from dv on are 0), the
 * second half 0 for an odd kb's last pair. */
BF16K static void pack_values(const void *v, int dt, size_t ldv, int kb,
                              int dv, uint32_t *vp, int ldp) {
  const __m512i lo_idx = _mm512_set_epi16(
      47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
      38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  for (int p = 0; p < (kb + 1) / 2; p++) {
    uint32_t *row = vp + (size_t)p * ldp;
    int two = 2 * p + 1 < kb;
    for (int c0 = 0; c0 < dv; c0 += 32) {
      int cnt = dv - c0 < 32 ? dv - c0 : 32;
      __m512i a = load32(v, dt, (size_t)(2 * p) * ldv + c0, cnt);
      __m512i b = two ? load32(v, dt, (size_t)(2 * p + 1) * ldv + c0, cnt)
                      : _mm512_setzero_si512();
      _mm512_storeu_si512(row + c0, _mm512_permutex2var_epi16(a, lo_idx, b));
      if (c0 + 16 < ldp)
        _mm512_storeu_si512(row + c0 + 16,
                            _mm512_permutex2var_epi16(a, hi_idx, b));
    }
  }
}

enum { KC_PAIRS = 128 };

/* One tile, as gemm.c's: C[0, mr) x [0, 16 nv) = alpha * (init + sum_{p
 * < kc} A[r][p] . B[p][.]), a and b pair words, one VDPBF16PS per
 * accumulator and pair. */
#define TILE_LOAD(v)                                                       \
  if (nv > v) b##v = (__m512bh)_mm512_loadu_si512(bj + 16 * v);
#define TILE_DOT(r, v)                                                     \
  if (TILE_LIVE(r, v)) c##r##v = _mm512_dpbf16_ps(c##r##v, a##r, b##v);
#define TILE_BCAST(r)                                                      \
  __m512bh a##r =                                                          \
      mr > r ? (__m512bh)_mm512_set1_epi32((int)a[r * lda + j]) : b0;
#define TILE_STEP(r) TILE_BCAST(r) TILE_ROW(r, TILE_DOT)

BF16K static INLINE void tile(const int mr, const int nv, int kc,
                              const uint32_t *a, size_t lda,
                              const uint32_t *b, size_t ldb, float *c,
                              size_t ldc, __mmask16 last, int load_c,
                              float beta, float alpha) {
  const __m512 vbeta = _mm512_set1_ps(beta), valpha = _mm512_set1_ps(alpha);
  TILE_ALL(TILE_DECL)
  for (int j = 0; j < kc; j++) {
    const uint32_t *bj = b + j * ldb;
    __m512bh b0 = (__m512bh)_mm512_setzero_si512(), b1 = b0, b2 = b0,
             b3 = b0;
    TILE_LOAD(0) TILE_LOAD(1) TILE_LOAD(2) TILE_LOAD(3)
    TILE_EACH(TILE_STEP)
  }
  TILE_ALL(TILE_STORE)
}

TILE_DEFINE_STRIP()

static const void *elem(const void *base, int dt, size_t off) {
  return dt == ATTN_DTYPE_BF16 ? (const void *)((const uint16_t *)base + off)
                               : (const void *)((const float *)base + off);
}

#define AVX512F __attribute__((target("avx512f")))

AVX512F void attn__bf16_round_avx512(float *dst, const float *src, int n) {
  for (int c = 0; c < n; c += 16) {
    __mmask16 mk = lanes(n - c);
    __m512i u = _mm512_maskz_loadu_epi32(mk, src + c);
    _mm512_mask_storeu_epi32(dst + c, mk, attn__bf16_round16(u));
  }
}

AVX512F void attn__bf16_widen_avx512(float *dst, const uint16_t *src, int n) {
  int c = 0;
  for (; c + 16 <= n; c += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(src + c));
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_si512(dst + c, attn__bf16_round16(u));
  }
  for (; c < n; c++) dst[c] = attn__bf16_round(attn__bf16_widen(src[c]));
}

BF16K void attn__bf16_nt_avx512(int m, int n, int k, float alpha,
                                const void *a, int adt, size_t lda,
                                const void *b, int bdt, size_t ldb, float *c,
                                int ldc, uint32_t *a2, uint32_t *pack) {
  int kp = (k + 1) / 2;
  to_pairs(a, adt, lda, m, k, a2, kp);
  for (int j0 = 0; j0 < n; j0 += TILE_NC) {
    int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
    pack_keys(elem(b, bdt, (size_t)j0 * ldb), bdt, ldb, w, k, pack);
    strip(m, w, kp, a2, (size_t)kp, pack, TILE_NC, c + j0, (size_t)ldc, 0,
          0.0f, alpha);
  }
}

BF16K void attn__bf16_nn_avx512(int m, int n, int k, const float *a,
                                int lda, const void *b, int bdt, size_t ldb,
                                float beta, float *c, int ldc, uint32_t *a2,
                                uint32_t *pack) {
  int ldp = (n + 15) / 16 * 16;
  for (int k0 = 0; k0 < k; k0 += ATTN__KBLOCK) {
    int kb = k - k0 < ATTN__KBLOCK ? k - k0 : ATTN__KBLOCK;
    int kp = (kb + 1) / 2;
    to_pairs(a + k0, ATTN_DTYPE_F32, (size_t)lda, m, kb, a2, kp);
    pack_values(elem(b, bdt, (size_t)k0 * ldb), bdt, ldb, kb, n, pack, ldp);
    for (int j0 = 0; j0 < n; j0 += TILE_NC) {
      int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
      for (int q0 = 0; q0 < kp; q0 += KC_PAIRS) {
        int kc = kp - q0 < KC_PAIRS ? kp - q0 : KC_PAIRS;
        int load_c = k0 > 0 || q0 > 0 ? 1
                     : beta == 0.0f   ? 0
                     : beta == 1.0f   ? 1
                                      : 2;
        strip(m, w, kc, a2 + q0, (size_t)kp, pack + (size_t)q0 * ldp + j0,
              (size_t)ldp, c + j0, (size_t)ldc, load_c, beta, 1.0f);
      }
    }
  }
}
#endif /* ATTN__HAVE_AVX2_FMA */
