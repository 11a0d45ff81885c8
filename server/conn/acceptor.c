/* acceptor.c - the accept thread: it waits for room, accepts, picks a
 * lane (acceptor_lanes.c) and hands each connection over, and keeps the
 * counts of connections handed over, started, served and closed (see
 * acceptor.h).  The acceptor's other jobs, each a file sharing
 * acceptor_impl.h: the listen sockets (acceptor_sockets.c), the lanes
 * (acceptor_lanes.c), the per-address limit (acceptor_peers.c) and the
 * drain (acceptor_drain.c).
 *
 * DESIGN
 *
 * Threads: the accept thread alone calls accept4 and the callbacks while
 * it runs.  The controlling thread creates the sockets, starts the
 * thread, and in acceptor_quiesce wakes it (an eventfd it polls beside
 * the listen sockets, and a.cv while it waits for room) and joins it;
 * then it takes the backlogs itself, calling the callbacks, closes the
 * sockets and waits on a.cv for the first requests.  acceptor_started,
 * acceptor_served and acceptor_closed come from the threads that serve
 * the connections.
 *
 * Shared state, under a.mu (the only lock; the callbacks are never
 * called with it held): the counts of connections handed over, started,
 * closed and not yet served, each lane's count of open ones and whether
 * it is full, the connections each client address holds (a.peers), and
 * the stopping flag.
 * closed <= started <= handed always, so handed - closed is the number
 * open.  A connection handed over that
 * never starts (the server dropped it, out of memory, without a word)
 * would hold its place forever; when the thread has waited a whole
 * write_off_ms for room with no start and no close, it writes such ones
 * off (out of handed), at most max_open of them not started since,
 * so the server (whose lanes make room for twice max_open, handoff.h)
 * never holds more than that even if they all start after all; one that
 * does is counted back in, as open and not yet served.  A lane's count
 * only steers the choice of lane, so a written-off connection stays in
 * it.
 */
#include "server/conn/acceptor_impl.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/obs/log.h"

/* Writes off the connections handed over that never started (see the
 * DESIGN note).  Under a->mu. */
static void acceptor_write_off(struct acceptor *a) {
  size_t lost = a->handed - a->started, cap = a->max_open - a->written_off;
  if (lost > cap)
    lost = cap;
  a->unserved -= lost < a->unserved ? lost : a->unserved;
  a->handed -= lost;
  a->written_off += lost;
}

/* Waits while max_open connections are open; 0 once stopping. */
static int acceptor_wait_room(struct acceptor *a) {
  int ok;
  pthread_mutex_lock(&a->mu);
  while (!a->stopping && a->handed - a->closed >= a->max_open) {
    size_t started = a->started, closed = a->closed;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += a->write_off_ms / 1000;
    t.tv_nsec += (long)(a->write_off_ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
      t.tv_sec++;
      t.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&a->cv, &a->mu, &t) == ETIMEDOUT &&
        started == a->started && closed == a->closed)
      acceptor_write_off(a);
  }
  ok = !a->stopping;
  pthread_mutex_unlock(&a->mu);
  return ok;
}

/* Gives fd to the refuse callback for reason why, or closes it. */
void acceptor_refuse(struct acceptor *a, int fd, int why) {
  if (a->refuse)
    a->refuse(a->arg, fd, why);
  else
    close(fd);
}

/* Hands fd, from listen socket i (or ACCEPTOR_ANY_LANE), over, counting
 * it first: it may start and close before the callback returns.  A
 * connection whose address holds the per-address limit is refused. */
void acceptor_hand(struct acceptor *a, unsigned i, int fd,
                   const struct sockaddr_storage *ss, socklen_t len) {
  const struct sockaddr *sa = (const struct sockaddr *)ss;
  unsigned lane;
  pthread_mutex_lock(&a->mu);
  if (!acceptor_peer_admit(a, sa)) {
    pthread_mutex_unlock(&a->mu);
    acceptor_refuse(a, fd, ACCEPTOR_PER_ADDRESS);
    return;
  }
  a->handed++;
  a->unserved++;
  lane = acceptor_lane(a, i);
  a->lane[lane].open++;
  pthread_mutex_unlock(&a->mu);
  if (a->fn(a->arg, fd, sa, len, lane) == 0)
    return;
  pthread_mutex_lock(&a->mu);
  acceptor_peer_release(a, sa);
  if (a->handed > a->started)
    a->handed--;
  if (a->unserved > 0)
    a->unserved--;
  if (a->lane[lane].open > 0)
    a->lane[lane].open--;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* Errors accept4 reports for one connection that failed (or a network
 * error pending on it), after which the next one may be fine. */
int acceptor_transient(int e) {
  switch (e) {
  case EINTR: case ECONNABORTED: case EPROTO: case ENETDOWN:
  case ENOPROTOOPT: case EHOSTDOWN: case ENONET: case EHOSTUNREACH:
  case EOPNOTSUPP: case ENETUNREACH: case EPERM: case ETIMEDOUT:
    return 1;
  default:
    return 0;
  }
}

/* Sleeps ms unless woken; 0 when woken (stopping). */
static int acceptor_pause(struct acceptor *a, int ms) {
  struct pollfd p = {a->wake, POLLIN, 0};
  return poll(&p, 1, ms) == 0;
}

/* Accepts what is waiting on listen socket fd, whose connections go to
 * lane home (ACCEPTOR_ANY_LANE: the Unix socket), up to ACCEPTOR_BURST,
 * each once there is room: the room acceptor_main waited for before its
 * poll may have gone to another listener's burst; 0 when the thread must
 * end. */
static int acceptor_take(struct acceptor *a, int lfd, unsigned home) {
  for (int i = 0; i < ACCEPTOR_BURST; i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd;
    if (!acceptor_wait_room(a))
      return 0;
    fd = accept4(lfd, (struct sockaddr *)&ss, &len,
                 SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      acceptor_hand(a, home, fd, &ss, len);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 1;
    if (acceptor_transient(errno))
      continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
      /* Out of descriptors or memory: the clients wait in the backlog
       * until something closes. */
      log_error("accept: %s; retrying in %d ms", strerror(errno),
                ACCEPTOR_BACKOFF_MS);
      return acceptor_pause(a, ACCEPTOR_BACKOFF_MS);
    }
    log_error("accept: %s; no longer accepting connections",
              strerror(errno));
    return 0;
  }
  return 1;
}

/* Polls the listen sockets (TCP, then Unix) and, last, the wake-up. */
static void *acceptor_main(void *arg) {
  struct acceptor *a = arg;
  struct pollfd p[ACCEPTOR_MAX_LISTENERS + 2];
  unsigned home[ACCEPTOR_MAX_LISTENERS + 1];
  unsigned n = 0;
  for (unsigned i = 0; i < a->nfd; i++) {
    home[n] = i;
    p[n++] = (struct pollfd){a->fd[i], POLLIN, 0};
  }
  if (a->ufd >= 0) {
    home[n] = ACCEPTOR_ANY_LANE;
    p[n++] = (struct pollfd){a->ufd, POLLIN, 0};
  }
  p[n] = (struct pollfd){a->wake, POLLIN, 0};
  while (acceptor_wait_room(a)) {
    if (poll(p, n + 1, -1) < 0) {
      if (errno == EINTR)
        continue;
      log_error("accept: poll: %s; no longer accepting connections",
                strerror(errno));
      return NULL;
    }
    if (p[n].revents)
      return NULL;
    for (unsigned i = 0; i < n; i++)
      if (p[i].revents && !acceptor_take(a, p[i].fd, home[i]))
        return NULL;
  }
  return NULL;
}

#ifdef ATTND_TEST_HOOKS
void acceptor_write_off_after(struct acceptor *a, unsigned ms) {
  a->write_off_ms = ms;
}
#endif

int acceptor_run(struct acceptor *a, size_t max_open, acceptor_fn *fn,
                 acceptor_refuse_fn *refuse, void *arg) {
  a->fn = fn;
  a->refuse = refuse;
  a->arg = arg;
  a->max_open = max_open ? max_open : 1;
  if (pthread_create(&a->thread, NULL, acceptor_main, a) != 0)
    return -1;
  a->running = 1;
  return 0;
}

void acceptor_started(struct acceptor *a) {
  pthread_mutex_lock(&a->mu);
  a->started++;
  if (a->started > a->handed) { /* written off, and started after all */
    a->handed = a->started;
    a->unserved++;
    if (a->written_off > 0)
      a->written_off--;
  }
  pthread_mutex_unlock(&a->mu);
}

void acceptor_served(struct acceptor *a) {
  pthread_mutex_lock(&a->mu);
  if (a->unserved > 0)
    a->unserved--;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

void acceptor_closed(struct acceptor *a, unsigned lane, int served,
                     const struct sockaddr *peer) {
  pthread_mutex_lock(&a->mu);
  acceptor_peer_release(a, peer);
  if (a->closed < a->started)
    a->closed++;
  if (!served && a->unserved > 0)
    a->unserved--;
  if (lane < a->lanes && a->lane[lane].open > 0)
    a->lane[lane].open--;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

size_t acceptor_open(struct acceptor *a) {
  size_t n;
  pthread_mutex_lock(&a->mu);
  n = a->handed - a->closed;
  pthread_mutex_unlock(&a->mu);
  return n;
}

size_t acceptor_unserved(struct acceptor *a) {
  size_t n;
  pthread_mutex_lock(&a->mu);
  n = a->unserved;
  pthread_mutex_unlock(&a->mu);
  return n;
}
