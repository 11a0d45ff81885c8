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
 * a packed batch costs what its sequences cost, not the square.  Additive
 * scoring projects, in each attn__scores call (a block of at most
 * ATTN__KBLOCK keys of a chunk), the chunk's rows and the block's keys:
 * charged per call, so that a one-row sequence pays for projecting every
 * key of its sequence.
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

/* What one (b, h) computes, chunk by chunk: scores, and for additive
 * scoring the keys and query rows each attn__scores call projects. */
typedef struct cost_work {
  double scores;   /* rows times the width of the keys they score */
  double keys;     /* keys projected, W_k K^T (a chunk's every call) */
  double qrows;    /* query rows projected, W_q Q^T (once per call) */
  double pairs;    /* (row, key) pairs within the rows' sequences */
} cost_work;

/* Adds one chunk of rows rows that scores keys [klo, khi): both paths
 * call attn__scores for it in key blocks of at most ATTN__KBLOCK
 * (additive; dot products on the weights path take the chunk in one
 * call, which changes nothing counted here). */
static void cost_chunk(cost_work *w, int rows, int klo, int khi) {
  double width = (double)(khi - klo);
  if (klo >= khi)
    return;
  w->scores += rows * width;
  w->keys += width;
  w->qrows += (double)rows * (double)((khi - klo + ATTN__KBLOCK - 1) /
                                      ATTN__KBLOCK);
}

/* The work of one (b, h): each task (query block, within its packed
 * sequence) in groups of `rows` of its rows, each group scoring the
 * union of its rows' intervals under causal, the window and packing, as
 * the core's own attn__row_intervals finds them.  The tasks are walked
 * once, in order, so that this is linear in the number of sequences.
 * valid_lens are data: the problem is weighed without them. */
static void cost_scores(const attn_problem *p, const attn__scratch *lay,
                        int rows, cost_work *w) {
  attn_problem q = *p;
  int lo[ATTN__QBLOCK_MAX], hi[ATTN__QBLOCK_MAX], klo, khi;
  attn__task_iter it;
  attn__task task;
  q.valid_lens = NULL;
  attn__tasks_begin(&q, lay->nqb, &it);
  while (attn__tasks_next(&it, &task)) {
    w->pairs += (double)task.rows * task.lk;
    for (int r0 = 0; r0 < task.rows; r0 += rows) {
      attn__task c = task;
      c.i0 = task.i0 + r0;
      c.rows = task.rows - r0 < rows ? task.rows - r0 : rows;
      attn__row_intervals(&q, &c, lo, hi, &klo, &khi);
      cost_chunk(w, c.rows, klo, khi);
    }
  }
}

double attn_cost_flops(const attn_problem *p, int with_weights,
                       int diagnostics) {
  attn__scratch lay;
  cost_work w = {0.0, 0.0, 0.0, 0.0};
  double heads, s, all, per_score, flops;
  if (p->B < 1 || p->H < 1 || p->Lq < 1 || p->Lk < 1 || p->D < 1 ||
      p->Dk < 1 || p->Dv < 1)
    return 0.0;
  attn__scratch_layout(p, with_weights, &lay);
  heads = (double)p->B * p->H;
  /* The weights path takes a task's rows lay.wrows at a time. */
  cost_scores(p, &lay,
              with_weights ? (lay.wrows < lay.qrows ? lay.wrows : lay.qrows)
                           : lay.qrows,
              &w);
  s = w.scores;
  all = (double)p->Lq * p->Lk;
  if (p->scoring == ATTN_SCORING_ADDITIVE) {
    /* Each attn__scores call projects its rows (Q W_q^T) and its keys
     * (W_k K^T), then takes a tanh per hidden unit per score; then P V. */
    flops = 2.0 * w.qrows * p->Hd * p->D + 2.0 * w.keys * p->Hd * p->Dk +
            s * p->Hd * COST_TANH + 2.0 * s * p->Dv;
  } else {
    flops = 2.0 * s * p->D + 2.0 * s * p->Dv;
  }
  per_score = COST_SOFTMAX + (p->mask ? 1.0 : 0.0) + (p->bias ? 1.0 : 0.0) +
              (p->dropout_p > 0.0f ? COST_DROPOUT : 0.0);
  flops += s * per_score;
  if (with_weights || diagnostics)
    flops += all * COST_WEIGHT;  /* every weight is written, 0 or not */
  if (diagnostics)  /* over each row's own sequence's keys (diag.c) */
    flops += w.pairs * COST_DIAG;
  return heads * flops;
}
