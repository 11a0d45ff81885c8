/* test_shm_faults.c - the guarded copies under the shared memory registry
 * (server/shm/fault.c) on real POSIX shared memory objects: a page its file
 * system cannot back (a caught SIGBUS, with its own message), a SIGBUS
 * outside a guarded copy that still kills or reaches a handler installed
 * before attnd's, and a computation reading a lost mapping in place
 * stopped by its guard with flush-to-zero put back. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_skip.h"
#include "proto/mem.h"
#include "proto/proto.h"
#include "server/shm/fault.h"
#include "server/shm/shm.h"
#include "server/shm/shm_http.h"
#include "support_shm.h"
#include "support_suite.h"

/* ---- a file system that cannot back a page ---------------------------- */

/* The child's side of a_full_file_system_is_named, in a mount namespace
 * of its own with a 64 KiB tmpfs on /dev/shm: a sparse 1 MiB object is
 * registered whole, the file system is then filled, and a write to one
 * of the object's holes and a read of another fault though the object
 * still holds them.  0 when both fail with the message that names the
 * file system; 77 when a mount namespace is not allowed here; any other
 * code is a failure, its message on stderr.  No check asserts: this runs
 * in a process of its own. */
static int full_file_system_child(void) {
  static const char key[] = "/attnd-test-full";
  static const char filler[] = "/attnd-test-filler";
  char err[PROTO_ERR_MAX] = "", page[4096] = {0};
  if (unshare(CLONE_NEWNS) != 0 ||
      mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("attnd-test", "/dev/shm", "tmpfs", 0, "size=64k") != 0)
    return 77;
  int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, 1 << 20) != 0)
    return 2;
  close(fd);
  struct shm_registry *reg = shm_new(8, 1 << 21);
  if (fault_init() != 0 || reg_rc(reg, "r", key, 0, 1 << 20, err) != 0) {
    fprintf(stderr, "register: %s\n", err);
    return 3;
  }
  fd = shm_open(filler, O_RDWR | O_CREAT | O_EXCL, 0600);
  while (fd >= 0 && write(fd, page, sizeof page) > 0)
    ;
  if (fd < 0 || errno != ENOSPC)
    return 4;
  close(fd);
  struct shm_region *r = shm_acquire(reg, "r");
  int rc = 0;
  if (shm_region_write(r, 8192, page, 64, err) != ATTND_EINVAL ||
      !strstr(err, "writing '/attnd-test-full' failed") ||
      !strstr(err, "file system full?"))
    rc = 5;
  else if (shm_region_read(r, 65536, page, 64, err) != ATTND_EINVAL ||
           !strstr(err, "reading '/attnd-test-full' failed") ||
           !strstr(err, "file system full?"))
    rc = 6;
  if (rc)
    fprintf(stderr, "%s\n", err[0] ? err : "the copy did not fail");
  shm_release(r);
  shm_unregister(reg, "r");
  shm_free(reg);
  return rc;
}

/* A page the kernel cannot back faults like a truncated one, but the
 * object still holds it: the message says the file system may be full,
 * not that the object was truncated. */
START_TEST(a_full_file_system_is_named) {
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(full_file_system_child());
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st), "the child was killed by signal %d",
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  if (WEXITSTATUS(st) == 77) {
    support_skip("a_full_file_system_is_named", "no mount namespace with a "
                 "tmpfs here (%s)", geteuid() == 0 ? "not allowed" : "not root");
    return;
  }
  ck_assert_msg(WEXITSTATUS(st) == 0, "the child failed with code %d",
                WEXITSTATUS(st));
}
END_TEST

/* ---- SIGBUS outside a guarded copy ----------------------------------- */

/* Maps 2 pages of object key (created if need be) and then empties it:
 * every byte of the mapping faults.  MAP_FAILED on an error; no check
 * asserts, so that a process outside a running test may call it. */
static unsigned char *map_then_empty(const char *key) {
  void *m = MAP_FAILED;
  int fd = shm_open(key, O_RDWR | O_CREAT, 0600);
  if (fd < 0)
    return MAP_FAILED;
  if (ftruncate(fd, 8192) == 0)
    m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m != MAP_FAILED && ftruncate(fd, 0) != 0) {
    munmap(m, 8192);
    m = MAP_FAILED;
  }
  close(fd);
  return m;
}

/* map_then_empty of a new object of this test's (unlink_objects). */
static unsigned char *lost_mapping(void) {
  unsigned char *m = map_then_empty(make_object(8192));
  ck_assert_ptr_ne(m, MAP_FAILED);
  return m;
}

/* Under AddressSanitizer its SIGBUS handler comes first, and attnd's
 * passes on to it what is not a guard's: it reports and exits 1. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_HEARS_SIGBUS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_HEARS_SIGBUS 1
#endif
#endif
#ifndef ASAN_HEARS_SIGBUS
#define ASAN_HEARS_SIGBUS 0
#endif

/* Runs how(m) in a child with the handler installed and m a lost
 * mapping; asserts that the child died of SIGBUS (or of the sanitizer's
 * report of it). */
static void dies_of_sigbus(void (*how)(unsigned char *m), const char *what) {
  unsigned char *m = lost_mapping();
  ck_assert_int_eq(fault_init(), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  /* no core file in the tree */
    how(m);
    _exit(0);  /* survived: the parent fails the test */
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  int asan_report = WIFEXITED(st) && WEXITSTATUS(st) == 1;
  ck_assert_msg((WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS) ||
                    (ASAN_HEARS_SIGBUS && asan_report),
                "%s: the child %s %d, not killed by SIGBUS", what,
                WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  munmap(m, 8192);
  unlink_objects();
}

static void touch_unguarded(unsigned char *m) {
  volatile unsigned char *p = m;
  p[100] = 1;
}

/* A guarded copy whose fault is outside the guarded range: the guard
 * covers dst (healthy memory), the fault is in src. */
static void fault_beside_the_guard(unsigned char *m) {
  static unsigned char healthy[64];
  (void)fault_copy_to(healthy, m, sizeof healthy);
}

static void sent_sigbus(unsigned char *m) {
  (void)m;
  raise(SIGBUS);
}

START_TEST(sigbus_outside_a_guard_still_kills) {
  /* a guarded copy still works in the parent, before and after */
  unsigned char *m = lost_mapping(), b;
  ck_assert_int_eq(fault_init(), 0);
  ck_assert_int_eq(fault_copy_from(&b, m + 4100, 1), ATTND_EINVAL);
  munmap(m, 8192);
  unlink_objects();
  dies_of_sigbus(touch_unguarded, "an unguarded access");
  dies_of_sigbus(fault_beside_the_guard, "a fault outside the guarded range");
  dies_of_sigbus(sent_sigbus, "a SIGBUS sent by raise");
  m = lost_mapping();
  ck_assert_int_eq(fault_copy_to(m + 10, "x", 1), ATTND_EINVAL);
  munmap(m, 8192);
  unlink_objects();
}
END_TEST

/* ---- a SIGBUS handler installed before attnd's ----------------------- */

/* This test binary, to run again as a fresh process: argv[0], not
 * /proc/self/exe, which under valgrind is valgrind. */
static const char *self_path;

/* Set once the child expects its own handler to be called. */
static volatile sig_atomic_t earlier_expected;

static void earlier_plain(int sig) {
  _exit(sig == SIGBUS && earlier_expected ? 42 : 3);
}

static void earlier_info(int sig, siginfo_t *si, void *uctx) {
  (void)si;
  (void)uctx;
  earlier_plain(sig);
}

/* The child's side, in a fresh process (the test binary run again, since
 * fault_init installs once per process): its own SIGBUS handler first
 * (SA_SIGINFO for "fault", a plain one for "raise"), then attnd's.  A
 * guarded copy's fault must stay attnd's; then an unguarded access
 * ("fault") or a raise ("raise") must reach the earlier handler, which
 * exits 42. */
static int earlier_handler_child(const char *mode) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (strcmp(mode, "fault") == 0) {
    sa.sa_sigaction = earlier_info;
    sa.sa_flags = SA_SIGINFO;
  } else {
    sa.sa_handler = earlier_plain;
  }
  if (sigaction(SIGBUS, &sa, NULL) != 0 || fault_init() != 0)
    return 2;
  char key[64];
  snprintf(key, sizeof key, "/attnd-test-%d-earlier", (int)getpid());
  unsigned char *m = map_then_empty(key), b;
  shm_unlink(key);
  if (m == MAP_FAILED)
    return 4;
  if (fault_copy_from(&b, m + 4100, 1) != ATTND_EINVAL)
    return 6;
  earlier_expected = 1;
  if (strcmp(mode, "fault") == 0)
    touch_unguarded(m);
  else
    raise(SIGBUS);
  return 0;  /* survived: the parent fails the test */
}

START_TEST(an_earlier_sigbus_handler_still_hears_the_rest) {
  static const char *const modes[] = {"fault", "raise"};
  for (int i = 0; i < 2; i++) {
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      char *argv[] = {"test_shm", "--earlier-sigbus-handler",
                      (char *)modes[i], NULL};
      execv(self_path, argv);
      _exit(5);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 42,
                  "%s: the child %s %d, not 42 from its own handler", modes[i],
                  WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
}
END_TEST

/* ---- a computation reading a mapping in place ------------------------ */

static int read_at(void *arg) {
  const volatile unsigned char *p = arg;
  return p[0] + 7;
}

/* What the core does around P V: flush-to-zero on, then a read that may
 * fault. */
static int ftz_then_read(void *arg) {
  fenv_t env;
  fegetenv(&env);
  env.__mxcsr |= 0x8040u;  /* FTZ and DAZ */
  fesetenv(&env);
  return read_at(arg);
}

static unsigned mxcsr_now(void) {
  fenv_t env;
  fegetenv(&env);
  return env.__mxcsr;
}

START_TEST(fault_run_stops_a_computation_that_faults) {
  unsigned char *m = lost_mapping(), healthy[1] = {5};  /* m: no pages */
  struct fault_range r[2] = {{m, 4096}, {m + 4096, 4096}};
  unsigned long caught = fault_caught();
  unsigned before = mxcsr_now();
  ck_assert_int_eq(fault_init(), 0);
  ck_assert_int_eq(fault_run(r, 2, read_at, healthy), 12);
  ck_assert_uint_eq(fault_caught(), caught);
  ck_assert_int_eq(fault_run(r, 2, ftz_then_read, m + 4100), ATTND_EINVAL);
  ck_assert_uint_eq(fault_caught(), caught + 1);
  ck_assert_uint_eq(mxcsr_now(), before);  /* flush-to-zero off again */
  ck_assert_int_eq(fault_run(r, FAULT_RANGES + 1, read_at, m), ATTND_EINTERNAL);
  munmap(m, 8192);
  unlink_objects();
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--earlier-sigbus-handler") == 0)
    return earlier_handler_child(argv[2]);
  self_path = argv[0];
  mem_init();
  support_case cases[] = {
    {"faults", {a_full_file_system_is_named,
                sigbus_outside_a_guard_still_kills,
                an_earlier_sigbus_handler_still_hears_the_rest,
                fault_run_stops_a_computation_that_faults}},
  };
  return support_run("shm_faults", cases, sizeof cases / sizeof cases[0]);
}
