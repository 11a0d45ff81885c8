/* test_linger.c - the lingering close, on real loopback TCP sockets.
 *
 * Each test opens a connection, writes an "answer" from the server side
 * and hands the server's socket to linger_add, as the HTTP layer does
 * after an early answer; the client then behaves as a client would
 * (writes its whole body first, or never closes).  The control test
 * closes the socket plainly instead, and shows the reset the lingering
 * close exists to avoid.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/conn/linger.h"

#define BODY (64u << 20) /* beyond any loopback socket buffers */

static const char answer[] = "HTTP/1.1 413 Payload Too Large\r\n\r\n";

/* A connected pair: *srv the accepted end, *cli the client's. */
static void tcp_pair(int *srv, int *cli) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof a;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(l, 4), 0);
  ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
  *cli = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_eq(connect(*cli, (struct sockaddr *)&a, sizeof a), 0);
  *srv = accept(l, NULL, NULL);
  ck_assert_int_ge(*srv, 0);
  close(l);
}

/* The server's side of an early answer: the answer written, some of the
 * body already in its receive buffer, unread. */
static void answer_early(int srv, int cli) {
  static char head[4096];
  ck_assert_int_eq(send(cli, head, sizeof head, 0), (ssize_t)sizeof head);
  ck_assert_int_eq(send(srv, answer, sizeof answer - 1, 0),
                   (ssize_t)(sizeof answer - 1));
}

/* Writes n bytes; 0, or the errno that stopped it. */
static int send_all(int fd, size_t n) {
  static char buf[1 << 16];
  while (n) {
    ssize_t k = send(fd, buf, n < sizeof buf ? n : sizeof buf, MSG_NOSIGNAL);
    if (k < 0)
      return errno;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads to the end: what arrived in buf (NUL-terminated), 0 or errno. */
static int read_all(int fd, char *buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    ssize_t k = recv(fd, buf + got, cap - 1 - got, 0);
    if (k < 0) {
      buf[got] = '\0';
      return errno;
    }
    if (k == 0 || (got += (size_t)k) == cap - 1) {
      buf[got] = '\0';
      return 0;
    }
  }
}

static void wait_count(struct linger_set *l, size_t want, int secs) {
  struct timespec ms = {0, 10 * 1000000};
  for (int i = 0; i < secs * 100 && linger_count(l) != want; i++)
    nanosleep(&ms, NULL);
  ck_assert_uint_eq(linger_count(l), want);
}

START_TEST(plain_close_resets_a_client_still_writing) {
  int srv, cli;
  tcp_pair(&srv, &cli);
  answer_early(srv, cli);
  close(srv);
  int err = send_all(cli, BODY);
  ck_assert_msg(err == ECONNRESET || err == EPIPE, "send: %s", strerror(err));
  close(cli);
}
END_TEST

START_TEST(client_writing_all_first_reads_the_answer_then_the_end) {
  struct linger_set *l = linger_start(8, 1ull << 40);
  char got[256];
  int srv, cli;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&srv, &cli);
  answer_early(srv, cli);
  linger_add(l, srv);
  ck_assert_int_eq(send_all(cli, BODY), 0);
  ck_assert_int_eq(read_all(cli, got, sizeof got), 0);
  ck_assert_str_eq(got, answer);
  close(cli);
  wait_count(l, 0, 5);  /* the client's close ends the linger */
  linger_stop(l);
}
END_TEST

/* A client streaming into a lingering socket keeps the linger thread
 * waking; a socket handed over between two of its wakes must linger too
 * (its times are newer than the thread's last clock reading). */
static _Atomic int busy_stop;

static void *busy_sender(void *arg) {
  int fd = *(int *)arg;
  while (!atomic_load(&busy_stop) && send_all(fd, 1u << 16) == 0) {
  }
  return NULL;
}

START_TEST(sockets_handed_over_while_others_drain_linger_too) {
  struct linger_set *l = linger_start(8, 1ull << 40);
  char got[256];
  int bs, bc, srv, cli;
  pthread_t t;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&bs, &bc);
  linger_add(l, bs);
  atomic_store(&busy_stop, 0);
  ck_assert_int_eq(pthread_create(&t, NULL, busy_sender, &bc), 0);
  for (int i = 0; i < 30; i++) {
    tcp_pair(&srv, &cli);
    answer_early(srv, cli);
    linger_add(l, srv);
    int err = send_all(cli, 4u << 20);
    ck_assert_msg(err == 0, "round %d: send: %s", i, strerror(err));
    ck_assert_int_eq(read_all(cli, got, sizeof got), 0);
    ck_assert_str_eq(got, answer);
    close(cli);
  }
  atomic_store(&busy_stop, 1);
  shutdown(bc, SHUT_RDWR);
  pthread_join(t, NULL);
  close(bc);
  linger_stop(l);
}
END_TEST

START_TEST(client_sending_past_max_bytes_is_cut_off) {
  struct linger_set *l = linger_start(8, 1u << 20);
  int srv, cli;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&srv, &cli);
  answer_early(srv, cli);
  linger_add(l, srv);
  int err = send_all(cli, BODY);
  ck_assert_msg(err == ECONNRESET || err == EPIPE, "send: %s", strerror(err));
  wait_count(l, 0, 5);
  close(cli);
  linger_stop(l);
}
END_TEST

START_TEST(sockets_beyond_max_socks_close_at_once) {
  struct linger_set *l = linger_start(1, 1ull << 40);
  char got[256];
  int s1, c1, s2, c2;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&s1, &c1);
  tcp_pair(&s2, &c2);
  linger_add(l, s1);
  linger_add(l, s2);
  ck_assert_uint_eq(linger_count(l), 1);
  /* both half-closed: each client reads the end at once */
  ck_assert_int_eq(read_all(c1, got, sizeof got), 0);
  ck_assert_int_eq(read_all(c2, got, sizeof got), 0);
  close(c1);
  close(c2);
  wait_count(l, 0, 5);
  linger_stop(l);
}
END_TEST

START_TEST(an_idle_client_is_let_go_after_the_idle_time) {
  struct linger_set *l = linger_start(8, 1ull << 40);
  struct timespec t0, t1;
  char got[256];
  int srv, cli;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&srv, &cli);
  answer_early(srv, cli);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  linger_add(l, srv);
  ck_assert_int_eq(read_all(cli, got, sizeof got), 0);  /* answer + FIN */
  ck_assert_uint_eq(linger_count(l), 1);  /* the client has not closed */
  wait_count(l, 0, LINGER_IDLE_MS / 1000 + 5);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ck_assert_double_ge(waited, LINGER_IDLE_MS / 1000.0 - 0.05);
  close(cli);
  linger_stop(l);
}
END_TEST

START_TEST(stop_closes_every_lingering_socket) {
  struct linger_set *l = linger_start(8, 1ull << 40);
  char got[256];
  int srv, cli;
  ck_assert_ptr_nonnull(l);
  tcp_pair(&srv, &cli);
  linger_add(l, srv);
  ck_assert_uint_eq(linger_count(l), 1);
  linger_stop(l);
  ck_assert_int_eq(read_all(cli, got, sizeof got), 0);
  close(cli);
  linger_stop(NULL);
  /* no set (it failed to start): the socket is closed at once */
  tcp_pair(&srv, &cli);
  linger_add(NULL, srv);
  ck_assert_int_eq(read_all(cli, got, sizeof got), 0);
  close(cli);
}
END_TEST

static Suite *linger_suite(void) {
  Suite *s = suite_create("linger");
  TCase *tc = tcase_create("linger");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, plain_close_resets_a_client_still_writing);
  tcase_add_test(tc, client_writing_all_first_reads_the_answer_then_the_end);
  tcase_add_test(tc, sockets_handed_over_while_others_drain_linger_too);
  tcase_add_test(tc, client_sending_past_max_bytes_is_cut_off);
  tcase_add_test(tc, sockets_beyond_max_socks_close_at_once);
  tcase_add_test(tc, an_idle_client_is_let_go_after_the_idle_time);
  tcase_add_test(tc, stop_closes_every_lingering_socket);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(linger_suite());
  int failed;
  signal(SIGPIPE, SIG_IGN);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
