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
 * value rows (an interleave of two rows); the _kept kernels read a
 * head's panels and value pairs packed once for all its tasks a thread
 * runs, repacking one only when a block needs more of its keys.  NN's A
 * is P, probabilities, converted without saturation (p_to_pairs).  The
 * tile then is gemm.c's:
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
 * the pair buffers live in the task's scratch (attn__scratch.b16a, b16b,
 * and the kept operands at kpanels).
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
#include "bf16_pack_avx512.h"

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
                               bf16_load32(src, dt, (size_t)r * ld + c0, cnt));
    }
  }
}

/* to_pairs for P, the probabilities (float32, finite, at most dropout's
 * 1/(1 - p) and not negative): they need no saturation to BF16's largest
 * finite, only VCVTNE2PS2BF16's rounding, which is attn__bf16_round's on
 * them (nearest even, subnormals to 0). */
BF16K static void p_to_pairs(const float *src, size_t ld, int m, int k,
                             uint32_t *dst, int kp) {
  for (int r = 0; r < m; r++) {
    const float *s = src + (size_t)r * ld;
    uint16_t *d = (uint16_t *)(dst + (size_t)r * kp);
    for (int c0 = 0; c0 < k; c0 += 32) {
      int cnt = k - c0 < 32 ? k - c0 : 32, pad = (cnt + 1) & ~1;
      __mmask32 mk = pad >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << pad) - 1;
      __m512 lo = _mm512_maskz_loadu_ps(bf16_lanes(cnt), s + c0);
      __m512 hi = _mm512_maskz_loadu_ps(bf16_lanes(cnt - 16), s + c0 + 16);
      _mm512_mask_storeu_epi16(d + c0, mk,
                               (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
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
    __mmask16 mk = bf16_lanes(n - c);
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
  int kp = attn__bf16_pairs(k);
  to_pairs(a, adt, lda, m, k, a2, kp);
  for (int j0 = 0; j0 < n; j0 += TILE_NC) {
    int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
    bf16_pack_keys(elem(b, bdt, (size_t)j0 * ldb), bdt, ldb, w, k, pack,
                   kp);
    strip(m, w, kp, a2, (size_t)kp, pack, TILE_NC, c + j0, (size_t)ldc, 0,
          0.0f, alpha);
  }
}

BF16K void attn__bf16_nt_kept_avx512(int m, int n, int k, float alpha,
                                     const void *a, int adt, size_t lda,
                                     const void *b, int bdt, size_t ldb,
                                     int j0, float *c, int ldc, uint32_t *a2,
                                     uint32_t *panels, int *ready) {
  int kp = attn__bf16_pairs(k);
  to_pairs(a, adt, lda, m, k, a2, kp);
  for (int s = 0; s < n; s += TILE_NC) {
    int q = (j0 + s) / TILE_NC, w = n - s < TILE_NC ? n - s : TILE_NC;
    uint32_t *pk = panels + (size_t)q * TILE_NC * kp;
    if (ready[q] < w) {
      bf16_pack_keys(elem(b, bdt, (size_t)q * TILE_NC * ldb), bdt, ldb, w,
                     k, pk, kp);
      ready[q] = w;
    }
    strip(m, w, kp, a2, (size_t)kp, pk, TILE_NC, c + s, (size_t)ldc, 0,
          0.0f, alpha);
  }
}

/* C (+)= A (m, kb) times the value pairs vp (ldp words a pair row) of one
 * block of at most ATTN__KBLOCK keys: chains of KC_PAIRS pairs, the
 * block's first starting from beta C (load_c 0 for beta 0). */
BF16K static void nn_block(int m, int n, int kb, const float *a, int lda,
                           const uint32_t *vp, int ldp, int first,
                           float beta, float *c, int ldc, uint32_t *a2) {
  int kp = attn__bf16_pairs(kb);
  p_to_pairs(a, (size_t)lda, m, kb, a2, kp);
  for (int j0 = 0; j0 < n; j0 += TILE_NC) {
    int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
    for (int q0 = 0; q0 < kp; q0 += KC_PAIRS) {
      int kc = kp - q0 < KC_PAIRS ? kp - q0 : KC_PAIRS;
      int load_c = !first || q0 > 0 ? 1
                   : beta == 0.0f   ? 0
                   : beta == 1.0f   ? 1
                                    : 2;
      strip(m, w, kc, a2 + q0, (size_t)kp, vp + (size_t)q0 * ldp + j0,
            (size_t)ldp, c + j0, (size_t)ldc, load_c, beta, 1.0f);
    }
  }
}

BF16K void attn__bf16_nn_avx512(int m, int n, int k, const float *a,
                                int lda, const void *b, int bdt, size_t ldb,
                                float beta, float *c, int ldc, uint32_t *a2,
                                uint32_t *pack) {
  int ldp = attn__bf16_ldp(n);
  for (int k0 = 0; k0 < k; k0 += ATTN__KBLOCK) {
    int kb = k - k0 < ATTN__KBLOCK ? k - k0 : ATTN__KBLOCK;
    bf16_pack_values(elem(b, bdt, (size_t)k0 * ldb), bdt, ldb, kb, n, pack,
                     ldp);
    nn_block(m, n, kb, a + k0, lda, pack, ldp, k0 == 0, beta, c, ldc, a2);
  }
}

BF16K void attn__bf16_nn_kept_avx512(int m, int n, int k, const float *a,
                                     int lda, const void *b, int bdt,
                                     size_t ldb, int j0, float beta,
                                     float *c, int ldc, uint32_t *a2,
                                     uint32_t *vpairs, int *ready) {
  int ldp = attn__bf16_ldp(n);
  for (int s = 0; s < k; s += TILE_NC) {
    int q = (j0 + s) / TILE_NC, w = k - s < TILE_NC ? k - s : TILE_NC;
    if (ready[q] < w) {
      bf16_pack_values(elem(b, bdt, (size_t)q * TILE_NC * ldb), bdt, ldb,
                       w, n, vpairs + (size_t)q * (TILE_NC / 2) * ldp, ldp);
      ready[q] = w;
    }
  }
  for (int k0 = 0; k0 < k; k0 += ATTN__KBLOCK) {
    int kb = k - k0 < ATTN__KBLOCK ? k - k0 : ATTN__KBLOCK;
    nn_block(m, n, kb, a + k0, lda, vpairs + (size_t)(j0 + k0) / 2 * ldp,
             ldp, k0 == 0, beta, c, ldc, a2);
  }
}
#endif /* ATTN__HAVE_AVX2_FMA */
