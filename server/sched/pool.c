/* pool.c - compute worker threads (see pool.h).
 *
 * DESIGN
 * - One FIFO of intrusive items (head/tail) under pool.mu; pool_submit
 *   appends and signals pool.cv.  Workers wait on cv, take the head,
 *   unlock, and call run() with no pool lock held, so run() may take any
 *   other lock (the batcher's) without a lock-order concern: pool.mu is a
 *   leaf lock, never held while calling out.
 * - Each struct pool_worker belongs to exactly one thread; its scratch
 *   buffer is touched only by that thread (and freed by pool_stop after
 *   the join).
 * - pool_stop sets `stopping`; workers exit once the FIFO is empty, so
 *   every submitted item runs exactly once.
 */
#include "server/sched/pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "proto/mem.h"

struct pool_worker {
  struct pool *pool;
  pthread_t thread;
  int index;
  void *scratch;            /* 64-byte aligned, owned by this worker */
  size_t scratch_cap;
};

struct pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct pool_item *head, *tail;  /* guarded by mu */
  int stopping;                   /* guarded by mu */
  pool_run_fn *run;
  void *arg;
  int n;
  struct pool_worker *workers;
};

static struct pool_item *pool_take(struct pool *p) {
  struct pool_item *it;
  pthread_mutex_lock(&p->mu);
  while (!p->head && !p->stopping)
    pthread_cond_wait(&p->cv, &p->mu);
  it = p->head;
  if (it) {
    p->head = it->next;
    if (!p->head)
      p->tail = NULL;
  }
  pthread_mutex_unlock(&p->mu);
  return it;
}

static void *pool_main(void *arg) {
  struct pool_worker *w = arg;
  struct pool_item *it;
  while ((it = pool_take(w->pool)) != NULL)
    w->pool->run(it, w, w->pool->arg);
  return NULL;
}

struct pool *pool_start(int n, pool_run_fn *run, void *arg) {
  struct pool *p = calloc(1, sizeof *p);
  int started = 0;
  if (!p)
    return NULL;
  p->workers = calloc((size_t)n, sizeof *p->workers);
  if (!p->workers)
    goto err;
  p->run = run;
  p->arg = arg;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (; started < n; started++) {
    struct pool_worker *w = &p->workers[started];
    w->pool = p;
    w->index = started;
    if (pthread_create(&w->thread, NULL, pool_main, w) != 0)
      break;
  }
  p->n = started;
  if (started == n)
    return p;
  pool_stop(p);  /* joins the threads that did start and frees p */
  return NULL;
err:
  free(p);
  return NULL;
}

void pool_submit(struct pool *p, struct pool_item *item) {
  item->next = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->tail)
    p->tail->next = item;
  else
    p->head = item;
  p->tail = item;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

int pool_cancel(struct pool *p, struct pool_item *item) {
  struct pool_item **pp, *prev = NULL;
  int found = 0;
  pthread_mutex_lock(&p->mu);
  for (pp = &p->head; *pp; prev = *pp, pp = &(*pp)->next)
    if (*pp == item) {
      *pp = item->next;
      if (p->tail == item)
        p->tail = prev;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&p->mu);
  return found;
}

void *pool_scratch(struct pool_worker *w, size_t bytes) {
  size_t cap;
  void *np;
  if (bytes <= w->scratch_cap && w->scratch)
    return w->scratch;
  /* Grow geometrically so that a mix of shapes settles quickly. */
  cap = w->scratch_cap * 2 > bytes ? w->scratch_cap * 2 : bytes;
  cap = (cap + 63) & ~(size_t)63;
  if (cap == 0)
    cap = 64;
  np = mem_aligned_alloc(64, cap);
  if (!np)
    return NULL;
  mem_free(w->scratch);
  w->scratch = np;
  w->scratch_cap = cap;
  return np;
}

int pool_worker_index(const struct pool_worker *w) { return w->index; }

void pool_stop(struct pool *p) {
  int i;
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (i = 0; i < p->n; i++)
    pthread_join(p->workers[i].thread, NULL);
  for (i = 0; i < p->n; i++)
    mem_free(p->workers[i].scratch);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->workers);
  free(p);
}
