/* softmax.c - the weights path: one task materialises its (rows, Lk)
 * block of scores in the caller's weights buffer, masks it, turns it into
 * softmax weights in place and multiplies by V.
 *
 * Keys outside a row's span (valid_lens, causal, window) get weight 0
 * directly; keys inside it that the mask forbids hold -FLT_MAX as scores
 * and get weight 0 by their flag, not by exp underflow, so a row whose
 * allowed scores are themselves -FLT_MAX still gives them exactly 0.
 * Only the key range some row of the task may see, [klo, khi), is scored
 * and multiplied by V.
 */
#include <cblas.h>

#include "attn_impl.h"

static void zero(float *s, size_t n) { memset(s, 0, n * sizeof *s); }

/* Softmax of one row over keys [klo, khi); everything else is 0.
 * Returns the number of allowed keys. */
static int softmax_row(const attn_problem *p, const attn__task *t, int r,
                       int lo, int hi, int klo, int khi, float *w,
                       float *flags) {
  int i = t->i0 + r, n = khi - klo;
  attn__span sp;
  attn__row_span(p, t, i, lo, hi, klo, n, flags, &sp);
  zero(w, (size_t)klo);
  zero(w + khi, (size_t)(p->Lk - khi));
  if (sp.allowed == 0) {
    zero(w + klo, (size_t)n);
    return 0;
  }
  float mx = attn__row_scores(p, t, i, klo, &sp, w + klo);
  float sum = attn__row_exp(w + klo, n, &sp, mx);
  attn__row_scale(w + klo + sp.a, sp.z - sp.a, 1.0f / sum);
  return sp.allowed;
}

/* dst (rows, n) = weights columns [j0, j0 + n) with dropout applied:
 * kept ones scaled by 1/(1-p), the rest 0. */
static void drop_block(const attn_problem *p, const attn__task *t,
                       const float *w, float *dst, int j0, int n) {
  float keep_scale = 1.0f / (1.0f - p->dropout_p);
  for (int r = 0; r < t->rows; r++) {
    uint64_t n0 = (((uint64_t)t->b * p->H + t->h) * p->Lq + t->i0 + r) *
                  (uint64_t)p->Lk;
    const float *wr = w + (size_t)r * p->Lk + j0;
    float *dr = dst + (size_t)r * n;
    for (int c = 0; c < n; c++) {
      int keep = attn__dropout_keep(p->seed, n0 + (uint64_t)(j0 + c),
                                    p->dropout_p);
      dr[c] = keep ? wr[c] * keep_scale : 0.0f;
    }
  }
}

/* o (+)= W V over keys [j0, j0 + n); beta 0 starts the sum. */
static void weights_times_v(const attn_problem *p, const attn__task *t,
                            const float *w, int ldw, int j0, int n,
                            float beta, float *o) {
  size_t kvhead = (size_t)t->b * p->Hkv + t->kvh;
  const float *v = p->v + (kvhead * p->Lk + j0) * p->Dv;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t->rows, p->Dv, n,
              1.0f, w, ldw, v, p->Dv, beta, o, p->Dv);
}

/* o = dropout(W) V, a key block at a time so the dropped copy needs only
 * (rows, KBLOCK) scratch; the returned weights stay undropped. */
static void dropped_times_v(const attn_problem *p, const attn__task *t,
                            const float *w, int klo, int khi, float *d,
                            float *o) {
  for (int j0 = klo; j0 < khi; j0 += ATTN__KBLOCK) {
    int n = khi - j0 < ATTN__KBLOCK ? khi - j0 : ATTN__KBLOCK;
    drop_block(p, t, w, d, j0, n);
    weights_times_v(p, t, d, n, j0, n, j0 == klo ? 0.0f : 1.0f, o);
  }
}

/* Raw scores for keys [klo, khi) into the weights rows: dot in one sgemm,
 * additive in key blocks (its projection scratch holds one block). */
static void block_scores(const attn_problem *p, const attn__task *t,
                         float *w, int klo, int khi, char *scratch,
                         const attn__scratch *lay) {
  int step = p->scoring == ATTN_SCORING_ADDITIVE ? ATTN__KBLOCK : khi - klo;
  for (int j0 = klo; j0 < khi; j0 += step) {
    int n = khi - j0 < step ? khi - j0 : step;
    attn__scores(p, t, j0, n, w + j0, p->Lk, scratch, lay);
  }
}

void attn__task_weights(const attn_problem *p, const attn__task *t,
                        float *out, float *weights, char *scratch,
                        const attn__scratch *lay) {
  size_t row0 = ((size_t)t->b * p->H + t->h) * p->Lq + t->i0;
  float *w = weights + row0 * p->Lk, *o = out + row0 * p->Dv;
  int *lo = (int *)(scratch + lay->lo), *hi = (int *)(scratch + lay->hi);
  float *flags = (float *)(scratch + lay->flags);
  int klo, khi, any = 0;

  attn__row_intervals(p, t, lo, hi, &klo, &khi);
  if (klo >= khi) {
    zero(w, (size_t)t->rows * p->Lk);
    zero(o, (size_t)t->rows * p->Dv);
    return;
  }
  block_scores(p, t, w, klo, khi, scratch, lay);
  /* lo[r] is spent once row r is done; its slot keeps the allowed count. */
  int *allowed = lo;
  for (int r = 0; r < t->rows; r++) {
    allowed[r] = softmax_row(p, t, r, lo[r], hi[r], klo, khi,
                             w + (size_t)r * p->Lk, flags);
    any |= allowed[r] > 0;
  }
  if (!any) {
    zero(o, (size_t)t->rows * p->Dv);
    return;
  }
  if (p->dropout_p > 0.0f)
    dropped_times_v(p, t, w, klo, khi, (float *)(scratch + lay->drop), o);
  else
    weights_times_v(p, t, w + klo, p->Lk, klo, khi - klo, 0.0f, o);
  /* Huge values can overflow the product; rows without keys are +0. */
  attn__sanitize_rows(o, (size_t)t->rows * p->Dv);
  for (int r = 0; r < t->rows; r++)
    if (allowed[r] == 0) zero(o + (size_t)r * p->Dv, (size_t)p->Dv);
}
