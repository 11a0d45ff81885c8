/* diag.c - per-row diagnostics of returned attention weights: allowed key
 * count, entropy, largest weight and the Frobenius norm of the softmax
 * Jacobian.  Not on the hot path (one pass over the weights), so the sums
 * are kept in double for accuracy.
 */
#include <math.h>

#include "attn_impl.h"

typedef struct row_stats {
  double entropy, max, jacobian;
} row_stats;

static void stats_of(const float *a, int n, row_stats *st) {
  double s2 = 0.0, s3 = 0.0, h = 0.0, mx = 0.0;
  for (int j = 0; j < n; j++) {
    double x = a[j];
    if (x > 0.0) h -= x * log(x);
    s2 += x * x;
    s3 += x * x * x;
    mx = x > mx ? x : mx;
  }
  /* ||diag(a) - a a^T||_F^2 = sum (a - a^2)^2 + sum_{i != j} a_i^2 a_j^2 */
  double f2 = s2 - 2.0 * s3 + s2 * s2;
  st->entropy = h;
  st->max = mx;
  st->jacobian = sqrt(f2 > 0.0 ? f2 : 0.0);
}

/* Allowed keys of every row of a task, written to allowed[r]. */
static void task_allowed(const attn_problem *p, const attn__task *t,
                         int *lo, int *hi, int32_t *allowed) {
  int klo, khi;
  attn__row_intervals(p, t, lo, hi, &klo, &khi);
  for (int r = 0; r < t->rows; r++)
    allowed[r] = attn__row_count(p, t, t->i0 + r, lo[r], hi[r]);
}

int attn_diagnostics(const attn_problem *p, const float *weights,
                     int32_t *allowed_keys, float *entropy,
                     float *max_weight, float *jacobian_norm) {
  int lo[ATTN__QBLOCK_MAX], hi[ATTN__QBLOCK_MAX];
  int32_t allowed[ATTN__QBLOCK_MAX];
  attn__task_walk walk;
  if (attn_check(p) != 0 || !weights) return ATTND_EINVAL;
  size_t tasks = attn_task_count(p, 1);
  attn__walk_start(p, &walk);
  for (size_t k = 0; k < tasks; k++) {
    attn__task t;
    if (attn__stopped(p)) return ATTND_ECANCELED;
    attn__walk_task(p, &walk, k, &t);
    task_allowed(p, &t, lo, hi, allowed);
    size_t row0 = ((size_t)t.b * p->H + t.h) * p->Lq + t.i0;
    for (int r = 0; r < t.rows; r++) {
      row_stats st = {0.0, 0.0, 0.0};
      if (allowed[r] > 0)
        stats_of(weights + (row0 + r) * p->Lk, p->Lk, &st);
      if (allowed_keys) allowed_keys[row0 + r] = allowed[r];
      if (entropy) entropy[row0 + r] = (float)st.entropy;
      if (max_weight) max_weight[row0 + r] = (float)st.max;
      if (jacobian_norm) jacobian_norm[row0 + r] = (float)st.jacobian;
    }
  }
  return 0;
}
