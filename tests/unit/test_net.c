/* test_net.c - net_fd_with_remainder on real descriptors.
 *
 * The HTTP layer moves each accepted connection to a descriptor number
 * with a given remainder, which is what picks its libmicrohttpd thread:
 * these check that the number is the lowest free one that fits, that it
 * names the same socket, that the old number is closed, and that a
 * failure leaves the descriptor as it was.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/conn/net.h"

static int is_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

/* The lowest free descriptor number n >= rem with n % mod == rem. */
static int lowest_free(unsigned rem, unsigned mod) {
  for (int n = (int)rem;; n += (int)mod)
    if (!is_open(n))
      return n;
}

START_TEST(a_descriptor_with_the_remainder_is_kept) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ck_assert_int_eq(net_fd_with_remainder(sv[0], (unsigned)sv[0] % 3, 3),
                   sv[0]);
  ck_assert_int_eq(net_fd_with_remainder(sv[1], 0, 1), sv[1]);
  ck_assert(is_open(sv[0]) && is_open(sv[1]));
  close(sv[0]);
  close(sv[1]);
}
END_TEST

START_TEST(a_descriptor_moves_to_the_lowest_free_number_that_fits) {
  int sv[2], hold[12], fd, want;
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* a run of numbers in use, with holes of the wrong remainder */
  for (int i = 0; i < 12; i++)
    hold[i] = dup(sv[1]);
  for (int i = 0; i < 12; i += 4)
    close(hold[i]);
  for (unsigned mod = 2; mod <= 5; mod++)
    for (unsigned rem = 0; rem < mod; rem++) {
      int before = sv[0];
      if ((unsigned)before % mod == rem)
        continue;
      want = lowest_free(rem, mod);
      fd = net_fd_with_remainder(sv[0], rem, mod);
      ck_assert_int_eq(fd, want);
      ck_assert_uint_eq((unsigned)fd % mod, rem);
      ck_assert(!is_open(before));
      sv[0] = fd;
      /* still the same socket: what goes in one end comes out here */
      ck_assert_int_eq(send(sv[1], "x", 1, 0), 1);
      char c = 0;
      ck_assert_int_eq(recv(fd, &c, 1, 0), 1);
      ck_assert_int_eq(c, 'x');
    }
  for (int i = 0; i < 12; i++)
    if (i % 4)
      close(hold[i]);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

/* One lane holding many more connections than the others: its numbers
 * fill a long run while the numbers between them are free. */
START_TEST(a_long_run_of_the_remainder_in_use_is_skipped) {
  enum { HELD = 400 };
  int sv[2], hold[HELD], fd = -1, want, before;
  char c = 0;
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* dup takes the lowest free number: every number up to the last is in
   * use now */
  for (int i = 0; i < HELD; i++)
    ck_assert_int_ge(hold[i] = dup(sv[1]), 0);
  /* free the odd ones but one, the descriptor to move */
  for (int i = 0; i < HELD; i++)
    if (hold[i] % 2 && fd < 0)
      fd = hold[i];
    else if (hold[i] % 2)
      close(hold[i]);
  before = fd;
  want = lowest_free(0, 2);
  ck_assert_int_gt(want, hold[HELD - 1] - 2);
  fd = net_fd_with_remainder(fd, 0, 2);
  ck_assert_int_eq(fd, want);
  ck_assert(!is_open(before));
  ck_assert_int_eq(send(sv[0], "z", 1, 0), 1);
  ck_assert_int_eq(recv(fd, &c, 1, 0), 1);
  ck_assert_int_eq(c, 'z');
  for (int i = 0; i < HELD; i++)
    if (hold[i] % 2 == 0)
      close(hold[i]);
  close(fd);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

START_TEST(out_of_descriptors_leaves_the_descriptor_as_it_was) {
  int sv[2], fd, filled[64], n = 0;
  struct rlimit rl, old;
  char c = 0;
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* every number up to sv[1] in use, and none above it allowed */
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  for (int i = 0; i < sv[1] && n < 64; i++)
    if (!is_open(i))
      filled[n++] = dup(sv[1]);
  rl = old;
  rl.rlim_cur = (rlim_t)sv[1] + 1;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  fd = net_fd_with_remainder(sv[1], ((unsigned)sv[1] + 1) % 2, 2);
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  ck_assert_int_eq(fd, -1);
  /* sv[1] is still open and still the same socket */
  ck_assert_int_eq(send(sv[1], "y", 1, 0), 1);
  ck_assert_int_eq(recv(sv[0], &c, 1, 0), 1);
  ck_assert_int_eq(c, 'y');
  for (int i = 0; i < n; i++)
    close(filled[i]);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

static Suite *net_suite(void) {
  Suite *s = suite_create("net");
  TCase *tc = tcase_create("remainder");
  tcase_add_test(tc, a_descriptor_with_the_remainder_is_kept);
  tcase_add_test(tc, a_descriptor_moves_to_the_lowest_free_number_that_fits);
  tcase_add_test(tc, a_long_run_of_the_remainder_in_use_is_skipped);
  tcase_add_test(tc, out_of_descriptors_leaves_the_descriptor_as_it_was);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(net_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
