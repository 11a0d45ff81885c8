/* online.c - the no-weights path: online (flash-style) softmax over key
 * blocks.  A task never holds more than (rows, KBLOCK) scores; for each
 * block it keeps per row the running maximum m, the running sum l of
 * exp(s - m) and the accumulator acc = sum exp(s - m) v, rescaling l and
 * acc by exp(m_old - m_new) when the maximum grows.  The output row is
 * acc / l, or 0 when l stayed 0 (no allowed key).  A task whose acc
 * overflowed (huge values: see rescale.c) runs once more with every block's
 * probabilities scaled by a power of two.
 *
 * With sinks a row starts as if it had seen its sink: m = sink, l = 1 and
 * nothing in acc (a sink has no value).  The row lse is m + ln(l).
 *
 * Key blocks are skipped without computing scores when no row of the task
 * may see any key in them (outside every row's interval from valid_lens,
 * causal and window, or masked out entirely).
 */
#include "attn_impl.h"

typedef struct online_state {
  float *flags, *s, *acc, *m, *l, *alpha, *ahead;
  int *lo, *hi;
  attn__span *span;
  float g;            /* probabilities' factor: 1, or rescale.c's 2^-k */
} online_state;

static void state_of(char *scratch, const attn__scratch *lay,
                     online_state *st) {
  st->flags = (float *)(scratch + lay->flags);
  st->s = (float *)(scratch + lay->scores);
  st->acc = (float *)(scratch + lay->acc);
  st->m = (float *)(scratch + lay->rowmax);
  st->l = (float *)(scratch + lay->rowsum);
  st->alpha = (float *)(scratch + lay->rowscale);
  st->ahead = (float *)(scratch + lay->rowahead);
  st->lo = (int *)(scratch + lay->lo);
  st->hi = (int *)(scratch + lay->hi);
  st->span = (attn__span *)(scratch + lay->span);
}

/* Spans (and mask flags, leading dimension n) of every row for keys
 * [j0, j0 + n); returns the number of allowed (row, key) pairs. */
static int block_spans(const attn_problem *p, const attn__task *t,
                       const online_state *st, int j0, int n) {
  int total = 0;
  for (int r = 0; r < t->rows; r++) {
    attn__row_span(p, t, t->i0 + r, st->lo[r], st->hi[r], j0, n,
                   p->mask ? st->flags + (size_t)r * n : NULL, &st->span[r]);
    total += st->span[r].allowed;
  }
  return total;
}

/* Dropout on the block's probabilities (the sum l keeps the undropped
 * ones, so acc / l is the dropped weights times V). */
static void block_dropout(const attn_problem *p, const attn__task *t,
                          float *s, int j0, int n) {
  float keep_scale = 1.0f / (1.0f - p->dropout_p);
  for (int r = 0; r < t->rows; r++) {
    uint64_t n0 = (((uint64_t)t->b * p->H + t->h) * p->Lq + t->i0 + r) *
                  (uint64_t)p->Lk;
    float *sr = s + (size_t)r * n;
    for (int c = 0; c < n; c++)
      if (!attn__dropout_keep(p->seed, n0 + (uint64_t)(j0 + c), p->dropout_p))
        sr[c] = 0.0f;
      else
        sr[c] *= keep_scale;
  }
}

/* BF16 mode rounds the probabilities to BF16 before they multiply V.
 * The VDPBF16PS kernels round their copy of P the same way as they
 * convert it (gemm_bf16_avx512.c), so the row softmax leaves that to
 * them, unless dropout or g scales P in between: then it is P's rounded
 * value that is scaled, and the scaled one rounded again. */
static int softmax_rounds(const attn_problem *p, const online_state *st,
                          const attn__scratch *lay) {
  return attn__is_bf16(p) && (lay->gemm != ATTN_GEMM_BF16 ||
                              p->dropout_p > 0.0f || st->g != 1.0f);
}

/* Masks, updates m and l, and turns row r's scores into probabilities
 * (rounded to BF16 when round); alpha[r] is the factor acc row r must be
 * rescaled by. */
static void block_row_update(const attn_problem *p, const attn__task *t,
                             const online_state *st, int r, int j0, int n,
                             int round) {
  float *s = st->s + (size_t)r * n;
  const attn__span *sp = &st->span[r];
  if (sp->allowed == 0) {
    memset(s, 0, (size_t)n * sizeof *s);
    st->alpha[r] = 1.0f;
    return;
  }
  const float *mx = st->ahead[r] == st->ahead[r] ? &st->ahead[r] : NULL;
  float mnew, sum = attn__row_softmax(p, t, t->i0 + r, j0, sp, s, n,
                                      st->m[r], round, mx, &mnew);
  /* m starts at -FLT_MAX with l = acc = 0, so the first factor is moot.
   * What attn__expf gives at the two ends, without the call: exactly 1
   * for a maximum that did not grow, exactly 0 below its cut-off (the
   * first block's -FLT_MAX among them). */
  float d = st->m[r] - mnew;
  st->alpha[r] = d == 0.0f ? 1.0f : d < ATTN__EXP_LO ? 0.0f : attn__expf(d);
  st->l[r] = st->l[r] * st->alpha[r] + sum;
  st->m[r] = mnew;
}

/* acc = alpha acc + P V; the task's first computed block sets acc = P V
 * instead (beta 0), so acc needs no zeroing. */
static void block_accumulate(const attn_problem *p, const attn__task *t,
                             const online_state *st, int j0, int n,
                             int first, char *scratch,
                             const attn__scratch *lay) {
  int dv = p->Dv;
  for (int r = 0; r < t->rows && !first; r++)
    if (st->alpha[r] != 1.0f)
      attn__scale_floats(st->acc + (size_t)r * dv, (size_t)dv, st->alpha[r]);
  unsigned csr = attn__ftz_on();
  if (attn__is_bf16(p)) {
    /* P holds BF16 values where the row softmax rounded them and
     * neither dropout nor g scaled them since */
    int rounded = softmax_rounds(p, st, lay) && p->dropout_p == 0.0f &&
                  st->g == 1.0f;
    attn__bf16_pv(p, t, st->s, n, j0, n, rounded, first ? 0.0f : 1.0f,
                  st->acc, scratch, lay);
  } else {
    size_t kvhead = (size_t)t->b * p->Hkv + t->kvh;
    const float *v = p->v + (kvhead * p->Lk + j0) * p->Dv;
    attn__gemm_nn(lay->gemm, t->rows, dv, n, st->s, n, v, dv,
                  first ? 0.0f : 1.0f, st->acc, dv);
  }
  attn__ftz_off(csr);
}

/* Scores to P V of keys [j0, j0 + n) for the rows of t and st: a whole
 * task, or a run of its rows (run_block). */
static void block_rows(const attn_problem *p, const attn__task *t,
                       const online_state *st, int j0, int n, int first,
                       char *scratch, const attn__scratch *lay) {
  attn__scores(p, t, j0, n, st->s, n, scratch, lay);
  attn__rows_max(p, st->span, st->s, n, t->rows, st->ahead);
  int round = softmax_rounds(p, st, lay);
  for (int r = 0; r < t->rows; r++)
    block_row_update(p, t, st, r, j0, n, round);
  if (p->dropout_p > 0.0f) block_dropout(p, t, st->s, j0, n);
  if (st->g != 1.0f)
    attn__scale_floats(st->s, (size_t)t->rows * n, st->g);
  block_accumulate(p, t, st, j0, n, first, scratch, lay);
}

/* Rows [r0, r0 + rows) of t, and st's per-row state from row r0. */
static void sub_rows(const attn__task *t, const online_state *st, int r0,
                     int rows, int dv, attn__task *sub, online_state *ss) {
  *sub = *t;
  *ss = *st;
  sub->i0 = t->i0 + r0;
  sub->rows = rows;
  ss->acc = st->acc + (size_t)r0 * dv;
  ss->m = st->m + r0;
  ss->l = st->l + r0;
  ss->alpha = st->alpha + r0;
  ss->ahead = st->ahead + r0;
  ss->span = st->span + r0;
}

/* Returns 1 when the block was computed, 0 when it was skipped.  Where
 * the scores read the head's kept K panels (score.c), the block runs
 * ATTN__SUBROWS rows at a time from scores to P V, so that their scores
 * stay near the core (in L1 and L2) from the product through the
 * softmax to P V; each row's arithmetic is the same either way.  A run
 * stops at the last key its rows' intervals reach (a causal diagonal),
 * and one whose intervals miss the block is skipped unless the block is
 * the task's first (which writes acc, then from one key of probability
 * 0): attn__run_width.  What is left out are terms 0 v at the end of
 * P V's chains; inputs are finite, and a chain from +0 plus +-0 stays
 * what it was, so the bits are those of the whole block. */
static int run_block(const attn_problem *p, const attn__task *t,
                     const online_state *st, int j0, int n, int first,
                     char *scratch, const attn__scratch *lay) {
  if (block_spans(p, t, st, j0, n) == 0) return 0; /* skipped, not filled */
  if (!attn__scores_kept(lay, j0)) {
    block_rows(p, t, st, j0, n, first, scratch, lay);
    return 1;
  }
  for (int r0 = 0; r0 < t->rows; r0 += ATTN__SUBROWS) {
    attn__task sub;
    online_state ss;
    int rows = t->rows - r0 < ATTN__SUBROWS ? t->rows - r0 : ATTN__SUBROWS;
    int a, z, w;
    attn__run_keys(st->lo + r0, st->hi + r0, rows, &a, &z);
    w = attn__run_width(a, z, j0, n, first);
    if (w == 0) continue;
    sub_rows(t, st, r0, rows, p->Dv, &sub, &ss);
    block_rows(p, &sub, &ss, j0, w, first, scratch, lay);
  }
  return 1;
}

/* Output rows acc / (l g); returns 0 when a row had to be clamped, which
 * with g = 1 means acc overflowed (rescale.c).  computed 0: no block ran,
 * acc was never written and every row is 0 (l may be a sink's 1). */
static int write_out(const attn_problem *p, const attn__task *t,
                     const online_state *st, int computed, float *o) {
  int dv = p->Dv, finite = 1;
  float back = 1.0f / st->g; /* exact: g is a power of two */
  for (int r = 0; r < t->rows; r++) {
    float *orow = o + (size_t)r * dv;
    const float *acc = st->acc + (size_t)r * dv;
    if (computed && st->l[r] > 0.0f) {
      finite &= attn__scale_sanitize(orow, acc, dv, 1.0f / st->l[r] * back);
    } else {
      memset(orow, 0, (size_t)dv * sizeof *orow);
    }
  }
  return finite;
}

/* Every key block of [klo, khi) with probabilities times g; returns 1
 * when some block was computed (acc was written).  With sinks each row
 * starts as if it had seen the sink: m = sink, l = exp(0) = 1, and no
 * value. */
static int run_pass(const attn_problem *p, const attn__task *t,
                    online_state *st, int klo, int khi, float g,
                    char *scratch, const attn__scratch *lay) {
  float m0 = attn__sink(p, t->h), l0 = p->sinks ? 1.0f : 0.0f;
  for (int r = 0; r < t->rows; r++) {
    st->m[r] = m0;
    st->l[r] = l0;
  }
  st->g = g;
  /* acc is written by the first computed block; write_out reads it only
   * for rows whose sum l grew, which only a computed block does. */
  int first = 1;
  for (int j0 = klo; j0 < khi && !attn__stopped(p); j0 += ATTN__KBLOCK) {
    int n = khi - j0 < ATTN__KBLOCK ? khi - j0 : ATTN__KBLOCK;
    if (run_block(p, t, st, j0, n, first, scratch, lay)) first = 0;
  }
  return !first;
}

void attn__task_online(const attn_problem *p, const attn__task *t,
                       float *out, float *lse, char *scratch,
                       const attn__scratch *lay) {
  size_t row0 = ((size_t)t->b * p->H + t->h) * p->Lq + t->i0;
  online_state st;
  int klo, khi, computed;
  state_of(scratch, lay, &st);
  attn__row_intervals(p, t, st.lo, st.hi, &klo, &khi);
  computed = run_pass(p, t, &st, klo, khi, 1.0f, scratch, lay);
  /* l holds the undropped, unscaled sum in units of exp(m) */
  for (int r = 0; r < t->rows && lse; r++)
    lse[row0 + r] = attn__lse(st.m[r], st.l[r]);
  if (write_out(p, t, &st, computed, out + row0 * p->Dv) ||
      attn__stopped(p))
    return;
  /* acc overflowed: the whole task again with scaled probabilities; a
   * clamp now is a true output beyond float range (dropout) */
  computed = run_pass(p, t, &st, klo, khi, attn__value_scale(p, t, klo, khi),
                      scratch, lay);
  (void)write_out(p, t, &st, computed, out + row0 * p->Dv);
}
