/* tile_avx512.h - the register tile of the native matrix products,
 * shared by the float32 kernels (gemm.c) and the BF16 ones
 * (gemm_bf16_avx512.c): the accumulators, their store, the dispatch on
 * a constant row count and the strip of tiles over a column block.
 *
 * The includer defines TILE_TARGET (the functions' target attribute),
 * TILE_ELEM (the element type of A and B: float, or uint32_t BF16
 * pairs), then, after this header, TILE_LOAD(v), TILE_STEP(r) and a
 * static inline tile(mr, nv, TILE_ARGS-shaped parameters) built from
 * these pieces, and last TILE_DEFINE_STRIP(), which defines tile_1 ..
 * tile_4, their table and strip().  Include after <immintrin.h>.
 */
#ifndef TILE_AVX512_H
#define TILE_AVX512_H

/* Tiles are up to TILE_MR rows by TILE_NV vectors, TILE_MR2 rows when
 * they are at most two vectors wide: 24 accumulators either way, and at
 * least 8 independent FMA chains (FMA latency 4 x 2 ports) for any tile
 * of 8 or more rows. */
enum { TILE_MR = 6, TILE_MR2 = 12, TILE_NV = 4, TILE_NC = 16 * TILE_NV };

/* One tile: C[0, mr) x [0, 16 nv) (the last vector's lanes by mask
 * last) = alpha * (init + sum_{j < kc} A[r][j] B[j][.]), where init is 0
 * (load_c 0), C (load_c 1) or beta C (load_c 2), added to the sum once
 * it is complete.  mr and nv are
 * constants after inlining.  The accumulators are named variables, not
 * an array: gcc keeps an array of vectors in memory across the loop. */
#define TILE_VEC(v) (v == nv - 1 ? last : (__mmask16)0xffff)
#define TILE_ROW(r, X) X(r, 0) X(r, 1) X(r, 2) X(r, 3)
#define TILE_ALL(X)                                                        \
  TILE_ROW(0, X) TILE_ROW(1, X) TILE_ROW(2, X) TILE_ROW(3, X)              \
  TILE_ROW(4, X) TILE_ROW(5, X) TILE_ROW(6, X) TILE_ROW(7, X)              \
  TILE_ROW(8, X) TILE_ROW(9, X) TILE_ROW(10, X) TILE_ROW(11, X)
#define TILE_EACH(Y)                                                       \
  Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11)
#define TILE_DECL(r, v) __m512 c##r##v = _mm512_setzero_ps();
#define TILE_LIVE(r, v) (mr > r && nv > v)
/* The block's sums go onto C (times beta) only now: each is an FMA
 * chain of kc terms from zero, so a long row is summed in two levels,
 * not as one chain over every key. */
#define TILE_STORE(r, v)                                                   \
  if (TILE_LIVE(r, v)) {                                                   \
    float *cv = c + r * ldc + 16 * v;                                      \
    __m512 x = c##r##v;                                                    \
    if (load_c) {                                                          \
      __m512 old = _mm512_maskz_loadu_ps(TILE_VEC(v), cv);                 \
      x = load_c == 2 ? _mm512_fmadd_ps(old, vbeta, x)                     \
                      : _mm512_add_ps(old, x);                             \
    }                                                                      \
    if (alpha != 1.0f) x = _mm512_mul_ps(x, valpha);                       \
    _mm512_mask_storeu_ps(cv, TILE_VEC(v), x);                             \
  }

#define TILE_ARGS kc, a, lda, b, ldb, c, ldc, last, load_c, beta, alpha
#define TILE_PARAMS                                                        \
  int mr, int kc, const TILE_ELEM *a, size_t lda, const TILE_ELEM *b,     \
      size_t ldb, float *c, size_t ldc, __mmask16 lanes, int load_c,       \
      float beta, float alpha

/* tile_NV(mr, ...): the tile with NV vectors and a constant row count;
 * more than TILE_MR rows only for NV <= 2. */
#define TILE_CASE(MR, NV) case MR: tile(MR, NV, TILE_ARGS); break;
#define TILE_SWITCH(NV, WIDE)                                              \
    switch (mr) {                                                          \
    WIDE                                                                   \
    TILE_CASE(6, NV) TILE_CASE(5, NV) TILE_CASE(4, NV)                     \
    TILE_CASE(3, NV) TILE_CASE(2, NV)                                      \
    default: tile(1, NV, TILE_ARGS); break;                                \
    }
/* A tile whose last vector is whole (every width a multiple of 16, the
 * usual case) gets last as a constant: its loads then take no mask,
 * which on Intel's cores would cost a port-5 instruction each k step,
 * one of the two the FMAs issue on. */
#define TILE_ROWS(NV, WIDE)                                                \
  TILE_TARGET static void tile_##NV(TILE_PARAMS) {                         \
    if (lanes == 0xffff) {                                                 \
      const __mmask16 last = 0xffff;                                       \
      TILE_SWITCH(NV, WIDE)                                                \
    } else {                                                               \
      const __mmask16 last = lanes;                                        \
      TILE_SWITCH(NV, WIDE)                                                \
    }                                                                      \
  }
#define TILE_WIDE(NV)                                                      \
  TILE_CASE(12, NV) TILE_CASE(11, NV) TILE_CASE(10, NV) TILE_CASE(9, NV)   \
  TILE_CASE(8, NV) TILE_CASE(7, NV)
/* tile_1 .. tile_4, tiles_by_width (tile_NV by NV - 1) and strip(): the
 * tiles of rows [0, m) of one column strip of width w <= 64, as few as
 * the height limit allows, of (nearly) equal heights, so that no thin
 * tile is left waiting on FMA latency. */
#define TILE_DEFINE_STRIP()                                                 \
TILE_ROWS(1, TILE_WIDE(1))                                                   \
TILE_ROWS(2, TILE_WIDE(2))                                                   \
TILE_ROWS(3, )                                                               \
TILE_ROWS(4, )                                                               \
                                                                             \
static void (*const tiles_by_width[TILE_NV])(TILE_PARAMS) = {tile_1, tile_2, \
                                                          tile_3, tile_4};   \
                                                                             \
TILE_TARGET static void strip(int m, int w, int kc, const TILE_ELEM *a,      \
                              size_t lda, const TILE_ELEM *b, size_t ldb,    \
                              float *c, size_t ldc, int load_c, float beta,  \
                              float alpha) {                                 \
  int nv = (w + 15) / 16, mrmax = nv <= 2 ? TILE_MR2 : TILE_MR;              \
  int tiles = (m + mrmax - 1) / mrmax;                                       \
  __mmask16 last = (__mmask16)attn__lanes16(w - 16 * (nv - 1));              \
  for (int i0 = 0, t = 0; t < tiles; t++) {                                  \
    int mr = (m - i0) / (tiles - t) + ((m - i0) % (tiles - t) != 0);         \
    tiles_by_width[nv - 1](mr, kc, a + (size_t)i0 * lda, lda, b, ldb,        \
                           c + (size_t)i0 * ldc, ldc, last, load_c, beta,    \
                           alpha);                                           \
    i0 += mr;                                                                \
  }                                                                          \
}

#endif /* TILE_AVX512_H */
