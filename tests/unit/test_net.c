/* test_net.c - net_retire_listener on real loopback sockets.
 *
 * The HTTP layer retires libmicrohttpd's listen socket with it while
 * libmicrohttpd's threads still watch the socket in their epoll sets, so
 * these check what those threads would see: the port refuses clients,
 * the epoll entry stays valid (a later EPOLL_CTL_DEL succeeds, which is
 * what keeps libmicrohttpd from aborting), no event arrives while the
 * peer lives, and accept fails with EINVAL.  The control case replaces
 * the descriptor with dup2 instead and shows the entry lost.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/net.h"

/* A non-blocking listening socket on host, any port; its address back. */
static int listener(const char *host, struct sockaddr_storage *ss,
                    socklen_t *len) {
  int one = 1, fd;
  *len = net_sockaddr(host, 0, ss, NULL);
  ck_assert_uint_gt(*len, 0);
  fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                              sizeof one), 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)ss, *len), 0);
  ck_assert_int_eq(listen(fd, 16), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)ss, len), 0);
  return fd;
}

/* An epoll set watching fd for input, as libmicrohttpd watches its
 * listen socket. */
static int watch(int fd) {
  struct epoll_event ev = {.events = EPOLLIN};
  int ep = epoll_create1(0);
  ck_assert_int_ge(ep, 0);
  ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  return ep;
}

/* Where a client reaches a listener bound as ss: at host, ss's port. */
static socklen_t reach_at(const struct sockaddr_storage *ss, const char *host,
                          struct sockaddr_storage *to) {
  int port = ss->ss_family == AF_INET
                 ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
                 : ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
  socklen_t n = net_sockaddr(host, port, to, NULL);
  ck_assert_uint_gt(n, 0);
  return n;
}

/* A client connected to `to` (blocking); -1 with errno when refused. */
static int client(const struct sockaddr_storage *to, socklen_t len) {
  int c = socket(to->ss_family, SOCK_STREAM, 0), e;
  ck_assert_int_ge(c, 0);
  if (connect(c, (const struct sockaddr *)to, len) == 0)
    return c;
  e = errno;
  close(c);
  errno = e;
  return -1;
}

/* Retires a listener bound to `bind_to`, which clients reach at `host`. */
static void check_retire(const char *bind_to, const char *host) {
  struct sockaddr_storage ss, to;
  socklen_t len, tlen;
  struct epoll_event ev;
  char buf[8];
  int fd = listener(bind_to, &ss, &len), ep = watch(fd), peer = -1, early;
  tlen = reach_at(&ss, host, &to);
  /* a client waiting in the backlog */
  early = client(&to, tlen);
  ck_assert_int_ge(early, 0);
  ck_assert_int_eq(epoll_wait(ep, &ev, 1, 1000), 1);

  ck_assert_int_eq(net_retire_listener(fd, &peer), 0);
  ck_assert_int_ge(peer, 0);
  /* the waiting client is let go, new ones are refused at once */
  ck_assert_int_le(recv(early, buf, sizeof buf, 0), 0);
  close(early);
  ck_assert_int_eq(client(&to, tlen), -1);
  ck_assert_int_eq(errno, ECONNREFUSED);
  /* the descriptor is quiet, and does not accept */
  ck_assert_int_eq(epoll_wait(ep, &ev, 1, 200), 0);
  ck_assert_int_eq(accept(fd, NULL, NULL), -1);
  ck_assert_int_eq(errno, EINVAL);
  /* the entry is still valid: taking it out succeeds */
  ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), 0);
  /* and the peer must outlive the watchers: its close wakes them */
  ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd,
                             &(struct epoll_event){.events = EPOLLIN}), 0);
  close(peer);
  ck_assert_int_eq(epoll_wait(ep, &ev, 1, 1000), 1);
  close(ep);
  close(fd);
}

START_TEST(a_retired_ipv4_listener_refuses_and_stays_quiet_in_epoll) {
  check_retire("127.0.0.1", "127.0.0.1");
}
END_TEST

START_TEST(a_retired_wildcard_listener_refuses_and_stays_quiet_in_epoll) {
  check_retire("0.0.0.0", "127.0.0.1");
}
END_TEST

START_TEST(a_retired_ipv6_listener_refuses_and_stays_quiet_in_epoll) {
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6};
  a.sin6_addr = in6addr_loopback;
  /* machines without IPv6 on loopback (some containers) skip it */
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
    if (s >= 0)
      close(s);
    return;
  }
  close(s);
  check_retire("::1", "::1");
}
END_TEST

/* The control: replacing the descriptor also refuses clients, but the
 * listen socket's epoll entry goes with it, so a later EPOLL_CTL_DEL by
 * the descriptor fails - where libmicrohttpd would abort. */
START_TEST(replacing_the_descriptor_instead_loses_the_epoll_entry) {
  struct sockaddr_storage ss;
  socklen_t len;
  int fd = listener("127.0.0.1", &ss, &len), ep = watch(fd), sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ck_assert_int_eq(dup2(sv[0], fd), fd);
  ck_assert_int_eq(client(&ss, len), -1);
  ck_assert_int_eq(errno, ECONNREFUSED);
  ck_assert_int_eq(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), -1);
  ck_assert_int_eq(errno, ENOENT);
  close(sv[0]);
  close(sv[1]);
  close(ep);
  close(fd);
}
END_TEST

START_TEST(a_socket_that_does_not_listen_is_left_as_it_was) {
  int p = -1, sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ck_assert_int_eq(net_retire_listener(sv[0], &p), -1);
  ck_assert_int_eq(p, -1);
  ck_assert_int_eq(send(sv[0], "x", 1, 0), 1); /* still connected */
  close(sv[0]);
  close(sv[1]);
}
END_TEST

static Suite *net_suite(void) {
  Suite *s = suite_create("net");
  TCase *tc = tcase_create("retire");
  tcase_add_test(tc, a_retired_ipv4_listener_refuses_and_stays_quiet_in_epoll);
  tcase_add_test(tc,
                 a_retired_wildcard_listener_refuses_and_stays_quiet_in_epoll);
  tcase_add_test(tc, a_retired_ipv6_listener_refuses_and_stays_quiet_in_epoll);
  tcase_add_test(tc, replacing_the_descriptor_instead_loses_the_epoll_entry);
  tcase_add_test(tc, a_socket_that_does_not_listen_is_left_as_it_was);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(net_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
