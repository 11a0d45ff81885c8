/* attn.c - the public entry points of core/: problem set-up, checks,
 * task split, scratch sizing and the task driver.
 *
 * DESIGN (threads): core/ starts no threads and has no globals.  A task is
 * one (b, h, query block); attn_run_tasks may run concurrently on several
 * threads for disjoint task ranges of one problem, because each task
 * writes only its own rows of out and weights and uses only the scratch
 * the calling thread passed in.  The problem and its tensors are read
 * only.  Results do not depend on the split: a task's arithmetic is a
 * function of the problem and the task index alone.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_impl.h"

void attn_problem_init(attn_problem *p) {
  memset(p, 0, sizeof *p);
  p->scoring = ATTN_SCORING_DOT;
  p->causal = ATTN_CAUSAL_NONE;
  p->H = 1;
  p->Hkv = 1;
}

/* 1 when a * b fits in size_t (and both are non-negative). */
static int fits_mul(size_t *acc, long long v) {
  if (v < 0) return 0;
  return !__builtin_mul_overflow(*acc, (size_t)v, acc);
}

/* Element counts of every tensor must be representable, so that index
 * arithmetic in the tasks never wraps. */
static int check_sizes(const attn_problem *p) {
  long long dims[][4] = {
    {p->B, p->H, p->Lq, p->D},   {p->B, p->Hkv, p->Lk, p->Dk},
    {p->B, p->Hkv, p->Lk, p->Dv}, {p->B, p->H, p->Lq, p->Dv},
    {p->B, p->H, p->Lq, p->Lk},   {ATTN__QBLOCK_MAX, p->Lk, 4, 4},
    {p->Hd, p->Lk, 4, 4},         {p->Hd, p->D, p->Dk, 1},
  };
  for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
    size_t n = 1;
    for (int a = 0; a < 4; a++)
      if (!fits_mul(&n, dims[t][a])) return 0;
    if (n > (size_t)INT64_MAX / 8) return 0;
  }
  return 1;
}

static int check_strides(const int64_t *st) {
  for (int a = 0; a < 4; a++)
    if (st[a] < 0) return 0;
  return 1;
}

static int check_scoring(const attn_problem *p) {
  if (p->scoring == ATTN_SCORING_DOT)
    return p->Dk == p->D && isfinite(p->scale) && p->scale != 0.0f;
  if (p->scoring == ATTN_SCORING_ADDITIVE)
    return p->Hd >= 1 && p->w_q && p->w_k && p->w_v;
  return 0;
}

/* Both or neither cu_seqlens; when packed, B == 1, no valid_lens, and
 * each array runs from 0 to its length without decreasing. */
static int check_cu(const int32_t *cu, int n, int len) {
  if (cu[0] != 0 || cu[n] != len) return 0;
  for (int s = 0; s < n; s++)
    if (cu[s + 1] < cu[s]) return 0;
  return 1;
}

static int check_packing(const attn_problem *p) {
  if (!p->cu_seqlens_q && !p->cu_seqlens_k) return 1;
  if (!p->cu_seqlens_q || !p->cu_seqlens_k) return 0;
  if (p->n_seqs < 1 || p->B != 1 || p->valid_lens) return 0;
  return check_cu(p->cu_seqlens_q, p->n_seqs, p->Lq) &&
         check_cu(p->cu_seqlens_k, p->n_seqs, p->Lk);
}

static int check_variants(const attn_problem *p) {
  /* Written so that NaN fails too.  A subnormal cap would make s / cap
   * infinite and a zero score NaN. */
  if (!(p->softcap == 0.0f || (p->softcap >= FLT_MIN && p->softcap <= FLT_MAX)))
    return 0;
  if (p->window_align != ATTN_WINDOW_UPPER_LEFT &&
      p->window_align != ATTN_WINDOW_LOWER_RIGHT)
    return 0;
  return check_packing(p);
}

/* The tensors of the dtype are there; BF16 storage needs BF16 mode and
 * BF16 mode needs dot scoring. */
static int check_precision(const attn_problem *p) {
  if (p->precision != ATTN_PRECISION_FP32 &&
      p->precision != ATTN_PRECISION_BF16)
    return 0;
  if (p->precision == ATTN_PRECISION_BF16 &&
      p->scoring != ATTN_SCORING_DOT)
    return 0;
  if (p->dtype == ATTN_DTYPE_BF16)
    return p->precision == ATTN_PRECISION_BF16 && p->q16 && p->k16 &&
           p->v16;
  return p->dtype == ATTN_DTYPE_F32 && p->q && p->k && p->v;
}

int attn_check(const attn_problem *p) {
  if (!p) return ATTND_EINVAL;
  if (p->B < 1 || p->H < 1 || p->Hkv < 1 || p->Lq < 1 || p->Lk < 1 ||
      p->D < 1 || p->Dk < 1 || p->Dv < 1)
    return ATTND_EINVAL;
  if (p->H % p->Hkv != 0) return ATTND_EINVAL;
  if (!check_precision(p)) return ATTND_EINVAL;
  if (!check_scoring(p)) return ATTND_EINVAL;
  if (p->causal != ATTN_CAUSAL_NONE && p->causal != ATTN_CAUSAL_UPPER_LEFT &&
      p->causal != ATTN_CAUSAL_LOWER_RIGHT)
    return ATTND_EINVAL;
  if (p->mask && !check_strides(p->mask_stride)) return ATTND_EINVAL;
  if (p->bias && !check_strides(p->bias_stride)) return ATTND_EINVAL;
  /* Written so that NaN fails too. */
  if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f)) return ATTND_EINVAL;
  if (p->gemm != ATTN_GEMM_AUTO && p->gemm != ATTN_GEMM_BLAS &&
      p->gemm != ATTN_GEMM_NATIVE && p->gemm != ATTN_GEMM_BF16 &&
      p->gemm != ATTN_GEMM_AMX)
    return ATTND_EINVAL;
  if (!check_sizes(p)) return ATTND_EINVAL;
  if (!check_variants(p)) return ATTND_EINVAL;
  return 0;
}

/* Keys a row may see under a sliding window (with causal closing its
 * open right side), or 0 when that is not bounded. */
static long long window_width(const attn_problem *p) {
  long long left = p->window_left, right = p->window_right;
  if (!p->has_window || left < 0) return 0;
  if (right < 0 && p->causal == ATTN_CAUSAL_NONE) return 0;
  return left + (right < 0 ? 0 : right) + 1;
}

/* A task's rows see the union of their keys: under a window of w keys,
 * rows + w - 1 keys for w each, so a block of rows stays at most a
 * quarter of the window, ATTN__QBLOCK at least (for w >= 256 each score
 * computed is then at least 80 % useful); where K is packed per task and
 * key block (BLAS, long heads), larger blocks pack it fewer times. */
int attn__query_block(const attn_problem *p) {
  size_t heads = (size_t)p->B * (size_t)p->H;
  long long w = window_width(p);
  int qb = ATTN__QBLOCK;
  while (qb < ATTN__QBLOCK_MAX && (w == 0 || 8LL * qb <= w) &&
         heads * (((size_t)p->Lq + 2 * qb - 1) / (2 * (size_t)qb)) >=
             ATTN__MIN_TASKS)
    qb *= 2;
  return qb;
}

/* Query blocks of sequence s (qb rows each; the last may be short). */
static size_t seq_blocks(const attn_problem *p, int s, size_t qb) {
  size_t len = (size_t)(p->cu_seqlens_q[s + 1] - p->cu_seqlens_q[s]);
  return (len + qb - 1) / qb;
}

/* Query blocks per (b, h): over the whole Lq, or sequence by sequence
 * when packed, so that no block crosses a sequence boundary. */
static size_t blocks_of(const attn_problem *p, size_t qb) {
  size_t n = 0;
  if (!p->cu_seqlens_q) return ((size_t)p->Lq + qb - 1) / qb;
  for (int s = 0; s < p->n_seqs; s++) n += seq_blocks(p, s, qb);
  return n;
}

static size_t query_blocks(const attn_problem *p) {
  return blocks_of(p, (size_t)attn__query_block(p));
}

size_t attn_task_count(const attn_problem *p, int with_weights) {
  (void)with_weights; /* both paths split queries the same way */
  if (attn_check(p) != 0) return 0;
  return (size_t)p->B * (size_t)p->H * query_blocks(p);
}

double attn_score_pairs(const attn_problem *p) {
  double pairs = 0.0;
  if (attn_check(p) != 0) return 0.0;
  if (!p->cu_seqlens_q) return (double)p->B * p->H * p->Lq * (double)p->Lk;
  for (int s = 0; s < p->n_seqs; s++)
    pairs += (double)(p->cu_seqlens_q[s + 1] - p->cu_seqlens_q[s]) *
             (double)(p->cu_seqlens_k[s + 1] - p->cu_seqlens_k[s]);
  return pairs * p->H;
}

static size_t take(size_t *off, size_t bytes) {
  size_t at = *off;
  *off += (bytes + ATTN__ALIGN - 1) / ATTN__ALIGN * ATTN__ALIGN;
  return at;
}

/* Rows per weights-path chunk: as many as keep a (rows, Lk) block of
 * scores within ATTN__WFLOATS, a multiple of 16 from 64 up to the task's
 * rows. */
static int weight_rows(const attn_problem *p, int qb) {
  long long r = ATTN__WFLOATS / p->Lk;
  r = r >= 64 ? r / 16 * 16 : 64;
  return r < qb ? (int)r : qb;
}

void attn__scratch_layout(const attn_problem *p, int with_weights,
                          attn__scratch *s) {
  int qrows = attn__query_block(p);
  size_t qb = (size_t)(p->Lq < qrows ? p->Lq : qrows);
  /* Key blocks are KBLOCK wide; only when every key fits in half a
   * block does the scratch shrink to Lk columns. */
  size_t kb = (size_t)(2 * (long long)p->Lk <= ATTN__KBLOCK ? p->Lk
                                                           : ATTN__KBLOCK);
  size_t lk = (size_t)p->Lk, f = sizeof(float);
  size_t off = 0;
  memset(s, 0, sizeof *s);
  s->lo = take(&off, qb * sizeof(int));
  s->hi = take(&off, qb * sizeof(int));
  if (with_weights) {
    s->wrows = weight_rows(p, (int)qb);
    s->stream = (double)p->B * p->H * p->Lq * p->Lk * f > ATTN__STREAM_BYTES;
    s->flags = take(&off, lk * f);
    s->scores = take(&off, (size_t)s->wrows * lk * f);
    s->rowsum = take(&off, qb * f);
    s->rowmax = take(&off, qb * f);
    if (p->dropout_p > 0.0f) s->drop = take(&off, qb * kb * f);
  } else {
    if (p->mask) s->flags = take(&off, qb * kb * f);
    s->scores = take(&off, qb * kb * f);
    s->acc = take(&off, qb * (size_t)p->Dv * f);
    s->rowmax = take(&off, qb * f);
    s->rowsum = take(&off, qb * f);
    s->rowscale = take(&off, qb * f);
    s->rowahead = take(&off, qb * f);
    s->span = take(&off, qb * sizeof(attn__span));
  }
  if (p->scoring == ATTN_SCORING_ADDITIVE) {
    s->qproj = take(&off, qb * (size_t)p->Hd * f);
    s->kproj = take(&off, (size_t)p->Hd * kb * f);
  }
  s->gemm = attn__gemm_pick(p);
  if (s->gemm == ATTN_GEMM_NATIVE)
    s->pack = take(&off, attn__gemm_pack_floats(p) * f);
  s->kpanel_count = attn__kpanels(p, s->gemm);
  if (s->kpanel_count > 0) {
    size_t panels = (size_t)s->kpanel_count;
    s->kpanels = take(&off, attn__kept_bytes(p, s->gemm));
    s->kready = take(&off, (2 * panels + 1) * sizeof(int));
  }
  if (attn__is_bf16(p)) {
    size_t a, b;
    attn__bf16_scratch(p, qb, &a, &b);
    s->b16a = take(&off, a);
    s->b16b = take(&off, b);
  }
  s->total = off;
  s->qrows = qrows;
  s->nqb = blocks_of(p, (size_t)qrows);
}

size_t attn_scratch_bytes(const attn_problem *p, int with_weights) {
  attn__scratch s;
  if (attn_check(p) != 0) return 0;
  attn__scratch_layout(p, with_weights, &s);
  return s.total;
}

/* Task t with w->nqb query blocks of w->rows rows each per (b, h).  The
 * cursor (w->seq, w->first) only moves forward within one (b, h); a task
 * of an earlier block (the next (b, h)) starts it again from 0. */
void attn__walk_task(const attn_problem *p, attn__task_walk *w, size_t t,
                     attn__task *task) {
  size_t qb = t % w->nqb, bh = t / w->nqb;
  int rows = w->rows;
  task->b = (int)(bh / (size_t)p->H);
  task->h = (int)(bh % (size_t)p->H);
  task->kvh = task->h / (p->H / p->Hkv);
  task->qoff = task->koff = 0;
  task->lq = p->Lq;
  task->lk = p->Lk;
  if (p->cu_seqlens_q) {
    const int32_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
    if (qb < w->first) w->seq = 0, w->first = 0;
    for (;;) {
      size_t n = seq_blocks(p, w->seq, (size_t)rows);
      if (qb < w->first + n) break;
      w->first += n;
      w->seq++;
    }
    task->qoff = cq[w->seq];
    task->koff = ck[w->seq];
    task->lq = cq[w->seq + 1] - cq[w->seq];
    task->lk = ck[w->seq + 1] - ck[w->seq];
    qb -= w->first;
  }
  task->i0 = task->qoff + (int)qb * rows;
  int end = task->qoff + task->lq;
  task->rows = end - task->i0 < rows ? end - task->i0 : rows;
}

void attn__walk_start(const attn_problem *p, attn__task_walk *w) {
  w->rows = attn__query_block(p);
  w->nqb = blocks_of(p, (size_t)w->rows);
  w->seq = 0;
  w->first = 0;
}

float attn__lse(float m, float den) {
  if (!(den > 0.0f)) return -INFINITY;
  return (float)((double)m + log((double)den));
}

int attn_run_tasks(const attn_problem *p, size_t t0, size_t t1, float *out,
                   float *weights, void *scratch) {
  return attn_run_tasks_lse(p, t0, t1, out, weights, NULL, scratch);
}

int attn_run_tasks_lse(const attn_problem *p, size_t t0, size_t t1,
                       float *out, float *weights, float *lse,
                       void *scratch) {
  attn__task_walk walk;
  attn__scratch lay;
  int with_weights = weights != NULL;
  if (attn_check(p) != 0 || !out || !scratch) return ATTND_EINVAL;
  if ((uintptr_t)scratch % ATTN__ALIGN != 0) return ATTND_EINVAL;
  /* The layout also carries the task split, so that a call works it out
   * once (a tiny problem's call is a microsecond). */
  attn__scratch_layout(p, with_weights, &lay);
  if (t0 > t1 || t1 > (size_t)p->B * (size_t)p->H * lay.nqb)
    return ATTND_EINVAL;
  walk.nqb = lay.nqb;
  walk.rows = lay.qrows;
  walk.seq = 0;
  walk.first = 0;
  /* no head's K panels are kept yet: the scratch may hold another
   * problem's (score.c) */
  if (lay.kpanel_count > 0) *(int *)((char *)scratch + lay.kready) = -1;
  for (size_t t = t0; t < t1; t++) {
    attn__task task;
    attn__walk_task(p, &walk, t, &task);
    if (with_weights)
      attn__task_weights(p, &task, out, weights, lse, scratch, &lay);
    else
      attn__task_online(p, &task, out, lse, scratch, &lay);
    if (attn__stopped(p)) return ATTND_ECANCELED;
  }
  return 0;
}

int attn_forward(const attn_problem *p, float *out, float *weights) {
  return attn_forward_lse(p, out, weights, NULL);
}

int attn_forward_lse(const attn_problem *p, float *out, float *weights,
                     float *lse) {
  int with_weights = weights != NULL, rc;
  void *scratch = NULL;
  if (attn_check(p) != 0 || !out) return ATTND_EINVAL;
  size_t bytes = attn_scratch_bytes(p, with_weights);
  bytes = (bytes + ATTN__ALIGN - 1) / ATTN__ALIGN * ATTN__ALIGN;
  scratch = aligned_alloc(ATTN__ALIGN, bytes ? bytes : ATTN__ALIGN);
  if (!scratch) return ATTND_ENOMEM;
  rc = attn_run_tasks_lse(p, 0, attn_task_count(p, with_weights), out,
                          weights, lse, scratch);
  free(scratch);
  return rc;
}
