/* test_handshake.c - handshake_pending against the kernel's own count.
 *
 * A handshake is held half-way on loopback with a socket filter on the
 * listen socket that drops the client's final ACK (and any data, which
 * carries an ACK too): the client's connect() has returned, the server's
 * kernel keeps a request socket in SYN_RECV, and nothing is in the
 * accept queue yet.  Removing the filter lets the client's next segment
 * complete it.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support_skip.h"
#include "server/conn/handshake.h"
#include "support_filter.h"

/* A listen socket on 127.0.0.1 (any port); its address in *a. */
static int listener(struct sockaddr_in *a) {
  socklen_t len = sizeof *a;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(l, (struct sockaddr *)a, sizeof *a), 0);
  ck_assert_int_eq(listen(l, 16), 0);
  ck_assert_int_eq(getsockname(l, (struct sockaddr *)a, &len), 0);
  return l;
}

/* A client whose connect() has returned (SYN-ACK received). */
static int connected_client(const struct sockaddr_in *a) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
  struct pollfd p = {c, POLLOUT, 0};
  socklen_t len = sizeof err;
  int rc = connect(c, (const struct sockaddr *)a, sizeof *a);
  ck_assert(rc == 0 || errno == EINPROGRESS);
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  ck_assert_int_eq(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  ck_assert_int_eq(err, 0);
  return c;
}

START_TEST(no_handshake_under_way_counts_0) {
  struct sockaddr_in a;
  int l = listener(&a);
  int c = connected_client(&a);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&a), 0);
  close(c);
  close(l);
}
END_TEST

START_TEST(a_handshake_held_half_way_counts_until_it_completes) {
  struct sockaddr_in a, other;
  struct pollfd p;
  int l = listener(&a), c, s = -1, zero = 0;
  if (support_drop_acks(l, "a_handshake_held_half_way_counts_until_it_completes")) {
    close(l);
    return;
  }
  c = connected_client(&a);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&a), 1);
  /* nothing to accept: the connection is not established yet */
  ck_assert_int_lt(accept(l, NULL, NULL), 0);
  ck_assert_int_eq(errno, EAGAIN);
  /* another port, or another address on the port, does not count it */
  other = a;
  other.sin_port = htons((uint16_t)(ntohs(a.sin_port) ^ 1));
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&other), 0);
  other = a;
  other.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&other), 0);
  /* the wildcard address matches any local one */
  other = a;
  other.sin_addr.s_addr = htonl(INADDR_ANY);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&other), 1);
  /* the client's data completes the handshake once it passes */
  ck_assert_int_eq(
      setsockopt(l, SOL_SOCKET, SO_DETACH_FILTER, &zero, sizeof zero), 0);
  ck_assert_int_eq(send(c, "x", 1, 0), 1);
  p = (struct pollfd){l, POLLIN, 0};
  ck_assert_int_eq(poll(&p, 1, 5000), 1);
  s = accept(l, NULL, NULL);
  ck_assert_int_ge(s, 0);
  ck_assert_int_eq(handshake_pending((struct sockaddr *)&a), 0);
  close(s);
  close(c);
  close(l);
}
END_TEST

START_TEST(other_families_cannot_be_told) {
  struct sockaddr sa = {.sa_family = AF_UNIX};
  ck_assert_int_eq(handshake_pending(&sa), -1);
  ck_assert_int_eq(errno, EAFNOSUPPORT);
}
END_TEST

static Suite *handshake_suite(void) {
  Suite *s = suite_create("handshake");
  TCase *tc = tcase_create("syn_recv");
  tcase_add_test(tc, no_handshake_under_way_counts_0);
  tcase_add_test(tc, a_handshake_held_half_way_counts_until_it_completes);
  tcase_add_test(tc, other_families_cannot_be_told);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(handshake_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
