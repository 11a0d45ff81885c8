/* test_peek.c - the Content-Length a new connection's first bytes
 * announce (peek.h), which picks the memory its connection gets.  A hint
 * only: these check that it is read from whole header lines of the first
 * request and nowhere else, and that peeking leaves the bytes in the
 * socket for libmicrohttpd.
 */
#include <check.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/peek.h"

static unsigned long long of(const char *head) {
  return peek_content_length(head, strlen(head));
}

START_TEST(the_content_length_of_the_first_request_is_read) {
  ck_assert_uint_eq(of("POST /v2/models/attention/infer HTTP/1.1\r\n"
                       "Host: 127.0.0.1:8000\r\n"
                       "Inference-Header-Content-Length: 251\r\n"
                       "Content-Length: 786797\r\n\r\n\x01\x02"),
                    786797);
  /* any case, whitespace around the value, bare LF line ends */
  ck_assert_uint_eq(of("POST / HTTP/1.1\ncontent-LENGTH:\t 42 \n\n"), 42);
  /* the whole block need not have arrived, only the field's line */
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: 131072\r\nHo"),
                    131072);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                       "Content-Length: 9\r\n\r\n"), 5);
}
END_TEST

START_TEST(anything_else_announces_nothing) {
  /* no field, a field of another name, one in the body */
  ck_assert_uint_eq(of("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nX-Content-Length: 99\r\n\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\n\r\nContent-Length: 99\r\n"), 0);
  /* the request line alone, or a field line cut off by the peek */
  ck_assert_uint_eq(of("Content-Length: 99\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: 99"), 0);
  /* values that are not one plain decimal */
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: 9x\r\n\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: -9\r\n\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n"), 0);
  ck_assert_uint_eq(of("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"), 0);
  ck_assert_uint_eq(
      of("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"),
      0);
  ck_assert_uint_eq(
      of("POST / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n"),
      9999999999999999999ULL);
  /* TLS: a ClientHello's first bytes */
  ck_assert_uint_eq(peek_content_length("\x16\x03\x01\x02\x00\x01\x00\x01", 8),
                    0);
  ck_assert_uint_eq(peek_content_length("", 0), 0);
}
END_TEST

START_TEST(peeking_a_socket_leaves_its_bytes_there) {
  static const char req[] = "POST /v1/attention HTTP/1.1\r\n"
                            "Content-Length: 200000\r\n\r\n{\"query\"";
  char back[sizeof req];
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ck_assert_uint_eq(peek_socket_content_length(sv[0], 4096), 0); /* none */
  ck_assert_int_eq(write(sv[1], req, sizeof req - 1), (ssize_t)sizeof req - 1);
  ck_assert_uint_eq(peek_socket_content_length(sv[0], 4096), 200000);
  /* a peek too short for the field's line sees nothing */
  ck_assert_uint_eq(peek_socket_content_length(sv[0], 40), 0);
  ck_assert_int_eq(read(sv[0], back, sizeof back), (ssize_t)sizeof req - 1);
  ck_assert_int_eq(memcmp(back, req, sizeof req - 1), 0);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

static Suite *peek_suite(void) {
  Suite *s = suite_create("peek");
  TCase *tc = tcase_create("content-length");
  tcase_add_test(tc, the_content_length_of_the_first_request_is_read);
  tcase_add_test(tc, anything_else_announces_nothing);
  tcase_add_test(tc, peeking_a_socket_leaves_its_bytes_there);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(peek_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
