/* bf16.c - BF16 mode's two products: the dispatch between the AMX
 * kernels (gemm_bf16_amx.c), the AVX512-BF16 ones (gemm_bf16_avx512.c)
 * and the portable path, which rounds the operands to BF16 in float32
 * buffers and runs the float32 products (gemm.c) on them.  All three
 * round the same operands the same way (attn__bf16_round); they differ
 * only in how the float32 sums are ordered, so the last bits of the
 * answers may differ between them.
 * attn__gemm_pick says which runs (lay->gemm); no globals, no
 * allocation: the buffers are the task's scratch (b16a, b16b), and on
 * VDPBF16PS the head's K panels and V pairs kept for all the tasks of
 * that head a thread runs (kpanels, as gemm.c keeps float32 K panels).
 */
#include "attn_impl.h"

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

void attn__bf16_scratch(const attn_problem *p, size_t rows, size_t *a,
                        size_t *b) {
  size_t kb = (ATTN__KBLOCK + 31) / 32 * 32, d = (size_t)p->D;
  size_t dk = (size_t)p->Dk;
  size_t dv = (size_t)p->Dv, dpad = (d + 31) & ~(size_t)31;
  size_t dv16 = (dv + 15) / 16 * 16, rows16 = (rows + 15) / 16 * 16;
  /* Q or a P block as BF16 (AMX: k padded to 32, rows to 16); or Q
   * rounded in float32 */
  *a = max2(rows16 * max2(dpad, kb) * 2, rows * d * 4);
  /* a 64-key panel or a value block in pairs (AMX: pairs padded to 16);
   * or K or V rounded */
  *b = max2(max2(64 * dpad * 2, kb * dv16 * 2), kb * max2(dk, dv) * 4);
}

/* Element off of q, k or v as the dtype stores it. */
static const void *at(const attn_problem *p, const float *f,
                      const uint16_t *h, size_t off) {
  return p->dtype == ATTN_DTYPE_BF16 ? (const void *)(h + off)
                                     : (const void *)(f + off);
}

/* One row of n values rounded to BF16: float32 (dt F32) or BF16 bits
 * widened. */
static void round_row(float *d, const void *src, int dt, int n) {
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx512()) {
    if (dt == ATTN_DTYPE_BF16)
      attn__bf16_widen_avx512(d, (const uint16_t *)src, n);
    else
      attn__bf16_round_avx512(d, (const float *)src, n);
    return;
  }
#endif
  if (dt == ATTN_DTYPE_BF16) {
    const uint16_t *h = (const uint16_t *)src;
    for (int c = 0; c < n; c++) d[c] = attn__bf16_round(attn__bf16_widen(h[c]));
  } else {
    const float *f = (const float *)src;
    for (int c = 0; c < n; c++) d[c] = attn__bf16_round(f[c]);
  }
}

/* dst (rows, cols) = src rows (leading dimension ld, the problem's dtype)
 * rounded to BF16, in float32. */
static void round_rows(const attn_problem *p, const void *src, size_t ld,
                       int rows, int cols, float *dst) {
  for (int r = 0; r < rows; r++) {
    const void *row = p->dtype == ATTN_DTYPE_BF16
                          ? (const void *)((const uint16_t *)src + r * ld)
                          : (const void *)((const float *)src + r * ld);
    round_row(dst + (size_t)r * cols, row, p->dtype, cols);
  }
}

#if ATTN__HAVE_AVX2_FMA
/* The VDPBF16PS kernels' kept operands (attn__kept_bytes): a head's K
 * panels, then its V pairs; the ready counts in the same order. */
static uint32_t *kept_k(char *scratch, const attn__scratch *lay) {
  return (uint32_t *)(scratch + lay->kpanels);
}
static uint32_t *kept_v(const attn_problem *p, char *scratch,
                        const attn__scratch *lay) {
  return kept_k(scratch, lay) +
         (size_t)lay->kpanel_count * 64 * attn__bf16_pairs(p->D);
}
#endif

void attn__bf16_scores(const attn_problem *p, const attn__task *t, int j0,
                       int n, float *s, int lds, char *scratch,
                       const attn__scratch *lay) {
  size_t qoff = (((size_t)t->b * p->H + t->h) * p->Lq + t->i0) * p->D;
  size_t koff = (((size_t)t->b * p->Hkv + t->kvh) * p->Lk + j0) * p->Dk;
  const void *q = at(p, p->q, p->q16, qoff), *k = at(p, p->k, p->k16, koff);
#if ATTN__HAVE_AVX2_FMA
  if (lay->gemm == ATTN_GEMM_AMX) {
    attn__bf16_nt_amx(t->rows, n, p->D, p->scale, q, p->dtype, (size_t)p->D,
                      k, p->dtype, (size_t)p->Dk, s, lds,
                      (uint32_t *)(scratch + lay->b16a),
                      (uint32_t *)(scratch + lay->b16b));
    return;
  }
  if (lay->gemm == ATTN_GEMM_BF16 && attn__scores_kept(lay, j0)) {
    size_t k0 = koff - (size_t)j0 * p->Dk; /* the head's first key */
    attn__bf16_nt_kept_avx512(t->rows, n, p->D, p->scale, q, p->dtype,
                              (size_t)p->D, at(p, p->k, p->k16, k0),
                              p->dtype, (size_t)p->Dk, j0, s, lds,
                              (uint32_t *)(scratch + lay->b16a),
                              kept_k(scratch, lay),
                              attn__kept_ready(p, t, scratch, lay));
    return;
  }
  if (lay->gemm == ATTN_GEMM_BF16) {
    attn__bf16_nt_avx512(t->rows, n, p->D, p->scale, q, p->dtype,
                         (size_t)p->D, k, p->dtype, (size_t)p->Dk, s, lds,
                         (uint32_t *)(scratch + lay->b16a),
                         (uint32_t *)(scratch + lay->b16b));
    return;
  }
#endif
  float *qr = (float *)(scratch + lay->b16a);
  float *kr = (float *)(scratch + lay->b16b);
  round_rows(p, q, (size_t)p->D, t->rows, p->D, qr);
  round_rows(p, k, (size_t)p->Dk, n, p->Dk, kr);
  attn__gemm_nt(lay->gemm, t->rows, n, p->D, p->scale, qr, p->D, kr, p->Dk,
                s, lds, (float *)(scratch + lay->pack));
}

/* The portable P V over one block of at most ATTN__KBLOCK keys. */
static void pv_block(const attn_problem *p, const attn__task *t, float *s,
                     int lds, const void *v, int n, int rounded, float beta,
                     float *o, char *scratch, const attn__scratch *lay) {
  float *vr = (float *)(scratch + lay->b16b);
  for (int r = 0; r < t->rows && !rounded; r++) {
    float *sr = s + (size_t)r * lds;
    round_row(sr, sr, ATTN_DTYPE_F32, n);
  }
  round_rows(p, v, (size_t)p->Dv, n, p->Dv, vr);
  attn__gemm_nn(lay->gemm, t->rows, p->Dv, n, s, lds, vr, p->Dv, beta, o,
                p->Dv);
}

void attn__bf16_pv(const attn_problem *p, const attn__task *t, float *s,
                   int lds, int j0, int n, int rounded, float beta, float *o,
                   char *scratch, const attn__scratch *lay) {
  size_t voff = (((size_t)t->b * p->Hkv + t->kvh) * p->Lk + j0) * p->Dv;
  const void *v = at(p, p->v, p->v16, voff);
#if ATTN__HAVE_AVX2_FMA
  if (lay->gemm == ATTN_GEMM_AMX) {
    attn__bf16_nn_amx(t->rows, p->Dv, n, s, lds, v, p->dtype, (size_t)p->Dv,
                      beta, o, p->Dv, (uint32_t *)(scratch + lay->b16a),
                      (uint32_t *)(scratch + lay->b16b));
    return;
  }
  if (lay->gemm == ATTN_GEMM_BF16 && attn__scores_kept(lay, j0)) {
    size_t v0 = voff - (size_t)j0 * p->Dv; /* the head's first value */
    attn__bf16_nn_kept_avx512(t->rows, p->Dv, n, s, lds,
                              at(p, p->v, p->v16, v0), p->dtype,
                              (size_t)p->Dv, j0, beta, o, p->Dv,
                              (uint32_t *)(scratch + lay->b16a),
                              kept_v(p, scratch, lay),
                              attn__kept_ready(p, t, scratch, lay) +
                                  lay->kpanel_count);
    return;
  }
  if (lay->gemm == ATTN_GEMM_BF16) {
    attn__bf16_nn_avx512(t->rows, p->Dv, n, s, lds, v, p->dtype,
                         (size_t)p->Dv, beta, o, p->Dv,
                         (uint32_t *)(scratch + lay->b16a),
                         (uint32_t *)(scratch + lay->b16b));
    return;
  }
#endif
  for (int c0 = 0; c0 < n; c0 += ATTN__KBLOCK) {
    int w = n - c0 < ATTN__KBLOCK ? n - c0 : ATTN__KBLOCK;
    pv_block(p, t, s + c0, lds, at(p, p->v, p->v16, voff + (size_t)c0 * p->Dv),
             w, rounded, c0 == 0 ? beta : 1.0f, o, scratch, lay);
  }
}

const char *attn_kernel_name(int precision, int amx) {
  if (precision == ATTN_PRECISION_BF16 && amx && attn__use_amx())
    return "amx-bf16";
  if (precision == ATTN_PRECISION_BF16 && attn__fast_avx512bf16())
    return "avx512bf16";
  return attn__use_avx512() ? "avx512" : "blas";
}
