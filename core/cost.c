/* cost.c - what a problem costs to run, from its shapes and options alone
 * (attn_cost_flops, attn.h).
 *
 * It follows the work the two paths really do: tasks of attn__query_block
 * rows (the weights path in chunks of lay.wrows rows), each computing the
 * scores of the keys [klo, khi) some of its rows may see under causal and
 * window, as attn__row_intervals and the skipping of online.c find them.
 * valid_lens and the mask are data, not options: they are charged as if
 * every key were allowed, so the estimate is an upper bound of what they
 * save.
 *
 * Packed sequences (cu_seqlens) bound each row to its own sequence the
 * way causal bounds it to a prefix: their interval belongs in
 * cost_interval, and this file then charges them without further change.
 */
#include "attn_impl.h"

/* Flop-equivalents per score, beyond the products, measured on the
 * AVX-512 path of one core, where the products run at about 100 GFLOP/s
 * (docs/api.md, "Cost limit"): the softmax of a computed score (maximum,
 * exp, sum, scale),
 * writing one weight (zero or not), one score's dropout decision, the
 * diagnostics' pass over one weight (a log in double), and one hidden
 * unit of additive scoring (a tanh and a multiply-add). */
#define COST_SOFTMAX 80.0
#define COST_WEIGHT 60.0
#define COST_DROPOUT 560.0
#define COST_DIAG 1100.0
#define COST_TANH 40.0

/* Row i's keys [lo, hi) under causal and window (mask.c's row_interval
 * without valid_lens). */
static void cost_interval(const attn_problem *p, long long i, long long *lo,
                          long long *hi) {
  long long l = 0, h = p->Lk;
  if (p->causal == ATTN_CAUSAL_UPPER_LEFT && i + 1 < h)
    h = i + 1;
  else if (p->causal == ATTN_CAUSAL_LOWER_RIGHT && i + p->Lk - p->Lq + 1 < h)
    h = i + p->Lk - p->Lq + 1;
  if (p->has_window) {
    if (p->window_left >= 0 && i - p->window_left > l) l = i - p->window_left;
    if (p->window_right >= 0 && i + p->window_right + 1 < h)
      h = i + p->window_right + 1;
  }
  if (h < l) h = l;
  *lo = l;
  *hi = h;
}

/* Scores one (b, h) computes: over its row groups of `rows` rows, each
 * group's rows times the width of the union of its rows' intervals.
 * The intervals' ends grow with i, so a group's union runs from its first
 * row's lo to its last row's hi; an empty row adds nothing. */
static double cost_scores(const attn_problem *p, int rows) {
  double total = 0.0;
  if (p->causal == ATTN_CAUSAL_NONE && !p->has_window)
    return (double)p->Lq * p->Lk;
  for (long long i0 = 0; i0 < p->Lq; i0 += rows) {
    long long n = p->Lq - i0 < rows ? p->Lq - i0 : rows;
    long long klo = p->Lk, khi = 0, lo, hi, lo2, hi2;
    /* Both ends grow with i: with the group's first and last rows
     * non-empty, they are its union; otherwise look at every row. */
    cost_interval(p, i0, &lo, &hi);
    cost_interval(p, i0 + n - 1, &lo2, &hi2);
    if (lo < hi && lo2 < hi2) {
      total += (double)n * (double)(hi2 - lo);
      continue;
    }
    for (long long r = 0; r < n; r++) {
      cost_interval(p, i0 + r, &lo, &hi);
      if (lo >= hi) continue;
      if (lo < klo) klo = lo;
      if (hi > khi) khi = hi;
    }
    if (klo < khi) total += (double)n * (double)(khi - klo);
  }
  return total;
}

double attn_cost_flops(const attn_problem *p, int with_weights,
                       int diagnostics) {
  attn__scratch lay;
  double heads, s, all, per_score, flops;
  if (p->B < 1 || p->H < 1 || p->Lq < 1 || p->Lk < 1 || p->D < 1 ||
      p->Dk < 1 || p->Dv < 1)
    return 0.0;
  attn__scratch_layout(p, with_weights, &lay);
  heads = (double)p->B * p->H;
  /* The weights path takes a task's rows lay.wrows at a time. */
  s = cost_scores(p, with_weights ? (lay.wrows < lay.qrows ? lay.wrows
                                                           : lay.qrows)
                                  : lay.qrows);
  all = (double)p->Lq * p->Lk;
  if (p->scoring == ATTN_SCORING_ADDITIVE) {
    /* Q W_q^T once per row; W_k K^T for every computed key of every task
     * (each task projects its own key blocks); then a tanh per hidden
     * unit per score, and P V. */
    double tasks_keys = s / (lay.qrows < p->Lq ? lay.qrows : p->Lq);
    flops = 2.0 * p->Lq * p->Hd * p->D + 2.0 * tasks_keys * p->Hd * p->Dk +
            s * p->Hd * COST_TANH + 2.0 * s * p->Dv;
  } else {
    flops = 2.0 * s * p->D + 2.0 * s * p->Dv;
  }
  per_score = COST_SOFTMAX + (p->mask ? 1.0 : 0.0) + (p->bias ? 1.0 : 0.0) +
              (p->dropout_p > 0.0f ? COST_DROPOUT : 0.0);
  flops += s * per_score;
  if (with_weights || diagnostics)
    flops += all * COST_WEIGHT;  /* every weight is written, 0 or not */
  if (diagnostics)
    flops += all * COST_DIAG;
  return heads * flops;
}
