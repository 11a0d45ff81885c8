/* cost.c - what a problem costs to run, from its shapes and options alone
 * (attn_cost_flops, attn.h).
 *
 * It follows the work the two paths really do: tasks of attn__query_block
 * rows (the weights path in chunks of lay.wrows rows), each computing the
 * scores of the keys [klo, khi) some of its rows may see under causal,
 * the window (either alignment) and packing, as attn__row_intervals and
 * the skipping of online.c find them (down to its runs of rows where the
 * scores read kept K panels).
 * valid_lens and the mask are data, not options: they are charged as if
 * every key were allowed, so the estimate is an upper bound of what they
 * save.
 *
 * Packed sequences (cu_seqlens) are weighed the same way: a task never
 * crosses a sequence and its rows see only their own sequence's keys, so
 * a packed batch costs what its sequences cost, not the square.  The
 * tasks are walked in order with one cursor over cu_seqlens
 * (attn__task_walk), so the estimate is linear in the problem's size: it
 * runs before any limit is applied.
 */
#include <string.h>

#include "attn_impl.h"

/* Flop-equivalents per score, beyond the products, measured on the
 * AVX-512 path of one core, where the products run at about 100 GFLOP/s
 * (docs/api.md, "Cost limit"): the softmax of a computed score (maximum,
 * exp, sum, scale),
 * writing one weight (zero or not), one score's dropout decision, and
 * the diagnostics' pass over one weight (a log in double). */
#define COST_SOFTMAX 80.0
#define COST_WEIGHT 60.0
#define COST_DROPOUT 560.0
#define COST_DIAG 1100.0

/* Flop-equivalents per hidden unit per score of additive scoring: the
 * unit's step of the tanh sum (score.c, additive_row), a tanh computed
 * both ways (odd polynomial, and an exp and a division) and picked by a
 * mask, the add of the projections before it and the multiply-add by
 * w_v after it: about 90 vector instructions for 8 units (the loop's
 * AVX2 clone, 8 lanes, also on AVX-512 cores).  It is what additive
 * scoring spends its time on (the projections are products, a few per
 * cent at D = 64): about 1.7 ns a unit on one AVX-512 core whatever Hd,
 * D, the path or the packing, so that at 120 the estimate runs at
 * about 70 GFLOP/s there, the middle of the band docs/api.md promises
 * (attnd-bench estimate measures it). */
#define COST_TANH 120.0

/* The work of one (b, h), counted the way the paths do it: for each
 * task (query block, within its packed sequence), each group of `rows` of
 * its rows against the union [klo, khi) of their intervals under causal,
 * the window and packing (the core's own attn__row_intervals), taken in
 * key blocks of ATTN__KBLOCK; each block's call of attn__scores computes
 * rows x width scores and, when additive, projects the group's rows and
 * the block's keys.  valid_lens are data: the problem is weighed without
 * them. */
/* The scores of a task's rows where the online path's blocks read kept
 * K panels (online.c): runs of ATTN__SUBROWS rows, each computing in
 * every block its union of intervals [a, z) meets the keys from the
 * block's start up to z, and one key in the task's first block when it
 * misses that one (attn__run_width); the blocks it meets run from the
 * one holding a, so the sum is z minus that block's start. */
static double kept_scores(const int *lo, const int *hi, int rows, int klo) {
  double s = 0.0;
  for (int r0 = 0; r0 < rows; r0 += ATTN__SUBROWS) {
    int n = rows - r0 < ATTN__SUBROWS ? rows - r0 : ATTN__SUBROWS, a, z;
    attn__run_keys(lo + r0, hi + r0, n, &a, &z);
    int start = a < z ? klo + (a - klo) / ATTN__KBLOCK * ATTN__KBLOCK : klo;
    s += (double)n * (a < z ? z - start + (start > klo) : 1);
  }
  return s;
}

static void cost_walk(const attn_problem *p, const attn__scratch *lay,
                      int rows, int online, attn__cost_work *w) {
  attn_problem q = *p;
  int lo[ATTN__QBLOCK_MAX], hi[ATTN__QBLOCK_MAX], klo, khi;
  attn__task_walk walk;
  q.valid_lens = NULL;
  attn__walk_start(&q, &walk);
  for (size_t t = 0; t < lay->nqb; t++) {
    attn__task task;
    attn__walk_task(&q, &walk, t, &task);
    w->pairs += (double)task.rows * task.lk;
    for (int r0 = 0; r0 < task.rows; r0 += rows) {
      attn__task c = task;
      c.i0 = task.i0 + r0;
      c.rows = task.rows - r0 < rows ? task.rows - r0 : rows;
      attn__row_intervals(&q, &c, lo, hi, &klo, &khi);
      if (klo >= khi) continue;
      double width = (double)(khi - klo);
      double blocks = (double)((khi - klo + ATTN__KBLOCK - 1) / ATTN__KBLOCK);
      if (online && lay->kpanel_count > 0 && klo % 64 == 0)
        w->scores += kept_scores(lo, hi, c.rows, klo);
      else
        w->scores += (double)c.rows * width;
      w->keys_projected += width;
      w->rows_projected += (double)c.rows * blocks;
    }
  }
}

void attn__cost_count(const attn_problem *p, int with_weights,
                      attn__cost_work *w) {
  attn__scratch lay;
  double heads = (double)p->B * p->H;
  memset(w, 0, sizeof *w);
  attn__scratch_layout(p, with_weights, &lay);
  /* The weights path takes a task's rows lay.wrows at a time. */
  cost_walk(p, &lay,
            with_weights ? (lay.wrows < lay.qrows ? lay.wrows : lay.qrows)
                         : lay.qrows,
            !with_weights, w);
  w->scores *= heads;
  w->keys_projected *= heads;
  w->rows_projected *= heads;
  w->pairs *= heads;
}

double attn_cost_flops(const attn_problem *p, int with_weights,
                       int diagnostics) {
  attn__cost_work w;
  double s, all, per_score, flops;
  if (p->B < 1 || p->H < 1 || p->Lq < 1 || p->Lk < 1 || p->D < 1 ||
      p->Dk < 1 || p->Dv < 1)
    return 0.0;
  attn__cost_count(p, with_weights, &w);
  s = w.scores;
  all = (double)p->B * p->H * p->Lq * (double)p->Lk;
  if (p->scoring == ATTN_SCORING_ADDITIVE) {
    /* W_q Q^T for the rows and W_k K^T for the keys of every block
     * (each call projects its own), a tanh per hidden unit per score,
     * and P V. */
    flops = 2.0 * w.rows_projected * p->Hd * p->D +
            2.0 * w.keys_projected * p->Hd * p->Dk + s * p->Hd * COST_TANH +
            2.0 * s * p->Dv;
  } else {
    flops = 2.0 * s * p->D + 2.0 * s * p->Dv;
  }
  per_score = COST_SOFTMAX + (p->mask ? 1.0 : 0.0) + (p->bias ? 1.0 : 0.0) +
              (p->dropout_p > 0.0f ? COST_DROPOUT : 0.0);
  flops += s * per_score;
  if (with_weights || diagnostics)
    flops += all * COST_WEIGHT;  /* every weight is written, 0 or not */
  if (diagnostics)  /* each row's own sequence's weights (diag.c) */
    flops += w.pairs * COST_DIAG;
  return flops;
}
