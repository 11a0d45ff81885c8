/* batcher.c - shape-keyed queues on a libuv loop thread (see batcher.h).
 *
 * DESIGN
 *
 * This file decides where and when a job runs: admission, the queues,
 * dispatch to the pool, completion.  Running one (the core, encoding,
 * compression, statistics, splitting a large request) is exec.c's.
 *
 * Threads and what they own:
 * - Producers (MHD threads) call batcher_reserve/batcher_submit.  They
 *   touch only the fields under b->mu, then call uv_async_send.  A
 *   producer may instead run a reserved job itself (batcher_take_here,
 *   the inline path): a cheap one always, a costlier one only when it
 *   is the one request in flight, in a vacant worker place it holds.  It
 *   calls exec_job as a worker does, on its own thread and scratch,
 *   touching only b->mu's fields and metrics.
 * - The loop thread (uv_run on b->loop) owns the per-key queues, the
 *   round-robin cursor and the batch slots.  It is the only thread that
 *   calls libuv functions other than uv_async_send.
 * - Workers (pool.c) run one batch at a time (batcher_run): take each job
 *   off the batch under b->mu, exec_job and complete it (calling
 *   job->done), then hand the batch slot back on b->done_batches under
 *   b->mu and uv_async_send.
 *
 * Queues:
 * - b->in_head/in_tail: submitted jobs not yet seen by the loop (b->mu).
 * - b->done_batches: batch slots workers have finished (b->mu).
 * - b->queues[]: one FIFO per shape key (loop thread only).  An empty
 *   queue is removed, so the array holds only keys with waiting work.
 * - batch->jobs, in each of the `workers` batch slots: the jobs of a
 *   launched batch not yet started.  The loop fills it before
 *   pool_submit; from then on it changes under b->mu only, by the worker
 *   taking its next job or by the loop's sweep taking one out.
 *
 * The async callback drains both b->mu lists in one step (uv_async_send
 * coalesces), re-queues, then dispatches while a worker place is vacant:
 * there are exactly `workers` places (b->vacant, under b->mu), taken by
 * a batch on a worker or by a job run on its HTTP thread, so no more
 * than `workers` jobs compute at once, a batch leaves as soon as a place
 * frees, and batches grow while all are taken.  Whoever frees a place
 * with jobs queued wakes the loop.
 *
 * Splitting (exec.c): a worker holding one large request may lend it to
 * idle workers through helper items on the same pool; b->ex.idle_hint is
 * a relaxed copy of b->vacant for that.
 *
 * Locks: b->mu is a leaf lock; nothing is called with it held (no
 * uv_async_send, no done()).  pool.c's lock and a split's lock (exec.c)
 * are leaves too; no two of these are ever held together.
 *
 * Cancelling and deadlines: a job's cancel word (batcher.h) is set by the
 * watcher (server/conn/watch.c: the client left, the deadline passed),
 * which then wakes the loop (batcher_wake_cancelled).  A job is either
 * not yet started or running, and each state has one path.  Not yet
 * started (in a queue, or in a batch behind its batch mates): every pass
 * of the loop (batcher_expire) completes those whose word is set or whose
 * deadline has passed, and arms the timer for the next deadline among
 * them, so a job whose client left gives its queue place and budget back
 * at once and a late one hears 504 on time, however long its batch mates
 * compute.  Running: the job reads the word itself (exec.c, the core).
 * The two never overlap: a worker takes a job off its batch and onto
 * b->running in one step under b->mu, the sweep takes jobs off batches
 * under b->mu, so each job is completed once, and a worker never sees a
 * job the sweep took.  Skipping one leaves its batch mates' answers as
 * they were: each job is computed as its own problem.  b->running lists
 * the jobs that a worker or an HTTP thread has taken, from their start to
 * just before done() (or, inline, before the reservation is given back),
 * so that batcher_cancel_all can set every running job's word under
 * b->mu; a job that starts after it finds b->cancel_all set, and the
 * jobs not yet started are completed by the loop (batcher_fail_queued).
 *
 * Accounting (b->mu): `queued` counts reserved jobs not yet started,
 * queued or waiting in a batch (admission against max_queue; the
 * metrics' attnd_queue_depth moves with it), `outstanding` counts
 * reserved jobs whose done() has not returned (what the drain waits on),
 * `bytes` sums every hold on the budget against max_bytes: bodies still
 * arriving (batcher_hold), reserved jobs' hold_bytes, and the answers of
 * completed jobs that their submitters have not yet sent
 * (batcher_unhold).  A job completes in two steps (batcher_finish):
 * before done() it gives back its queue place, if it still has one, and
 * its hold_bytes but its answer's (job->answer_bytes, which pass to the
 * submitter), so that a client hearing its answer may be admitted again
 * at once; after done() returns it leaves `outstanding`.  Every change to
 * `bytes` is added to the metrics' gauge after the unlock, as a
 * difference, so that the gauge needs no lock of its own.
 */
#include "server/sched/batcher.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "proto/mem.h"
#include "server/clock.h"
#include "server/sched/exec.h"
#include "server/obs/log.h"
#include "server/sched/pool.h"
#include "server/sched/work.h"

/* One in-flight batch; exactly cfg.workers of them exist. */
struct batcher_batch {
  struct exec_item base;    /* first; kind EXEC_ITEM_BATCH */
  struct batcher *b;
  struct batcher_job *jobs; /* not yet started, linked through job->next:
                               filled by the loop before pool_submit, then
                               taken under b->mu, by the worker one at a
                               time or by the loop's sweep */
  int n;                    /* jobs it left the queue with */
  struct batcher_batch *next;
};

struct batcher_queue {
  struct batcher_key key;
  struct batcher_job *head, *tail;
  int n;
};

struct batcher {
  struct batcher_config cfg;
  struct exec_ctx ex;       /* the metrics and the pool (the batcher's, lent
                               to exec_job) and idle_hint */

  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t timer;
  uv_thread_t thread;

  pthread_mutex_t mu;       /* guards the fields up to the next comment */
  struct batcher_job *in_head, *in_tail;
  struct batcher_batch *done_batches;
  size_t queued, outstanding, bytes;
  int vacant;               /* worker places free: batch slots neither
                               running nor lent to an HTTP thread */
  int closed, aborting, stopping;
  int cancel_all;           /* batcher_cancel_all was called */
  struct batcher_job *running; /* jobs computing or about to, on a
                               worker or an HTTP thread (run_prev/next) */

  /* Loop thread only. */
  struct batcher_queue *queues;
  size_t nq, capq, rr;
  struct batcher_batch *slots, *free_slots;
};

/* ---- keys and queues (loop thread) ---------------------------------- */

static void batcher_key_of(const proto_request *r, struct batcher_key *k) {
  const attn_problem *p = &r->prob;
  int i = 0, j;
  memset(k, 0, sizeof *k);
  k->dims[i++] = p->scoring;
  k->dims[i++] = p->B;
  k->dims[i++] = p->H;
  k->dims[i++] = p->Hkv;
  k->dims[i++] = p->Lq;
  k->dims[i++] = p->Lk;
  k->dims[i++] = p->D;
  k->dims[i++] = p->Dk;
  k->dims[i++] = p->Dv;
  k->dims[i++] = p->Hd;
  k->dims[i++] = p->causal;
  k->dims[i++] = p->valid_lens ? 1 + p->valid_lens_per_query : 0;
  k->dims[i++] = p->has_window;
  k->dims[i++] = p->mask != NULL;
  k->dims[i++] = p->bias != NULL;
  k->dims[i++] = r->return_weights;
  k->dims[i++] = r->diagnostics;
  k->dims[i++] = p->dropout_p > 0;
  for (j = 0; j < 4; j++) {
    k->strides[j] = p->mask ? p->mask_stride[j] : 0;
    k->strides[4 + j] = p->bias ? p->bias_stride[j] : 0;
  }
}

/* Returns the queue for key, creating it; NULL when out of memory. */
static struct batcher_queue *batcher_queue_for(struct batcher *b,
                                               const struct batcher_key *k) {
  size_t i;
  for (i = 0; i < b->nq; i++)
    if (memcmp(&b->queues[i].key, k, sizeof *k) == 0)
      return &b->queues[i];
  if (b->nq == b->capq) {
    size_t cap = b->capq ? b->capq * 2 : 8;
    struct batcher_queue *nqs = mem_realloc(b->queues, cap * sizeof *nqs);
    if (!nqs)
      return NULL;
    b->queues = nqs;
    b->capq = cap;
  }
  memset(&b->queues[b->nq], 0, sizeof b->queues[0]);
  b->queues[b->nq].key = *k;
  return &b->queues[b->nq++];
}

static void batcher_queue_remove(struct batcher *b, size_t i) {
  b->queues[i] = b->queues[--b->nq];
  if (b->rr > b->nq)
    b->rr = 0;
}

/* ---- completion (any thread) ------------------------------------------ */

/* The bytes of the answer a job carries out of done(): its encoded body,
 * or its parts, which the submitter then owns.  At most what it reserved,
 * so that the budget never gives back more than it took. */
static size_t batcher_answer_bytes(const struct batcher_job *job) {
  size_t n = job->body || job->parts.n ? job->body_len : 0;
  return n < job->hold_bytes ? n : job->hold_bytes;
}

/* Records a job's outcome and releases its request; then gives back what
 * it no longer needs, before anyone hears of it: its tensors' share of
 * the budget (all of hold_bytes but job->answer_bytes, which the
 * submitter gives back once its answer is sent) and, for a job that never
 * left its queue (`queued` 1), its queue place.  The job stays
 * outstanding until batcher_done. */
static void batcher_settle(struct batcher *b, struct batcher_job *job,
                           int err, int queued) {
  size_t back;
  job->err = err;
  job->finished_ns = clock_now_ns();
  proto_request_free(&job->req);
  job->answer_bytes = batcher_answer_bytes(job);
  back = job->hold_bytes - job->answer_bytes;
  pthread_mutex_lock(&b->mu);
  b->bytes -= back;
  b->queued -= (size_t)queued;
  pthread_mutex_unlock(&b->mu);
  metrics_add_inflight_bytes(b->ex.m, -(int64_t)back);
  if (queued)
    metrics_add_queue_depth(b->ex.m, -1);
}

/* A completed job leaves the count the drain waits on
 * (batcher_outstanding), after its done() has returned. */
static void batcher_done(struct batcher *b) {
  pthread_mutex_lock(&b->mu);
  b->outstanding--;
  pthread_mutex_unlock(&b->mu);
}

/* Completes a job: the last time the batcher touches it.  queued: it
 * never left its queue, which it still has a place in. */
static void batcher_finish(struct batcher *b, struct batcher_job *job,
                           int err, int queued) {
  batcher_settle(b, job, err, queued);
  job->done(job);
  batcher_done(b);
}

/* Completes every job of a list of jobs never started (queued, or taken
 * off a batch), with err, or with err 0 each with what its cancel word
 * says. */
static void batcher_fail_list(struct batcher *b, struct batcher_job *job,
                              int err) {
  while (job) {
    struct batcher_job *next = job->next;
    if (err == ATTND_ETIMEDOUT)
      metrics_record_cancel(b->ex.m, METRICS_CANCEL_DEADLINE);
    batcher_finish(b, job, err ? err : exec_cancelled(&b->ex, job), 1);
    job = next;
  }
}

/* ---- worker places (b->mu held) ---------------------------------------- */

/* A worker place is taken: by a batch the loop launches, or by a request
 * that runs on its HTTP thread while a worker would have been idle. */
static int batcher_occupy(struct batcher *b) {
  if (b->vacant == 0)
    return 0;
  b->vacant--;
  atomic_store_explicit(&b->ex.idle_hint, b->vacant, memory_order_relaxed);
  return 1;
}

static void batcher_vacate(struct batcher *b) {
  b->vacant++;
  atomic_store_explicit(&b->ex.idle_hint, b->vacant, memory_order_relaxed);
}

/* ---- running jobs (b->mu held) ----------------------------------------- */

/* Stops job with BATCHER_DRAIN unless it has a reason already. */
static void batcher_drain_job(struct batcher_job *job) {
  int none = BATCHER_RUN;
  atomic_compare_exchange_strong(&job->cancel, &none, BATCHER_DRAIN);
}

/* Lists a job that is about to run, so that batcher_cancel_all reaches
 * it; one that starts after that call is stopped at once. */
static void batcher_link(struct batcher *b, struct batcher_job *job) {
  job->run_prev = NULL;
  job->run_next = b->running;
  if (b->running)
    b->running->run_prev = job;
  b->running = job;
  if (b->cancel_all)
    batcher_drain_job(job);
}

static void batcher_unlink(struct batcher *b, struct batcher_job *job) {
  if (job->run_prev)
    job->run_prev->run_next = job->run_next;
  else
    b->running = job->run_next;
  if (job->run_next)
    job->run_next->run_prev = job->run_prev;
}

/* batcher_unlink under the lock, for a job that ran: before done(),
 * after which the job may be gone. */
static void batcher_unlist(struct batcher *b, struct batcher_job *job) {
  pthread_mutex_lock(&b->mu);
  batcher_unlink(b, job);
  pthread_mutex_unlock(&b->mu);
}

/* ---- workers ---------------------------------------------------------- */

/* Takes the next job of a batch to run it: off the batch, out of the
 * queued count and onto the running list, in one step under b->mu, so
 * that the loop's sweep (batcher_expire) either completes it before this
 * or never sees it.  NULL when none is left. */
static struct batcher_job *batcher_start_next(struct batcher *b,
                                              struct batcher_batch *batch) {
  struct batcher_job *job;
  pthread_mutex_lock(&b->mu);
  job = batch->jobs;
  if (job) {
    batch->jobs = job->next;
    job->next = NULL;
    b->queued--;
    batcher_link(b, job);
  }
  pthread_mutex_unlock(&b->mu);
  if (job)
    metrics_add_queue_depth(b->ex.m, -1);
  return job;
}

/* The pool's run function: a batch's jobs, taken, executed (exec.c) and
 * completed one by one, skipping those the loop completed meanwhile, then
 * the slot handed back to the loop thread; or a split helper, which is
 * exec.c's business. */
static void batcher_run(struct pool_item *item, struct pool_worker *w,
                        void *arg) {
  struct batcher_batch *batch = (struct batcher_batch *)item;
  struct batcher *b = arg;
  struct batcher_job *job;
  int n;

  if (((struct exec_item *)item)->kind == EXEC_ITEM_HELPER) {
    exec_help(item, w);
    return;
  }
  n = batch->n;
  while ((job = batcher_start_next(b, batch)) != NULL) {
    int err = exec_job(&b->ex, job, w, n);
    batcher_unlist(b, job);
    batcher_finish(b, job, err, 0);
  }
  pthread_mutex_lock(&b->mu);
  batch->next = b->done_batches;
  b->done_batches = batch;
  batcher_vacate(b);
  pthread_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}

/* ---- dispatch (loop thread) ------------------------------------------ */

/* Lowers *due to at, where 0 means "nothing due". */
static void batcher_due(uint64_t *due, uint64_t at) {
  if (*due == 0 || at < *due)
    *due = at;
}

/* Moves *pp, a job not yet started, to the list whose tail link is **ep. */
static void batcher_pull(struct batcher_job **pp, struct batcher_job ***ep) {
  struct batcher_job *job = *pp;
  *pp = job->next;
  job->next = NULL;
  **ep = job;
  *ep = &job->next;
}

/* Takes the jobs of the list at *pp that are not to start: to **sp those
 * whose cancel word is set, to **ep those past their deadline.  Lowers
 * *due to the next deadline of those left; *last is the last one left
 * (NULL: none).  Returns how many it took. */
static int batcher_sift(struct batcher_job **pp, uint64_t now,
                        uint64_t *due, struct batcher_job ***ep,
                        struct batcher_job ***sp, struct batcher_job **last) {
  int n = 0;
  *last = NULL;
  while (*pp) {
    struct batcher_job *job = *pp;
    if (atomic_load_explicit(&job->cancel, memory_order_relaxed))
      batcher_pull(pp, sp);
    else if (job->deadline_ns && now > job->deadline_ns)
      batcher_pull(pp, ep);
    else {
      if (job->deadline_ns)
        batcher_due(due, job->deadline_ns + 1);
      *last = job;
      pp = &job->next;
      continue;
    }
    n++;
  }
  return n;
}

/* The one deadline path of jobs not yet started: completes those whose
 * cancel word is set (batcher.h: their client left, their deadline
 * passed, the drain) with the error it names, and those whose deadline
 * has passed with ATTND_ETIMEDOUT, giving their queue places and budget
 * back; lowers *due to the next deadline still ahead, so that a job
 * stuck behind busy workers hears 504 on time rather than when one frees
 * up.  It looks at the queues and at the batches on the workers, whose
 * jobs wait there behind their batch mates.  Every wake-up of the loop
 * runs this, and the watcher wakes it when it sets a word
 * (batcher_wake_cancelled). */
static void batcher_expire(struct batcher *b, uint64_t now, uint64_t *due) {
  struct batcher_job *expired = NULL, **ep = &expired, *last;
  struct batcher_job *stopped = NULL, **sp = &stopped;
  size_t i;
  for (i = 0; i < b->nq; i++) {
    struct batcher_queue *q = &b->queues[i];
    q->n -= batcher_sift(&q->head, now, due, &ep, &sp, &q->tail);
  }
  pthread_mutex_lock(&b->mu);
  for (i = 0; i < (size_t)b->cfg.workers; i++)
    batcher_sift(&b->slots[i].jobs, now, due, &ep, &sp, &last);
  pthread_mutex_unlock(&b->mu);
  batcher_fail_list(b, expired, ATTND_ETIMEDOUT);
  batcher_fail_list(b, stopped, 0);
}

/* May queue q leave now?  If not, lowers *due to when it may. */
static int batcher_ready(struct batcher *b, struct batcher_queue *q,
                         uint64_t now, int closed, uint64_t *due) {
  uint64_t at;
  if (q->n == 0)
    return 0;
  if (b->cfg.max_delay_us == 0 || q->n >= b->cfg.max_batch || closed)
    return 1;
  at = q->head->enqueued_ns + (uint64_t)b->cfg.max_delay_us * 1000u;
  if (now >= at)
    return 1;
  batcher_due(due, at);
  return 0;
}

/* Takes up to max_batch jobs from queue i into a free slot and submits.
 * 0 when every worker place is taken (an HTTP thread may hold one). */
static int batcher_launch(struct batcher *b, size_t i) {
  struct batcher_queue *q = &b->queues[i];
  struct batcher_batch *batch = b->free_slots;
  struct batcher_job **tail = &batch->jobs;
  int n = q->n < b->cfg.max_batch ? q->n : b->cfg.max_batch, placed, k;

  pthread_mutex_lock(&b->mu);
  placed = batcher_occupy(b);
  pthread_mutex_unlock(&b->mu);
  if (!placed)
    return 0;
  b->free_slots = batch->next;
  for (k = 0; k < n; k++) {
    *tail = q->head;
    q->head = q->head->next;
    tail = &(*tail)->next;
  }
  *tail = NULL;
  q->n -= n;
  if (!q->head)
    q->tail = NULL;
  batch->n = n;
  metrics_record_batch(b->ex.m, n);
  pool_submit(b->ex.pool, &batch->base.item);
  return 1;
}

static void batcher_on_timer(uv_timer_t *t);

/* Hands batches to idle workers, round-robin over keys with work. */
static void batcher_dispatch(struct batcher *b, int closed) {
  uint64_t now = clock_now_ns(), due = 0, expiry = 0;
  size_t scanned, i;

  batcher_expire(b, now, &expiry);
  for (scanned = 0; b->free_slots && scanned < b->nq;) {
    i = (b->rr + scanned) % b->nq;
    if (!batcher_ready(b, &b->queues[i], now, closed, &due)) {
      scanned++;
      continue;
    }
    if (!batcher_launch(b, i))
      break;
    b->rr = i + 1;
    scanned = 0;
    if (b->queues[i].n == 0)
      batcher_queue_remove(b, i);
    if (b->nq)
      b->rr %= b->nq;
  }
  for (i = 0; i < b->nq;)  /* drop keys left empty by expiry */
    if (b->queues[i].n == 0)
      batcher_queue_remove(b, i);
    else
      i++;
  if (expiry)
    batcher_due(&due, expiry);
  if (due) {
    uint64_t ms = due > now ? (due - now + 999999u) / 1000000u : 0;
    uv_timer_start(&b->timer, batcher_on_timer, ms ? ms : 1, 0);
  }
}

static void batcher_on_timer(uv_timer_t *t) {
  struct batcher *b = t->data;
  int closed;
  pthread_mutex_lock(&b->mu);
  closed = b->closed;
  pthread_mutex_unlock(&b->mu);
  batcher_dispatch(b, closed);
}

/* Appends a newly submitted job to its key's queue. */
static void batcher_enqueue(struct batcher *b, struct batcher_job *job) {
  struct batcher_queue *q;
  job->next = NULL;
  batcher_key_of(&job->req, &job->key);
  q = batcher_queue_for(b, &job->key);
  if (!q) {
    batcher_fail_list(b, job, ATTND_ENOMEM);
    return;
  }
  if (q->tail)
    q->tail->next = job;
  else
    q->head = job;
  q->tail = job;
  q->n++;
}

/* Completes every job not yet started with err: the queues, emptied, and
 * the jobs waiting in batches on the workers. */
static void batcher_fail_queued(struct batcher *b, int err) {
  struct batcher_job *taken = NULL, **tp = &taken;
  size_t i;
  for (i = 0; i < b->nq; i++)
    batcher_fail_list(b, b->queues[i].head, err);
  b->nq = 0;
  b->rr = 0;
  pthread_mutex_lock(&b->mu);
  for (i = 0; i < (size_t)b->cfg.workers; i++)
    while (b->slots[i].jobs)
      batcher_pull(&b->slots[i].jobs, &tp);
  pthread_mutex_unlock(&b->mu);
  batcher_fail_list(b, taken, err);
}

static void batcher_shutdown(struct batcher *b) {
  batcher_fail_queued(b, ATTND_EDRAINING);
  /* Join the workers here, on the loop thread, so that their final
   * uv_async_send calls land on a handle that is still open. */
  pool_stop(b->ex.pool);
  b->ex.pool = NULL;
  uv_timer_stop(&b->timer);
  uv_close((uv_handle_t *)&b->timer, NULL);
  uv_close((uv_handle_t *)&b->async, NULL);
}

static void batcher_on_async(uv_async_t *a) {
  struct batcher *b = a->data;
  struct batcher_job *in;
  struct batcher_batch *done;
  int closed, aborting, stopping;

  pthread_mutex_lock(&b->mu);
  in = b->in_head;
  b->in_head = b->in_tail = NULL;
  done = b->done_batches;
  b->done_batches = NULL;
  closed = b->closed;
  aborting = b->aborting;
  stopping = b->stopping;
  pthread_mutex_unlock(&b->mu);

  while (done) {
    struct batcher_batch *next = done->next;
    done->next = b->free_slots;
    b->free_slots = done;
    done = next;
  }
  while (in) {
    struct batcher_job *next = in->next;
    batcher_enqueue(b, in);
    in = next;
  }
  if (stopping) {
    if (b->ex.pool)
      batcher_shutdown(b);
    return;
  }
  if (aborting)
    batcher_fail_queued(b, ATTND_EDRAINING);
  batcher_dispatch(b, closed);
}

/* ---- public API ----------------------------------------------------- */

static void batcher_loop_main(void *arg) {
  struct batcher *b = arg;
  uv_run(&b->loop, UV_RUN_DEFAULT);
}

/* The libuv half of batcher_start; 0 or a libuv error. */
static int batcher_start_loop(struct batcher *b) {
  int rc = uv_loop_init(&b->loop);
  if (rc)
    return rc;
  b->async.data = b;
  b->timer.data = b;
  if ((rc = uv_async_init(&b->loop, &b->async, batcher_on_async)) != 0)
    goto err_loop;
  uv_timer_init(&b->loop, &b->timer);
  /* Handles are initialised before the thread exists, so the loop thread
   * sees them fully formed (thread creation orders memory). */
  if ((rc = uv_thread_create(&b->thread, batcher_loop_main, b)) != 0)
    goto err_handles;
  return 0;
err_handles:
  uv_close((uv_handle_t *)&b->async, NULL);
  uv_close((uv_handle_t *)&b->timer, NULL);
  uv_run(&b->loop, UV_RUN_DEFAULT);
err_loop:
  uv_loop_close(&b->loop);
  return rc;
}

struct batcher *batcher_start(const struct batcher_config *cfg,
                              struct metrics *m) {
  struct batcher *b = calloc(1, sizeof *b);
  int i;
  if (!b)
    return NULL;
  b->cfg = *cfg;
  b->ex.m = m;
  b->ex.amx = cfg->amx;
  metrics_set_inflight_limit(m, cfg->max_bytes);
  metrics_set_amx(m, cfg->amx);
  pthread_mutex_init(&b->mu, NULL);
  b->slots = calloc((size_t)cfg->workers, sizeof *b->slots);
  if (!b->slots)
    goto err;
  for (i = 0; i < cfg->workers; i++) {
    b->slots[i].base.kind = EXEC_ITEM_BATCH;
    b->slots[i].b = b;
    b->slots[i].next = i + 1 < cfg->workers ? &b->slots[i + 1] : NULL;
  }
  b->free_slots = &b->slots[0];
  b->vacant = cfg->workers;
  b->ex.idle_hint = cfg->workers;
  b->ex.pool = pool_start(cfg->workers, batcher_run, b);
  if (!b->ex.pool)
    goto err;
  if (batcher_start_loop(b) != 0)
    goto err_pool;
  return b;
err_pool:
  pool_stop(b->ex.pool);
err:
  pthread_mutex_destroy(&b->mu);
  free(b->slots);
  free(b);
  return NULL;
}

int batcher_reserve(struct batcher *b, size_t hold_bytes) {
  return batcher_reserve_held(b, hold_bytes, 0, NULL, 0);
}

int batcher_reserve_held(struct batcher *b, size_t hold_bytes, size_t held,
                         char *msg, size_t cap) {
  int rc = 0;
  pthread_mutex_lock(&b->mu);
  b->bytes -= held;
  if (b->closed) {
    rc = ATTND_EDRAINING;
  } else if (b->queued >= b->cfg.max_queue) {
    rc = ATTND_EBUSY;
    if (msg)
      snprintf(msg, cap, "server busy: %zu requests are queued, the "
               "server's limit (--max-queue %zu); retry later",
               (size_t)b->queued, (size_t)b->cfg.max_queue);
  } else if (hold_bytes > b->cfg.max_bytes - b->bytes) {
    rc = ATTND_EBUSY;
    if (msg)
      snprintf(msg, cap, "server busy: the request needs %zu MiB of "
               "in-flight memory and %zu of %zu MiB are in use "
               "(--max-inflight-mb); retry later", (hold_bytes >> 20) + 1,
               (size_t)((b->bytes + (1u << 20) - 1) >> 20),
               (size_t)(b->cfg.max_bytes >> 20));
  } else {
    b->queued++;
    b->outstanding++;
    b->bytes += hold_bytes;
  }
  pthread_mutex_unlock(&b->mu);
  metrics_add_inflight_bytes(b->ex.m,
                             (rc == 0 ? (int64_t)hold_bytes : 0) - (int64_t)held);
  if (rc == 0)
    metrics_add_queue_depth(b->ex.m, 1);
  return rc;
}

int batcher_hold(struct batcher *b, size_t n) {
  int rc = 0;
  pthread_mutex_lock(&b->mu);
  if (n > b->cfg.max_bytes - b->bytes)
    rc = ATTND_EBUSY;
  else
    b->bytes += n;
  pthread_mutex_unlock(&b->mu);
  if (rc == 0 && n)
    metrics_add_inflight_bytes(b->ex.m, (int64_t)n);
  return rc;
}

void batcher_unhold(struct batcher *b, size_t n) {
  if (!n)
    return;
  pthread_mutex_lock(&b->mu);
  b->bytes -= n;
  pthread_mutex_unlock(&b->mu);
  metrics_add_inflight_bytes(b->ex.m, -(int64_t)n);
}

size_t batcher_bytes_in_use(struct batcher *b) {
  size_t n;
  pthread_mutex_lock(&b->mu);
  n = b->bytes;
  pthread_mutex_unlock(&b->mu);
  return n;
}

/* The batcher's fields of a job as it enters. */
static void batcher_job_reset(struct batcher_job *job) {
  job->next = NULL;
  job->err = 0;
  job->body = NULL;
  job->body_len = job->plain_len = job->json_len = 0;
  job->compressed = 0;
  job->answer_bytes = 0;
  memset(&job->parts, 0, sizeof job->parts);
  job->batch_size = 0;
  job->enqueued_ns = clock_now_ns();
  job->started_ns = job->finished_ns = job->computed_ns = 0;
}

/* A place is borrowed (BATCHER_HERE_IDLE) only while this is the one
 * request in flight (alone, and no other job reserved): with others being
 * received, queued or computing, batching them together on the workers
 * serves many connections better than holding an HTTP thread, whose
 * other connections would wait.  On any other answer than BATCHER_QUEUE
 * the job is no longer queued. */
enum batcher_here batcher_take_here(struct batcher *b, struct batcher_job *job,
                                    int alone) {
  enum batcher_here took = BATCHER_QUEUE;
  double ns;
  /* With a batching delay the operator asked for batches, and with
   * inline_ns 0 for every request queued. */
  if (b->cfg.max_delay_us > 0 || b->cfg.inline_ns == 0)
    return BATCHER_QUEUE;
  ns = work_ns(&job->req, job->cost_flops);
  pthread_mutex_lock(&b->mu);
  if (ns <= (double)b->cfg.inline_ns)
    took = ns <= BATCHER_BRIEF_NS ? BATCHER_HERE_BRIEF : BATCHER_HERE_CHEAP;
  else if (alone && ns <= (double)b->cfg.inline_idle_ns &&
           b->outstanding == 1 && batcher_occupy(b))
    took = BATCHER_HERE_IDLE;
  if (took != BATCHER_QUEUE) {
    b->queued--;
    batcher_link(b, job);
  }
  pthread_mutex_unlock(&b->mu);
  return took;
}

/* Returns the worker place a job run here took; wakes the loop thread if
 * jobs queued meanwhile, which may be waiting for this place. */
static void batcher_give_back(struct batcher *b) {
  int waiting;
  pthread_mutex_lock(&b->mu);
  batcher_vacate(b);
  waiting = b->queued > 0;
  pthread_mutex_unlock(&b->mu);
  if (waiting)
    uv_async_send(&b->async);
}

/* The inline path: what a worker does for a batch of one, around the
 * same exec_job, without the hand-offs. */
void batcher_run_here(struct batcher *b, struct batcher_job *job,
                      enum batcher_here took) {
  int err;
  assert(took != BATCHER_QUEUE);
  batcher_job_reset(job);
  metrics_add_queue_depth(b->ex.m, -1);
  metrics_record_batch(b->ex.m, 1);
  metrics_record_inline(b->ex.m, took == BATCHER_HERE_IDLE
                                     ? METRICS_INLINE_IDLE
                                     : METRICS_INLINE_CHEAP);
  err = exec_job(&b->ex, job, NULL, 1);
  batcher_unlist(b, job);
  batcher_settle(b, job, err, 0);
  if (took == BATCHER_HERE_IDLE)
    batcher_give_back(b);
  batcher_done(b);
}

void batcher_submit(struct batcher *b, struct batcher_job *job) {
  batcher_job_reset(job);
  pthread_mutex_lock(&b->mu);
  if (b->in_tail)
    b->in_tail->next = job;
  else
    b->in_head = job;
  b->in_tail = job;
  pthread_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}

/* Sets one of the flags under b->mu and wakes the loop thread. */
static void batcher_flag(struct batcher *b, int *flag) {
  pthread_mutex_lock(&b->mu);
  *flag = 1;
  pthread_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}

void batcher_close(struct batcher *b) { batcher_flag(b, &b->closed); }

void batcher_wake_cancelled(void *b) {
  uv_async_send(&((struct batcher *)b)->async);
}

void batcher_cancel_all(struct batcher *b) {
  pthread_mutex_lock(&b->mu);
  b->cancel_all = 1;
  b->aborting = 1;
  for (struct batcher_job *job = b->running; job; job = job->run_next)
    batcher_drain_job(job);
  pthread_mutex_unlock(&b->mu);
  uv_async_send(&b->async);
}

size_t batcher_outstanding(struct batcher *b) {
  size_t n;
  pthread_mutex_lock(&b->mu);
  n = b->outstanding;
  pthread_mutex_unlock(&b->mu);
  return n;
}

void batcher_stop(struct batcher *b) {
  int rc;
  batcher_flag(b, &b->stopping);
  uv_thread_join(&b->thread);
  rc = uv_loop_close(&b->loop);
  if (rc != 0)
    log_error("batcher: uv_loop_close: %s", uv_strerror(rc));
  pthread_mutex_destroy(&b->mu);
  mem_free(b->queues);
  free(b->slots);
  free(b);
}
