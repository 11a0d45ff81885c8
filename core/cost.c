/* cost.c - what a problem costs to run, from its shapes and options alone
 * (attn_cost_flops, attn.h).
 *
 * It follows the work the two paths really do: tasks of attn__query_block
 * rows (the weights path in chunks of lay.wrows rows), each computing the
 * scores of the keys [klo, khi) some of its rows may see under causal,
 * the window (either alignment) and packing, as attn__row_intervals and
 * the skipping of online.c find them.
 * valid_lens and the mask are data, not options: they are charged as if
 * every key were allowed, so the estimate is an upper bound of what they
 * save.
 *
 * Packed sequences (cu_seqlens) are weighed the same way: a task never
 * crosses a sequence and its rows see only their own sequence's keys, so
 * a packed batch costs what its sequences cost, not the square.
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

/* Scores one (b, h) computes, rows at a time: for each task (query
 * block, within its packed sequence), each group of `rows` of its rows
 * times the width of the union of their intervals under causal, the
 * window and packing, found by the core's own attn__row_intervals.
 * valid_lens are data: the problem is weighed without them. */
static double cost_scores(const attn_problem *p, const attn__scratch *lay,
                          int rows) {
  attn_problem q = *p;
  int lo[ATTN__QBLOCK_MAX], hi[ATTN__QBLOCK_MAX], klo, khi;
  double total = 0.0;
  attn__task_walk walk;
  if (!p->cu_seqlens_q && p->causal == ATTN_CAUSAL_NONE && !p->has_window)
    return (double)p->Lq * p->Lk;
  q.valid_lens = NULL;
  attn__walk_start(&q, &walk);
  for (size_t t = 0; t < lay->nqb; t++) {
    attn__task task;
    attn__walk_task(&q, &walk, t, &task);
    for (int r0 = 0; r0 < task.rows; r0 += rows) {
      attn__task c = task;
      c.i0 = task.i0 + r0;
      c.rows = task.rows - r0 < rows ? task.rows - r0 : rows;
      attn__row_intervals(&q, &c, lo, hi, &klo, &khi);
      if (klo < khi)
        total += (double)c.rows * (double)(khi - klo);
    }
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
  s = cost_scores(p, &lay,
                  with_weights ? (lay.wrows < lay.qrows ? lay.wrows
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
