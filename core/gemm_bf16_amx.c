/* gemm_bf16_amx.c - the products of BF16 mode on AMX (TDPBF16PS: a 16 x
 * 16 float32 tile plus a 16 x 32 BF16 tile times a 32 x 16 one, 8192
 * multiply-adds an instruction).
 *
 *   NT  C (m, n) = alpha * A (m, k) B (n, k)^T   scores Q K^T
 *   NN  C (m, n) = A (m, k) B (k, n) + beta C     P V
 *
 * The contracts of gemm_bf16_avx512.c, and its rounding code
 * (bf16_pack_avx512.h): the BF16 numbers multiplied are those of every
 * other kernel path, and only the order of the float32 sums differs.
 *
 * Layout.  A's rows as BF16, k padded with zeros to a multiple of 32
 * and the rows to a multiple of 16 (an A tile is 16 rows of 32 values);
 * B in pair layout (a 32-bit word holds B[2p][c], B[2p + 1][c]), the
 * pairs padded with zeros to a multiple of 16 (a B tile is 16 pairs of
 * 16 columns): NT the 64-key panels of gemm_bf16_avx512.c, NN the value
 * pairs of a block of up to ATTN__KBLOCK keys.  A padded product is an
 * exact zero added to a sum that starts at +0, so padding changes no
 * bit.
 *
 * Tiles: tmm0-3 hold a block of 32 x 32 sums (2 x 2 tiles), tmm4-5 the
 * two A tiles and tmm6-7 the two B tiles of one step of 32 along k.
 * Each element of C is one chain over k in increasing order, from zero,
 * in its own lane: its bits depend neither on the other rows of its
 * block nor on m, so answers stay batch-invariant.  NN sums a block of
 * keys in one chain and adds it to C (beta C for the first block), as
 * the other kernels add theirs.  A block's sums go to a 16 x 16 buffer
 * on the stack and from there into C with alpha, beta and the edge
 * masks: nothing outside C's m rows and n columns is written.
 *
 * TDPBF16PS ignores the MXCSR as VDPBF16PS does: BF16 subnormals count
 * as 0, subnormal results flush to 0, sums round to nearest even.
 *
 * Tile state: the configuration is loaded (LDTILECFG) once a panel's or
 * a key block's operands are packed, and the tiles are released
 * (TILERELEASE) once its sums are out, so a thread holds no tile state
 * between calls, nor while it reads the caller's tensors: a SIGBUS guard
 * (server/shm/fault.c) that jumps out of a read of a shared memory
 * region leaves none behind.  The process must hold the kernel's
 * permission for tile data (attn_problem.amx: the caller's business; a
 * tile instruction without it is SIGILL).  No globals, no allocation:
 * the operands live in the task's scratch (attn__scratch.b16a, b16b).
 */
#include "attn_impl.h"

#if ATTN__HAVE_AVX2_FMA
#include <immintrin.h>

#define AMX                                                                \
  __attribute__((target("avx512f,avx512bw,avx512bf16,fma,amx-tile,"        \
                        "amx-bf16")))
#define INLINE inline __attribute__((always_inline))
#include "transpose16_avx512.h"
#include "bf16_pack_avx512.h"

/* Keeps the compiler from moving plain stores past the tile loads that
 * read them (the tile intrinsics are asm that names no memory). */
#define TILE_FENCE() __asm__ volatile("" ::: "memory")

/* LDTILECFG's 64 bytes, palette 1. */
typedef struct amx_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;

/* Every tile used is 16 rows of 64 bytes: tails are zero padding. */
AMX static void tiles_begin(void) {
  amx_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  __asm__ volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

AMX static void tiles_end(void) { _tile_release(); }

/* dst (mpad rows of ldd values, ldd a multiple of 32) = rows [0, m) of
 * src (k values each, leading dimension ld) as BF16, zero from k to ldd
 * and in rows m to mpad. */
AMX static void rows_bf16(const void *src, int dt, size_t ld, int m, int k,
                          uint16_t *dst, int ldd, int mpad) {
  for (int r = 0; r < m; r++)
    for (int c0 = 0; c0 < ldd; c0 += 32) {
      int cnt = k - c0 < 32 ? k - c0 : 32;
      __m512i x = cnt > 0 ? bf16_load32(src, dt, (size_t)r * ld + c0, cnt)
                          : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (size_t)r * ldd + c0, x);
    }
  memset(dst + (size_t)m * ldd, 0, (size_t)(mpad - m) * ldd * 2);
}

/* The block of up to 2 x 2 tiles at a (A's first row, lda bytes a row)
 * and b (B's first pair row, ldb bytes a row; bstep bytes a step of 16
 * pairs; the second column tile 64 bytes on), summed over kc steps into
 * buf[0..3] (16 x 16 each: tiles 0, 1 the first 16 rows, 2, 3 the next
 * 16). */
AMX static INLINE void block(const int two_r, const int two_c, int kc,
                             const char *a, size_t lda, const char *b,
                             size_t ldb, size_t bstep, float *buf) {
  _tile_zero(0);
  if (two_c) _tile_zero(1);
  if (two_r) _tile_zero(2);
  if (two_r && two_c) _tile_zero(3);
  for (int s = 0; s < kc; s++) {
    const char *as = a + (size_t)s * 64, *bs = b + (size_t)s * bstep;
    _tile_loadd(4, as, lda);
    _tile_loadd(6, bs, ldb);
    if (two_c) _tile_loadd(7, bs + 64, ldb);
    if (two_r) _tile_loadd(5, as + 16 * lda, lda);
    _tile_dpbf16ps(0, 4, 6);
    if (two_c) _tile_dpbf16ps(1, 4, 7);
    if (two_r) _tile_dpbf16ps(2, 5, 6);
    if (two_r && two_c) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, buf, 64);
  if (two_c) _tile_stored(1, buf + 256, 64);
  if (two_r) _tile_stored(2, buf + 512, 64);
  if (two_r && two_c) _tile_stored(3, buf + 768, 64);
}

AMX static void block_any(int two_r, int two_c, int kc, const char *a,
                          size_t lda, const char *b, size_t ldb,
                          size_t bstep, float *buf) {
  if (two_r && two_c)
    block(1, 1, kc, a, lda, b, ldb, bstep, buf);
  else if (two_r)
    block(1, 0, kc, a, lda, b, ldb, bstep, buf);
  else if (two_c)
    block(0, 1, kc, a, lda, b, ldb, bstep, buf);
  else
    block(0, 0, kc, a, lda, b, ldb, bstep, buf);
}

/* C[0, rows) x [0, cols) of one tile = alpha (init + sums), init 0
 * (load_c 0), C (1) or beta C (2), as tile_avx512.h's TILE_STORE. */
AMX static void put(const float *buf, float *c, size_t ldc, int rows,
                    int cols, int load_c, float beta, float alpha) {
  const __m512 vbeta = _mm512_set1_ps(beta), valpha = _mm512_set1_ps(alpha);
  __mmask16 mk = bf16_lanes(cols);
  for (int r = 0; r < rows; r++) {
    float *cr = c + (size_t)r * ldc;
    __m512 x = _mm512_loadu_ps(buf + 16 * r);
    if (load_c) {
      __m512 old = _mm512_maskz_loadu_ps(mk, cr);
      x = load_c == 2 ? _mm512_fmadd_ps(old, vbeta, x) : _mm512_add_ps(old, x);
    }
    if (alpha != 1.0f) x = _mm512_mul_ps(x, valpha);
    _mm512_mask_storeu_ps(cr, mk, x);
  }
}

/* Every block of rows [0, m) by columns [0, w): A (a, BF16 rows two to a
 * word, lda bytes a row), B column tile g at b + 64 g, kc steps; sums
 * into c as put says. */
AMX static void blocks(int m, int w, int kc, const uint32_t *a, size_t lda,
                       const uint32_t *b, size_t ldb, size_t bstep, float *c,
                       size_t ldc, int load_c, float beta, float alpha) {
  float buf[1024] __attribute__((aligned(64)));
  int mt = (m + 15) / 16, nt = (w + 15) / 16;
  for (int r0 = 0; r0 < mt; r0 += 2)
    for (int g0 = 0; g0 < nt; g0 += 2) {
      int two_r = r0 + 1 < mt, two_c = g0 + 1 < nt;
      block_any(two_r, two_c, kc, (const char *)a + (size_t)r0 * 16 * lda,
                lda, (const char *)(b + g0 * 16), ldb, bstep, buf);
      for (int t = 0; t < 4; t++) {
        int rt = r0 + t / 2, ct = g0 + t % 2;
        if (rt >= mt || ct >= nt) continue;
        int rows = m - 16 * rt < 16 ? m - 16 * rt : 16;
        int cols = w - 16 * ct < 16 ? w - 16 * ct : 16;
        put(buf + 256 * t, c + (size_t)16 * rt * ldc + 16 * ct, ldc, rows,
            cols, load_c, beta, alpha);
      }
    }
}

static const void *elem(const void *base, int dt, size_t off) {
  return dt == ATTN_DTYPE_BF16 ? (const void *)((const uint16_t *)base + off)
                               : (const void *)((const float *)base + off);
}

AMX void attn__bf16_nt_amx(int m, int n, int k, float alpha, const void *a,
                           int adt, size_t lda, const void *b, int bdt,
                           size_t ldb, float *c, int ldc, uint32_t *a2,
                           uint32_t *pack) {
  int np = ((k + 1) / 2 + 15) / 16 * 16; /* pairs, padded */
  rows_bf16(a, adt, lda, m, k, (uint16_t *)a2, 2 * np, (m + 15) / 16 * 16);
  for (int j0 = 0; j0 < n; j0 += BF16_PANEL) {
    int w = n - j0 < BF16_PANEL ? n - j0 : BF16_PANEL;
    bf16_pack_keys(elem(b, bdt, (size_t)j0 * ldb), bdt, ldb, w, k, pack, np);
    TILE_FENCE();
    tiles_begin();
    blocks(m, w, np / 16, a2, (size_t)np * 4, pack, BF16_PANEL * 4,
           (size_t)16 * BF16_PANEL * 4, c + j0, (size_t)ldc, 0, 0.0f, alpha);
    tiles_end();
  }
}

AMX void attn__bf16_nn_amx(int m, int n, int k, const float *a, int lda,
                           const void *b, int bdt, size_t ldb, float beta,
                           float *c, int ldc, uint32_t *a2, uint32_t *pack) {
  int ldp = (n + 15) / 16 * 16;
  for (int k0 = 0; k0 < k; k0 += ATTN__KBLOCK) {
    int kb = k - k0 < ATTN__KBLOCK ? k - k0 : ATTN__KBLOCK;
    int kp = (kb + 1) / 2, np = (kp + 15) / 16 * 16;
    int load_c = k0 > 0 ? 1 : beta == 0.0f ? 0 : beta == 1.0f ? 1 : 2;
    rows_bf16(a + k0, ATTN_DTYPE_F32, (size_t)lda, m, kb, (uint16_t *)a2,
              2 * np, (m + 15) / 16 * 16);
    bf16_pack_values(elem(b, bdt, (size_t)k0 * ldb), bdt, ldb, kb, n, pack,
                     ldp);
    memset(pack + (size_t)kp * ldp, 0, (size_t)(np - kp) * ldp * 4);
    TILE_FENCE();
    tiles_begin();
    blocks(m, n, np / 16, a2, (size_t)np * 4, pack, (size_t)ldp * 4,
           (size_t)16 * ldp * 4, c, (size_t)ldc, load_c, beta, 1.0f);
    tiles_end();
  }
}
#endif /* ATTN__HAVE_AVX2_FMA */
