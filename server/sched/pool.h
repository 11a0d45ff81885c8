/* pool.h - a fixed set of compute threads fed from one FIFO.
 *
 * The pool knows nothing about attention: it runs run(item, worker, arg)
 * for every submitted item on one of its threads.  Items are intrusive
 * (embed a struct pool_item), so submitting never allocates and never
 * fails.  Each worker owns a scratch buffer that it reuses across items.
 *
 * Threads: pool_start/pool_stop from one controlling thread;
 * pool_submit from any thread; pool_scratch only from inside run() for
 * the worker passed to it.
 */
#ifndef ATTND_POOL_H
#define ATTND_POOL_H

#include <stddef.h>

struct pool;
struct pool_worker;

struct pool_item {
  struct pool_item *next;   /* owned by the pool while queued */
};

typedef void pool_run_fn(struct pool_item *item, struct pool_worker *w,
                         void *arg);

/* Starts n threads that call run(item, worker, arg).  Returns NULL (and
 * leaves no thread running) on allocation or thread creation failure. */
struct pool *pool_start(int n, pool_run_fn *run, void *arg);

/* Queues item; a free worker runs it.  FIFO.  The item must stay valid
 * until run() has returned for it. */
void pool_submit(struct pool *p, struct pool_item *item);

/* Removes item from the FIFO if no worker has taken it yet.  Returns 1
 * when it was removed (it will never run), 0 when a worker has it or had
 * it.  Any thread. */
int pool_cancel(struct pool *p, struct pool_item *item);

/* Returns this worker's scratch of at least bytes bytes, 64-byte aligned,
 * growing it when needed; NULL when out of memory (the old buffer is kept).
 * The memory stays the worker's until pool_stop. */
void *pool_scratch(struct pool_worker *w, size_t bytes);

/* Index of the worker in [0, n). */
int pool_worker_index(const struct pool_worker *w);

/* Lets the workers finish every queued item, joins them and frees the
 * pool.  No pool_submit may run concurrently or afterwards. */
void pool_stop(struct pool *p);

#endif /* ATTND_POOL_H */
