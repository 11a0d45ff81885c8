/* exec.c - runs one job: core, encode, compress, statistics (see exec.h).
 *
 * DESIGN
 *
 * Threads: exec_job runs on a pool worker (a job of a batch) or on an HTTP
 * thread (batcher_run_here's inline job); it touches only its own job, the
 * worker's scratch or scratch of its own, and the metrics (lock-free).
 * Nothing here touches the batcher's queues or b->mu.
 *
 * Splitting lives here, not in batcher.c: it is how one request is
 * computed, not which work runs next.  A worker holding one large request
 * while others are idle (x->idle_hint, a relaxed copy of the batcher's
 * vacant worker places) submits helper items straight to the pool, past
 * the loop thread and its batch slots; helpers and the owner claim task
 * ranges from an atomic counter, so the owner alone can finish if no
 * helper shows up.
 * The owner withdraws helpers nobody took (pool_cancel) and waits for the
 * ones running (split.mu/cv) before it touches the result.  The split
 * lives on the owner's stack.  A helper takes no batch slot: a batch the
 * loop thread dispatches meanwhile waits in the pool's FIFO for a worker.
 *
 * Inputs read in place from a client's shared memory region
 * (proto_request.shared) can lose their pages at any time: every thread
 * that runs the core over a request's tasks, owner and helpers alike,
 * does so inside its own SIGBUS guard over them (exec_tasks, through the
 * submitter's job->guarded).
 *
 * Locks: a split's mu is a leaf lock, never held with pool.c's or b->mu.
 */
#include "server/sched/exec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "proto/mem.h"
#include "server/clock.h"
#include "server/obs/log.h"
#include "server/sched/work.h"

/* ---- the core over a range of tasks ----------------------------------- */

struct exec_tasks {
  const attn_problem *p;
  size_t t0, t1;
  float *out, *weights, *lse;
  void *scratch;
};

/* The core's own failures other than a stop are our bugs (500), so that
 * ATTND_EINVAL out of fault_run means a region lost pages. */
static int exec_tasks_run(void *arg) {
  struct exec_tasks *a = arg;
  int rc = attn_run_tasks_lse(a->p, a->t0, a->t1, a->out, a->weights,
                              a->lse, a->scratch);
  return rc == 0 || rc == ATTND_ECANCELED ? rc : ATTND_EINTERNAL;
}

/* Tasks [t0, t1) of job's request on this thread: through job->guarded
 * when the request reads inputs in place from shared memory regions
 * (proto_request.shared), so that a client truncating its object under
 * the core costs its request a 400 (ATTND_EINVAL), not the process.
 * 0, ATTND_ECANCELED, ATTND_EINVAL or ATTND_EINTERNAL. */
static int exec_tasks(const struct batcher_job *job, size_t t0, size_t t1,
                      float *out, float *weights, float *lse,
                      void *scratch) {
  struct exec_tasks a = {&job->req.prob, t0, t1, out, weights, lse,
                         scratch};
  if (!job->req.n_shared)
    return exec_tasks_run(&a);
  if (!job->guarded)  /* the submitter's bug: never read them unguarded */
    return ATTND_EINTERNAL;
  return job->guarded(&job->req, exec_tasks_run, &a);
}

/* ---- splitting one request across idle workers ---------------------- */

/* One large request split across workers by task ranges (b, h, query
 * block).  Lives on the stack of the worker that owns the request, which
 * returns only after every helper a worker took has finished with it. */
#define EXEC_MAX_HELPERS 63

struct exec_split;

struct exec_helper {
  struct exec_item base;    /* first */
  struct exec_split *split;
};

struct exec_split {
  const struct batcher_job *job;
  float *out, *weights, *lse;
  size_t ntasks, chunk, scratch_bytes;
  _Atomic size_t next;      /* first task nobody has claimed */
  _Atomic size_t helped;    /* tasks the helpers ran */
  _Atomic int err;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int pending;              /* helpers submitted and not finished (mu) */
  struct exec_helper helpers[EXEC_MAX_HELPERS];
};

/* Claims chunks of tasks until none are left; any thread of the split
 * (helper != 0: not the owner). */
static void exec_claim(struct exec_split *s, void *scratch, int helper) {
  for (;;) {
    size_t t0 = atomic_fetch_add(&s->next, s->chunk), t1;
    if (t0 >= s->ntasks)
      return;
    t1 = t0 + s->chunk < s->ntasks ? t0 + s->chunk : s->ntasks;
    int rc = exec_tasks(s->job, t0, t1, s->out, s->weights, s->lse,
                        scratch);
    if (rc != 0) {  /* stopped (attn_problem.stop), a region lost pages,
                       or our bug */
      atomic_store(&s->err, rc);
      return;
    }
    if (helper)
      atomic_fetch_add(&s->helped, t1 - t0);
  }
}

/* A helper's side of a split: help with its own scratch, then report.
 * After the unlock the split may be gone. */
void exec_help(struct pool_item *item, struct pool_worker *w) {
  struct exec_split *s = ((struct exec_helper *)item)->split;
  void *scratch = pool_scratch(w, s->scratch_bytes);
  if (scratch)  /* without scratch, leave the work to the others */
    exec_claim(s, scratch, 1);
  pthread_mutex_lock(&s->mu);
  s->pending--;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* How many idle workers should help with this request: none unless its
 * computing (work_compute_ns) is long enough to repay the hand-offs. */
static int exec_helpers_wanted(struct exec_ctx *x, double flops,
                               size_t tasks) {
  double ns = work_compute_ns(flops);
  int idle = atomic_load_explicit(&x->idle_hint, memory_order_relaxed);
  size_t n = (size_t)(idle > 0 ? idle : 0);
  if (ns < WORK_SPLIT_NS || tasks < 2)
    return 0;
  if (n > tasks - 1)
    n = tasks - 1;
  return (int)(n < EXEC_MAX_HELPERS ? n : EXEC_MAX_HELPERS);
}

/* Runs every task of p on this worker and nh helpers.  0 or ATTND_E*. */
static int exec_split_run(struct exec_ctx *x, const struct batcher_job *job,
                          float *out, float *weights, float *lse,
                          size_t tasks, size_t bytes, void *scratch,
                          int nh) {
  struct exec_split s;
  int i, err;
  memset(&s, 0, sizeof s);
  s.job = job;
  s.out = out;
  s.weights = weights;
  s.lse = lse;
  s.ntasks = tasks;
  s.scratch_bytes = bytes;
  /* Many chunks per thread, so that a slow helper (or a core another
   * process took for a while) does not hold the whole request back: the
   * last worker to finish waits at most one chunk for the others. */
  s.chunk = tasks / ((size_t)(nh + 1) * WORK_SPLIT_CHUNKS);
  if (s.chunk == 0)
    s.chunk = 1;
  pthread_mutex_init(&s.mu, NULL);
  pthread_cond_init(&s.cv, NULL);
  s.pending = nh;
  for (i = 0; i < nh; i++) {
    s.helpers[i].base.kind = EXEC_ITEM_HELPER;
    s.helpers[i].split = &s;
    pool_submit(x->pool, &s.helpers[i].base.item);
  }
  exec_claim(&s, scratch, 0);
  /* Helpers no worker has picked up yet would find nothing left to do:
   * withdraw them rather than wait for a worker to free up. */
  for (i = 0; i < nh; i++)
    if (pool_cancel(x->pool, &s.helpers[i].base.item)) {
      pthread_mutex_lock(&s.mu);
      s.pending--;
      pthread_mutex_unlock(&s.mu);
    }
  pthread_mutex_lock(&s.mu);
  while (s.pending > 0)
    pthread_cond_wait(&s.cv, &s.mu);
  pthread_mutex_unlock(&s.mu);
  pthread_cond_destroy(&s.cv);
  pthread_mutex_destroy(&s.mu);
  metrics_record_split(x->m, atomic_load(&s.helped));
  err = atomic_load(&s.err);
  return err;
}

/* ---- one job: compute, encode, compress, statistics ------------------ */

/* Has the job's cancel word been set (batcher.h)?  Read between the
 * phases after the core, which read it themselves no more. */
static int exec_stopped(struct batcher_job *job) {
  return atomic_load_explicit(&job->cancel, memory_order_relaxed) != 0;
}

/* Compresses the encoded response on the worker, where the CPU time is
 * parallel.  Whenever the client asked, so that what it gets is
 * predictable.  A compression failure is not the client's problem: the
 * body then goes out uncompressed. */
static int exec_compress(struct batcher_job *job) {
  char *z;
  size_t zlen;
  if (!job->coding)
    return 0;
  if (exec_stopped(job))
    return ATTND_ECANCELED;
  if (proto_deflate(job->coding, job->body, job->body_len, &z, &zlen) != 0)
    return 0;
  mem_free(job->body);
  job->body = z;
  job->body_len = zlen;
  job->compressed = 1;
  return 0;
}

/* The response of a computed job.  v2 binary outputs leave from the
 * buffers the core wrote (job->parts), unless the response is to be
 * compressed, which needs it in one piece. */
static int exec_encode(struct batcher_job *job) {
  int rc = 1;
  if (!job->coding && job->req.codec == PROTO_CODEC_V2)
    rc = proto_v2_encode_parts(&job->req, &job->parts);
  if (rc < 0)
    return ATTND_ENOMEM;
  if (rc == 0) {
    job->json_len = job->plain_len = job->parts.json_len;
    for (int i = 0; i < job->parts.n; i++)
      job->plain_len += job->parts.len[i];
    job->body_len = job->plain_len;
    return 0;
  }
  if (proto_encode(&job->req, &job->body, &job->body_len, &job->json_len))
    return ATTND_ENOMEM;
  job->plain_len = job->body_len;
  return exec_compress(job);
}

/* Runs one request on this worker (and idle helpers): core, then encode.
 * w NULL: on the submitter's thread (batcher_run_here), alone, with
 * scratch of its own.  0 or ATTND_E*. */
static int exec_compute(struct exec_ctx *x, struct batcher_job *job,
                        struct pool_worker *w) {
  const attn_problem *p = &job->req.prob;
  /* proto/ allocated weights when they are returned or the diagnostics
   * need them; NULL selects the core's online path */
  float *weights = job->req.weights;
  size_t tasks, bytes;
  void *scratch;
  int nh, rc;

  /* proto/ validated the request; a failure here is our bug, not the
   * client's, hence 500 rather than 400. */
  if (attn_check(p) != 0) {
    log_error("batcher: decoded request failed attn_check");
    return ATTND_EINTERNAL;
  }
  tasks = attn_task_count(p, weights != NULL);
  bytes = attn_scratch_bytes(p, weights != NULL);
  if (bytes == 0)
    bytes = 64;
  scratch = w ? pool_scratch(w, bytes)
              : mem_aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!scratch)
    return ATTND_ENOMEM;
  nh = w ? exec_helpers_wanted(x, job->cost_flops, tasks) : 0;
  if (nh > 0)
    rc = exec_split_run(x, job, job->req.out, weights, job->req.lse,
                        tasks, bytes, scratch, nh);
  else
    rc = exec_tasks(job, 0, tasks, job->req.out, weights, job->req.lse,
                    scratch);
  if (!w)
    mem_free(scratch);
  if (rc != 0)
    return rc;
  if (exec_stopped(job))
    return ATTND_ECANCELED;
  if (job->req.diagnostics &&
      (rc = attn_diagnostics(p, weights, job->req.allowed_keys,
                             job->req.entropy, job->req.max_weight,
                             job->req.jacobian_norm)) != 0)
    return rc == ATTND_ECANCELED ? rc : ATTND_EINTERNAL;
  if (exec_stopped(job))
    return ATTND_ECANCELED;
  job->computed_ns = clock_now_ns();
  rc = exec_encode(job);
  if (rc == 0 && job->finish)
    rc = job->finish(job);
  if (rc != 0) {  /* an answer encoded, then stopped or refused */
    mem_free(job->body);
    job->body = NULL;
    proto_parts_free(&job->parts);
  }
  return rc;
}

/* A v2 job's phases, for its model's statistics (proto_model_stats). */
static void exec_record_model(struct exec_ctx *x,
                              const struct batcher_job *job,
                              uint64_t end_ns) {
  int model = job->req.model;
  if (job->req.codec != PROTO_CODEC_V2)
    return;
  metrics_record_model(x->m, model, METRICS_PHASE_QUEUE,
                       job->started_ns - job->enqueued_ns);
  metrics_record_model(x->m, model, METRICS_PHASE_INFER,
                       job->computed_ns - job->started_ns);
  metrics_record_model(x->m, model, METRICS_PHASE_OUTPUT,
                       end_ns - job->computed_ns);
}

int exec_cancelled(struct exec_ctx *x, struct batcher_job *job) {
  int why = atomic_load(&job->cancel);
  if (why == BATCHER_DRAIN)
    return ATTND_EDRAINING;
  metrics_record_cancel(x->m, why == BATCHER_LATE ? METRICS_CANCEL_DEADLINE
                                                  : METRICS_CANCEL_DISCONNECT);
  return why == BATCHER_LATE ? ATTND_ETIMEDOUT : ATTND_ECANCELED;
}

/* Runs a job taken from its queue by worker w, or by its submitter (w
 * NULL): not at all when its client has left or its deadline passed
 * (504), else compute, which the cancel word stops (batcher.h), and
 * encode.  Returns its error. */
int exec_job(struct exec_ctx *x, struct batcher_job *job,
             struct pool_worker *w, int batch_size) {
  uint64_t end;
  int err;
  job->batch_size = batch_size;
  job->started_ns = clock_now_ns();
  job->req.prob.stop = &job->cancel;
  job->req.prob.amx = x->amx;
  if (atomic_load(&job->cancel))
    err = exec_cancelled(x, job);
  else if (job->deadline_ns && job->started_ns > job->deadline_ns) {
    metrics_record_cancel(x->m, METRICS_CANCEL_DEADLINE);
    err = ATTND_ETIMEDOUT;
  } else if ((err = exec_compute(x, job, w)) == ATTND_ECANCELED)
    err = exec_cancelled(x, job);
  end = clock_now_ns();
  metrics_record_job(x->m, job->started_ns - job->enqueued_ns,
                     end - job->started_ns);
  if (err == 0)
    exec_record_model(x, job, end);
  return err;
}
