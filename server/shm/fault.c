/* fault.c - guarded copies to and from a mapping (see fault.h).
 *
 * DESIGN
 *
 * Threads: any thread copies; the SIGBUS handler runs on the thread that
 * faulted (a fault's SIGBUS is synchronous: the kernel sends it to the
 * faulting thread), so everything it reads is that thread's own.
 *
 * What is shared, and how:
 * - fault_guard is thread-local: the jump buffer, the guarded ranges
 *   [lo[i], lo[i] + len[i]) and armed.  Only its own thread writes it,
 *   and its handler reads it in between two instructions of that same
 *   thread, so volatile fields and compiler-only fences
 *   (atomic_signal_fence) order the stores against the copy (or fn); no
 *   lock, no atomic instruction.
 * - fault_once / fault_init_rc / fault_prev: pthread_once makes the one
 *   installation, and fault_prev (the disposition it replaced) is written
 *   there, before the handler can run, and only read afterwards.  The
 *   disposition of SIGBUS is process-wide; the handler itself only ever
 *   sets it back to SIG_DFL, on its way to killing the process.
 *
 * The handler is async-signal-safe: it reads its thread's guard, and
 * calls only sigaction, raise, siglongjmp and the handler it replaced
 * (no allocation, no lock, no stdio).  SA_NODEFER leaves SIGBUS unblocked
 * while it runs, and sa_mask is empty, so the signal mask in the handler
 * is the copy's own: the jump back needs no mask restored, and
 * sigsetjmp(..., 0) saves none, which keeps the guard free of system
 * calls.
 *
 * Between sigsetjmp and a siglongjmp nothing local is modified, so no
 * local needs to be volatile; the guard itself is volatile because the
 * handler reads it.
 */
#include "server/shm/fault.h"

#include <fenv.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/attnd_err.h"

struct fault_guard {
  sigjmp_buf jb;
  /* the mapped side of the copy, or the ranges of a fault_run */
  volatile uintptr_t lo[FAULT_RANGES], len[FAULT_RANGES];
  volatile int n;
  volatile sig_atomic_t armed; /* 1 from sigsetjmp to the copy's end */
  volatile unsigned long caught;
};

static _Thread_local struct fault_guard fault_guard;

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static int fault_init_rc;
static struct sigaction fault_prev;  /* what fault_install replaced */

/* Puts sig back to its default action. */
static void fault_reset(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
}

/* A SIGBUS that is not a guarded copy's goes to the handler installed
 * before attnd's, as the kernel would have delivered it (less that
 * handler's own sa_mask); 0 when there was none to call. */
static int fault_pass_on(int sig, siginfo_t *si, void *uctx) {
  int info = (fault_prev.sa_flags & SA_SIGINFO) != 0;
  if (info ? fault_prev.sa_sigaction == NULL
           : fault_prev.sa_handler == SIG_DFL ||
                 fault_prev.sa_handler == SIG_IGN)
    return 0;
  if (fault_prev.sa_flags & SA_RESETHAND)
    fault_reset(sig);
  if (info)
    fault_prev.sa_sigaction(sig, si, uctx);
  else
    fault_prev.sa_handler(sig);
  return 1;
}

static void fault_on_sigbus(int sig, siginfo_t *si, void *uctx) {
  struct fault_guard *g = &fault_guard;
  /* si_addr means something only for a signal the kernel raised for a
   * fault (si_code > 0); kill(2) and sigqueue(3) leave other fields
   * there. */
  if (g->armed && si->si_code > 0) {
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < g->n; i++)
      if (a >= g->lo[i] && a - g->lo[i] < g->len[i]) {
        g->armed = 0;
        g->caught++;
        siglongjmp(g->jb, 1);
      }
  }
  /* Not a guarded copy's: the earlier handler's, or death as without
   * any.  A fault re-executes its instruction on return and faults again,
   * now with the default action; a sent signal is sent again (unblocked:
   * SA_NODEFER).  (SIG_IGN cannot ignore a fault: the kernel forces the
   * default action, so it is treated as SIG_DFL.) */
  if (fault_pass_on(sig, si, uctx))
    return;
  fault_reset(sig);
  if (si->si_code <= 0)
    raise(sig);
}

static void fault_install(void) {
  struct sigaction sa, now;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &fault_prev) != 0 ||
      sigaction(SIGBUS, NULL, &now) != 0 ||
      !(now.sa_flags & SA_SIGINFO) || now.sa_sigaction != fault_on_sigbus)
    fault_init_rc = ATTND_EINTERNAL;
}

int fault_init(void) {
  pthread_once(&fault_once, fault_install);
  return fault_init_rc;
}

/* memcpy(dst, src, n) with a fault in [lo, lo + n) caught. */
static int fault_copy(void *dst, const void *src, size_t n, const void *lo) {
  struct fault_guard *g = &fault_guard;
  if (n == 0)
    return 0;
  g->lo[0] = (uintptr_t)lo;
  g->len[0] = n;
  g->n = 1;
  if (sigsetjmp(g->jb, 0))
    return ATTND_EINVAL;  /* the handler disarmed the guard */
  g->armed = 1;
  atomic_signal_fence(memory_order_seq_cst);  /* armed before the copy */
  memcpy(dst, src, n);
  atomic_signal_fence(memory_order_seq_cst);  /* the copy before disarming */
  g->armed = 0;
  return 0;
}

int fault_copy_from(void *dst, const void *src, size_t n) {
  return fault_copy(dst, src, n, src);
}

int fault_copy_to(void *dst, const void *src, size_t n) {
  return fault_copy(dst, src, n, dst);
}

int fault_run(const struct fault_range *r, int n, int (*fn)(void *),
              void *arg) {
  struct fault_guard *g = &fault_guard;
  fenv_t env;
  int rc;
  if (n < 0 || n > FAULT_RANGES)
    return ATTND_EINTERNAL;
  for (int i = 0; i < n; i++) {
    g->lo[i] = (uintptr_t)r[i].p;
    g->len[i] = r[i].n;
  }
  g->n = n;
  fegetenv(&env);
  if (sigsetjmp(g->jb, 0)) {
    fesetenv(&env);  /* fn may have left flush-to-zero on */
    return ATTND_EINVAL;
  }
  g->armed = 1;
  atomic_signal_fence(memory_order_seq_cst);  /* armed before fn */
  rc = fn(arg);
  atomic_signal_fence(memory_order_seq_cst);  /* fn before disarming */
  g->armed = 0;
  return rc;
}

#ifdef ATTND_TEST_HOOKS
unsigned long fault_caught(void) { return fault_guard.caught; }
#endif
