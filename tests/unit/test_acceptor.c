/* test_acceptor.c - the listen sockets, lanes and limits of acceptor.h,
 * and its drain, on real loopback and Unix socket connections.
 *
 * The hand-off callback here plays the HTTP layer: it keeps each
 * connection with the lane it was given (and the thread that handed it
 * over) and reports it started, and unless told otherwise served, at
 * once; the tests close connections through acceptor_closed as the HTTP
 * layer would when a client leaves.  The refuse callback keeps what it
 * is given.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "server/conn/acceptor.h"
#include "server/conn/handshake.h"
#include "server/conn/net.h"
#include "support_filter.h"
#include "support_skip.h"

#define MAX_HANDED 128

struct handed {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct acceptor *a;
  int n;
  int unserved;             /* 1: take() does not report the first request */
  int unstarted;            /* 1: nor the start (a busy or lost lane) */
  int fd[MAX_HANDED];
  unsigned lane[MAX_HANDED];
  pthread_t by[MAX_HANDED]; /* the thread that handed it over */
  struct sockaddr_storage peer[MAX_HANDED];  /* what take() was given */
  int refused;
  int rfd[MAX_HANDED];      /* given to the refuse callback */
  int rwhy[MAX_HANDED];     /* and why */
  size_t per_address;       /* acceptor_limit_per_address before the run */
  unsigned write_off_ms;    /* acceptor_write_off_after before it, if not 0 */
};

static int take(void *arg, int fd, const struct sockaddr *sa, socklen_t len,
                unsigned lane) {
  struct handed *h = arg;
  /* Started before the test can see it: a test that closes what it was
   * handed would otherwise race the start, and a close before its start
   * is not counted (closed <= started). */
  if (!h->unstarted)
    acceptor_started(h->a);
  if (!h->unserved && !h->unstarted)
    acceptor_served(h->a);
  pthread_mutex_lock(&h->mu);
  ck_assert_int_lt(h->n, MAX_HANDED);
  h->fd[h->n] = fd;
  memset(&h->peer[h->n], 0, sizeof h->peer[h->n]);
  memcpy(&h->peer[h->n], sa, len < sizeof h->peer[0] ? len : sizeof h->peer[0]);
  h->by[h->n] = pthread_self();
  h->lane[h->n++] = lane;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return 0;
}

static void refuse(void *arg, int fd, int why) {
  struct handed *h = arg;
  pthread_mutex_lock(&h->mu);
  ck_assert_int_lt(h->refused, MAX_HANDED);
  h->rwhy[h->refused] = why;
  h->rfd[h->refused++] = fd;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Waits up to ms for n connections handed over; the count seen. */
static int wait_handed(struct handed *h, int n, int ms) {
  struct timespec t;
  int got;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&h->mu);
  while (h->n < n &&
         pthread_cond_timedwait(&h->cv, &h->mu, &t) != ETIMEDOUT)
    ;
  got = h->n;
  pthread_mutex_unlock(&h->mu);
  return got;
}

/* The acceptor on host:port, with a Unix socket at upath unless NULL;
 * with_refuse: the refuse callback, else none. */
static struct acceptor *start_with(struct handed *h, const char *host,
                                   int port, const char *upath,
                                   unsigned lanes, size_t max_open,
                                   int with_refuse) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr(host, port, &ss, NULL);
  size_t per_address = h->per_address;
  unsigned write_off_ms = h->write_off_ms;
  int unstarted = h->unstarted;
  ck_assert_uint_gt(len, 0);
  memset(h, 0, sizeof *h);
  h->unstarted = unstarted;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->a = acceptor_listen((struct sockaddr *)&ss, len, lanes);
  ck_assert_ptr_nonnull(h->a);
  if (upath)
    ck_assert_int_eq(acceptor_listen_unix(h->a, upath, 0600), 0);
  ck_assert_int_eq(acceptor_limit_per_address(h->a, per_address), 0);
  if (write_off_ms)
    acceptor_write_off_after(h->a, write_off_ms);
  ck_assert_int_eq(acceptor_run(h->a, max_open, take,
                                with_refuse ? refuse : NULL, h),
                   0);
  return h->a;
}

static struct acceptor *start(struct handed *h, const char *host, int port,
                              unsigned lanes, size_t max_open) {
  return start_with(h, host, port, NULL, lanes, max_open, 1);
}

static void finish(struct handed *h) {
  acceptor_stop(h->a);
  for (int i = 0; i < h->n; i++)
    close(h->fd[i]);
  for (int i = 0; i < h->refused; i++)
    close(h->rfd[i]);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
}

/* A blocking client of 127.0.0.1:port from address src; -1 with errno
 * when refused. */
static int client_from(int port, const char *src) {
  struct sockaddr_storage ss, me;
  socklen_t len = net_sockaddr("127.0.0.1", port, &ss, NULL);
  int c = socket(AF_INET, SOCK_STREAM, 0), e;
  ck_assert_int_ge(c, 0);
  ck_assert_uint_gt(net_sockaddr(src, 0, &me, NULL), 0);
  ck_assert_int_eq(bind(c, (struct sockaddr *)&me, sizeof(struct sockaddr_in)),
                   0);
  if (connect(c, (struct sockaddr *)&ss, len) == 0)
    return c;
  e = errno;
  close(c);
  errno = e;
  return -1;
}

/* A blocking client of 127.0.0.1:port; -1 with errno when refused. */
static int client(int port) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr("127.0.0.1", port, &ss, NULL);
  int c = socket(AF_INET, SOCK_STREAM, 0), e;
  ck_assert_int_ge(c, 0);
  if (connect(c, (struct sockaddr *)&ss, len) == 0)
    return c;
  e = errno;
  close(c);
  errno = e;
  return -1;
}

struct from_cpu {
  int cpu, port, n;
  int fd[64];
};

/* Connects n clients from a thread that runs on cpu alone. */
static void *connect_from(void *arg) {
  struct from_cpu *f = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(f->cpu, &set);
  ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
  for (int i = 0; i < f->n; i++)
    f->fd[i] = client(f->port);
  return NULL;
}

static void connect_from_cpu(int cpu, int port, int n, struct from_cpu *f) {
  pthread_t t;
  f->cpu = cpu;
  f->port = port;
  f->n = n;
  ck_assert_int_eq(pthread_create(&t, NULL, connect_from, f), 0);
  pthread_join(t, NULL);
  for (int i = 0; i < n; i++)
    ck_assert_int_ge(f->fd[i], 0);
}

static void close_all(struct from_cpu *f) {
  for (int i = 0; i < f->n; i++)
    close(f->fd[i]);
}

/* The first two CPUs this process may use; 0 when it has only one. */
static int two_cpus(int cpu[2]) {
  cpu_set_t set;
  int n = 0;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &set))
      cpu[n++] = c;
  return n == 2;
}

START_TEST(each_connection_goes_to_the_lane_of_the_cpu_it_came_from) {
  struct handed h = {0};
  struct from_cpu f[2];
  int cpu[2];
  if (!two_cpus(cpu) || cpu[0] % 2 == cpu[1] % 2)
    return; /* one CPU, or two of one parity: nothing to tell apart */
  start(&h, "127.0.0.1", 0, 2, 100);
  for (int round = 0; round < 3; round++) {
    int before = h.n;
    for (int k = 0; k < 2; k++) {
      connect_from_cpu(cpu[k], acceptor_port(h.a), 4, &f[k]);
      ck_assert_int_eq(wait_handed(&h, before + 4 * (k + 1), 5000),
                       before + 4 * (k + 1));
      for (int i = before + 4 * k; i < before + 4 * (k + 1); i++)
        ck_assert_uint_eq(h.lane[i], (unsigned)cpu[k] % 2);
    }
    for (int k = 0; k < 2; k++)
      close_all(&f[k]);
  }
  ck_assert_uint_eq(acceptor_lane_open(h.a, 0), 12);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 1), 12);
  finish(&h);
}
END_TEST

START_TEST(a_crowd_from_one_cpu_is_dealt_out_in_blocks_of_the_slack) {
  struct handed h = {0};
  struct from_cpu f[2];
  int cpu[2], lane_of_cpu;
  if (!two_cpus(cpu))
    cpu[0] = sched_getcpu();
  start(&h, "127.0.0.1", 0, 2, 100);
  lane_of_cpu = cpu[0] % 2;
  /* two lanes leave a slack of 32: the first 32 stay together, the lane
   * is full then, and the next 32 go to the other lane (as two client
   * threads' pools, one after the other, would) */
  connect_from_cpu(cpu[0], acceptor_port(h.a), 64, &f[0]);
  ck_assert_int_eq(wait_handed(&h, 64, 5000), 64);
  for (int i = 0; i < 64; i++)
    ck_assert_uint_eq(h.lane[i], (unsigned)(i < 32 ? lane_of_cpu
                                                   : 1 - lane_of_cpu));
  /* caught up: the lane of the CPU takes connections again */
  connect_from_cpu(cpu[0], acceptor_port(h.a), 8, &f[1]);
  ck_assert_int_eq(wait_handed(&h, 72, 5000), 72);
  for (int i = 64; i < 72; i++)
    ck_assert_uint_eq(h.lane[i], (unsigned)lane_of_cpu);
  ck_assert_uint_eq(acceptor_lane_open(h.a, (unsigned)lane_of_cpu), 40);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 1u - (unsigned)lane_of_cpu), 32);
  close_all(&f[0]);
  close_all(&f[1]);
  finish(&h);
}
END_TEST

START_TEST(with_more_lanes_a_crowd_from_one_cpu_reaches_all_of_them) {
  struct handed h = {0};
  struct from_cpu f;
  int cpu[2], lane_of_cpu, n[4] = {0, 0, 0, 0};
  if (!two_cpus(cpu))
    cpu[0] = sched_getcpu();
  start(&h, "127.0.0.1", 0, 4, 100);
  lane_of_cpu = cpu[0] % 4;
  connect_from_cpu(cpu[0], acceptor_port(h.a), 40, &f);
  ck_assert_int_eq(wait_handed(&h, 40, 5000), 40);
  /* four lanes leave a slack of 64 / 4 = 16: the first 16 stay
   * together, then the other three take turns */
  for (int i = 0; i < 40; i++) {
    if (i < 16)
      ck_assert_uint_eq(h.lane[i], (unsigned)lane_of_cpu);
    else
      ck_assert_uint_ne(h.lane[i], (unsigned)lane_of_cpu);
    n[h.lane[i]]++;
  }
  for (int l = 0; l < 4; l++)
    ck_assert_int_eq(n[l], l == lane_of_cpu ? 16 : 8);
  close_all(&f);
  finish(&h);
}
END_TEST

START_TEST(closed_connections_leave_their_lane) {
  struct handed h = {0};
  struct from_cpu f;
  start(&h, "127.0.0.1", 0, 2, 100);
  connect_from_cpu(sched_getcpu(), acceptor_port(h.a), 6, &f);
  ck_assert_int_eq(wait_handed(&h, 6, 5000), 6);
  ck_assert_uint_eq(acceptor_open(h.a), 6);
  for (int i = 0; i < 6; i++)
    acceptor_closed(h.a, h.lane[i], 1, NULL);
  ck_assert_uint_eq(acceptor_open(h.a), 0);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 0), 0);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 1), 0);
  close_all(&f);
  finish(&h);
}
END_TEST

/* Waits up to ms for n refusals; the count seen. */
static int wait_refused(struct handed *h, int n, int ms) {
  int got = 0;
  for (int waited = 0; waited <= ms; waited += 10) {
    pthread_mutex_lock(&h->mu);
    got = h->refused;
    pthread_mutex_unlock(&h->mu);
    if (got >= n)
      break;
    poll(NULL, 0, 10);
  }
  return got;
}

START_TEST(an_address_over_its_limit_is_refused_until_one_of_its_closes) {
  struct handed h = {.per_address = 2};
  int c[6];
  start(&h, "127.0.0.1", 0, 2, 100);
  for (int i = 0; i < 4; i++)
    c[i] = client_from(acceptor_port(h.a), "127.0.0.1");
  ck_assert_int_eq(wait_handed(&h, 2, 5000), 2);
  ck_assert_int_eq(wait_refused(&h, 2, 5000), 2);
  ck_assert_int_eq(wait_handed(&h, 3, 300), 2);
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(h.rwhy[i], ACCEPTOR_PER_ADDRESS);
  /* another address is not held back by it */
  c[4] = client_from(acceptor_port(h.a), "127.0.0.2");
  ck_assert_int_eq(wait_handed(&h, 3, 5000), 3);
  /* one of the first address's closes: room for one more of it */
  acceptor_closed(h.a, h.lane[0], 1, (struct sockaddr *)&h.peer[0]);
  c[5] = client_from(acceptor_port(h.a), "127.0.0.1");
  ck_assert_int_eq(wait_handed(&h, 4, 5000), 4);
  ck_assert_int_eq(wait_refused(&h, 3, 300), 2);
  for (int i = 0; i < 6; i++)
    close(c[i]);
  finish(&h);
}
END_TEST

START_TEST(at_max_open_clients_wait_until_one_closes) {
  struct handed h = {0};
  int c[5];
  start(&h, "127.0.0.1", 0, 1, 3);
  for (int i = 0; i < 5; i++)
    c[i] = client(acceptor_port(h.a)); /* the kernel completes them all */
  ck_assert_int_eq(wait_handed(&h, 3, 5000), 3);
  ck_assert_int_eq(wait_handed(&h, 4, 300), 3); /* the rest wait */
  acceptor_closed(h.a, h.lane[0], 1, NULL);
  ck_assert_int_eq(wait_handed(&h, 4, 5000), 4);
  ck_assert_int_eq(wait_handed(&h, 5, 300), 4);
  for (int i = 0; i < 5; i++)
    close(c[i]);
  finish(&h);
}
END_TEST

/* Connections handed over that never start are written off after a
 * quiet spell, at most max_open of them not started since: here one, so
 * a lane that takes connections and never starts them lets in one more,
 * not one a spell; both start after all and are counted open and not
 * yet served. */
START_TEST(connections_that_never_start_are_written_off_at_most_max_open) {
  struct handed h = {.unstarted = 1, .write_off_ms = 200};
  int c[3];
  start(&h, "127.0.0.1", 0, 1, 1);
  for (int i = 0; i < 3; i++)
    c[i] = client(acceptor_port(h.a));
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  ck_assert_int_eq(wait_handed(&h, 2, 5000), 2);   /* the first written off */
  ck_assert_int_eq(wait_handed(&h, 3, 1000), 2);   /* and no more */
  acceptor_started(h.a);
  acceptor_served(h.a);
  acceptor_started(h.a);
  ck_assert_uint_eq(acceptor_open(h.a), 2);
  ck_assert_uint_eq(acceptor_unserved(h.a), 1);
  acceptor_closed(h.a, h.lane[0], 1, NULL);
  ck_assert_int_eq(wait_handed(&h, 3, 300), 2);    /* one open: still full */
  acceptor_closed(h.a, h.lane[1], 0, NULL);
  ck_assert_int_eq(wait_handed(&h, 3, 5000), 3);
  ck_assert_uint_eq(acceptor_unserved(h.a), 1);    /* the third */
  for (int i = 0; i < 3; i++)
    close(c[i]);
  finish(&h);
}
END_TEST

START_TEST(quiescing_refuses_new_clients) {
  struct handed h = {0};
  int port, c;
  start(&h, "127.0.0.1", 0, 2, 100);
  port = acceptor_port(h.a);
  c = client(port);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  acceptor_quiesce(h.a);
  ck_assert_int_eq(client(port), -1);
  ck_assert_int_eq(errno, ECONNREFUSED);
  acceptor_quiesce(h.a); /* idempotent */
  close(c);
  finish(&h);
}
END_TEST

START_TEST(a_port_in_use_is_refused_even_by_a_reuse_group) {
  struct handed h = {0};
  struct sockaddr_storage ss;
  socklen_t len;
  struct acceptor *second;
  int port;
  start(&h, "127.0.0.1", 0, 2, 100);
  port = acceptor_port(h.a);
  len = net_sockaddr("127.0.0.1", port, &ss, NULL);
  /* a second attnd on the same port would join the first one's group
   * without the check */
  second = acceptor_listen((struct sockaddr *)&ss, len, 2);
  ck_assert_ptr_null(second);
  ck_assert_int_eq(errno, EADDRINUSE);
  finish(&h);
}
END_TEST

START_TEST(a_port_held_by_another_server_is_refused) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr("127.0.0.1", 0, &ss, NULL);
  int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), port;
  ck_assert_int_eq(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one),
                   0);
  ck_assert_int_eq(bind(s, (struct sockaddr *)&ss, len), 0);
  ck_assert_int_eq(listen(s, 4), 0);
  ck_assert_int_eq(getsockname(s, (struct sockaddr *)&ss, &len), 0);
  port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  len = net_sockaddr("127.0.0.1", port, &ss, NULL);
  ck_assert_ptr_null(acceptor_listen((struct sockaddr *)&ss, len, 2));
  ck_assert_int_eq(errno, EADDRINUSE);
  close(s);
}
END_TEST

START_TEST(an_ipv6_listener_takes_connections) {
  struct handed h = {0};
  struct sockaddr_in6 a = {.sin6_family = AF_INET6};
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  a.sin6_addr = in6addr_loopback;
  /* machines without IPv6 on loopback (some containers) skip it */
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
    support_skip("an_ipv6_listener_takes_connections",
                 "no IPv6 loopback address here (%s)", strerror(errno));
    if (s >= 0)
      close(s);
    return;
  }
  close(s);
  start(&h, "::1", 0, 2, 100);
  a.sin6_port = htons((uint16_t)acceptor_port(h.a));
  s = socket(AF_INET6, SOCK_STREAM, 0);
  ck_assert_int_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  ck_assert_uint_lt(h.lane[0], 2);
  close(s);
  finish(&h);
}
END_TEST


/* ---- the drain ---------------------------------------------------- */

/* A blocking client of the Unix socket at path; -1 with errno when
 * refused. */
static int unix_client(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int c = socket(AF_UNIX, SOCK_STREAM, 0), e;
  ck_assert_int_ge(c, 0);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  if (connect(c, (struct sockaddr *)&a, sizeof a) == 0)
    return c;
  e = errno;
  close(c);
  errno = e;
  return -1;
}

/* A fresh path for a Unix socket in the temporary directory. */
static void temp_socket_path(char *path, size_t cap) {
  static atomic_int seq;
  snprintf(path, cap, "/tmp/attnd-test-%d-%d.sock", (int)getpid(),
           atomic_fetch_add(&seq, 1));
  unlink(path);
}

/* With max_open open, no listener's connection is taken, whichever
 * listener the last one came from: here the TCP socket's backlog (more
 * than two of the accept thread's bursts) fills the one place over and
 * over while a Unix client waits; each close lets exactly one more in. */
START_TEST(at_max_open_no_listener_takes_one_past_the_limit) {
  struct handed h = {0};
  enum { TCP = 64 };
  char path[108];
  int c[TCP], u, unix_seen = 0;
  temp_socket_path(path, sizeof path);
  start_with(&h, "127.0.0.1", 0, path, 1, 1, 1);
  c[0] = client(acceptor_port(h.a));
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  u = unix_client(path);
  ck_assert_int_ge(u, 0);
  for (int i = 1; i < TCP; i++)
    ck_assert_int_ge(c[i] = client(acceptor_port(h.a)), 0);
  for (int n = 1; n <= TCP; n++) {
    ck_assert_int_eq(wait_handed(&h, n + 1, 20), n); /* one open: full */
    acceptor_closed(h.a, h.lane[n - 1], 1, NULL);
    ck_assert_int_eq(wait_handed(&h, n + 1, 5000), n + 1);
  }
  for (int i = 0; i < h.n; i++)
    unix_seen += h.peer[i].ss_family == AF_UNIX;
  ck_assert_int_eq(unix_seen, 1);
  for (int i = 0; i < TCP; i++)
    close(c[i]);
  close(u);
  finish(&h);
}
END_TEST

/* Connects client i, which sends the byte 'a' + i at once. */
static int client_sending(int port, const char *upath, int i) {
  char b = (char)('a' + i);
  int c = upath ? unix_client(upath) : client(port);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(send(c, &b, 1, 0), 1);
  return c;
}

/* Neither end of the connection pair (server fd s, client c) was reset:
 * the server reads the client's byte 'a' + i, and the client has
 * nothing to read yet (no error, no end). */
static void assert_whole(int s, int c, int i) {
  char b = 0;
  struct pollfd p = {s, POLLIN, 0};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert_int_eq(recv(s, &b, 1, 0), 1);
  ck_assert_int_eq(b, 'a' + i);
  ck_assert_int_lt(recv(c, &b, 1, MSG_DONTWAIT), 0);
  ck_assert_int_eq(errno, EAGAIN);
}

/* With max_open 1 and one connection open the accept thread waits for
 * room, so the next clients stay in the backlog until the quiesce. */
static void backlog_at_quiesce(const char *upath, int with_refuse) {
  struct handed h = {0};
  int port, c[4];
  start_with(&h, "127.0.0.1", 0, upath, 2, 1, with_refuse);
  port = acceptor_port(h.a);
  c[0] = client_sending(port, upath, 0);
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  for (int i = 1; i < 4; i++)
    c[i] = client_sending(port, upath, i);
  ck_assert_int_eq(wait_handed(&h, 2, 300), 1); /* they wait */
  acceptor_quiesce(h.a);
  if (with_refuse) {
    /* no room: each one refused with an answer, none reset */
    ck_assert_int_eq(h.n, 1);
    ck_assert_int_eq(h.refused, 3);
    for (int i = 1; i < 4; i++)
      assert_whole(h.rfd[i - 1], c[i], i);
  } else {
    /* without a refuse callback they are handed over all the same, by
     * the quiescing thread, in the order they arrived */
    ck_assert_int_eq(h.n, 4);
    for (int i = 1; i < 4; i++) {
      ck_assert(pthread_equal(h.by[i], pthread_self()));
      ck_assert_uint_lt(h.lane[i], 2);
      assert_whole(h.fd[i], c[i], i);
    }
  }
  assert_whole(h.fd[0], c[0], 0);
  /* and from now on clients are refused */
  if (upath) {
    ck_assert_int_eq(unix_client(upath), -1);
    ck_assert_int_eq(errno, ENOENT); /* the file is gone */
  } else {
    ck_assert_int_eq(client(port), -1);
    ck_assert_int_eq(errno, ECONNREFUSED);
  }
  for (int i = 0; i < 4; i++)
    close(c[i]);
  finish(&h);
}

START_TEST(quiescing_hands_over_the_backlog_instead_of_resetting_it) {
  backlog_at_quiesce(NULL, 0);
}
END_TEST

START_TEST(quiescing_without_room_refuses_the_backlog_with_an_answer) {
  backlog_at_quiesce(NULL, 1);
}
END_TEST

START_TEST(quiescing_hands_over_the_unix_socket_backlog) {
  char path[108];
  temp_socket_path(path, sizeof path);
  backlog_at_quiesce(path, 0);
}
END_TEST

/* The acceptor's listen socket on port (found among this process's
 * descriptors: the test reaches past the acceptor to hold a handshake
 * half-way). */
static int listen_socket_on(int port) {
  for (int fd = 0; fd < 1024; fd++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int on = 0;
    socklen_t olen = sizeof on;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &olen) == 0 && on &&
        getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
        ss.ss_family == AF_INET && net_port((struct sockaddr *)&ss) == port)
      return fd;
  }
  return -1;
}

START_TEST(a_handshake_under_way_at_quiesce_is_waited_for_and_handed_over) {
  struct handed h = {0};
  struct sockaddr_storage ss;
  struct pollfd p;
  int port, l, c, err = 0;
  socklen_t elen = sizeof err;
  start(&h, "127.0.0.1", 0, 1, 100);
  port = acceptor_port(h.a);
  l = listen_socket_on(port);
  ck_assert_int_ge(l, 0);
  /* drop the handshake's last ACK, and the data behind it */
  if (support_drop_acks(
          l, "a_handshake_under_way_at_quiesce_is_waited_for_and_handed_over")) {
    close(l);
    finish(&h);
    return;
  }
  /* the client is connected as far as it can tell, and sends */
  net_sockaddr("127.0.0.1", port, &ss, NULL);
  c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ck_assert(connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) ==
                0 ||
            errno == EINPROGRESS);
  p = (struct pollfd){c, POLLOUT, 0};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert_int_eq(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen), 0);
  ck_assert_int_eq(err, 0);
  ck_assert_int_eq(send(c, "a", 1, 0), 1);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&ss), 1);
  ck_assert_int_eq(h.n, 0);
  /* the quiesce's own filter replaces the test's: the client's
   * retransmission completes the handshake, and the sweep waits for it */
  acceptor_quiesce(h.a);
  ck_assert_int_eq(h.n, 1);
  assert_whole(h.fd[0], c, 0);
  close(c);
  finish(&h);
}
END_TEST

struct serve_later {
  struct acceptor *a;
  atomic_int served;
};

static void *serve_after_300_ms(void *arg) {
  struct serve_later *s = arg;
  poll(NULL, 0, 300);
  atomic_store(&s->served, 1);
  acceptor_served(s->a);
  return NULL;
}

START_TEST(quiescing_waits_for_the_first_request_of_a_connection) {
  struct handed h = {0};
  struct serve_later s;
  pthread_t t;
  int c;
  start(&h, "127.0.0.1", 0, 2, 100);
  h.unserved = 1;
  c = client(acceptor_port(h.a));
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  ck_assert_uint_eq(acceptor_unserved(h.a), 1);
  s.a = h.a;
  atomic_init(&s.served, 0);
  ck_assert_int_eq(pthread_create(&t, NULL, serve_after_300_ms, &s), 0);
  acceptor_quiesce(h.a);
  ck_assert_int_eq(atomic_load(&s.served), 1);
  ck_assert_uint_eq(acceptor_unserved(h.a), 0);
  pthread_join(t, NULL);
  close(c);
  finish(&h);
}
END_TEST

START_TEST(a_connection_that_never_asks_holds_the_quiesce_a_bounded_time) {
  struct handed h = {0};
  struct timespec t0, t1;
  double ms;
  int c[2];
  start(&h, "127.0.0.1", 0, 2, 100);
  h.unserved = 1;
  c[0] = client(acceptor_port(h.a));
  c[1] = client(acceptor_port(h.a));
  ck_assert_int_eq(wait_handed(&h, 2, 5000), 2);
  /* one closes without a request: it no longer counts */
  acceptor_closed(h.a, h.lane[1], 0, NULL);
  ck_assert_uint_eq(acceptor_unserved(h.a), 1);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  acceptor_quiesce(h.a);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  ck_assert_double_ge(ms, ACCEPTOR_SERVED_MS * 0.9);
  ck_assert_double_lt(ms, ACCEPTOR_SERVED_MS + ACCEPTOR_SWEEP_MS + 5000);
  close(c[0]);
  close(c[1]);
  finish(&h);
}
END_TEST

/* ---- the Unix socket ----------------------------------------------- */

static struct acceptor *tcp_acceptor(void) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr("127.0.0.1", 0, &ss, NULL);
  struct acceptor *a = acceptor_listen((struct sockaddr *)&ss, len, 2);
  ck_assert_ptr_nonnull(a);
  return a;
}

START_TEST(the_unix_socket_takes_connections_with_its_mode) {
  struct handed h = {0};
  struct stat st;
  char path[108];
  int c;
  temp_socket_path(path, sizeof path);
  start_with(&h, "127.0.0.1", 0, path, 4, 100, 1);
  ck_assert_int_eq(lstat(path, &st), 0);
  ck_assert(S_ISSOCK(st.st_mode));
  ck_assert_uint_eq(st.st_mode & 0777, 0600);
  c = unix_client(path);
  ck_assert_int_ge(c, 0);
  ck_assert_int_eq(wait_handed(&h, 1, 5000), 1);
  ck_assert_uint_lt(h.lane[0], 4);
  acceptor_closed(h.a, h.lane[0], 1, NULL);
  acceptor_quiesce(h.a);
  ck_assert_int_ne(lstat(path, &st), 0); /* removed */
  close(c);
  finish(&h);
}
END_TEST

START_TEST(a_stale_socket_file_is_replaced) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  struct acceptor *a = tcp_acceptor();
  char path[108];
  int s = socket(AF_UNIX, SOCK_STREAM, 0), c;
  temp_socket_path(path, sizeof path);
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
  /* a socket file whose server has gone */
  ck_assert_int_eq(bind(s, (struct sockaddr *)&sun, sizeof sun), 0);
  close(s);
  ck_assert_int_eq(unix_client(path), -1);
  ck_assert_int_eq(errno, ECONNREFUSED);
  ck_assert_int_eq(acceptor_listen_unix(a, path, 0660), 0);
  c = unix_client(path);
  ck_assert_int_ge(c, 0);
  close(c);
  acceptor_stop(a);
  ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(a_socket_a_live_server_answers_on_is_refused_and_kept) {
  struct acceptor *a = tcp_acceptor(), *b = tcp_acceptor();
  struct stat before, after;
  char path[108];
  temp_socket_path(path, sizeof path);
  ck_assert_int_eq(acceptor_listen_unix(a, path, 0600), 0);
  ck_assert_int_eq(lstat(path, &before), 0);
  ck_assert_int_eq(acceptor_listen_unix(b, path, 0600), -1);
  ck_assert_int_eq(errno, EADDRINUSE);
  ck_assert_int_eq(lstat(path, &after), 0);
  ck_assert_uint_eq(before.st_ino, after.st_ino);
  /* the one that failed does not remove the other's file either */
  acceptor_stop(b);
  ck_assert_int_eq(lstat(path, &after), 0);
  acceptor_stop(a);
  ck_assert_int_ne(lstat(path, &after), 0);
}
END_TEST

START_TEST(a_path_that_is_not_a_socket_is_never_removed) {
  struct acceptor *a = tcp_acceptor();
  char path[108];
  int f;
  temp_socket_path(path, sizeof path);
  f = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
  ck_assert_int_ge(f, 0);
  close(f);
  ck_assert_int_eq(acceptor_listen_unix(a, path, 0600), -1);
  ck_assert_int_eq(errno, EEXIST);
  acceptor_stop(a);
  ck_assert_int_eq(access(path, F_OK), 0);
  unlink(path);
}
END_TEST

START_TEST(a_successors_socket_file_is_left_alone) {
  struct acceptor *a = tcp_acceptor(), *b;
  char path[108];
  struct stat st;
  temp_socket_path(path, sizeof path);
  ck_assert_int_eq(acceptor_listen_unix(a, path, 0600), 0);
  /* a successor takes the path over (here: a removed it and bound
   * anew, as after its own file was deleted by hand) */
  ck_assert_int_eq(unlink(path), 0);
  b = tcp_acceptor();
  ck_assert_int_eq(acceptor_listen_unix(b, path, 0600), 0);
  acceptor_stop(a);
  ck_assert_int_eq(lstat(path, &st), 0);
  acceptor_stop(b);
  ck_assert_int_ne(lstat(path, &st), 0);
}
END_TEST

static Suite *acceptor_suite(void) {
  Suite *s = suite_create("acceptor");
  TCase *tc = tcase_create("lanes");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, each_connection_goes_to_the_lane_of_the_cpu_it_came_from);
  tcase_add_test(tc, a_crowd_from_one_cpu_is_dealt_out_in_blocks_of_the_slack);
  tcase_add_test(tc, with_more_lanes_a_crowd_from_one_cpu_reaches_all_of_them);
  tcase_add_test(tc, closed_connections_leave_their_lane);
  tcase_add_test(tc, at_max_open_clients_wait_until_one_closes);
  tcase_add_test(tc, connections_that_never_start_are_written_off_at_most_max_open);
  tcase_add_test(tc, quiescing_refuses_new_clients);
  tcase_add_test(tc, a_port_in_use_is_refused_even_by_a_reuse_group);
  tcase_add_test(tc, a_port_held_by_another_server_is_refused);
  tcase_add_test(tc, an_ipv6_listener_takes_connections);
  suite_add_tcase(s, tc);
  tc = tcase_create("drain");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, quiescing_hands_over_the_backlog_instead_of_resetting_it);
  tcase_add_test(tc, quiescing_without_room_refuses_the_backlog_with_an_answer);
  tcase_add_test(tc, quiescing_hands_over_the_unix_socket_backlog);
  tcase_add_test(tc,
                 a_handshake_under_way_at_quiesce_is_waited_for_and_handed_over);
  tcase_add_test(tc, quiescing_waits_for_the_first_request_of_a_connection);
  tcase_add_test(tc,
                 a_connection_that_never_asks_holds_the_quiesce_a_bounded_time);
  suite_add_tcase(s, tc);
  tc = tcase_create("unix");
  tcase_add_test(tc, the_unix_socket_takes_connections_with_its_mode);
  tcase_add_test(tc, a_stale_socket_file_is_replaced);
  tcase_add_test(tc, at_max_open_no_listener_takes_one_past_the_limit);
  tcase_add_test(tc, a_socket_a_live_server_answers_on_is_refused_and_kept);
  tcase_add_test(tc, a_path_that_is_not_a_socket_is_never_removed);
  tcase_add_test(tc, a_successors_socket_file_is_left_alone);
  tcase_add_test(tc, an_address_over_its_limit_is_refused_until_one_of_its_closes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(acceptor_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
