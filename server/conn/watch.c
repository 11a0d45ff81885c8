/* watch.c - the watcher thread (see watch.h).
 *
 * DESIGN
 *
 * Threads: the watcher thread waits in epoll_wait on the set of watched
 * descriptors and an eventfd (which wakes it for a new, earlier deadline
 * and for the stop), with a timeout of the earliest deadline.  HTTP
 * threads add entries; the threads that finish jobs remove them.
 *
 * Callbacks: a slot may name a function to tell once its flag is set
 * (the batcher's, which then sweeps its queues of cancelled jobs).  The
 * watcher collects them under w.mu and calls them after the unlock, so
 * that w.mu stays a leaf.
 *
 * Shared state, under w.mu (the only lock, a leaf): the slot table, its
 * free list and the stop flag.  A slot is named by its index and a
 * generation that every removal bumps; an epoll event carries both, and
 * the watcher acts on it only if the slot still holds that generation.
 * The table grows by doubling (its slots move, which is why nothing
 * outside the lock keeps a pointer to one).  Scanning for deadlines is
 * linear in the entries, which are the requests queued or computing
 * (at most --max-queue plus the workers).
 */
#include "server/conn/watch.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/obs/log.h"
#include "proto/mem.h"

#define WATCH_EVENTS 64

struct watch_slot {
  _Atomic int *flag;        /* NULL: free */
  int gone, late;           /* what to store in it */
  int fd;
  uint32_t gen;
  uint64_t deadline_ns;     /* 0: none */
  void (*fired)(void *);    /* told after the flag is stored, or NULL */
  void *arg;
  uint32_t next_free;       /* free list, as index + 1 (0: end) */
};

struct watch {
  int ep, wake;
  pthread_t thread;
  pthread_mutex_t mu;
  struct watch_slot *slot;  /* [cap], under mu */
  uint32_t cap, used;
  uint32_t free_head;       /* index + 1, 0: none */
  int stopping;
  /* Watcher thread only: the fired callbacks of one pass over events
   * and deadlines, to be called once w.mu is released, each distinct
   * (callback, arg) once. */
  void (*tell[WATCH_EVENTS + 1])(void *);
  void *tell_arg[WATCH_EVENTS + 1];
  int ntell;
};

static uint64_t watch_handle(uint32_t idx, uint32_t gen) {
  return ((uint64_t)gen << 32) | (uint64_t)(idx + 1);
}

/* Stops watching slot idx's descriptor and frees the slot (a new
 * generation: events already taken for the old one are ignored).  Under
 * w->mu. */
static void watch_release(struct watch *w, uint32_t idx) {
  struct watch_slot *s = &w->slot[idx];
  epoll_ctl(w->ep, EPOLL_CTL_DEL, s->fd, NULL);
  s->flag = NULL;
  s->gen++;
  s->next_free = w->free_head;
  w->free_head = idx + 1;
  w->used--;
}

/* Notes that s's callback is to be called after the unlock; one call
 * per distinct callback and argument suffices (it wakes whoever sweeps
 * the flags).  Room for WATCH_EVENTS + 1 distinct ones a pass; attnd
 * uses one.  Under w->mu. */
static void watch_note(struct watch *w, const struct watch_slot *s) {
  if (!s->fired)
    return;
  for (int i = 0; i < w->ntell; i++)
    if (w->tell[i] == s->fired && w->tell_arg[i] == s->arg)
      return;
  if (w->ntell < WATCH_EVENTS + 1) {
    w->tell[w->ntell] = s->fired;
    w->tell_arg[w->ntell++] = s->arg;
  }
}

/* Stores the slot's value for the event (late: the deadline) in its
 * flag unless one is there, and releases the slot.  Under w->mu. */
static void watch_fire(struct watch *w, uint32_t idx, int late) {
  struct watch_slot *s = &w->slot[idx];
  int none = 0;
  atomic_compare_exchange_strong(s->flag, &none, late ? s->late : s->gone);
  watch_note(w, s);
  watch_release(w, idx);
}

/* Calls the callbacks watch_note collected; w->mu NOT held (they take
 * locks of their own).  Watcher thread only. */
static void watch_tell(struct watch *w, int n) {
  for (int i = 0; i < n; i++)
    w->tell[i](w->tell_arg[i]);
}

/* The milliseconds to the earliest deadline (at least 1), or -1 when
 * there is none; fires the ones that have passed.  Under w->mu. */
static int watch_deadlines(struct watch *w) {
  uint64_t now = clock_now_ns(), due = 0;
  for (uint32_t i = 0; i < w->cap; i++) {
    struct watch_slot *s = &w->slot[i];
    if (!s->flag || !s->deadline_ns)
      continue;
    if (s->deadline_ns <= now)
      watch_fire(w, i, 1);
    else if (!due || s->deadline_ns < due)
      due = s->deadline_ns;
  }
  if (!due)
    return -1;
  /* A far deadline (a v2 timeout may be 2^53 us) waits INT_MAX ms at a
   * time rather than wrapping to a negative or zero timeout. */
  due = (due - now + 999999u) / 1000000u;
  return due > INT_MAX ? INT_MAX : (int)due;
}

static void *watch_main(void *arg) {
  struct watch *w = arg;
  struct epoll_event ev[WATCH_EVENTS];
  int timeout, n, told;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    w->ntell = 0;
    timeout = w->stopping ? 0 : watch_deadlines(w);
    told = w->ntell;
    if (w->stopping) {
      pthread_mutex_unlock(&w->mu);
      return NULL;
    }
    pthread_mutex_unlock(&w->mu);
    watch_tell(w, told);
    n = epoll_wait(w->ep, ev, WATCH_EVENTS, timeout);
    if (n < 0 && errno != EINTR) {
      log_error("watch: epoll_wait: %s; clients that leave are no longer "
                "noticed before their answers", strerror(errno));
      return NULL;
    }
    pthread_mutex_lock(&w->mu);
    w->ntell = 0;
    for (int i = 0; i < n; i++) {
      uint64_t h = ev[i].data.u64, count;
      uint32_t idx = (uint32_t)h - 1;
      if (h == 0) {  /* the eventfd */
        if (read(w->wake, &count, sizeof count) < 0) {
        }
        continue;
      }
      if (idx < w->cap && w->slot[idx].flag &&
          w->slot[idx].gen == (uint32_t)(h >> 32))
        watch_fire(w, idx, 0);
    }
    told = w->ntell;
    pthread_mutex_unlock(&w->mu);
    watch_tell(w, told);
  }
}

struct watch *watch_start(void) {
  struct watch *w = calloc(1, sizeof *w);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
  int eno;
  if (!w)
    return NULL;
  w->ep = epoll_create1(EPOLL_CLOEXEC);
  w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pthread_mutex_init(&w->mu, NULL);
  if (w->ep >= 0 && w->wake >= 0 &&
      epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake, &ev) == 0 &&
      pthread_create(&w->thread, NULL, watch_main, w) == 0)
    return w;
  eno = errno;
  if (w->ep >= 0)
    close(w->ep);
  if (w->wake >= 0)
    close(w->wake);
  pthread_mutex_destroy(&w->mu);
  free(w);
  errno = eno;
  return NULL;
}

/* A free slot's index, growing the table when none is free; -1 out of
 * memory.  Under w->mu. */
static int64_t watch_take(struct watch *w) {
  uint32_t idx;
  if (!w->free_head) {
    uint32_t cap = w->cap ? w->cap * 2 : 64;
    struct watch_slot *s = mem_realloc(w->slot, (size_t)cap * sizeof *s);
    if (!s)
      return -1;
    for (uint32_t i = w->cap; i < cap; i++)
      s[i] = (struct watch_slot){NULL, 0, 0, -1, 0, 0, NULL, NULL,
                                 i + 1 < cap ? i + 2 : 0};
    w->slot = s;
    w->free_head = w->cap + 1;
    w->cap = cap;
  }
  idx = w->free_head - 1;
  w->free_head = w->slot[idx].next_free;
  return idx;
}

uint64_t watch_add(struct watch *w, int fd, _Atomic int *flag, int gone,
                   uint64_t deadline_ns, int late, void (*fired)(void *),
                   void *arg) {
  struct epoll_event ev = {.events = EPOLLRDHUP};
  uint64_t one = 1, h;
  int64_t idx;
  pthread_mutex_lock(&w->mu);
  if (w->stopping || (idx = watch_take(w)) < 0) {
    pthread_mutex_unlock(&w->mu);
    return 0;
  }
  h = watch_handle((uint32_t)idx, w->slot[idx].gen);
  ev.data.u64 = h;
  if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    w->slot[idx].next_free = w->free_head;
    w->free_head = (uint32_t)idx + 1;
    pthread_mutex_unlock(&w->mu);
    return 0;
  }
  w->slot[idx].flag = flag;
  w->slot[idx].gone = gone;
  w->slot[idx].late = late;
  w->slot[idx].fd = fd;
  w->slot[idx].deadline_ns = deadline_ns;
  w->slot[idx].fired = fired;
  w->slot[idx].arg = arg;
  w->used++;
  pthread_mutex_unlock(&w->mu);
  /* The thread's timeout may be later than this deadline. */
  if (deadline_ns && write(w->wake, &one, sizeof one) < 0) {
  }
  return h;
}

void watch_remove(struct watch *w, uint64_t handle) {
  uint32_t idx = (uint32_t)handle - 1;
  if (!handle)
    return;
  pthread_mutex_lock(&w->mu);
  if (idx < w->cap && w->slot[idx].flag &&
      w->slot[idx].gen == (uint32_t)(handle >> 32))
    watch_release(w, idx);
  pthread_mutex_unlock(&w->mu);
}

void watch_stop(struct watch *w) {
  uint64_t one = 1;
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  pthread_mutex_unlock(&w->mu);
  if (write(w->wake, &one, sizeof one) < 0) {
  }
  pthread_join(w->thread, NULL);
  close(w->ep);
  close(w->wake);
  pthread_mutex_destroy(&w->mu);
  mem_free(w->slot);
  free(w);
}
