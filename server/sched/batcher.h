/* batcher.h - groups decoded requests by shape and feeds them to workers.
 *
 * A submitter (an MHD thread) owns a struct batcher_job, usually embedded
 * in its per-request context, and:
 *   1. batcher_reserve(b, hold_bytes): admission control.  0, or ATTND_EBUSY
 *      (queue full or tensor budget spent), or ATTND_EDRAINING (closed).
 *   2. fills job->req, job->deadline_ns, job->hold_bytes, job->done, job->arg;
 *   3. batcher_submit(b, job): cannot fail.
 * Exactly once per submitted job, done(job) is called on a worker or on
 * the batcher's loop thread with job->err set (0: job->body, or for v2
 * binary outputs job->parts, holds the encoded response, which the
 * submitter then owns and frees with free() or proto_parts_free).
 * After done() returns the batcher never touches the job again, and
 * job->req has been released (proto_request_free).
 *
 * The budget (cfg.max_bytes) counts every byte a request holds, through
 * three kinds of hold: a body still arriving (batcher_hold), a reserved
 * job's hold_bytes (its tensors and its answer), and a completed job's
 * answer until it is sent.  Before done() is called the job's queue place
 * and all of its hold_bytes but job->answer_bytes are given back; those
 * bytes, the answer's, stay in the budget and pass to the submitter, who
 * gives them back with batcher_unhold once the answer has left memory.
 * The job counts in batcher_outstanding until done() returns.
 *
 * Jobs are queued by shape key; a batch is up to max_batch jobs of one key
 * and is handed to a worker without copying tensors.  Keys are served
 * round-robin.  With max_delay_us 0 a batch leaves as soon as a worker is
 * free; otherwise it waits until it is full or its oldest job has waited
 * max_delay_us (millisecond timer granularity).  A job whose deadline
 * passes before it starts is completed with ATTND_ETIMEDOUT, uncomputed,
 * at its deadline: in its queue, or in its batch while the jobs before it
 * compute.  Until it starts a job counts as queued (max_queue).
 *
 * Threads: batcher_start/batcher_stop from the controlling thread;
 * everything else from any thread.
 */
#ifndef ATTND_BATCHER_H
#define ATTND_BATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "server/obs/metrics.h"

struct batcher_config {
  int workers;              /* compute threads, >= 1 */
  int max_batch;            /* >= 1 */
  long max_delay_us;        /* 0 = greedy */
  size_t max_queue;         /* jobs reserved but not yet started */
  size_t max_bytes;         /* budget of the jobs' hold_bytes */
  uint64_t inline_ns;       /* batcher_run_here's bounds, 0 = never: */
  uint64_t inline_idle_ns;  /* always, and while nothing else is in flight */
  int amx;                  /* 1: the process holds AMX's permission
                               (amx_request), so the core may use AMX
                               (attn_problem.amx, attnd_kernel_info) */
};

/* Private to the batcher: the shape a job is grouped by. */
struct batcher_key {
  int dims[24];
  int64_t strides[8];
};

/* Why a job is to stop (batcher_job.cancel). */
enum batcher_cancel {
  BATCHER_RUN = 0,
  BATCHER_GONE = 1,         /* its client closed the connection */
  BATCHER_LATE = 2,         /* its deadline passed */
  BATCHER_DRAIN = 3         /* the drain ran out of time (batcher_cancel_all) */
};

struct batcher_job {
  /* Set by the submitter before batcher_submit. */
  proto_request req;        /* decoded request; released by the batcher */
  uint64_t deadline_ns;     /* clock_now_ns() deadline, 0 = none */
  size_t hold_bytes;        /* bytes of the budget it holds: exactly what
                               was passed to batcher_reserve */
  double cost_flops;        /* work_flops(&req), weighed at admission: the
                               inline decision and the split read it */
  void (*done)(struct batcher_job *job);
  void *arg;                /* for the submitter; the batcher ignores it */
  const char *coding;       /* "gzip"/"deflate" to compress the response
                               (proto_accept_coding), NULL = identity */
  int (*finish)(struct batcher_job *job); /* NULL, or called on the thread
                               that ran the job once its answer is
                               encoded, with job->req intact: 0, or an
                               ATTND_E* that fails the job instead (its
                               answer dropped).  What writes v2 outputs
                               into shared memory regions. */
  int (*guarded)(const proto_request *req, int (*fn)(void *), void *arg);
                            /* NULL, or what runs the core over a request
                               that reads inputs in place from shared
                               memory (req->n_shared > 0), on every thread
                               that computes it: fn(arg) guarded against
                               those pages going away; fn's value, or
                               ATTND_EINVAL when they did. */

  /* Set by anyone at any time, once (the HTTP layer's watcher, or
   * batcher_cancel_all): why the job is to stop, enum batcher_cancel.
   * A job not yet started (queued, or in its batch behind others) is
   * then completed uncomputed once the batcher is told
   * (batcher_wake_cancelled), giving back its queue place and budget at
   * once, and its batch's worker skips it; one that runs stops within a
   * key block (attn_problem.stop) or before its next phase (diagnostics,
   * encoding, compression).  err is then
   * ATTND_ECANCELED (the client left), ATTND_ETIMEDOUT (its deadline
   * passed) or ATTND_EDRAINING (the drain), and no other job of its
   * batch is touched. */
  _Atomic int cancel;

  /* Set by the batcher before done(). */
  int err;                  /* 0 or ATTND_E* */
  char *body;               /* on success: the encoded response (malloc),
                               compressed with `coding` when that is set */
  size_t body_len;
  size_t plain_len;         /* body length before compression */
  size_t json_len;          /* length of its JSON part: less than
                               plain_len when v2 binary outputs follow */
  int compressed;           /* 1: body is compressed with `coding` */
  size_t answer_bytes;      /* of hold_bytes, what stays held after done():
                               the answer's bytes (body_len when there is
                               a body or parts, else 0, at most
                               hold_bytes); the submitter's to give back
                               with batcher_unhold */
  proto_parts parts;        /* parts.n > 0: the response is parts (JSON
                               and binary outputs, uncopied) and body is
                               NULL; the submitter frees it with
                               proto_parts_free */
  int batch_size;           /* jobs in its batch, 0 if it never ran */
  uint64_t enqueued_ns, started_ns, finished_ns;
  uint64_t computed_ns;      /* the core done, encoding starts; 0 if not */

  /* Private to the batcher. */
  struct batcher_job *next;
  struct batcher_job *run_prev, *run_next;  /* running jobs (b->mu) */
  struct batcher_key key;
};

struct batcher;

/* Starts the loop thread and cfg->workers compute threads.  m must outlive
 * the batcher.  Returns NULL on failure (nothing left running). */
struct batcher *batcher_start(const struct batcher_config *cfg,
                              struct metrics *m);

/* Admission control; see the top of this file.  A successful reserve must
 * be followed by exactly one batcher_submit of a job with job->hold_bytes ==
 * hold_bytes. */
int batcher_reserve(struct batcher *b, size_t hold_bytes);

/* The memory of a request body still arriving, counted as it arrives
 * against the same budget as reserved jobs (cfg.max_bytes): what has
 * arrived (or inflated) so far and a step ahead of it (http_limits.c).  batcher_hold takes n more bytes: 0, or ATTND_EBUSY
 * (taking nothing) when they do not fit in what is left.  batcher_unhold
 * gives n back: a body's hold, or a completed job's answer_bytes.  Every
 * byte held is given back exactly once: by batcher_unhold, or by
 * batcher_reserve_held. */
int batcher_hold(struct batcher *b, size_t n);
void batcher_unhold(struct batcher *b, size_t n);

/* batcher_reserve for a request whose body held `held` bytes: gives the
 * hold back and reserves hold_bytes in one step, so that a body turning into
 * its tensors never counts twice nor lets another request in between.
 * The hold is given back whatever the result.  On ATTND_EBUSY, msg (cap
 * bytes; NULL: none) says which limit was hit, the queue's (--max-queue)
 * or the memory budget's (--max-inflight-mb), with the figures. */
int batcher_reserve_held(struct batcher *b, size_t hold_bytes, size_t held,
                         char *msg, size_t cap);

/* Bytes of the budget in use right now: holds and reserved jobs. */
size_t batcher_bytes_in_use(struct batcher *b);

/* Queues a reserved job; see the top of this file. */
void batcher_submit(struct batcher *b, struct batcher_job *job);

/* Where a reserved job runs (batcher_take_here). */
enum batcher_here {
  BATCHER_QUEUE = 0,        /* on a worker: batcher_submit it */
  BATCHER_HERE_BRIEF = 1,   /* here, cheap and expected within
                               BATCHER_BRIEF_NS */
  BATCHER_HERE_CHEAP = 2,   /* here, expected within cfg.inline_ns */
  BATCHER_HERE_IDLE = 3     /* here, alone, in a vacant worker place */
};

/* What a job that runs here for BATCHER_HERE_BRIEF is expected to take at
 * most: the default of --inline-us.  Stopping such a job early would save
 * less than watching it for a departed client costs, so the HTTP layer
 * does not watch it (http_post.c). */
#define BATCHER_BRIEF_NS 100000.0

/* Instead of batcher_submit, for a reserved job: may it run on the calling
 * thread, now, because that is cheaper than the hand-offs to the loop
 * thread, a worker and back (four wake-ups)?  It may when its expected
 * time (work_ns, work.h) is below cfg.inline_ns (BATCHER_HERE_BRIEF or
 * BATCHER_HERE_CHEAP); or below cfg.inline_idle_ns when `alone` (the
 * caller knows of no other request in progress: none being received,
 * queued or computing), no other reserved job is outstanding and a worker
 * place is vacant, which it then holds until batcher_run_here returns (so
 * that no more than `workers` jobs compute at once: BATCHER_HERE_IDLE).
 * Otherwise (and always when inline_ns is 0 or max_delay_us > 0) it
 * returns BATCHER_QUEUE, doing nothing: then batcher_submit it.  A job it
 * took must go to batcher_run_here at once, with what it returned. */
enum batcher_here batcher_take_here(struct batcher *b, struct batcher_job *job,
                                    int alone);

/* Runs a job batcher_take_here took (took, what it returned) on the
 * calling thread.  Afterwards job->err and the response fields are set as
 * done() would see them, job->req is released and the reservation given
 * back but job->answer_bytes, which the caller gives back as a done()
 * would; done() is NOT called.  It counts as a batch of one in the
 * metrics. */
void batcher_run_here(struct batcher *b, struct batcher_job *job,
                      enum batcher_here took);

/* Refuses every later reservation with ATTND_EDRAINING and flushes
 * waiting batches without their delay.  Queued jobs still run. */
void batcher_close(struct batcher *b);

/* Tells the batcher that a job's cancel word was set: its loop thread
 * then completes every job not yet started whose word is set (cancel).
 * Any thread, no lock held, until batcher_stop; a void * for
 * watch_add's callback (the watch is stopped before the batcher). */
void batcher_wake_cancelled(void *b);

/* The end of a drain that ran out of time: stores BATCHER_DRAIN in the
 * cancel word of every running job (on a worker or its HTTP thread) and
 * of every job that starts later; the loop completes those not yet
 * started (queued, or in a batch) at once, without touching their words.
 * All answer ATTND_EDRAINING within about a key block's work each. */
void batcher_cancel_all(struct batcher *b);

/* Jobs reserved and not yet completed (done() not yet returned; a job run
 * here until batcher_run_here returns).  Their answers' bytes may still
 * be held after that (batcher_bytes_in_use). */
size_t batcher_outstanding(struct batcher *b);

/* Stops the workers and the loop thread and frees everything.  Jobs not
 * yet started are completed with ATTND_EDRAINING first; running ones
 * finish.  Nobody may call into b concurrently or afterwards, and every
 * done() must be safe to run until batcher_stop returns. */
void batcher_stop(struct batcher *b);

#endif /* ATTND_BATCHER_H */
