/* linger.c - lingering close (see linger.h).
 *
 * DESIGN
 *
 * Threads: one linger thread owns an epoll set and every socket in it;
 * it alone reads, closes and frees them.  linger_add runs on the HTTP
 * threads (from libmicrohttpd's completion callback): it half-closes the
 * socket, allocates its entry, links it and registers it with epoll
 * (epoll_ctl is safe from any thread), all under l->mu, so the thread
 * never sees an entry that is not yet linked.  linger_stop wakes the
 * thread through an eventfd in the same set and joins it.
 *
 * Shared state: the list of entries and its count, under l->mu (the
 * only lock; nothing else is taken while it is held).  An entry's
 * counters and times are the linger thread's alone once it is linked.
 *
 * The thread wakes for data, and at least every LINGER_TICK_MS to close
 * the sockets whose time is up.  Reading at most LINGER_BURST bytes per
 * socket per wake keeps one fast sender from holding up the others.
 */
#include "server/conn/linger.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/obs/log.h"
#include "proto/mem.h"

#define LINGER_TICK_MS 250
#define LINGER_BURST (1u << 20)
#define LINGER_EVENTS 64

struct linger_entry {
  int fd;
  uint64_t start_ns, last_ns;   /* handed over; last byte read */
  unsigned long long read;
  struct linger_entry *prev, *next;
};

struct linger_set {
  int ep, wake;                 /* epoll set; eventfd for linger_stop */
  size_t max_socks;
  unsigned long long max_bytes;
  pthread_t thread;
  _Atomic int stop;
  pthread_mutex_t mu;           /* guards head and count */
  struct linger_entry *head;
  size_t count;
};

/* Unlinks and closes e; l->mu held. */
static void linger_drop_locked(struct linger_set *l, struct linger_entry *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    l->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  l->count--;
  (void)epoll_ctl(l->ep, EPOLL_CTL_DEL, e->fd, NULL);
  close(e->fd);
  mem_free(e);
}

static void linger_drop(struct linger_set *l, struct linger_entry *e) {
  pthread_mutex_lock(&l->mu);
  linger_drop_locked(l, e);
  pthread_mutex_unlock(&l->mu);
}

/* Reads and drops what e's client sent.  1 when e is done: the client
 * closed (or the socket failed), or it sent more than max_bytes. */
static int linger_drain(struct linger_set *l, struct linger_entry *e,
                        uint64_t now, char *buf, size_t cap) {
  size_t burst = 0;
  while (burst < LINGER_BURST) {
    /* never blocks, whatever the descriptor's flags */
    ssize_t n = recv(e->fd, buf, cap, MSG_DONTWAIT);
    if (n == 0)
      return 1;
    if (n < 0)
      return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    burst += (size_t)n;
    e->read += (unsigned long long)n;
    e->last_ns = now;
    if (e->read > l->max_bytes)
      return 1;
  }
  return 0;
}

/* Closes the sockets idle for LINGER_IDLE_MS or open for LINGER_TOTAL_MS.
 * The clock is read under the lock: an entry linked since the thread's
 * last reading has times after it, which unsigned differences from that
 * older reading would take for ages. */
static void linger_sweep(struct linger_set *l) {
  const uint64_t idle = (uint64_t)LINGER_IDLE_MS * 1000000u;
  const uint64_t total = (uint64_t)LINGER_TOTAL_MS * 1000000u;
  pthread_mutex_lock(&l->mu);
  uint64_t now = clock_now_ns();
  for (struct linger_entry *e = l->head, *next; e; e = next) {
    next = e->next;
    if (now - e->last_ns >= idle || now - e->start_ns >= total)
      linger_drop_locked(l, e);
  }
  pthread_mutex_unlock(&l->mu);
}

static void *linger_main(void *arg) {
  struct linger_set *l = arg;
  struct epoll_event ev[LINGER_EVENTS];
  char buf[64 * 1024];
  while (!atomic_load(&l->stop)) {
    int n = epoll_wait(l->ep, ev, LINGER_EVENTS, LINGER_TICK_MS);
    uint64_t now = clock_now_ns();
    for (int i = 0; i < n; i++) {
      struct linger_entry *e = ev[i].data.ptr;
      if (e && linger_drain(l, e, now, buf, sizeof buf))
        linger_drop(l, e);
    }
    linger_sweep(l);
  }
  return NULL;
}

struct linger_set *linger_start(size_t max_socks,
                                unsigned long long max_bytes) {
  struct linger_set *l = mem_calloc(1, sizeof *l);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (!l) {
    log_error("linger: out of memory");
    return NULL;
  }
  l->max_socks = max_socks;
  l->max_bytes = max_bytes;
  l->ep = epoll_create1(EPOLL_CLOEXEC);
  l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->ep < 0 || l->wake < 0 ||
      epoll_ctl(l->ep, EPOLL_CTL_ADD, l->wake, &ev) != 0 ||
      pthread_mutex_init(&l->mu, NULL) != 0)
    goto err;
  if (pthread_create(&l->thread, NULL, linger_main, l) != 0) {
    pthread_mutex_destroy(&l->mu);
    goto err;
  }
  return l;
err:
  log_error("linger: cannot start: %s", strerror(errno));
  if (l->ep >= 0)
    close(l->ep);
  if (l->wake >= 0)
    close(l->wake);
  mem_free(l);
  return NULL;
}

void linger_add(struct linger_set *l, int fd) {
  struct linger_entry *e;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
  /* The FIN goes out after the answer already in the send buffer, so the
   * client reads the answer and then end of stream. */
  (void)shutdown(fd, SHUT_WR);
  if (!l || !(e = mem_calloc(1, sizeof *e))) {
    close(fd);
    return;
  }
  e->fd = fd;
  e->start_ns = e->last_ns = clock_now_ns();
  ev.data.ptr = e;
  pthread_mutex_lock(&l->mu);
  if (l->count >= l->max_socks ||
      epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    pthread_mutex_unlock(&l->mu);
    close(fd);
    mem_free(e);
    return;
  }
  e->next = l->head;
  if (l->head)
    l->head->prev = e;
  l->head = e;
  l->count++;
  pthread_mutex_unlock(&l->mu);
}

size_t linger_count(struct linger_set *l) {
  size_t n;
  pthread_mutex_lock(&l->mu);
  n = l->count;
  pthread_mutex_unlock(&l->mu);
  return n;
}

void linger_stop(struct linger_set *l) {
  uint64_t one = 1;
  if (!l)
    return;
  atomic_store(&l->stop, 1);
  if (write(l->wake, &one, sizeof one) < 0) {
    /* the tick ends the wait anyway */
  }
  pthread_join(l->thread, NULL);
  pthread_mutex_lock(&l->mu);
  while (l->head)
    linger_drop_locked(l, l->head);
  pthread_mutex_unlock(&l->mu);
  pthread_mutex_destroy(&l->mu);
  close(l->ep);
  close(l->wake);
  mem_free(l);
}
