/* acceptor.c - the listen sockets and their accept thread (see
 * acceptor.h).
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
 * ACCEPTOR_WRITE_OFF_MS for room with no start and no close, it writes
 * such ones off (handed = started), and one that starts after all is
 * counted back in.  A lane's count only steers the choice of lane, so a
 * written-off connection stays in it.
 */
#include "server/conn/acceptor.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <linux/filter.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/conn/handshake.h"
#include "server/obs/log.h"
#include "server/conn/net.h"
#include "server/conn/peers.h"
#include "server/conn/unixsock.h"
#include "proto/mem.h"

#define ACCEPTOR_BURST 16           /* accepts per wake of poll */
#define ACCEPTOR_BACKOFF_MS 100     /* after EMFILE and the like */
#define ACCEPTOR_WRITE_OFF_MS 1000
/* A lane holding ACCEPTOR_SLACK_ALL / lanes (at least 1) connections
 * more than the least loaded one is full until every other lane holds
 * as many: 32 with two lanes, 8 with eight.  A client with a thread
 * per CPU and 64 connections keeps each thread's pool on its lane; a
 * client on fewer CPUs than there are lanes still reaches the others. */
#define ACCEPTOR_SLACK_ALL 64
/* Lanes beyond this many get connections only from the balancing. */
#define ACCEPTOR_MAX_LISTENERS 64
/* The lane argument for a connection from the Unix socket. */
#define ACCEPTOR_ANY_LANE UINT_MAX
/* Without sock_diag (a sandbox that forbids netlink sockets, such as
 * the systemd unit's RestrictAddressFamilies), the backlog is taken
 * until it has stayed empty this long: handshakes under way complete
 * within a round trip. */
#define ACCEPTOR_QUIET_MS 100

struct acceptor {
  int fd[ACCEPTOR_MAX_LISTENERS];  /* listen sockets, one per lane up to
                                      the maximum */
  unsigned nfd;             /* how many; 0 once quiesced */
  int ufd;                  /* the Unix listen socket, or -1 */
  struct unixsock unix_file;
  struct sockaddr_storage addr;  /* the TCP address, port included */
  int wake;                 /* eventfd; -1 once quiesced */
  int port;
  acceptor_fn *fn;
  acceptor_refuse_fn *refuse;
  void *arg;
  size_t max_open;
  pthread_t thread;
  int running;              /* the thread was started and not joined */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t handed, started, closed;  /* under mu */
  size_t unserved;                 /* handed, not yet served nor closed;
                                      under mu */
  int stopping;                    /* under mu */
  struct peers *peers;             /* per-address counts, or NULL; under
                                      mu */
  unsigned lanes;
  struct acceptor_lane {
    size_t open;                   /* connections on it */
    int full;                      /* see acceptor_lane */
  } *lane;                         /* [lanes], under mu */
};

/* A non-blocking socket bound to sa (an IPv6 address for IPv6 only), in
 * sa's reuse group when reuse is set; -1 with errno when it cannot. */
static int acceptor_bound(const struct sockaddr *sa, socklen_t len,
                          int reuse) {
  int one = 1, eno;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
      (!reuse ||
       setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0) &&
      (sa->sa_family != AF_INET6 ||
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0) &&
      bind(fd, sa, len) == 0)
    return fd;
  eno = errno;
  close(fd);
  errno = eno;
  return -1;
}

/* Whether some socket is already bound to sa's port (another server, or
 * another attnd): a plain bind, without SO_REUSEPORT, fails then.  This
 * keeps attnd from silently joining the reuse group of another process
 * of the same user. */
static int acceptor_port_taken(const struct sockaddr *sa, socklen_t len) {
  int fd = acceptor_bound(sa, len, 0);
  if (fd < 0)
    return errno == EADDRINUSE;
  close(fd);
  return 0;
}

/* A listening socket on sa, in sa's reuse group. */
static int acceptor_bind(const struct sockaddr *sa, socklen_t len) {
  int eno, fd = acceptor_bound(sa, len, 1);
  if (fd < 0 || listen(fd, SOMAXCONN) == 0)
    return fd;
  eno = errno;
  close(fd);
  errno = eno;
  return -1;
}

static int acceptor_bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return -1;
  return net_port((struct sockaddr *)&ss);
}

/* The kernel puts a new connection in the listen socket (of the group,
 * in the order they listened) that this classic BPF program returns: the
 * number of the CPU its handshake arrived on, modulo the sockets.  For a
 * client on this machine that is the CPU its thread connected from.
 * Without the program (an old kernel; logged) the kernel picks by a hash
 * of the addresses, and only the balancing groups connections. */
static void acceptor_steer(struct acceptor *a) {
  struct sock_filter code[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_AD_OFF + SKF_AD_CPU)},
      {BPF_ALU | BPF_MOD | BPF_K, 0, 0, a->nfd},
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  if (a->nfd > 1 &&
      net_attach_filter(a->fd[0], SO_ATTACH_REUSEPORT_CBPF, code,
                        sizeof code / sizeof code[0]) != 0)
    log_error("accept: cannot steer connections by CPU (%s); lanes are "
              "balanced only", strerror(errno));
}

/* Binds the group: the first socket takes the port (the kernel's choice
 * for port 0), the others join it. */
static int acceptor_bind_all(struct acceptor *a, const struct sockaddr *sa,
                             socklen_t len) {
  struct sockaddr_storage ss;
  memcpy(&ss, sa, len);
  if (net_port(sa) != 0 && acceptor_port_taken(sa, len))
    return -1;
  while (a->nfd < a->lanes && a->nfd < ACCEPTOR_MAX_LISTENERS) {
    int fd = acceptor_bind((struct sockaddr *)&ss, len);
    if (fd < 0)
      return -1;
    a->fd[a->nfd++] = fd;
    if (a->nfd == 1) {
      if ((a->port = acceptor_bound_port(fd)) < 0)
        return -1;
      net_set_port(&ss, a->port);
    }
  }
  a->addr = ss;
  acceptor_steer(a);
  return 0;
}

/* Closes the listen sockets and removes the Unix socket's file. */
static void acceptor_close_all(struct acceptor *a) {
  for (unsigned i = 0; i < a->nfd; i++)
    close(a->fd[i]);
  a->nfd = 0;
  if (a->ufd >= 0)
    close(a->ufd);
  a->ufd = -1;
  unixsock_unlink(&a->unix_file);
}

struct acceptor *acceptor_listen(const struct sockaddr *sa, socklen_t len,
                                 unsigned lanes) {
  struct acceptor *a = mem_calloc(1, sizeof *a);
  pthread_condattr_t ca;
  int eno;
  if (!a)
    return NULL;
  a->wake = -1;
  a->ufd = -1;
  a->lanes = lanes ? lanes : 1;
  if (!(a->lane = mem_calloc(a->lanes, sizeof *a->lane)) ||
      acceptor_bind_all(a, sa, len) != 0 ||
      (a->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
    goto err;
  pthread_mutex_init(&a->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  return a;
err:
  eno = errno ? errno : ENOMEM;
  acceptor_close_all(a);
  mem_free(a->lane);
  mem_free(a);
  errno = eno;
  return NULL;
}

int acceptor_port(const struct acceptor *a) { return a->port; }

int acceptor_listen_unix(struct acceptor *a, const char *path,
                         unsigned mode) {
  if (a->ufd >= 0 || a->wake < 0) {
    errno = EINVAL;
    return -1;
  }
  a->ufd = unixsock_listen(&a->unix_file, path, mode);
  return a->ufd >= 0 ? 0 : -1;
}

/* Writes off the connections handed over that never started (see the
 * DESIGN note).  Under a->mu. */
static void acceptor_write_off(struct acceptor *a) {
  size_t lost = a->handed - a->started;
  a->unserved -= lost < a->unserved ? lost : a->unserved;
  a->handed = a->started;
}

/* Waits while max_open connections are open; 0 once stopping. */
static int acceptor_wait_room(struct acceptor *a) {
  int ok;
  pthread_mutex_lock(&a->mu);
  while (!a->stopping && a->handed - a->closed >= a->max_open) {
    size_t started = a->started, closed = a->closed;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ACCEPTOR_WRITE_OFF_MS / 1000;
    if (pthread_cond_timedwait(&a->cv, &a->mu, &t) == ETIMEDOUT &&
        started == a->started && closed == a->closed)
      acceptor_write_off(a);
  }
  ok = !a->stopping;
  pthread_mutex_unlock(&a->mu);
  return ok;
}

/* The least loaded lane.  Under a->mu. */
static unsigned acceptor_least(const struct acceptor *a) {
  unsigned least = 0;
  for (unsigned l = 1; l < a->lanes; l++)
    if (a->lane[l].open < a->lane[least].open)
      least = l;
  return least;
}

/* The lane for a connection from listen socket i: lane i, unless it is
 * full, when the least loaded lane gets it.  Lane i fills when it holds
 * the slack more than the least loaded one, and stays full until that
 * one has caught up: a crowd from one CPU is dealt out in blocks of the
 * slack.  wrk, for one, often opens both of its threads' connections
 * from one CPU, one thread's 32 after the other's, and each block is
 * then one thread's (when the lanes took turns past the slack, the
 * second thread's pool was split over both).  From the Unix socket
 * (ACCEPTOR_ANY_LANE), the least loaded lane.  Under a->mu. */
static unsigned acceptor_lane(struct acceptor *a, unsigned i) {
  size_t slack = a->lanes < ACCEPTOR_SLACK_ALL ? ACCEPTOR_SLACK_ALL / a->lanes
                                               : 1;
  unsigned least = acceptor_least(a);
  if (i == ACCEPTOR_ANY_LANE)
    return least;
  if (a->lane[i].full && a->lane[i].open <= a->lane[least].open)
    a->lane[i].full = 0;
  else if (a->lane[i].open >= a->lane[least].open + slack)
    a->lane[i].full = 1;
  return a->lane[i].full ? least : i;
}

/* Gives fd to the refuse callback for reason why, or closes it. */
static void acceptor_refuse(struct acceptor *a, int fd, int why) {
  if (a->refuse)
    a->refuse(a->arg, fd, why);
  else
    close(fd);
}

/* Hands fd, from listen socket i (or ACCEPTOR_ANY_LANE), over, counting
 * it first: it may start and close before the callback returns.  A
 * connection whose address holds the per-address limit is refused. */
static void acceptor_hand(struct acceptor *a, unsigned i, int fd,
                          const struct sockaddr_storage *ss, socklen_t len) {
  const struct sockaddr *sa = (const struct sockaddr *)ss;
  unsigned lane;
  pthread_mutex_lock(&a->mu);
  if (a->peers && peers_take(a->peers, sa) != 0) {
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
  if (a->peers)
    peers_release(a->peers, sa);
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
static int acceptor_transient(int e) {
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
 * lane home (ACCEPTOR_ANY_LANE: the Unix socket), up to ACCEPTOR_BURST;
 * 0 when the thread must end. */
static int acceptor_take(struct acceptor *a, int lfd, unsigned home) {
  for (int i = 0; i < ACCEPTOR_BURST; i++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd;
    if (i > 0 && !acceptor_wait_room(a))
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

int acceptor_limit_per_address(struct acceptor *a, size_t n) {
  if (n && !a->peers && !(a->peers = peers_new(n)))
    return -1;
  return 0;
}

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
  if (a->started > a->handed) /* written off, and started after all */
    a->handed = a->started;
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
  if (a->peers && peer)
    peers_release(a->peers, peer);
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

size_t acceptor_lane_open(struct acceptor *a, unsigned lane) {
  size_t n = 0;
  pthread_mutex_lock(&a->mu);
  if (lane < a->lanes)
    n = a->lane[lane].open;
  pthread_mutex_unlock(&a->mu);
  return n;
}

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
