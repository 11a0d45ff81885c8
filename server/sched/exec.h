/* exec.h - runs one job: the core, encoding, compression, statistics.
 *
 * A job is a struct batcher_job (batcher.h) that has been decoded,
 * admitted (batcher_reserve), and either taken off its queue by a worker
 * or kept by its submitter to run inline.  exec_job runs it
 * where it is called and fills its response fields: the core writes
 * job->req.out (and req.weights, the diagnostics), then the answer is
 * encoded into job->body or job->parts, compressed when job->coding asks,
 * and handed to job->finish when that is set.  It records the job's
 * timings and statistics in the metrics.  It does NOT complete the job:
 * job->err, finished_ns, releasing job->req, done() and giving back the
 * reservation are the caller's (batcher.c), with the error it returns.
 *
 * Two callers, one function:
 *   - a pool worker running a batch (batcher.c: batcher_run), w != NULL:
 *     the core runs in w's scratch (pool_scratch), and a large request
 *     may be split with idle workers (see exec.c);
 *   - the submitter's own thread running a job inline (batcher_run_here:
 *     a cheap one, or one alone on the server), w == NULL: scratch is
 *     allocated for the job and freed before return, and the job is never
 *     split.
 *
 * Threads: exec_job on any thread, any number at once, each with its own
 * job; exec_help only on a pool worker, from the pool's run function.
 */
#ifndef ATTND_EXEC_H
#define ATTND_EXEC_H

#include "server/sched/batcher.h"
#include "server/obs/metrics.h"
#include "server/sched/pool.h"

/* What execution needs from the batcher that runs it.  The batcher owns
 * it (inside struct batcher) and sets m and pool before any job runs. */
struct exec_ctx {
  struct metrics *m;        /* job and model statistics */
  struct pool *pool;        /* where split helpers are submitted */
  _Atomic int idle_hint;    /* vacant worker places, a copy the batcher
                               writes under its lock; read relaxed here to
                               size a split */
  int amx;                  /* every job's attn_problem.amx (batcher_config) */
};

/* Every item submitted to the batcher's pool starts with this: a batch
 * (batcher.c, the zero kind) or a split helper (exec.c). */
enum exec_item_kind { EXEC_ITEM_BATCH, EXEC_ITEM_HELPER };

struct exec_item {
  struct pool_item item;    /* first: the pool hands us this pointer */
  enum exec_item_kind kind;
};

/* Runs job on worker w, or on the calling thread when w is NULL (see the
 * top of this file), as one of batch_size jobs of its batch.  The job
 * comes with its response fields empty and enqueued_ns set (what
 * batcher_submit and batcher_run_here do).  Sets job->batch_size,
 * started_ns, computed_ns and the response fields.  Past
 * job->deadline_ns it computes nothing and returns ATTND_ETIMEDOUT.
 * Returns 0, or ATTND_E*: the job failed and its response is not to be
 * sent. */
int exec_job(struct exec_ctx *x, struct batcher_job *job,
             struct pool_worker *w, int batch_size);

/* The error of a job stopped by its cancel word (batcher.h), counted in
 * the metrics: ATTND_ETIMEDOUT, ATTND_ECANCELED or, for the drain,
 * ATTND_EDRAINING.  For whoever completes it, run or not. */
int exec_cancelled(struct exec_ctx *x, struct batcher_job *job);

/* Runs a helper item (kind EXEC_ITEM_HELPER) on worker w: claims tasks of
 * the split it belongs to until none are left.  After it returns the item
 * and its split may be gone. */
void exec_help(struct pool_item *item, struct pool_worker *w);

#endif /* ATTND_EXEC_H */
