/* test_acceptor.c - the listen sockets, lanes and limits of acceptor.h,
 * on real loopback connections.
 *
 * The hand-off callback here plays the HTTP layer: it keeps each
 * connection with the lane it was given and reports it started at once;
 * the tests close connections through acceptor_closed as the HTTP layer
 * would when a client leaves.
 */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/acceptor.h"
#include "server/net.h"

#define MAX_HANDED 128

struct handed {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct acceptor *a;
  int n;
  int fd[MAX_HANDED];
  unsigned lane[MAX_HANDED];
};

static int take(void *arg, int fd, const struct sockaddr *sa, socklen_t len,
                unsigned lane) {
  struct handed *h = arg;
  (void)sa;
  (void)len;
  /* Started before the test can see it: a test that closes what it was
   * handed would otherwise race the start, and a close before its start
   * is not counted (closed <= started). */
  acceptor_started(h->a);
  pthread_mutex_lock(&h->mu);
  ck_assert_int_lt(h->n, MAX_HANDED);
  h->fd[h->n] = fd;
  h->lane[h->n++] = lane;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return 0;
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

static struct acceptor *start(struct handed *h, const char *host, int port,
                              unsigned lanes, size_t max_open) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr(host, port, &ss, NULL);
  ck_assert_uint_gt(len, 0);
  memset(h, 0, sizeof *h);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->a = acceptor_listen((struct sockaddr *)&ss, len, lanes);
  ck_assert_ptr_nonnull(h->a);
  ck_assert_int_eq(acceptor_run(h->a, max_open, take, h), 0);
  return h->a;
}

static void finish(struct handed *h) {
  acceptor_stop(h->a);
  for (int i = 0; i < h->n; i++)
    close(h->fd[i]);
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
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
  struct handed h;
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
  struct handed h;
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
  struct handed h;
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
  struct handed h;
  struct from_cpu f;
  start(&h, "127.0.0.1", 0, 2, 100);
  connect_from_cpu(sched_getcpu(), acceptor_port(h.a), 6, &f);
  ck_assert_int_eq(wait_handed(&h, 6, 5000), 6);
  ck_assert_uint_eq(acceptor_open(h.a), 6);
  for (int i = 0; i < 6; i++)
    acceptor_closed(h.a, h.lane[i]);
  ck_assert_uint_eq(acceptor_open(h.a), 0);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 0), 0);
  ck_assert_uint_eq(acceptor_lane_open(h.a, 1), 0);
  close_all(&f);
  finish(&h);
}
END_TEST

START_TEST(at_max_open_clients_wait_until_one_closes) {
  struct handed h;
  int c[5];
  start(&h, "127.0.0.1", 0, 1, 3);
  for (int i = 0; i < 5; i++)
    c[i] = client(acceptor_port(h.a)); /* the kernel completes them all */
  ck_assert_int_eq(wait_handed(&h, 3, 5000), 3);
  ck_assert_int_eq(wait_handed(&h, 4, 300), 3); /* the rest wait */
  acceptor_closed(h.a, h.lane[0]);
  ck_assert_int_eq(wait_handed(&h, 4, 5000), 4);
  ck_assert_int_eq(wait_handed(&h, 5, 300), 4);
  for (int i = 0; i < 5; i++)
    close(c[i]);
  finish(&h);
}
END_TEST

START_TEST(quiescing_refuses_new_clients) {
  struct handed h;
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
  struct handed h;
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
  struct handed h;
  struct sockaddr_in6 a = {.sin6_family = AF_INET6};
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  a.sin6_addr = in6addr_loopback;
  /* machines without IPv6 on loopback (some containers) skip it */
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
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

static Suite *acceptor_suite(void) {
  Suite *s = suite_create("acceptor");
  TCase *tc = tcase_create("lanes");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, each_connection_goes_to_the_lane_of_the_cpu_it_came_from);
  tcase_add_test(tc, a_crowd_from_one_cpu_is_dealt_out_in_blocks_of_the_slack);
  tcase_add_test(tc, with_more_lanes_a_crowd_from_one_cpu_reaches_all_of_them);
  tcase_add_test(tc, closed_connections_leave_their_lane);
  tcase_add_test(tc, at_max_open_clients_wait_until_one_closes);
  tcase_add_test(tc, quiescing_refuses_new_clients);
  tcase_add_test(tc, a_port_in_use_is_refused_even_by_a_reuse_group);
  tcase_add_test(tc, a_port_held_by_another_server_is_refused);
  tcase_add_test(tc, an_ipv6_listener_takes_connections);
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
