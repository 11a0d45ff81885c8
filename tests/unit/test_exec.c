/* test_exec.c - running one job (exec.h) with the real core and proto.
 *
 * Jobs are decoded from JSON with proto_v1_decode, as the HTTP layer
 * does, and given to exec_job without a batcher: on the calling thread
 * (the inline path), and on a real pool whose idle hint asks for helpers
 * (the split path).  Answers are compared with attn_forward + encode run
 * directly.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/sched/exec.h"
#include "server/sched/work.h"
#include "server/obs/metrics.h"
#include "support_jobs.h"

static const char *SHAPE_A = SUPPORT_SHAPE_A;

/* A decoded job as batcher_submit hands it on: response fields empty,
 * enqueued now. */
static void decode(struct batcher_job *job, const char *json) {
  char err[PROTO_ERR_MAX];
  memset(job, 0, sizeof *job);
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &job->req, 0, err), 0);
  job->hold_bytes = job->req.in_bytes + job->req.out_bytes;
  job->cost_flops = work_flops(&job->req);
  job->enqueued_ns = clock_now_ns();
}

/* The context of a batcher with no pool: enough for the inline path. */
static struct exec_ctx inline_ctx(void) {
  struct exec_ctx x;
  memset(&x, 0, sizeof x);
  x.m = metrics_new();
  ck_assert_ptr_nonnull(x.m);
  return x;
}

START_TEST(test_inline_job_answers_like_the_core) {
  struct exec_ctx x = inline_ctx();
  struct batcher_job job;
  size_t want_len;
  char *want = support_expected_body(SHAPE_A, &want_len);
  decode(&job, SHAPE_A);
  ck_assert_int_eq(exec_job(&x, &job, NULL, 3), 0);
  ck_assert_int_eq(job.batch_size, 3);
  ck_assert_uint_eq(job.body_len, want_len);
  ck_assert_uint_eq(job.plain_len, want_len);
  ck_assert_uint_eq(job.json_len, want_len);
  ck_assert_int_eq(job.compressed, 0);
  ck_assert_mem_eq(job.body, want, want_len);
  ck_assert_uint_ge(job.started_ns, job.enqueued_ns);
  ck_assert_uint_ge(job.computed_ns, job.started_ns);
  free(want);
  free(job.body);
  proto_request_free(&job.req);
  metrics_free(x.m);
}
END_TEST

START_TEST(test_job_past_its_deadline_is_not_computed) {
  struct exec_ctx x = inline_ctx();
  struct batcher_job job;
  decode(&job, SHAPE_A);
  job.deadline_ns = clock_now_ns() - 1;
  ck_assert_int_eq(exec_job(&x, &job, NULL, 1), ATTND_ETIMEDOUT);
  ck_assert_ptr_null(job.body);
  ck_assert_uint_eq(job.computed_ns, 0);
  proto_request_free(&job.req);
  metrics_free(x.m);
}
END_TEST

/* With a coding the answer leaves compressed: it inflates back to what
 * the core's answer encodes to, and plain_len is that length. */
START_TEST(test_response_is_compressed_when_asked) {
  static const char *codings[] = {"gzip", "deflate"};
  struct exec_ctx x = inline_ctx();
  struct batcher_job job;
  char err[PROTO_ERR_MAX], *plain;
  size_t want_len, plain_len;
  char *want = support_expected_body(SHAPE_A, &want_len);
  decode(&job, SHAPE_A);
  job.coding = codings[_i];
  ck_assert_int_eq(exec_job(&x, &job, NULL, 1), 0);
  ck_assert_int_eq(job.compressed, 1);
  ck_assert_uint_eq(job.plain_len, want_len);
  ck_assert_int_eq(proto_inflate(job.coding, job.body, job.body_len,
                                 1 << 20, &plain, &plain_len, err), 0);
  ck_assert_uint_eq(plain_len, want_len);
  ck_assert_mem_eq(plain, want, want_len);
  free(plain);
  free(want);
  free(job.body);
  proto_request_free(&job.req);
  metrics_free(x.m);
}
END_TEST

/* job->finish sees the encoded answer with the request intact; its error
 * fails the job and the answer is dropped. */
static int finish_seen;

static int finish_refuses(struct batcher_job *job) {
  finish_seen = job->body != NULL && job->body_len > 0 &&
                job->req.out != NULL;
  return ATTND_EINTERNAL;
}

START_TEST(test_finish_error_fails_the_job) {
  struct exec_ctx x = inline_ctx();
  struct batcher_job job;
  decode(&job, SHAPE_A);
  job.finish = finish_refuses;
  finish_seen = 0;
  ck_assert_int_eq(exec_job(&x, &job, NULL, 1), ATTND_EINTERNAL);
  ck_assert_int_eq(finish_seen, 1);
  ck_assert_ptr_null(job.body);
  ck_assert_int_eq(job.parts.n, 0);
  proto_request_free(&job.req);
  metrics_free(x.m);
}
END_TEST

/* ---- the split path: a real pool, run as batcher.c runs it ----------- */

struct owner {
  struct exec_item base;    /* first; kind EXEC_ITEM_BATCH */
  struct batcher_job *job;
  int err, done;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void run(struct pool_item *item, struct pool_worker *w, void *arg) {
  struct owner *o = (struct owner *)item;
  if (((struct exec_item *)item)->kind == EXEC_ITEM_HELPER) {
    exec_help(item, w);
    return;
  }
  o->err = exec_job(arg, o->job, w, 1);
  pthread_mutex_lock(&mu);
  o->done = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Three workers idle by the hint: a request this large goes down the
 * split path, helpers submitted to the pool.  How many tasks they claim
 * before the owner is done is up to timing; whatever they claim, the
 * answer is the core's.  It is run until a helper has claimed some (the
 * metrics count them), so that the test sees a second worker compute,
 * not only the owner alone. */
START_TEST(test_large_job_on_the_split_path_matches_core) {
  struct exec_ctx x = inline_ctx();
  char *json = support_large_request(!_i), *want;
  size_t want_len;
  int tries;
  want = support_expected_body(json, &want_len);
  x.pool = pool_start(4, run, &x);
  ck_assert_ptr_nonnull(x.pool);
  x.idle_hint = 3;
  for (tries = 0; tries < 50; tries++) {
    struct batcher_job job;
    struct owner o;
    decode(&job, json);
    memset(&o, 0, sizeof o);
    o.base.kind = EXEC_ITEM_BATCH;
    o.job = &job;
    pool_submit(x.pool, &o.base.item);
    pthread_mutex_lock(&mu);
    while (!o.done)
      pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    ck_assert_int_eq(o.err, 0);
    ck_assert_uint_eq(job.body_len, want_len);
    ck_assert_mem_eq(job.body, want, want_len);
    free(job.body);
    proto_request_free(&job.req);
    if (support_counter(x.m, "attnd_split_helper_tasks_total") > 0)
      break;
  }
  pool_stop(x.pool);
  ck_assert_uint_eq(support_counter(x.m, "attnd_split_requests_total"),
                    (unsigned long long)tries + (tries < 50));
  ck_assert_msg(tries < 50, "no helper ran a task in 50 split requests");
  free(want);
  free(json);
  metrics_free(x.m);
}
END_TEST

static Suite *exec_suite(void) {
  Suite *s = suite_create("exec");
  TCase *tc = tcase_create("exec");
  tcase_add_test(tc, test_inline_job_answers_like_the_core);
  tcase_add_test(tc, test_job_past_its_deadline_is_not_computed);
  tcase_add_loop_test(tc, test_response_is_compressed_when_asked, 0, 2);
  tcase_add_test(tc, test_finish_error_fails_the_job);
  tcase_add_loop_test(tc, test_large_job_on_the_split_path_matches_core,
                      0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(exec_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
