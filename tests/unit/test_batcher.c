/* test_batcher.c - the batcher with real workers, real core and proto.
 *
 * Jobs are decoded from JSON with proto_v1_decode, exactly as the HTTP
 * layer does, and their answers compared with attn_forward + encode run
 * directly.  A "gate" job whose done() blocks holds the only worker busy,
 * so that queue limits, batching and fairness can be observed without
 * timing assumptions.  There are two gates: the second holds the worker
 * in the middle of a batch.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/sched/batcher.h"
#include "server/sched/work.h"
#include "server/clock.h"
#include "server/obs/metrics.h"
#include "support_jobs.h"

#define MAXJ 16

static const char *SHAPE_A = SUPPORT_SHAPE_A;
static const char *SHAPE_B =
    "{\"query\": [[[0.5, 1, -1]]], \"key\": [[[1, 0, 2], [0, 1, 1]]],"
    " \"value\": [[[3], [4]]], \"return_weights\": false}";

/* Completion bookkeeping shared by every job of a test. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int n_done, gate_entered[3], gate_open[3];  /* gates 1 and 2 */
static struct batcher_job *order[MAXJ];

struct tjob {
  struct batcher_job job;
  int is_gate;              /* 0, or the gate its done() waits at */
  int answered;             /* done() was called */
  int err, batch_size;
  char *body;
  size_t answer;            /* the answer's bytes the batcher left held:
                               the test's to give back (batcher_unhold) */
};

static void on_done(struct batcher_job *job) {
  struct tjob *t = job->arg;
  pthread_mutex_lock(&mu);
  t->err = job->err;
  t->batch_size = job->batch_size;
  t->body = job->body;  /* the test owns the body from here on */
  t->answered = 1;
  t->answer = job->answer_bytes;  /* and the answer's hold */
  if (t->is_gate) {
    gate_entered[t->is_gate] = 1;
    pthread_cond_broadcast(&cv);
    while (!gate_open[t->is_gate])
      pthread_cond_wait(&cv, &mu);
  }
  order[n_done++] = job;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void reset(void) {
  n_done = 0;
  memset(gate_entered, 0, sizeof gate_entered);
  memset(gate_open, 0, sizeof gate_open);
  memset(order, 0, sizeof order);
}

static void wait_done(int n) {
  pthread_mutex_lock(&mu);
  while (n_done < n)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

static void wait_gate_of(int g) {
  pthread_mutex_lock(&mu);
  while (!gate_entered[g])
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

static void open_gate_of(int g) {
  pthread_mutex_lock(&mu);
  gate_open[g] = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void wait_gate(void) { wait_gate_of(1); }
static void open_gate(void) { open_gate_of(1); }

/* Waits until t's done() has been called or clock_now_ns() passes by_ns;
 * 1 when it was called. */
static int answered_by(const struct tjob *t, uint64_t by_ns) {
  int answered;
  for (;;) {
    pthread_mutex_lock(&mu);
    answered = t->answered;
    pthread_mutex_unlock(&mu);
    if (answered || clock_now_ns() > by_ns)
      return answered;
    usleep(1000);
  }
}

static void decode(struct tjob *t, const char *json) {
  char err[PROTO_ERR_MAX];
  memset(t, 0, sizeof *t);
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &t->job.req, 0, err), 0);
  t->job.hold_bytes = t->job.req.in_bytes + t->job.req.out_bytes;
  t->job.cost_flops = work_flops(&t->job.req);
  t->job.done = on_done;
  t->job.arg = t;
}

/* Reserves and submits; returns the reserve result (0: submitted). */
static int submit(struct batcher *b, struct tjob *t) {
  int rc = batcher_reserve(b, t->job.hold_bytes);
  if (rc == 0)
    batcher_submit(b, &t->job);
  else
    proto_request_free(&t->job.req);
  return rc;
}

/* What the batcher should answer for json: computed here directly. */
static char *expected_body(const char *json) {
  return support_expected_body(json, NULL);
}

static struct batcher *start_cfg(const struct batcher_config *cfg,
                                 struct metrics **m) {
  struct batcher *b;
  reset();
  *m = metrics_new();
  ck_assert_ptr_nonnull(*m);
  b = batcher_start(cfg, *m);
  ck_assert_ptr_nonnull(b);
  return b;
}

static struct batcher *start(struct metrics **m, int workers, int max_batch,
                             size_t max_queue, size_t max_bytes) {
  struct batcher_config cfg = {workers, max_batch, 0, max_queue, max_bytes};
  return start_cfg(&cfg, m);
}

/* Gives back the answers' holds of t[0..n) (the HTTP layer does once an
 * answer is sent): then nothing may be left of the budget. */
static void let_answers_go(struct batcher *b, struct tjob *t, int n) {
  for (int i = 0; i < n; i++) {
    batcher_unhold(b, t[i].answer);
    t[i].answer = 0;
  }
  ck_assert_uint_eq(batcher_bytes_in_use(b), 0);
}

static void finish(struct batcher *b, struct metrics *m, struct tjob *t, int n) {
  int i;
  /* A job leaves the count just after its done() returns. */
  for (i = 0; i < 10000 && batcher_outstanding(b) > 0; i++)
    usleep(1000);
  ck_assert_uint_eq(batcher_outstanding(b), 0);
  let_answers_go(b, t, n);
  batcher_stop(b);
  metrics_free(m);
  for (i = 0; i < n; i++)
    free(t[i].body);
}

/* Reserves t's job, checks that batcher_take_here leaves it to the queue,
 * and submits it. */
static void run_here_refused(struct batcher *b, struct tjob *t, int alone) {
  ck_assert_int_eq(batcher_reserve(b, t->job.hold_bytes), 0);
  ck_assert_int_eq(batcher_take_here(b, &t->job, alone), BATCHER_QUEUE);
  batcher_submit(b, &t->job);
}

/* Reserves t's job, checks that batcher_take_here gives it to the caller
 * as want, and runs it here. */
static void run_here_taken(struct batcher *b, struct tjob *t, int alone,
                           enum batcher_here want) {
  ck_assert_int_eq(batcher_reserve(b, t->job.hold_bytes), 0);
  ck_assert_int_eq(batcher_take_here(b, &t->job, alone), want);
  batcher_run_here(b, &t->job, want);
}

/* Waits for the n-th done() and checks t was answered with want. */
static void expect_answered(int n, const struct tjob *t, const char *want) {
  wait_done(n);
  ck_assert_int_eq(t->err, 0);
  ck_assert_str_eq(t->body, want);
}

START_TEST(test_jobs_answer_like_the_core) {
  struct metrics *m;
  struct batcher *b = start(&m, 2, 4, 64, 1 << 20);
  struct tjob t[8];
  char *want_a = expected_body(SHAPE_A), *want_b = expected_body(SHAPE_B);
  int i;
  for (i = 0; i < 8; i++) {
    decode(&t[i], i % 2 ? SHAPE_B : SHAPE_A);
    ck_assert_int_eq(submit(b, &t[i]), 0);
  }
  wait_done(8);
  for (i = 0; i < 8; i++) {
    ck_assert_int_eq(t[i].err, 0);
    ck_assert_ptr_nonnull(t[i].body);
    ck_assert_str_eq(t[i].body, i % 2 ? want_b : want_a);
    ck_assert_int_ge(t[i].batch_size, 1);
  }
  free(want_a);
  free(want_b);
  finish(b, m, t, 8);
}
END_TEST

/* A job cheaper than inline_ns runs on the caller's thread: answered as a
 * worker would answer it, its reservation given back, done() never
 * called; a dearer one is left for batcher_submit. */
START_TEST(test_cheap_job_runs_on_the_calling_thread) {
  struct metrics *m;
  struct batcher_config cfg = {1, 4, 0, 64, 1 << 20, 100000};
  struct batcher *b;
  struct tjob t[2];
  char *want = expected_body(SHAPE_A);
  b = start_cfg(&cfg, &m);
  decode(&t[0], SHAPE_A);
  run_here_taken(b, &t[0], 0, BATCHER_HERE_BRIEF);
  ck_assert_int_eq(t[0].job.err, 0);
  ck_assert_int_eq(t[0].job.batch_size, 1);
  ck_assert_str_eq(t[0].job.body, want);
  t[0].body = t[0].job.body;
  ck_assert_int_eq(n_done, 0);
  ck_assert_uint_eq(batcher_outstanding(b), 0);
  /* All of the reservation is back but the answer's bytes. */
  t[0].answer = t[0].job.answer_bytes;
  ck_assert_uint_gt(t[0].answer, 0);
  ck_assert_uint_eq(batcher_bytes_in_use(b), t[0].answer);
  let_answers_go(b, t, 1);
  batcher_stop(b);
  /* Bound of 1 ns: nothing is that cheap, so the job queues. */
  cfg.inline_ns = 1;
  b = batcher_start(&cfg, m);
  ck_assert_ptr_nonnull(b);
  decode(&t[1], SHAPE_A);
  run_here_refused(b, &t[1], 1);
  expect_answered(1, &t[1], want);
  free(want);
  finish(b, m, t, 2);
}
END_TEST

/* Of the jobs that run here for being cheaper than inline_ns, those
 * expected within BATCHER_BRIEF_NS are told apart as brief (the HTTP layer
 * does not watch them); a dearer cheap one is not, and both answer as a
 * worker would.  The estimate is the job's cost_flops, raised here past
 * the brief bound on the same shape. */
START_TEST(test_only_jobs_within_the_brief_bound_are_brief) {
  struct metrics *m;
  struct batcher_config cfg = {1, 4, 0, 64, 1 << 20, 1000000000};
  struct batcher *b = start_cfg(&cfg, &m);
  struct tjob t[2];
  char *want = expected_body(SHAPE_A);
  decode(&t[0], SHAPE_A);
  decode(&t[1], SHAPE_A);
  t[1].job.cost_flops = 2 * BATCHER_BRIEF_NS * WORK_FLOPS_PER_NS;
  run_here_taken(b, &t[0], 0, BATCHER_HERE_BRIEF);
  run_here_taken(b, &t[1], 0, BATCHER_HERE_CHEAP);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(t[i].job.err, 0);
    ck_assert_str_eq(t[i].job.body, want);
    t[i].body = t[i].job.body;
    t[i].answer = t[i].job.answer_bytes;
  }
  ck_assert_int_eq(n_done, 0);
  free(want);
  finish(b, m, t, 2);
}
END_TEST

/* Above inline_ns but within inline_idle_ns, a job runs on the calling
 * thread only as the one request in flight, taking a vacant worker place:
 * not when the caller knows of another request (alone 0, e.g. one still
 * being received); alone, it does; while another job computes it is left
 * for batcher_submit, both with the only worker busy (no more jobs compute
 * at once than there are workers) and with a second worker idle (requests
 * in flight together batch on the workers rather than hold HTTP threads).
 * _i + 1 workers. */
START_TEST(test_dearer_job_runs_here_only_as_the_one_in_flight) {
  struct metrics *m;
  struct batcher_config cfg = {_i + 1, 4, 0, 64, 1 << 20, 1, 1000000000};
  struct batcher *b = start_cfg(&cfg, &m);
  struct tjob t[4];
  char *want = expected_body(SHAPE_A);
  int i;
  for (i = 0; i < 4; i++)
    decode(&t[i], SHAPE_A);
  run_here_refused(b, &t[0], 0);
  expect_answered(1, &t[0], want);
  for (i = 0; i < 10000 && batcher_outstanding(b) > 0; i++)
    usleep(1000);  /* t[0] leaves the count just after its done() */
  run_here_taken(b, &t[1], 1, BATCHER_HERE_IDLE);
  ck_assert_int_eq(t[1].job.err, 0);
  ck_assert_str_eq(t[1].job.body, want);
  t[1].body = t[1].job.body;
  t[1].answer = t[1].job.answer_bytes;
  t[2].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[2]), 0);
  wait_gate();  /* a worker place is now taken */
  run_here_refused(b, &t[3], 1);
  open_gate();
  expect_answered(3, &t[3], want);
  free(want);
  finish(b, m, t, 4);
}
END_TEST

/* One at a time, so that the other workers idle and help; repeated
 * (at least twice) until a helper has run some of its tasks, so that the
 * test sees a second worker compute, not the owner alone. */
START_TEST(test_large_request_split_across_workers_matches_core) {
  struct metrics *m;
  struct batcher *b = start(&m, 4, 4, 64, 1 << 30);
  struct tjob t[MAXJ];
  char *json = support_large_request(!_i), *want;
  int i;
  want = expected_body(json);
  for (i = 0; i < MAXJ; i++) {
    decode(&t[i], json);
    ck_assert_int_eq(submit(b, &t[i]), 0);
    wait_done(i + 1);
    ck_assert_int_eq(t[i].err, 0);
    ck_assert_str_eq(t[i].body, want);
    if (i >= 1 && support_counter(m, "attnd_split_helper_tasks_total") > 0)
      break;
  }
  ck_assert_msg(i < MAXJ, "no helper ran a task in %d large requests", MAXJ);
  free(want);
  free(json);
  finish(b, m, t, i + 1);
}
END_TEST

/* Decodes n jobs of SHAPE_A into t and submits t[0] as a gate: the
 * batcher's one worker is held in its done() until open_gate. */
static void hold_the_worker(struct batcher *b, struct tjob *t, int n) {
  for (int i = 0; i < n; i++)
    decode(&t[i], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
}

START_TEST(test_queue_limit_answers_busy) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 1, 2, 1 << 20);
  struct tjob t[4];
  hold_the_worker(b, t, 4);
  ck_assert_int_eq(submit(b, &t[1]), 0);
  ck_assert_int_eq(submit(b, &t[2]), 0);
  ck_assert_int_eq(submit(b, &t[3]), ATTND_EBUSY);
  open_gate();
  wait_done(3);
  ck_assert_int_eq(t[1].err, 0);
  ck_assert_int_eq(t[2].err, 0);
  finish(b, m, t, 4);
}
END_TEST

/* A reserved job holds its hold_bytes until it completes: here t[0] is
 * reserved and not yet submitted. */
START_TEST(test_byte_budget_answers_busy) {
  struct metrics *m;
  struct batcher *b;
  struct tjob t[2];
  decode(&t[0], SHAPE_A);
  decode(&t[1], SHAPE_A);
  /* Room for one request's tensors, not two. */
  b = start(&m, 1, 1, 64, t[0].job.hold_bytes + t[0].job.hold_bytes / 2);
  ck_assert_int_eq(batcher_reserve(b, t[0].job.hold_bytes), 0);
  ck_assert_int_eq(submit(b, &t[1]), ATTND_EBUSY);
  batcher_submit(b, &t[0].job);
  wait_done(1);
  ck_assert_int_eq(t[0].err, 0);
  finish(b, m, t, 2);
}
END_TEST

START_TEST(test_body_holds_share_the_byte_budget) {
  struct metrics *m;
  struct batcher *b;
  struct tjob t[1];
  size_t c;
  decode(&t[0], SHAPE_A);
  c = t[0].job.hold_bytes;
  b = start(&m, 1, 1, 64, 3 * c);
  /* Holds of bodies still arriving count against the same budget. */
  ck_assert_int_eq(batcher_hold(b, 2 * c), 0);
  ck_assert_uint_eq(batcher_bytes_in_use(b), 2 * c);
  ck_assert_int_eq(batcher_hold(b, 2 * c), ATTND_EBUSY);
  ck_assert_uint_eq(batcher_bytes_in_use(b), 2 * c);
  /* A hold turns into the job's reservation in one step: here the body
   * held 2c, the job needs c, and 2c more would not have fitted beside
   * the hold. */
  ck_assert_int_eq(batcher_reserve_held(b, c, 2 * c, NULL, 0), 0);
  ck_assert_uint_eq(batcher_bytes_in_use(b), c);
  /* A refused reservation gives the hold back too. */
  ck_assert_int_eq(batcher_hold(b, c), 0);
  char why[256];
  ck_assert_int_eq(batcher_reserve_held(b, 4 * c, c, why, sizeof why),
                   ATTND_EBUSY);
  ck_assert_msg(strstr(why, "--max-inflight-mb"), "%s", why);
  ck_assert_uint_eq(batcher_bytes_in_use(b), c);
  batcher_unhold(b, 0);  /* nothing held: a no-op */
  batcher_submit(b, &t[0].job);
  wait_done(1);
  ck_assert_int_eq(t[0].err, 0);
  /* Everything is given back once the job is done but its answer's
   * bytes, which its submitter gives back (finish). */
  for (int i = 0; i < 10000 && batcher_outstanding(b) > 0; i++)
    usleep(1000);
  ck_assert_uint_eq(batcher_bytes_in_use(b), t[0].answer);
  finish(b, m, t, 1);
}
END_TEST

/* Queued jobs whose cancel words are set, once the batcher is told,
 * complete at once with the word's error while the one worker is still
 * busy, and give their queue places and budget back: a job the full
 * queue refused before is admitted. */
START_TEST(test_cancelled_queued_jobs_give_their_places_back_at_once) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 2, 1 << 20);
  struct tjob t[4];
  int i;
  hold_the_worker(b, t, 4);
  ck_assert_int_eq(submit(b, &t[1]), 0);
  ck_assert_int_eq(submit(b, &t[2]), 0);
  ck_assert_int_eq(batcher_reserve(b, t[3].job.hold_bytes), ATTND_EBUSY);
  atomic_store(&t[1].job.cancel, BATCHER_GONE);
  atomic_store(&t[2].job.cancel, BATCHER_LATE);
  batcher_wake_cancelled(b);
  wait_done(2);  /* t[0] counts only once the gate opens */
  ck_assert_int_eq(t[1].err, ATTND_ECANCELED);
  ck_assert_int_eq(t[2].err, ATTND_ETIMEDOUT);
  ck_assert_int_eq(t[1].batch_size, 0);
  for (i = 0; i < 10000 && batcher_outstanding(b) > 1; i++)
    usleep(1000);
  ck_assert_uint_eq(batcher_outstanding(b), 1);
  /* t[0], held in its done(), holds no more than its answer's bytes */
  ck_assert_uint_eq(batcher_bytes_in_use(b), t[0].answer);
  ck_assert_int_eq(submit(b, &t[3]), 0);
  open_gate();
  wait_done(4);
  ck_assert_int_eq(t[3].err, 0);
  finish(b, m, t, 4);
}
END_TEST

START_TEST(test_queued_jobs_leave_together_up_to_max_batch) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 64, 1 << 20);
  struct tjob t[6];
  int i;
  for (i = 0; i < 6; i++)
    decode(&t[i], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  for (i = 1; i < 6; i++)
    ck_assert_int_eq(submit(b, &t[i]), 0);
  open_gate();
  wait_done(6);
  ck_assert_int_eq(t[0].batch_size, 1);
  for (i = 1; i < 5; i++)
    ck_assert_int_eq(t[i].batch_size, 4);
  ck_assert_int_eq(t[5].batch_size, 1);
  for (i = 1; i < 6; i++)
    ck_assert_int_eq(t[i].err, 0);
  finish(b, m, t, 6);
}
END_TEST

/* A job whose client left, and one whose deadline passed, both queued
 * in the middle of what would be a batch: neither is computed (taken off
 * the queue or the batch by the loop, or skipped by the worker: the batch
 * is then of 2 or of 4), and the others answer exactly what they
 * would alone. */
START_TEST(test_cancelled_jobs_leave_their_batch_mates_untouched) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 64, 1 << 20);
  struct tjob t[5];
  char *want = expected_body(SHAPE_A);
  int i;
  for (i = 0; i < 5; i++)
    decode(&t[i], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  for (i = 1; i < 5; i++)
    ck_assert_int_eq(submit(b, &t[i]), 0);
  atomic_store(&t[2].job.cancel, BATCHER_GONE);
  atomic_store(&t[3].job.cancel, BATCHER_LATE);
  open_gate();
  wait_done(5);
  ck_assert_msg(t[1].batch_size == 2 || t[1].batch_size == 4,
                "a batch of %d", t[1].batch_size);
  ck_assert_int_eq(t[4].batch_size, t[1].batch_size);
  ck_assert_int_eq(t[2].err, ATTND_ECANCELED);
  ck_assert_int_eq(t[3].err, ATTND_ETIMEDOUT);
  ck_assert_ptr_null(t[2].body);
  ck_assert_ptr_null(t[3].body);
  for (i = 1; i < 5; i += 3) {
    ck_assert_int_eq(t[i].err, 0);
    ck_assert_str_eq(t[i].body, want);
  }
  ck_assert_uint_eq(support_counter_labelled(m, "attnd_cancelled_total",
                                             "reason=\"disconnect\""), 1);
  ck_assert_uint_eq(support_counter_labelled(m, "attnd_cancelled_total",
                                             "reason=\"deadline\""), 1);
  free(want);
  finish(b, m, t, 5);
}
END_TEST

START_TEST(test_keys_are_served_round_robin) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 1, 64, 1 << 20);
  struct tjob t[5];
  int i, pos_b = -1;
  for (i = 0; i < 5; i++)
    decode(&t[i], i == 4 ? SHAPE_B : SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  for (i = 1; i < 5; i++)  /* A, A, A, then B */
    ck_assert_int_eq(submit(b, &t[i]), 0);
  open_gate();
  wait_done(5);
  for (i = 0; i < 5; i++)
    if (order[i] == &t[4].job)
      pos_b = i;
  /* FIFO would run B last (position 4); round-robin runs it by 2. */
  ck_assert_int_le(pos_b, 2);
  finish(b, m, t, 5);
}
END_TEST

START_TEST(test_expired_deadline_is_not_computed) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 64, 1 << 20);
  struct tjob t[1];
  decode(&t[0], SHAPE_A);
  t[0].job.deadline_ns = clock_now_ns() - 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_done(1);
  ck_assert_int_eq(t[0].err, ATTND_ETIMEDOUT);
  ck_assert_ptr_null(t[0].body);
  finish(b, m, t, 1);
}
END_TEST

START_TEST(test_deadline_fires_while_workers_are_busy) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 64, 1 << 20);
  struct tjob t[2];
  decode(&t[0], SHAPE_A);
  decode(&t[1], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  t[1].job.deadline_ns = clock_now_ns() + 20 * 1000000u;
  ck_assert_int_eq(submit(b, &t[1]), 0);
  wait_done(1);  /* answered by the loop's timer: the worker is held */
  ck_assert_int_eq(t[1].err, ATTND_ETIMEDOUT);
  open_gate();
  wait_done(2);
  finish(b, m, t, 2);
}
END_TEST

/* Forms one batch [t[1], t[2]] of SHAPE_A behind the held worker (t[0]),
 * t[2] with the deadline given (0: none), and holds the worker again in
 * t[1]'s done(), at the second gate: t[2] is then taken in a batch and
 * not started, waiting behind its batch mate. */
static void hold_a_batch_mate(struct batcher *b, struct tjob *t,
                              uint64_t deadline_ns) {
  hold_the_worker(b, t, 3);
  t[1].is_gate = 2;
  ck_assert_int_eq(submit(b, &t[1]), 0);
  t[2].job.deadline_ns = deadline_ns;
  ck_assert_int_eq(submit(b, &t[2]), 0);
  open_gate();
  wait_gate_of(2);
  ck_assert_msg(t[1].batch_size == 2, "t[1] left in a batch of %d, not "
                "with t[2]", t[1].batch_size);
}

/* How a job taken in a batch and not started is stopped, by _i: its
 * deadline passes, its client leaves, the drain ends.  What it answers,
 * and the reason attnd_cancelled_total counts (NULL: none). */
static const struct {
  int err;
  const char *reason;
} stopped_in_batch[] = {
  {ATTND_ETIMEDOUT, "reason=\"deadline\""},
  {ATTND_ECANCELED, "reason=\"disconnect\""},
  {ATTND_EDRAINING, NULL},
};

/* While its batch mate t[1] still holds the worker, t[2] is answered
 * uncomputed, at its deadline or once the batcher is told, and gives its
 * queue place and budget back (it counts as queued until then); once
 * t[1] goes, t[1] is answered as alone and t[2] is completed no second
 * time. */
START_TEST(test_a_job_waiting_in_its_batch_is_answered_on_time) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 4, 64, 1 << 20);
  struct tjob t[3];
  char *want = expected_body(SHAPE_A);
  uint64_t deadline = _i == 0 ? clock_now_ns() + 100 * 1000000u : 0;
  int i;
  hold_a_batch_mate(b, t, deadline);
  if (_i > 0) {
    ck_assert_uint_eq(support_counter(m, "attnd_queue_depth"), 1);
    if (_i == 1) {
      atomic_store(&t[2].job.cancel, BATCHER_GONE);
      batcher_wake_cancelled(b);
    } else {
      batcher_close(b);
      batcher_cancel_all(b);
    }
  }
  ck_assert_msg(answered_by(&t[2], (deadline ? deadline : clock_now_ns()) +
                                       500 * 1000000u),
                "not answered while its batch mate computes");
  ck_assert_int_eq(t[2].err, stopped_in_batch[_i].err);
  ck_assert_ptr_null(t[2].body);
  ck_assert_int_eq(t[2].batch_size, 0);
  for (i = 0; i < 10000 && batcher_outstanding(b) > 1; i++)
    usleep(1000);  /* t[0] and t[2] leave the count after their done() */
  ck_assert_uint_eq(batcher_outstanding(b), 1);
  /* t[2]'s bytes are back: what stays held are the answers of t[0] and
   * t[1] (in its done()), the test's to give back */
  ck_assert_uint_eq(batcher_bytes_in_use(b), t[0].answer + t[1].answer);
  ck_assert_uint_eq(support_counter(m, "attnd_queue_depth"), 0);
  open_gate_of(2);
  expect_answered(3, &t[1], want);
  usleep(20000);
  ck_assert_int_eq(n_done, 3);
  if (stopped_in_batch[_i].reason)
    ck_assert_uint_eq(support_counter_labelled(m, "attnd_cancelled_total",
                                               stopped_in_batch[_i].reason), 1);
  free(want);
  finish(b, m, t, 3);
}
END_TEST

START_TEST(test_close_refuses_and_cancel_all_drops_queued) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 1, 64, 1 << 20);
  struct tjob t[4];
  int i;
  for (i = 0; i < 4; i++)
    decode(&t[i], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  ck_assert_int_eq(submit(b, &t[1]), 0);
  ck_assert_int_eq(submit(b, &t[2]), 0);
  batcher_close(b);
  ck_assert_int_eq(submit(b, &t[3]), ATTND_EDRAINING);
  batcher_cancel_all(b);  /* t[0] computed already: only in its done() */
  wait_done(2);  /* the two queued ones, answered while the gate holds */
  ck_assert_int_eq(t[1].err, ATTND_EDRAINING);
  ck_assert_int_eq(t[2].err, ATTND_EDRAINING);
  open_gate();
  wait_done(3);
  ck_assert_int_eq(t[0].err, 0);
  finish(b, m, t, 4);
}
END_TEST

START_TEST(test_stop_answers_queued_jobs) {
  struct metrics *m;
  struct batcher *b = start(&m, 1, 1, 64, 1 << 20);
  struct tjob t[3];
  int i;
  for (i = 0; i < 3; i++)
    decode(&t[i], SHAPE_A);
  t[0].is_gate = 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_gate();
  ck_assert_int_eq(submit(b, &t[1]), 0);
  ck_assert_int_eq(submit(b, &t[2]), 0);
  open_gate();  /* the gate's done() returns while stop may be under way */
  batcher_stop(b);
  ck_assert_int_eq(n_done, 3);
  for (i = 0; i < 3; i++) {
    ck_assert(t[i].err == 0 || t[i].err == ATTND_EDRAINING);
    free(t[i].body);
  }
  metrics_free(m);
}
END_TEST

/* A client that retries as soon as it hears its answer: done() asks the
 * budget again, from the job's thread, for the job's whole hold_bytes,
 * else for what its answer does not hold, and submits again.next with
 * what it got. */
static struct {
  struct batcher *b;
  struct tjob *next;
  int rc_whole, rc_rest;
} again;

static void on_done_retry(struct batcher_job *job) {
  size_t rest = job->hold_bytes - job->answer_bytes;
  again.rc_rest = -1;
  again.rc_whole = batcher_reserve(again.b, job->hold_bytes);
  if (again.rc_whole == 0)
    again.next->job.hold_bytes = job->hold_bytes;
  else if ((again.rc_rest = batcher_reserve(again.b, rest)) == 0)
    again.next->job.hold_bytes = rest;
  if (again.rc_whole == 0 || again.rc_rest == 0)
    batcher_submit(again.b, &again.next->job);
  else
    proto_request_free(&again.next->job.req);
  on_done(job);
}

/* A batcher with a queue of one place and a budget of exactly t[0]'s
 * hold_bytes (with its answer's upper bound when `answer`), t[0] set to
 * retry with t[1] from its done(). */
static struct batcher *start_retry(struct metrics **m, struct tjob *t,
                                   int answer) {
  struct batcher *b;
  decode(&t[0], SHAPE_A);
  decode(&t[1], SHAPE_A);
  if (answer)
    t[0].job.hold_bytes += proto_answer_bytes(&t[0].job.req);
  b = start(m, 1, 1, 1, t[0].job.hold_bytes);
  again.b = b;
  again.next = &t[1];
  t[0].job.done = on_done_retry;
  return b;
}

/* A queue of one place and a budget of one job: a queued job that
 * completes uncomputed (its deadline passed) has given both back before
 * its done() runs, so that its client, retrying at once, is admitted. */
START_TEST(test_a_queued_job_gives_its_place_back_before_done) {
  struct metrics *m;
  struct tjob t[2];
  struct batcher *b = start_retry(&m, t, 0);
  t[0].job.deadline_ns = clock_now_ns() - 1;
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_done(1);
  ck_assert_int_eq(t[0].err, ATTND_ETIMEDOUT);
  ck_assert_int_eq(again.rc_whole, 0);
  wait_done(2);
  ck_assert_int_eq(t[1].err, 0);
  finish(b, m, t, 2);
}
END_TEST

/* A computed job, its budget counting its answer as the HTTP layer's
 * does: when its done() runs, its tensors' bytes are back in the budget
 * and its answer's still held, until its submitter gives them back. */
START_TEST(test_a_computed_job_keeps_only_its_answer_held_at_done) {
  struct metrics *m;
  struct tjob t[2];
  struct batcher *b = start_retry(&m, t, 1);
  char *want = expected_body(SHAPE_A);
  ck_assert_int_eq(submit(b, &t[0]), 0);
  wait_done(1);
  ck_assert_str_eq(t[0].body, want);
  ck_assert_uint_eq(t[0].answer, strlen(want));
  ck_assert_int_eq(again.rc_whole, ATTND_EBUSY);
  ck_assert_int_eq(again.rc_rest, 0);
  wait_done(2);
  ck_assert_int_eq(t[1].err, 0);
  ck_assert_str_eq(t[1].body, want);
  free(want);
  finish(b, m, t, 2);
}
END_TEST

static Suite *batcher_suite(void) {
  Suite *s = suite_create("batcher");
  TCase *tc = tcase_create("batcher");
  tcase_add_test(tc, test_jobs_answer_like_the_core);
  tcase_add_test(tc, test_cancelled_jobs_leave_their_batch_mates_untouched);
  tcase_add_test(tc, test_cancelled_queued_jobs_give_their_places_back_at_once);
  tcase_add_loop_test(tc, test_large_request_split_across_workers_matches_core,
                      0, 2);
  tcase_add_test(tc, test_queue_limit_answers_busy);
  tcase_add_test(tc, test_byte_budget_answers_busy);
  tcase_add_test(tc, test_body_holds_share_the_byte_budget);
  tcase_add_test(tc, test_queued_jobs_leave_together_up_to_max_batch);
  tcase_add_test(tc, test_keys_are_served_round_robin);
  tcase_add_test(tc, test_expired_deadline_is_not_computed);
  tcase_add_test(tc, test_deadline_fires_while_workers_are_busy);
  tcase_add_loop_test(tc, test_a_job_waiting_in_its_batch_is_answered_on_time,
                      0, 3);
  tcase_add_test(tc, test_close_refuses_and_cancel_all_drops_queued);
  tcase_add_test(tc, test_stop_answers_queued_jobs);
  tcase_add_test(tc, test_a_queued_job_gives_its_place_back_before_done);
  tcase_add_test(tc, test_a_computed_job_keeps_only_its_answer_held_at_done);
  tcase_add_test(tc, test_cheap_job_runs_on_the_calling_thread);
  tcase_add_test(tc, test_only_jobs_within_the_brief_bound_are_brief);
  tcase_add_loop_test(tc, test_dearer_job_runs_here_only_as_the_one_in_flight, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(batcher_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
