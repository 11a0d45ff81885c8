/* softmax.c - the weights path.  A task's rows are taken a chunk at a
 * time (lay->wrows rows, so that the chunk's scores stay in L2): scores
 * of the keys some row of the chunk may see, [klo, khi), into scratch,
 * one sgemm per key block; per row the maximum (a read-only pass) and
 * exp(s - m) with its sum (one read-write pass); then O = P V straight
 * from the unnormalised P in scratch, again a key block at a time, each
 * output row scaled by 1 / sum; last, the
 * weights P / sum are written to the caller's buffer once, together with
 * the zeros around [klo, khi).  Nothing is read back from the weights
 * buffer, so a large one is written without being read (streaming
 * stores where the CPU has them).  When P V overflows (huge values: see
 * rescale.c) the chunk's output is computed once more from P scaled by a
 * power of two, after the weights have gone out.  The stop flag
 * (attn_problem.stop) is read between key blocks of both products and
 * between rows of the softmax; a stopped chunk writes no weights.
 *
 * Keys outside a row's span (valid_lens, causal, window) get weight 0
 * directly; keys inside it that the mask forbids hold -FLT_MAX as scores
 * and get weight 0 by their flag, not by exp underflow, so a row whose
 * allowed scores are themselves -FLT_MAX still gives them exactly 0.
 */
#include <math.h>

#include "attn_impl.h"

static void zero(float *s, size_t n) { memset(s, 0, n * sizeof *s); }

/* exp(s - m) over row r's span in place, m = max(row maximum, sink);
 * returns den, the sum with the sink's term exp(sink - m) (0 when the row
 * has no allowed key and no sink, and then the row is all 0), and m. */
static float softmax_row(const attn_problem *p, const attn__task *t, int r,
                         int lo, int hi, int klo, float *s, int n,
                         float *flags, float *m) {
  int i = t->i0 + r;
  float sink = attn__sink(p, t->h), sum;
  attn__span sp;
  attn__row_span(p, t, i, lo, hi, klo, n, flags, &sp);
  if (sp.allowed == 0) {
    zero(s, (size_t)n);
    *m = sink;
    return p->sinks ? 1.0f : 0.0f;
  }
  sum = attn__row_softmax(p, t, i, klo, &sp, s, n, sink, 0, NULL, m);
  return p->sinks ? sum + attn__expf(sink - *m) : sum;
}

/* lse of a chunk's rows from their maxima and sums (rowmax, inv as den). */
static void write_lse(const attn__task *t, const float *m, const float *den,
                      float *lse) {
  for (int r = 0; r < t->rows && lse; r++) lse[r] = attn__lse(m[r], den[r]);
}

/* dst (rows, n) = P columns [c0, c0 + n) of s (leading dimension lds)
 * with dropout applied: kept ones scaled by 1/(1-p), the rest 0; keys are
 * numbered from j0 = klo + c0. */
static void drop_block(const attn_problem *p, const attn__task *t,
                       const float *s, int lds, int c0, int j0, int n,
                       float *dst) {
  float keep_scale = 1.0f / (1.0f - p->dropout_p);
  for (int r = 0; r < t->rows; r++) {
    uint64_t n0 = (((uint64_t)t->b * p->H + t->h) * p->Lq + t->i0 + r) *
                  (uint64_t)p->Lk;
    const float *sr = s + (size_t)r * lds + c0;
    float *dr = dst + (size_t)r * n;
    for (int c = 0; c < n; c++) {
      int keep = attn__dropout_keep(p->seed, n0 + (uint64_t)(j0 + c),
                                    p->dropout_p);
      dr[c] = keep ? sr[c] * keep_scale : 0.0f;
    }
  }
}

/* o (+)= P V over keys [j0, j0 + n); beta 0 starts the sum. */
static void p_times_v(const attn_problem *p, const attn__task *t,
                      float *s, int lds, int j0, int n, float beta,
                      float *o, char *scratch, const attn__scratch *lay) {
  unsigned csr = attn__ftz_on();
  if (attn__is_bf16(p)) {
    /* dropout's copy is not BF16; P itself is (bf16_weights) */
    attn__bf16_pv(p, t, s, lds, j0, n, p->dropout_p == 0.0f, beta, o,
                  scratch, lay);
  } else {
    size_t kvhead = (size_t)t->b * p->Hkv + t->kvh;
    const float *v = p->v + (kvhead * p->Lk + j0) * p->Dv;
    attn__gemm_nn(lay->gemm, t->rows, p->Dv, n, s, lds, v, p->Dv, beta, o,
                  p->Dv);
  }
  attn__ftz_off(csr);
}

/* o = dropout(P) V, a key block at a time so the dropped copy needs only
 * (rows, KBLOCK) scratch. */
static void dropped_times_v(const attn_problem *p, const attn__task *t,
                            const float *s, int klo, int khi, float *d,
                            float *o, char *scratch,
                            const attn__scratch *lay) {
  int lds = khi - klo;
  for (int j0 = klo; j0 < khi && !attn__stopped(p); j0 += ATTN__KBLOCK) {
    int n = khi - j0 < ATTN__KBLOCK ? khi - j0 : ATTN__KBLOCK;
    drop_block(p, t, s, lds, j0 - klo, j0, n, d);
    p_times_v(p, t, d, n, j0, n, j0 == klo ? 0.0f : 1.0f, o, scratch, lay);
  }
}

/* Raw scores for keys [klo, khi) into s (leading dimension khi - klo),
 * a key block at a time: additive scoring's and BF16 mode's scratch holds
 * one block, and the stop flag is read between blocks. */
static void chunk_scores(const attn_problem *p, const attn__task *t,
                         float *s, int klo, int khi, char *scratch,
                         const attn__scratch *lay) {
  int lds = khi - klo;
  for (int j0 = klo; j0 < khi && !attn__stopped(p); j0 += ATTN__KBLOCK) {
    int n = khi - j0 < ATTN__KBLOCK ? khi - j0 : ATTN__KBLOCK;
    attn__scores(p, t, j0, n, s + (j0 - klo), lds, scratch, lay);
  }
}

/* o = P V over keys [klo, khi), a key block at a time (the stop flag
 * read between blocks). */
static void blocks_times_v(const attn_problem *p, const attn__task *t,
                           float *s, int klo, int khi, float *o,
                           char *scratch, const attn__scratch *lay) {
  int lds = khi - klo;
  for (int j0 = klo; j0 < khi && !attn__stopped(p); j0 += ATTN__KBLOCK) {
    int n = khi - j0 < ATTN__KBLOCK ? khi - j0 : ATTN__KBLOCK;
    p_times_v(p, t, s + (j0 - klo), lds, j0, n, j0 == klo ? 0.0f : 1.0f, o,
              scratch, lay);
  }
}

/* Output rows: o * inv[r], +-inf clamped, NaN as 0; rows without keys
 * are +0.  Returns 0 when a row had to be clamped. */
static int finish_out(const attn_problem *p, const attn__task *t,
                      const float *inv, float *o) {
  int dv = p->Dv, finite = 1;
  for (int r = 0; r < t->rows; r++) {
    float *orow = o + (size_t)r * dv;
    if (inv[r] == 0.0f) {
      zero(orow, (size_t)dv);
      continue;
    }
    finite &= attn__scale_sanitize(orow, orow, dv, inv[r]);
  }
  return finite;
}

/* o = P V (dropped when dropout is on), row r scaled by inv[r]; returns 0
 * when P V overflowed somewhere (rescale.c). */
static int chunk_out(const attn_problem *p, const attn__task *t,
                     float *s, int klo, int khi, const float *inv,
                     float *o, char *scratch, const attn__scratch *lay) {
  if (p->dropout_p > 0.0f)
    dropped_times_v(p, t, s, klo, khi, (float *)(scratch + lay->drop), o,
                    scratch, lay);
  else
    blocks_times_v(p, t, s, klo, khi, o, scratch, lay);
  return finish_out(p, t, inv, o);
}

/* chunk_out again after an overflow, with P scaled by g and the row
 * factors by 1/g (both exact); destroys P and inv.  A clamp now is a true
 * output beyond float range, which dropout's 1/(1-p) allows. */
static void chunk_out_rescaled(const attn_problem *p, const attn__task *t,
                               float *s, int klo, int khi, float *inv,
                               float *o, char *scratch,
                               const attn__scratch *lay) {
  float g = attn__value_scale(p, t, klo, khi);
  attn__scale_floats(s, (size_t)t->rows * (khi - klo), g);
  for (int r = 0; r < t->rows; r++) inv[r] *= 1.0f / g;
  (void)chunk_out(p, t, s, klo, khi, inv, o, scratch, lay);
}

/* Weights rows: 0 before klo and from khi on, P * inv[r] between. */
static void write_weights(const attn_problem *p, const attn__task *t,
                          const float *s, int klo, int khi,
                          const float *inv, float *w,
                          const attn__scratch *lay) {
  int lds = khi - klo;
  for (int r = 0; r < t->rows; r++)
    attn__write_weight_row(w + (size_t)r * p->Lk, p->Lk, klo, khi,
                           s + (size_t)r * lds, inv[r], lay->stream);
  attn__write_weights_done(lay->stream);
}

/* BF16 mode: the weights P inv[r] rounded to BF16 replace P, and inv
 * becomes 1, so that the weights that multiply V are the ones returned. */
static void bf16_weights(const attn__task *t, float *s, int n, float *inv) {
  for (int r = 0; r < t->rows; r++) {
    float *sr = s + (size_t)r * n, g = inv[r];
    if (g == 0.0f) continue;
    for (int c = 0; c < n; c++) sr[c] = attn__bf16_round(sr[c] * g);
    inv[r] = 1.0f;
  }
}

/* One chunk of a task's rows (t describes the chunk). */
static void chunk_weights(const attn_problem *p, const attn__task *t,
                          float *o, float *w, float *lse, char *scratch,
                          const attn__scratch *lay) {
  int *lo = (int *)(scratch + lay->lo), *hi = (int *)(scratch + lay->hi);
  float *flags = (float *)(scratch + lay->flags);
  float *s = (float *)(scratch + lay->scores);
  float *inv = (float *)(scratch + lay->rowsum);
  float *rm = (float *)(scratch + lay->rowmax);
  int klo, khi, any = 0;

  attn__row_intervals(p, t, lo, hi, &klo, &khi);
  if (klo >= khi) {
    for (int r = 0; r < t->rows; r++) {
      inv[r] = 0.0f;
      if (lse) lse[r] = p->sinks ? attn__sink(p, t->h) : -INFINITY;
    }
    write_weights(p, t, s, 0, 0, inv, w, lay);
    zero(o, (size_t)t->rows * p->Dv);
    return;
  }
  int n = khi - klo;
  /* Stopped (attn_problem.stop): the chunk's rows are left as they are. */
  chunk_scores(p, t, s, klo, khi, scratch, lay);
  for (int r = 0; r < t->rows; r++) {
    if (attn__stopped(p))
      return;
    float den = softmax_row(p, t, r, lo[r], hi[r], klo, s + (size_t)r * n,
                            n, flags, &rm[r]);
    /* den >= 1 when the row has a key or a sink: the larger of its
     * maximum and the sink contributes 1 */
    inv[r] = den;
    any |= den > 0.0f;
  }
  write_lse(t, rm, inv, lse);
  for (int r = 0; r < t->rows; r++)
    inv[r] = inv[r] > 0.0f ? 1.0f / inv[r] : 0.0f;
  if (attn__is_bf16(p)) bf16_weights(t, s, n, inv);
  int finite = 1;
  if (!any)
    zero(o, (size_t)t->rows * p->Dv);
  else
    finite = chunk_out(p, t, s, klo, khi, inv, o, scratch, lay);
  if (attn__stopped(p))
    return;
  /* The weights go out from the unscaled P, so they are the same bits
   * whether or not the output has to be redone. */
  write_weights(p, t, s, klo, khi, inv, w, lay);
  if (!finite) chunk_out_rescaled(p, t, s, klo, khi, inv, o, scratch, lay);
}

void attn__task_weights(const attn_problem *p, const attn__task *t,
                        float *out, float *weights, float *lse,
                        char *scratch, const attn__scratch *lay) {
  size_t row0 = ((size_t)t->b * p->H + t->h) * p->Lq + t->i0;
  float *w = weights + row0 * p->Lk, *o = out + row0 * p->Dv;
  for (int r0 = 0; r0 < t->rows && !attn__stopped(p); r0 += lay->wrows) {
    attn__task c = *t;
    c.i0 = t->i0 + r0;
    c.rows = t->rows - r0 < lay->wrows ? t->rows - r0 : lay->wrows;
    chunk_weights(p, &c, o + (size_t)r0 * p->Dv, w + (size_t)r0 * p->Lk,
                  lse ? lse + row0 + r0 : NULL, scratch, lay);
  }
}
