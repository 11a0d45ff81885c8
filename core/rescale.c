/* rescale.c - outputs whose unnormalised sums overflow.
 *
 * Both paths form o = sum_j p_j v_j with p_j = exp(s_j - m) in [0, 1]
 * (times 1/(1-p) under dropout) and divide by sum_j p_j >= 1 at the end.
 * The quotient is a convex combination of value rows, no larger than
 * max |v| (1/(1-p) times that under dropout), but o itself reaches
 * Lk max |v|: 4000 keys at 1e35, or two at 2e38, overflow it to inf
 * and the clamp turns a right answer into FLT_MAX.
 *
 * Guarding against that up front would cost a pass over V per task on
 * every input.  Instead a task runs as always and its o is checked where
 * it is scaled and sanitized anyway (attn__scale_sanitize reports a
 * clip).  The check is exact: every p_j v_j is finite, and a partial sum
 * that reached inf stays inf or NaN through every later step (more sums,
 * online rescales by factors <= 1), so a finite o means nothing
 * overflowed.  Only a task that failed it runs again with every p_j times
 * g = 2^-k, k chosen from the largest value the task reads so that
 * n max|v| / (1-p) g <= 2^126: then no partial sum can come near FLT_MAX.
 * Dividing g o by the unscaled sum and multiplying by 2^k gives the same
 * quotient (a power of two scales without rounding); only terms that g
 * pushes below the smallest float are lost, and those had weights under
 * 2^-126 of the row's largest.
 */
#include <math.h>

#include "attn_impl.h"

/* max |v| over keys [j0, j1) of the task's kv head. */
static float max_abs_value(const attn_problem *p, const attn__task *t,
                           int j0, int j1) {
  size_t kvhead = (size_t)t->b * p->Hkv + t->kvh;
  size_t off = (kvhead * p->Lk + j0) * p->Dv;
  size_t n = (size_t)(j1 - j0) * p->Dv;
  float mx = 0.0f;
  for (size_t c = 0; c < n; c++) {
    float a = __builtin_fabsf(p->dtype == ATTN_DTYPE_BF16
                                  ? attn__bf16_widen(p->v16[off + c])
                                  : p->v[off + c]);
    mx = a > mx ? a : mx;
  }
  return mx;
}

float attn__value_scale(const attn_problem *p, const attn__task *t, int j0,
                        int j1) {
  double keep = p->dropout_p > 0.0f ? 1.0f / (1.0f - p->dropout_p) : 1.0;
  double bound = (double)(j1 - j0) * max_abs_value(p, t, j0, j1) * keep;
  int e;
  if (!(bound <= 0x1p126)) {
    /* bound = f 2^e with f < 1, so bound 2^(126 - e) < 2^126 */
    frexp(bound, &e);
    if (bound <= DBL_MAX) return ldexpf(1.0f, 126 - e);
  }
  return 1.0f;
}

void attn__scale_floats(float *x, size_t n, float g) {
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx512()) {
    attn__scale_avx512(x, n, g);
    return;
  }
#endif
  for (size_t c = 0; c < n; c++) x[c] *= g;
}
