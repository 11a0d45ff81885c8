/* gemm.c - the attention's matrix products: cblas_sgemm, or native
 * AVX-512F kernels for exactly the two shapes the core needs.
 *
 *   NT  C (m, n) = alpha * A (m, k) B (n, k)^T   scores Q K^T, the
 *                                                additive projections
 *   NN  C (m, n) = A (m, k) B (k, n) + beta C     P V
 *
 * All row-major with leading dimensions; any m, n, k >= 1.
 *
 * The native kernels keep a tile of C, up to 6 rows by 64 columns or 12
 * rows by 32 (24 zmm accumulators), in registers and walk k: per step they
 * load up to four 16-wide vectors of one row of B and broadcast one
 * element of A per tile row into an FMA.  NN reads B (the value rows) in
 * place; NT first packs B transposed, 64 keys at a time, into [k][64]
 * panels (a 16 x 16 register transpose), so both run the same tile.  Edges
 * use masked loads and stores, so nothing outside the operands is read or
 * written.  Every element of C is, for each block of NN_KC keys in
 * increasing order, one FMA chain from zero over the block added to what C
 * held, so the answer does not depend on where a row falls in the tiling,
 * nor on m; and a long row is summed in two levels (the mean of 16000
 * values of 0.1 comes out 2.7e-6 off relatively with NN_KC 256 keys,
 * where one chain over every key was 1.5e-4 off).  The scores of the
 * online path read a head's K from panels kept for all its tasks a
 * thread runs (attn__gemm_nt_panels_avx512, packed on first use).
 *
 * Why native: Debian 12's OpenBLAS 0.3.21 does not recognise some recent
 * CPUs and then runs a generic SSE3 kernel; and for the small products of
 * short sequences its per-call overhead (argument checks, buffer set-up,
 * packing both operands) outweighs the arithmetic.  The native kernels
 * were ahead of every OpenBLAS kernel at every size measured, the proper
 * AVX-512 ones included (docs/decisions.md), so they run wherever the CPU
 * has AVX-512F and FMA, whatever kernel OpenBLAS picked.  Elsewhere, and
 * under valgrind (which hides AVX-512 from CPUID), cblas_sgemm runs.
 * attn__gemm_pick says which runs; no globals, no allocation (the NT panel
 * lives in the task's scratch), no I/O.
 */
#include <cblas.h>

#include "attn_impl.h"

/* ------------------------------------------------------------------ */
/* The portable path. */

static void blas_nt(int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda,
              b, ldb, 0.0f, c, ldc);
}

static void blas_nn(int m, int n, int k, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a,
              lda, b, ldb, beta, c, ldc);
}

/* ------------------------------------------------------------------ */
/* The AVX-512F kernels. */

#if ATTN__HAVE_AVX2_FMA
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE inline __attribute__((always_inline))
#include "transpose16_avx512.h"

#define TILE_TARGET AVX512
#define TILE_ELEM float
#include "tile_avx512.h"

/* Each k step prefetches B's row AHEAD_ROWS steps on (2 KiB at 64
 * columns): the scores' kept panels and P V's value rows stream from L2
 * on the large shapes.  Against no prefetch, twelve alternating runs
 * (docs/performance.md): 1-4 % less time on (1,16,2048,2048,D), causal
 * and windowed too, 2 % more on (1,8,128,128,64), whose 128 keys stay
 * in L1. */
enum { NN_KC = 256, AHEAD_ROWS = 8 };

#define TILE_LOAD(v)                                                       \
  if (nv > v)                                                              \
    b##v = v == nv - 1 ? _mm512_maskz_loadu_ps(last, bj + 16 * v)          \
                       : _mm512_loadu_ps(bj + 16 * v);
#define TILE_FMA(r, v)                                                     \
  if (TILE_LIVE(r, v)) c##r##v = _mm512_fmadd_ps(a##r, b##v, c##r##v);
#define TILE_BCAST(r)                                                      \
  __m512 a##r = mr > r ? _mm512_set1_ps(a[r * lda + j]) : b0;
/* One k step of row r: its A value broadcast, one FMA per vector. */
#define TILE_STEP(r) TILE_BCAST(r) TILE_ROW(r, TILE_FMA)
AVX512 static INLINE void tile(const int mr, const int nv, int kc,
                               const float *a, size_t lda, const float *b,
                               size_t ldb, float *c, size_t ldc,
                               __mmask16 last, int load_c, float beta,
                               float alpha) {
  const __m512 vbeta = _mm512_set1_ps(beta), valpha = _mm512_set1_ps(alpha);
  TILE_ALL(TILE_DECL)
  for (int j = 0; j < kc; j++) {
    const float *bj = b + j * ldb;
    for (int v = 0; v < nv; v++) /* maybe past B's end: never read */
      _mm_prefetch((const char *)((uintptr_t)(bj + 16 * v) +
                                  AHEAD_ROWS * ldb * sizeof(float)),
                   _MM_HINT_T0);
    __m512 b0 = _mm512_setzero_ps(), b1 = b0, b2 = b0, b3 = b0;
    TILE_LOAD(0) TILE_LOAD(1) TILE_LOAD(2) TILE_LOAD(3)
    TILE_EACH(TILE_STEP)
  }
  TILE_ALL(TILE_STORE)
}

TILE_DEFINE_STRIP()

AVX512 void attn__gemm_nn_avx512(int m, int n, int k, const float *a,
                                 int lda, const float *b, int ldb,
                                 float beta, float *c, int ldc) {
  /* Column strips of 64, then key blocks of NN_KC (a 64 KiB block of B
   * stays near the core while every row tile passes over it; half as
   * many loads and stores of C as blocks of 128 keys). */
  for (int j0 = 0; j0 < n; j0 += TILE_NC) {
    int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
    for (int p0 = 0; p0 < k; p0 += NN_KC) {
      int kc = k - p0 < NN_KC ? k - p0 : NN_KC;
      int load_c = p0 > 0 ? 1 : beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
      strip(m, w, kc, a + p0, (size_t)lda, b + (size_t)p0 * ldb + j0,
            (size_t)ldb, c + j0, (size_t)ldc, load_c, beta, 1.0f);
    }
  }
}

/* pk[d * 64 + c] = b[c * ldb + d] for keys c < w (<= 64), d < k; lanes
 * of a 16-key group beyond w are written as 0, and the groups beyond it
 * not at all (the tile's masks never read them). */
AVX512 static void pack_t(const float *b, size_t ldb, int w, int k,
                          float *pk) {
  for (int c0 = 0; c0 < w; c0 += 16) {
    int rows = w - c0 < 16 ? w - c0 : 16;
    for (int d0 = 0; d0 < k; d0 += 16) {
      int dk = k - d0 < 16 ? k - d0 : 16;
      __mmask16 mk = (__mmask16)attn__lanes16(dk);
      __m512 r[16];
      for (int y = 0; y < 16; y++)
        r[y] = y < rows ? _mm512_maskz_loadu_ps(
                              mk, b + (size_t)(c0 + y) * ldb + d0)
                        : _mm512_setzero_ps();
      transpose16(r);
      for (int x = 0; x < dk; x++)
        _mm512_storeu_ps(pk + (size_t)(d0 + x) * TILE_NC + c0, r[x]);
    }
  }
}

AVX512 void attn__gemm_nt_avx512(int m, int n, int k, float alpha,
                                 const float *a, int lda, const float *b,
                                 int ldb, float *c, int ldc, float *pack) {
  /* One panel of 64 keys at a time: packed once, then every row tile
   * passes over it (k * 256 bytes, in L1 for k <= 128). */
  for (int j0 = 0; j0 < n; j0 += TILE_NC) {
    int w = n - j0 < TILE_NC ? n - j0 : TILE_NC;
    pack_t(b + (size_t)j0 * ldb, (size_t)ldb, w, k, pack);
    strip(m, w, k, a, (size_t)lda, pack, TILE_NC, c + j0, (size_t)ldc, 0,
          0.0f, alpha);
  }
}

/* The same product over keys [j0, j0 + n) of a head whose panels are
 * kept: panel q (keys 64 q .. 64 q + 63 of b) lives at panels + 64 q k,
 * ready[q] says how many of its keys are packed, and a panel is packed
 * again, with more keys, when a block needs more than it has.  So only
 * the block's keys are ever read, as attn__gemm_nt_avx512 reads them.
 * j0 is a multiple of 64.  Each score is the same FMA chain over k as
 * attn__gemm_nt_avx512 computes, so the bits are the same. */
AVX512 void attn__gemm_nt_panels_avx512(int m, int n, int k, float alpha,
                                        const float *a, int lda,
                                        const float *b, int ldb, int j0,
                                        float *c, int ldc, float *panels,
                                        int *ready) {
  for (int s = 0; s < n; s += TILE_NC) {
    int q = (j0 + s) / TILE_NC, w = n - s < TILE_NC ? n - s : TILE_NC;
    float *pk = panels + (size_t)q * TILE_NC * k;
    if (ready[q] < w) {
      pack_t(b + (size_t)q * TILE_NC * ldb, (size_t)ldb, w, k, pk);
      ready[q] = w;
    }
    strip(m, w, k, a, (size_t)lda, pk, TILE_NC, c + s, (size_t)ldc, 0, 0.0f,
          alpha);
  }
}
#endif /* ATTN__HAVE_AVX2_FMA */

/* ------------------------------------------------------------------ */
/* Which one runs. */

size_t attn__gemm_pack_floats(const attn_problem *p) {
  int k = p->D > p->Dk ? p->D : p->Dk;
  return (size_t)64 * (size_t)k;
}

size_t attn__kept_bytes(const attn_problem *p, int gemm) {
  size_t panels = ((size_t)p->Lk + 63) / 64;
  if (p->scoring != ATTN_SCORING_DOT) return 0;
  if (gemm == ATTN_GEMM_NATIVE && !attn__is_bf16(p))
    return panels * 64 * (size_t)p->D * sizeof(float);
  if (gemm == ATTN_GEMM_BF16)
    return panels * (64 * (size_t)attn__bf16_pairs(p->D) +
                     32 * (size_t)attn__bf16_ldp(p->Dv)) *
           sizeof(uint32_t);
  return 0;
}

int attn__kpanels(const attn_problem *p, int gemm) {
  size_t bytes = attn__kept_bytes(p, gemm);
  if (bytes == 0 || bytes > ATTN__KPANEL_BYTES) return 0;
  return (int)(((size_t)p->Lk + 63) / 64);
}

/* Native where it can run unless BLAS is asked for (the table at the
 * top says why); in BF16 mode AMX where allowed, else the AVX512-BF16
 * kernels where they are the faster, or where they can run when asked
 * for (bf16.c).  __builtin_cpu_supports reads what libgcc found at
 * start-up: a load and a test, cheap enough for every call. */
int attn__gemm_pick(const attn_problem *p) {
  if (p->gemm == ATTN_GEMM_BLAS || !attn__use_avx512())
    return ATTN_GEMM_BLAS;
  /* BF16 mode: AMX where the caller allows it and the CPU has it, when
   * asked for or by default; VDPBF16PS when asked for, or by default
   * where it is the faster (attn_impl.h) */
  int dflt = p->gemm == ATTN_GEMM_AUTO || p->gemm == ATTN_GEMM_AMX;
  if (attn__is_bf16(p) && dflt && p->amx && attn__use_amx())
    return ATTN_GEMM_AMX;
  if (attn__is_bf16(p) &&
      (p->gemm == ATTN_GEMM_BF16 ? attn__use_avx512bf16()
       : dflt                    ? attn__fast_avx512bf16()
                                 : 0))
    return ATTN_GEMM_BF16;
  return ATTN_GEMM_NATIVE;
}

void attn__gemm_nt(int gemm, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb, float *c,
                   int ldc, float *pack) {
#if ATTN__HAVE_AVX2_FMA
  if (gemm == ATTN_GEMM_NATIVE) {
    attn__gemm_nt_avx512(m, n, k, alpha, a, lda, b, ldb, c, ldc, pack);
    return;
  }
#endif
  (void)gemm;
  (void)pack;
  blas_nt(m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

void attn__gemm_nn(int gemm, int m, int n, int k, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc) {
#if ATTN__HAVE_AVX2_FMA
  if (gemm == ATTN_GEMM_NATIVE) {
    attn__gemm_nn_avx512(m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  (void)gemm;
  blas_nn(m, n, k, a, lda, b, ldb, beta, c, ldc);
}
