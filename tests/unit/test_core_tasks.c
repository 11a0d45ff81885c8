/* test_core_tasks.c - core/'s work as tasks: the same seed gives the
 * same answer, any split of the tasks (and two threads on disjoint
 * ranges) gives the bits of one run, attn_check and attn_run_tasks refuse
 * what they must, the cost estimate counts the products and scores the
 * tasks compute, and a stop flag, set before or during a run, ends it
 * (on the weights path within one key block, counted, not timed).
 */
#include <check.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/attn_impl.h"
#include "support_ref.h"
#include "support_skip.h"

/* ------------------------------------------------------------------ */
/* Determinism and the task split. */

START_TEST(test_dropout_same_seed_same_answer_other_seed_differs) {
  shape s = {1, 2, 1, 33, 50, 4, 4};
  tcase c;
  make_unit_case(&c, &s, K_DROP, 11);
  size_t n = ref_out_len(&c.p);
  float *a = malloc(n * 4), *b = malloc(n * 4), *d = malloc(n * 4);
  ck_assert_int_eq(attn_forward(&c.p, a, NULL), 0);
  ck_assert_int_eq(attn_forward(&c.p, b, NULL), 0);
  ck_assert_mem_eq(a, b, n * 4);
  c.p.seed ^= 1;
  ck_assert_int_eq(attn_forward(&c.p, d, NULL), 0);
  ck_assert(memcmp(a, d, n * 4) != 0);
  free(a); free(b); free(d);
  free_case(&c);
}
END_TEST

/* Runs tasks one by one in reverse order with a fresh scratch each time
 * and compares bit for bit with attn_forward. */
static void split_is_bit_identical(int kinds, int with_weights) {
  shape big = {2, 4, 2, 150, 290, 8, 6}, small = {2, 4, 2, 70, 260, 4, 3};
  shape s = under_valgrind() ? small : big;
  tcase c;
  make_unit_case(&c, &s, kinds, 21);
  size_t no = ref_out_len(&c.p), nw = with_weights ? ref_w_len(&c.p) : 0;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = nw ? malloc(nw * 4) : NULL, *w2 = nw ? malloc(nw * 4) : NULL;
  size_t bytes = attn_scratch_bytes(&c.p, with_weights);
  size_t tasks = attn_task_count(&c.p, with_weights);
  ck_assert_uint_gt(tasks, 2 * 4 * 2 - 1);
  memset(o2, 0xff, no * 4); /* NaN: every element must be written */
  if (nw) memset(w2, 0xff, nw * 4);
  ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
  for (size_t t = tasks; t-- > 0;) {
    void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memset(scratch, 0xA5, (bytes + 63) / 64 * 64); /* stale garbage */
    ck_assert_int_eq(attn_run_tasks(&c.p, t, t + 1, o2, w2, scratch), 0);
    free(scratch);
  }
  ck_assert_mem_eq(o1, o2, no * 4);
  if (nw) ck_assert_mem_eq(w1, w2, nw * 4);
  free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_task_split_is_bit_identical_weights_path) {
  split_is_bit_identical(K_VL2 | K_MASK | K_BIAS | K_DROP, 1);
}
END_TEST

START_TEST(test_task_split_is_bit_identical_online_path) {
  split_is_bit_identical(K_VL2 | K_MASK | K_BIAS | K_DROP | K_UL, 0);
}
END_TEST

/* A thread keeps a head's K panels over the tasks it runs in one call
 * (score.c): query heads sharing a key head (GQA) read the same panels,
 * a call that starts inside a head packs what it reads, and a scratch
 * that has just run another problem of the same shape (other keys)
 * lends none of its panels to the next call.  Each way, and with causal,
 * window and packed rows whose runs stop early, gives attn_forward's
 * bits. */
static void kept_panels_case(const shape *s, int kinds) {
  tcase c, other;
  make_unit_case(&c, s, kinds, 41);
  make_unit_case(&other, s, kinds, 42);
  size_t no = ref_out_len(&c.p), tasks = attn_task_count(&c.p, 0);
  size_t b1 = attn_scratch_bytes(&c.p, 0), b2 = attn_scratch_bytes(&other.p, 0);
  size_t bytes = ((b1 > b2 ? b1 : b2) + 63) / 64 * 64;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  void *scratch = aligned_alloc(64, bytes);
  ck_assert_int_eq(attn_forward(&c.p, o1, NULL), 0);
  for (int way = 0; way < 3; way++) {
    memset(o2, 0xff, no * 4);
    ck_assert_int_eq(attn_run_tasks(&other.p, 0, attn_task_count(&other.p, 0),
                                    o2, NULL, scratch),
                     0);
    memset(o2, 0xff, no * 4); /* NaN: every element must be written */
    if (way == 0) /* one call over every task */
      ck_assert_int_eq(attn_run_tasks(&c.p, 0, tasks, o2, NULL, scratch), 0);
    for (size_t t = tasks; way == 1 && t-- > 0;) /* one call per task */
      ck_assert_int_eq(attn_run_tasks(&c.p, t, t + 1, o2, NULL, scratch), 0);
    if (way == 2) { /* from the middle of a head, then the rest */
      size_t mid = tasks / 2 + 1;
      ck_assert_int_eq(attn_run_tasks(&c.p, mid, tasks, o2, NULL, scratch), 0);
      ck_assert_int_eq(attn_run_tasks(&c.p, 0, mid, o2, NULL, scratch), 0);
    }
    EXPECT(memcmp(o1, o2, no * 4) == 0, "kinds %#x way %d: bits differ from "
           "attn_forward", kinds, way);
  }
  free(o1); free(o2); free(scratch);
  free_case(&c);
  free_case(&other);
}

START_TEST(test_kept_panels_follow_heads_and_calls) {
  static const shape shapes[] = {
    {1, 4, 2, 300, 700, 40, 24}, /* GQA; keys and D not multiples of 16 */
    {1, 4, 1, 130, 90, 64, 64},  /* every query head on one key head */
    {1, 2, 2, 520, 1030, 17, 5}, /* a third block of 6 keys */
  };
  static const int kinds[] = {0, K_UL, K_LR | K_WIN, K_PACK, K_MASK | K_VL2};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      kept_panels_case(&shapes[i], kinds[k]);
}
END_TEST

/* Two threads run disjoint task ranges into the same buffers, each with
 * its own scratch, as attnd's workers do; the result is bit-identical to
 * attn_forward. */
typedef struct half_job {
  const attn_problem *p;
  size_t t0, t1;
  float *out, *w;
  int rc;
} half_job;

static void *run_half(void *arg) {
  half_job *j = arg;
  size_t bytes = (attn_scratch_bytes(j->p, j->w != NULL) + 63) / 64 * 64;
  void *scratch = aligned_alloc(64, bytes);
  j->rc = scratch ? attn_run_tasks(j->p, j->t0, j->t1, j->out, j->w, scratch)
                  : ATTND_ENOMEM;
  free(scratch);
  return NULL;
}

static void threads_match_forward(int with_weights) {
  shape s = {2, 2, 1, 150, 270, 8, 6};
  tcase c;
  make_unit_case(&c, &s, K_VL2 | K_MASK | K_UL | K_BIAS | K_DROP, 31);
  size_t no = ref_out_len(&c.p), nw = with_weights ? ref_w_len(&c.p) : 0;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = nw ? malloc(nw * 4) : NULL, *w2 = nw ? malloc(nw * 4) : NULL;
  size_t n = attn_task_count(&c.p, with_weights);
  half_job jobs[2] = {{&c.p, 0, n / 2, o2, w2, -1},
                      {&c.p, n / 2, n, o2, w2, -1}};
  pthread_t th[2];
  ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, run_half, &jobs[k]), 0);
  for (int k = 0; k < 2; k++) {
    pthread_join(th[k], NULL);
    ck_assert_int_eq(jobs[k].rc, 0);
  }
  ck_assert_mem_eq(o1, o2, no * 4);
  if (nw) ck_assert_mem_eq(w1, w2, nw * 4);
  free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_two_threads_on_disjoint_tasks_match_forward) {
  threads_match_forward(1);
  threads_match_forward(0);
}
END_TEST

/* Random shapes and random mask combinations, both paths, both
 * scorings; every draw must match the reference. */
START_TEST(test_random_problems_match_reference) {
  static const int len[] = {1, 2, 3, 7, 31, 64, 65, 100, 129, 257, 300};
  static const int heads[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {3, 1}};
  rng r = {20261129};
  int draws = under_valgrind() ? 6 : 40;
  for (int d = 0; d < draws; d++) {
    int hh = rng_int(&r, 5), nl = under_valgrind() ? 7 : 11;
    shape s = {1 + rng_int(&r, 2), heads[hh][0], heads[hh][1],
               len[rng_int(&r, nl)], len[rng_int(&r, nl)],
               1 + rng_int(&r, 24), 1 + rng_int(&r, 24)};
    int kinds = (int)(rng_next(&r) & 0x1ff);
    if ((kinds & K_VL1) && (kinds & K_VL2)) kinds &= ~K_VL1;
    if ((kinds & K_UL) && (kinds & K_LR)) kinds &= ~K_UL;
    tcase c;
    char label[160];
    make_unit_case(&c, &s, kinds, rng_next(&r));
    snprintf(label, sizeof label,
             "draw %d kinds 0x%x B%d H%d/%d Lq%d Lk%d D%d Dv%d", d, kinds,
             s.B, s.H, s.Hkv, s.Lq, s.Lk, s.D, s.Dv);
    ref_compare(&c.p, label, 0);
    free_case(&c);
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* attn_check and the run_tasks arguments. */

static void valid_problem(attn_problem *p, const float *buf) {
  attn_problem_init(p);
  p->B = 1; p->Lq = 2; p->Lk = 3; p->D = p->Dk = 2; p->Dv = 2;
  p->q = p->k = p->v = buf;
  p->scale = 1.0f;
}

START_TEST(test_check_rejects_inconsistent_problems) {
  float buf[64] = {0}, out[64];
  uint8_t m[4] = {1, 1, 1, 1};
  attn_problem p;
  valid_problem(&p, buf);
  ck_assert_int_eq(attn_check(&p), 0);
  ck_assert_int_eq(attn_check(NULL), ATTND_EINVAL);
#define BAD(stmt)                                                        \
  do {                                                                   \
    valid_problem(&p, buf);                                              \
    stmt;                                                                \
    ck_assert_msg(attn_check(&p) == ATTND_EINVAL, "accepted: %s", #stmt); \
    ck_assert_int_eq(attn_forward(&p, out, NULL), ATTND_EINVAL);         \
  } while (0)
  BAD(p.B = 0);
  BAD(p.Lq = 0);
  BAD(p.Lk = -1);
  BAD(p.D = 0);
  BAD(p.Dv = 0);
  BAD(p.Dk = 3);
  BAD((p.H = 3, p.Hkv = 2));
  BAD(p.Hkv = 0);
  BAD(p.q = NULL);
  BAD(p.k = NULL);
  BAD(p.v = NULL);
  BAD(p.scale = 0.0f);
  BAD(p.scale = INFINITY);
  BAD(p.scale = NAN);
  BAD(p.dropout_p = 1.0f);
  BAD(p.dropout_p = -0.1f);
  BAD(p.dropout_p = NAN);
  BAD(p.causal = 3);
  BAD(p.scoring = 2);
  BAD((p.scoring = ATTN_SCORING_ADDITIVE, p.Hd = 0));
  BAD((p.scoring = ATTN_SCORING_ADDITIVE, p.Hd = 2, p.w_q = buf, p.w_k = buf));
  BAD((p.mask = m, p.mask_stride[2] = -1));
  BAD((p.B = 1 << 30, p.H = 1 << 30, p.Hkv = 1 << 30));
#undef BAD
  /* the additive problem with everything present is fine, any scale */
  valid_problem(&p, buf);
  p.scoring = ATTN_SCORING_ADDITIVE;
  p.Hd = 2; p.w_q = p.w_k = p.w_v = buf; p.scale = 0.0f;
  ck_assert_int_eq(attn_check(&p), 0);
}
END_TEST

START_TEST(test_run_tasks_rejects_ranges_beyond_task_count) {
  float buf[64] = {0}, out[64];
  attn_problem p;
  valid_problem(&p, buf);
  size_t n = attn_task_count(&p, 0);
  void *scratch = aligned_alloc(64, (attn_scratch_bytes(&p, 0) + 63) / 64 * 64);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n + 1, out, NULL, scratch),
                   ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 1, 0, out, NULL, scratch), ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n, NULL, NULL, scratch), ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n, out, NULL, scratch), 0);
  ck_assert_int_eq(attn_run_tasks(&p, n, n, out, NULL, scratch), 0);
  free(scratch);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Stopping a run (attn_problem.stop). */

/* A flag already set: nothing runs to the end, on either path; a flag
 * left at 0 changes no bit of the answer. */
START_TEST(test_a_set_stop_flag_cancels_the_run) {
  static const shape sh = {1, 2, 1, 70, 600, 8, 4};
  for (int weights = 0; weights < 2; weights++) {
    tcase c;
    _Atomic int stop = 1;
    size_t no = (size_t)2 * 70 * 4, nw = (size_t)2 * 70 * 600;
    float *o1 = calloc(no, sizeof *o1), *o2 = calloc(no, sizeof *o2);
    float *w1 = weights ? calloc(nw, sizeof *w1) : NULL;
    float *w2 = weights ? calloc(nw, sizeof *w2) : NULL;
    make_unit_case(&c, &sh, K_UL | K_BIAS, 7);
    ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
    c.p.stop = &stop;
    ck_assert_int_eq(attn_forward(&c.p, o2, w2), ATTND_ECANCELED);
    atomic_store(&stop, 0);
    ck_assert_int_eq(attn_forward(&c.p, o2, w2), 0);
    ck_assert_mem_eq(o1, o2, no * sizeof *o1);
    if (weights)
      ck_assert_mem_eq(w1, w2, nw * sizeof *w1);
    free(o1); free(o2); free(w1); free(w2);
    free_case(&c);
  }
}
END_TEST

struct stopper {
  _Atomic int flag;
  int after_ms;
};

static void *stop_later(void *arg) {
  struct stopper *s = arg;
  struct timespec t = {s->after_ms / 1000, (long)(s->after_ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  atomic_store(&s->flag, 1);
  return NULL;
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A long run on the online path, stopped by another thread 10 ms in:
 * it ends well before the same run left alone (its CPU time, so a loaded
 * machine does not matter), one task of one long row of keys. */
START_TEST(test_stop_set_by_another_thread_ends_one_long_task) {
  static const shape sh = {1, 1, 1, 64, 1 << 20, 16, 16};
  tcase c;
  struct stopper st = {0, 10};
  pthread_t th;
  float *o = calloc((size_t)64 * 16, sizeof *o);
  double t0, whole, stopped;
  make_unit_case(&c, &sh, 0, 11);
  t0 = cpu_now();
  ck_assert_int_eq(attn_forward(&c.p, o, NULL), 0);
  whole = cpu_now() - t0;
  c.p.stop = &st.flag;
  ck_assert_int_eq(pthread_create(&th, NULL, stop_later, &st), 0);
  t0 = cpu_now();
  ck_assert_int_eq(attn_forward(&c.p, o, NULL), ATTND_ECANCELED);
  stopped = cpu_now() - t0;
  pthread_join(th, NULL);
  ck_assert_msg(stopped < whole / 2, "stopped after %.3f s of a %.3f s run",
                stopped, whole);
  free(o);
  free_case(&c);
}
END_TEST

/* The weights path stops within one key block, counted rather than
 * timed: the stop flag is the first score of the chunk's scratch, 0
 * until the first key block's product writes it, and the rest of the
 * scores hold a marker.  The run must return ATTND_ECANCELED with the
 * scores of every later key block, and every weight, untouched: one key
 * block's product done, none after it.  Dot and additive scoring. */
START_TEST(test_the_weights_path_stops_within_one_key_block) {
  static const shape sh = {1, 1, 1, 64, 4 * ATTN__KBLOCK, 8, 4};
  const uint32_t mark = 0x7fc0beefu;  /* a NaN no product writes */
  for (int add = 0; add < 2; add++) {
    tcase c;
    attn__scratch lay;
    size_t nw = (size_t)sh.Lq * sh.Lk, bytes, untouched = 0, blocks = 0;
    float *o = calloc((size_t)sh.Lq * sh.Dv, sizeof *o);
    uint32_t *w = malloc(nw * sizeof *w), *sc;
    char *scratch;
    make_unit_case(&c, &sh, add ? K_ADD : 0, 23);
    attn__scratch_layout(&c.p, 1, &lay);
    ck_assert_int_eq(lay.wrows, sh.Lq);  /* one chunk of every row */
    bytes = attn_scratch_bytes(&c.p, 1);
    scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    ck_assert_ptr_nonnull(scratch);
    sc = (uint32_t *)(scratch + lay.scores);
    for (size_t i = 0; i < nw; i++) sc[i] = w[i] = mark;
    sc[0] = 0;
    c.p.stop = (const _Atomic int *)(const void *)sc;
    ck_assert_int_eq(attn_run_tasks_lse(&c.p, 0, attn_task_count(&c.p, 1), o,
                                        (float *)w, NULL, scratch),
                     ATTND_ECANCELED);
    for (size_t i = 0; i < nw; i++) untouched += w[i] == mark;
    ck_assert_uint_eq(untouched, nw);
    /* key blocks with any score written, over all rows */
    for (int j0 = 0; j0 < sh.Lk; j0 += ATTN__KBLOCK) {
      size_t written = 0;
      for (int r = 0; r < sh.Lq; r++)
        for (int j = j0; j < j0 + ATTN__KBLOCK; j++)
          written += sc[(size_t)r * sh.Lk + j] != mark;
      blocks += written > 0;
    }
    ck_assert_msg(blocks == 1, "%zu of %d key blocks scored after the stop",
                  blocks, sh.Lk / ATTN__KBLOCK);
    free(scratch); free(o); free(w);
    free_case(&c);
  }
}
END_TEST

/* attn_cost_flops: the products at 2 flops per multiply-add, a charge
 * per score so that D = 1 is not free, and nothing for what causal and
 * window let the core skip. */
static attn_problem cost_problem(int L, int D) {
  attn_problem p;
  attn_problem_init(&p);
  p.B = 2;
  p.H = p.Hkv = 4;
  p.Lq = p.Lk = L;
  p.D = p.Dk = p.Dv = D;
  p.scale = 1.0f;
  return p; /* no tensors: the estimate never reads them */
}

START_TEST(test_cost_counts_products_scores_and_skipped_blocks) {
  attn_problem p = cost_problem(2048, 64);
  double scores = 8.0 * 2048 * 2048, dense = attn_cost_flops(&p, 0, 0);
  /* The products alone are 4 D flops per score; the rest is per score. */
  ck_assert(dense > scores * 4 * 64);
  ck_assert(dense < scores * 4 * 64 * 1.5);
  attn_problem d1 = cost_problem(2048, 1);
  ck_assert(attn_cost_flops(&d1, 0, 0) > scores * 20);
  /* Weights, diagnostics and dropout each cost more. */
  ck_assert(attn_cost_flops(&p, 1, 0) > dense);
  ck_assert(attn_cost_flops(&p, 1, 1) > attn_cost_flops(&p, 1, 0));
  p.dropout_p = 0.5f;
  ck_assert(attn_cost_flops(&p, 0, 0) > dense);
  p.dropout_p = 0.0f;
  /* Causal: about half the scores, never less (whole query blocks). */
  p.causal = ATTN_CAUSAL_UPPER_LEFT;
  double causal = attn_cost_flops(&p, 0, 0);
  ck_assert(causal > dense * 0.5 && causal < dense * 0.65);
  /* A window of 128 keys: a small fraction. */
  p.causal = ATTN_CAUSAL_NONE;
  p.has_window = 1;
  p.window_left = 64;
  p.window_right = 63;
  ck_assert(attn_cost_flops(&p, 0, 0) < dense * 0.3);
  /* Rows with no key at all (lower-right causal, Lk < Lq) cost nothing. */
  attn_problem e = cost_problem(512, 8);
  e.Lk = 64;
  e.causal = ATTN_CAUSAL_LOWER_RIGHT;
  ck_assert(attn_cost_flops(&e, 0, 0) < 8.0 * 64 * 64 * 200);
  /* Additive scoring pays a tanh per hidden unit per score. */
  attn_problem a = cost_problem(256, 16);
  a.scoring = ATTN_SCORING_ADDITIVE;
  a.Hd = 32;
  ck_assert(attn_cost_flops(&a, 0, 0) > 8.0 * 256 * 256 * 32 * 10);
  attn_problem z;
  attn_problem_init(&z);
  ck_assert(attn_cost_flops(&z, 0, 0) == 0.0);
  /* Four packed sequences of a quarter each: a quarter of the square's
   * scores (B = 1 with packing); with weights, the whole square of
   * weights is still written, zeros across sequences. */
  static const int32_t cu[5] = {0, 128, 256, 384, 512};
  attn_problem sq = cost_problem(512, 8), pk;
  sq.B = 1;
  pk = sq;
  pk.cu_seqlens_q = pk.cu_seqlens_k = cu;
  pk.n_seqs = 4;
  for (int w = 0; w < 2; w++) {
    double full = attn_cost_flops(&sq, w, 0), packed = attn_cost_flops(&pk, w, 0);
    ck_assert_msg(packed < full * (w ? 0.75 : 0.3) && packed > full * 0.2,
                  "packed %g of %g (weights %d)", packed, full, w);
  }
}
END_TEST

/* Causal and windowed problems compute scores for few more (query, key)
 * pairs than they allow, counted (attn__cost_count follows the online
 * path's tasks and key ranges) against the allowed pairs counted one by
 * one: a task's rows share one key range, so a window keeps its tasks'
 * rows to a quarter of its width. */
static double allowed_pairs(int L, int causal, int left, int right) {
  double n = 0.0;
  for (int i = 0; i < L; i++) {
    int lo = left >= 0 && i - left > 0 ? i - left : 0;
    int hi = causal ? i : L - 1;
    if (right >= 0 && i + right < hi) hi = i + right;
    n += hi - lo + 1;
  }
  return n;
}

START_TEST(test_causal_and_window_compute_little_beyond_what_they_allow) {
  static const struct { int causal, left, right; double most; } cases[] = {
    {1, -1, -1, 1.15},   /* tasks of 256 rows: a triangle of 256 each */
    {0, 256, 255, 1.30}, /* 512 keys a row: tasks of 128 rows */
    {0, 1024, 1023, 1.30},
    {1, 511, -1, 1.30},  /* causal closes the window's right side */
    {0, 64, 63, 1.55},   /* at most 64 rows a task: 191 keys for 128 */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    attn_problem p = cost_problem(4096, 64);
    attn__cost_work w;
    p.B = 1;
    p.H = p.Hkv = 16; /* enough tasks that blocks could grow to 256 rows */
    p.causal = cases[k].causal ? ATTN_CAUSAL_UPPER_LEFT : ATTN_CAUSAL_NONE;
    p.has_window = cases[k].left >= 0;
    p.window_left = cases[k].left;
    p.window_right = cases[k].right;
    attn__cost_count(&p, 0, &w);
    double allowed = 16 * allowed_pairs(4096, cases[k].causal,
                                        cases[k].left, cases[k].right);
    ck_assert_msg(w.scores >= allowed && w.scores <= cases[k].most * allowed,
                  "case %zu: %.0f scores computed for %.0f allowed", k,
                  w.scores, allowed);
  }
}
END_TEST

/* Where a head's K panels are kept, causal rows compute scores for
 * hardly any pair beyond those they allow: runs of ATTN__SUBROWS rows
 * stop at their last row's key (attn__cost_count follows the runs, and
 * test_cost checks it against the scores the core computes). */
START_TEST(test_causal_runs_stop_at_their_last_key) {
  attn_problem p = cost_problem(4096, 64);
  attn__scratch lay;
  attn__cost_work w;
  p.B = 1;
  p.H = p.Hkv = 16;
  p.causal = ATTN_CAUSAL_UPPER_LEFT;
  attn__scratch_layout(&p, 0, &lay);
  if (lay.kpanel_count == 0) {
    support_skip("test_causal_runs_stop_at_their_last_key",
                 "no native AVX-512F scores product here (panels not kept)");
    return;
  }
  attn__cost_count(&p, 0, &w);
  double allowed = 16 * allowed_pairs(4096, 1, -1, -1);
  /* each run of 32 rows computes a triangle of 32 x 31 / 2 extra */
  ck_assert_msg(w.scores >= allowed && w.scores <= 1.02 * allowed,
                "%.0f scores computed for %.0f allowed", w.scores, allowed);
}
END_TEST

static Suite *tasks_suite(void) {
  Suite *s = suite_create("core tasks");
  TCase *split = tcase_create("task split");
  tcase_set_timeout(split, 60);
  tcase_add_test(split, test_dropout_same_seed_same_answer_other_seed_differs);
  tcase_add_test(split, test_task_split_is_bit_identical_weights_path);
  tcase_add_test(split, test_task_split_is_bit_identical_online_path);
  tcase_add_test(split, test_kept_panels_follow_heads_and_calls);
  tcase_add_test(split, test_two_threads_on_disjoint_tasks_match_forward);
  tcase_add_test(split, test_random_problems_match_reference);
  suite_add_tcase(s, split);

  TCase *api = tcase_create("checks and counts");
  tcase_add_test(api, test_check_rejects_inconsistent_problems);
  tcase_add_test(api, test_run_tasks_rejects_ranges_beyond_task_count);
  tcase_add_test(api, test_cost_counts_products_scores_and_skipped_blocks);
  tcase_add_test(api, test_causal_runs_stop_at_their_last_key);
  tcase_add_test(api,
                 test_causal_and_window_compute_little_beyond_what_they_allow);
  suite_add_tcase(s, api);

  TCase *stop = tcase_create("stopping");
  tcase_set_timeout(stop, 60);
  tcase_add_test(stop, test_a_set_stop_flag_cancels_the_run);
  tcase_add_test(stop, test_stop_set_by_another_thread_ends_one_long_task);
  tcase_add_test(stop, test_the_weights_path_stops_within_one_key_block);
  suite_add_tcase(s, stop);
  return s;
}

int main(void) { return ref_run_suite(tasks_suite()); }
