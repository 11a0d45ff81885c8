/* acceptor_drain.c - the acceptor's part of the drain (acceptor_quiesce):
 * new connections held off while those in the backlogs are taken and
 * handed over (or answered 503 without room), the listen sockets closed,
 * then a wait until every connection handed over is served.
 *
 * DESIGN: runs on the controlling thread.  It wakes the accept thread
 * (a->stopping under a->mu, the eventfd) and joins it before it touches
 * the listen sockets, so from then on it is their only user; the counts
 * it reads and waits on are under a->mu, where the lane threads'
 * acceptor_started, _served and _closed change them.
 */
#include "server/conn/acceptor_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/conn/handshake.h"
#include "server/conn/net.h"
#include "server/obs/log.h"
#include "proto/mem.h"

/* Stops new connections from arriving while what is already in the
 * backlogs stays (see acceptor.h): a filter that drops TCP segments with
 * SYN set and ACK clear, so handshakes under way still complete;
 * and on the Unix socket shutdown(SHUT_RD), after which connect() is
 * refused while queued connections can still be accepted.  Some kernels
 * refuse a socket filter on a TCP socket to a process without
 * CAP_NET_ADMIN (EPERM); the log line says so. */
static void acceptor_stop_new(struct acceptor *a) {
  int warned = 0;
  for (unsigned i = 0; i < a->nfd; i++) {
    int e;
    if (net_drop_tcp_flags(a->fd[i], NET_TCP_SYN | NET_TCP_ACK,
                           NET_TCP_SYN) == 0 || warned++)
      continue;
    e = errno;
    log_warn("drain: cannot hold new connections off (%s%s); clients "
             "connecting while the listen sockets close may be reset",
             strerror(e),
             e == EPERM ? ": this kernel attaches a socket filter to a TCP "
                          "socket only with CAP_NET_ADMIN"
                        : "");
  }
  if (a->ufd >= 0 && shutdown(a->ufd, SHUT_RD) != 0)
    log_error("drain: cannot refuse new connections on the unix socket "
              "(%s)", strerror(errno));
}

/* Accepts everything waiting on listen socket lfd (lane home) and hands
 * it over, or to the refuse callback once max_open are open.  Adds to
 * *took and *refused.  0, or -1 after logging an error that ends the
 * sweep (out of descriptors, say). */
static int acceptor_take_backlog(struct acceptor *a, int lfd, unsigned home,
                                 size_t *took, size_t *refused) {
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int room, fd = accept4(lfd, (struct sockaddr *)&ss, &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (acceptor_transient(errno))
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
      log_error("drain: accept: %s; the connections still waiting will "
                "be reset", strerror(errno));
      return -1;
    }
    pthread_mutex_lock(&a->mu);
    room = a->handed - a->closed < a->max_open;
    pthread_mutex_unlock(&a->mu);
    ++*took;
    if (room || !a->refuse) {
      acceptor_hand(a, home, fd, &ss, len);
    } else {
      ++*refused;
      acceptor_refuse(a, fd, ACCEPTOR_NO_ROOM);
    }
  }
}

/* Takes the backlogs of every listen socket: first with the count of
 * handshakes under way, and again until that count was 0 before a pass
 * (none can start after acceptor_stop_new, so that pass found the last
 * one), or, when the kernel cannot count them, until ACCEPTOR_QUIET_MS
 * passed without a connection; at most ACCEPTOR_SWEEP_MS. */
static void acceptor_sweep(struct acceptor *a) {
  uint64_t now = clock_now_ns();
  uint64_t end = now + (uint64_t)ACCEPTOR_SWEEP_MS * 1000000u;
  uint64_t quiet = now;
  size_t took = 0, refused = 0;
  for (;;) {
    size_t before = took;
    int failed = 0;
    int pending = a->nfd ? handshake_pending((struct sockaddr *)&a->addr) : 0;
    for (unsigned i = 0; i < a->nfd; i++)
      failed |= acceptor_take_backlog(a, a->fd[i], i, &took, &refused);
    if (a->ufd >= 0)
      failed |= acceptor_take_backlog(a, a->ufd, ACCEPTOR_ANY_LANE, &took,
                                      &refused);
    now = clock_now_ns();
    if (took > before)
      quiet = now;
    if (failed || pending == 0 ||
        (pending < 0 && now - quiet >= ACCEPTOR_QUIET_MS * 1000000u) ||
        now >= end)
      break;
    poll(NULL, 0, 1);
  }
  if (took)
    log_info("drain: took %zu connections waiting in the backlog (%zu "
             "answered 503: no room)", took, refused);
}

/* Waits until every connection handed over has been served or closed, at
 * most ms. */
static void acceptor_wait_served(struct acceptor *a, int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&a->mu);
  while (a->unserved > 0 &&
         pthread_cond_timedwait(&a->cv, &a->mu, &t) != ETIMEDOUT) {
  }
  pthread_mutex_unlock(&a->mu);
}

void acceptor_quiesce(struct acceptor *a) {
  uint64_t one = 1;
  if (a->wake < 0)
    return;
  pthread_mutex_lock(&a->mu);
  a->stopping = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  if (write(a->wake, &one, sizeof one) < 0)
    log_error("accept: cannot wake the accept thread: %s", strerror(errno));
  if (a->running) {
    pthread_join(a->thread, NULL);
    acceptor_stop_new(a);
    acceptor_sweep(a);
  }
  a->running = 0;
  acceptor_close_all(a);
  close(a->wake);
  a->wake = -1;
  acceptor_wait_served(a, ACCEPTOR_SERVED_MS);
}

void acceptor_stop(struct acceptor *a) {
  if (!a)
    return;
  acceptor_quiesce(a);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  peers_free(a->peers);
  mem_free(a->lane);
  mem_free(a);
}
