/* fault.h - copies to and from a mapping that may lose its pages.
 *
 * A MAP_SHARED mapping of an object that someone else can truncate (a
 * client's shared memory region) raises SIGBUS on any access to a page
 * past the object's new end, and also where the kernel cannot back a
 * page at all (its file system full).  fault_copy_from and fault_copy_to
 * copy with memcpy inside a guard (fault_run runs a computation that
 * reads a mapping in place inside one): a SIGBUS that the kernel raises
 * for an address inside the mapped side of the copy ends the copy early,
 * and the function returns ATTND_EINVAL instead of the process dying.
 *
 * Any other SIGBUS (one sent with kill(2) or raised outside a guarded
 * copy, or for an address outside the guarded range: attnd's own memory,
 * a bug) goes where it would have gone without attnd's handler.  If a
 * handler was installed before fault_init (a sanitizer's, a fuzzer's), it
 * is called with the same arguments, and its report is made.  Otherwise
 * the handler puts SIGBUS back to SIG_DFL and returns (re-raising a sent
 * one), so that the process dies of SIGBUS, with its core, at the
 * faulting instruction.
 *
 * fault_init installs the handler, process-wide, once; every mapping that
 * is copied through here must be made after it has returned 0 (shm.c
 * calls it before its first mapping).  Copies made before it, or after it
 * failed, are plain memcpy and a fault in them kills the process.
 *
 * What a guarded copy does not promise: a copy that faults may have
 * copied any part of the bytes before the faulting page; and a copy is
 * no snapshot, since the other side of a shared mapping may write while
 * it runs.  Callers check what landed in their own memory, never the
 * mapping.
 *
 * Threads: every function may be called from any thread.  The guard is
 * the calling thread's own (thread-local): the kernel delivers a fault's
 * SIGBUS to the thread that faulted, so concurrent copies on different
 * threads each see only their own fault.  A thread runs one guarded copy
 * at a time (the handler never copies).
 */
#ifndef ATTND_FAULT_H
#define ATTND_FAULT_H

#include <stddef.h>

/* Installs the SIGBUS handler (sigaction, SA_SIGINFO) the first time;
 * later calls only return the first call's result.  0, or
 * ATTND_EINTERNAL when the handler could not be installed (or did not
 * stay installed: a sanitizer that refuses user SIGBUS handlers). */
int fault_init(void);

/* Copies n bytes from src, inside a mapping, to dst (attnd's memory).
 * 0, or ATTND_EINVAL when a page of [src, src + n) faulted. */
int fault_copy_from(void *dst, const void *src, size_t n);

/* Copies n bytes from src (attnd's memory) to dst, inside a mapping.
 * 0, or ATTND_EINVAL when a page of [dst, dst + n) faulted. */
int fault_copy_to(void *dst, const void *src, size_t n);

/* The most ranges one fault_run guards. */
#define FAULT_RANGES 4

struct fault_range {
  const void *p;            /* the first byte, inside a mapping */
  size_t n;
};

/* Runs fn(arg) with SIGBUS faults at any address of the n ranges r
 * caught, as a guarded copy's are: fn's value, or ATTND_EINVAL when a page
 * of them faulted, fn then left wherever it was (it must hold no lock
 * and own no allocation it would free later: the core's computation over
 * tensors read in place from a mapping, with scratch its caller owns).
 * The floating-point environment (the core's flush-to-zero bit) is put
 * back as it was before fn after a fault.  ATTND_EINTERNAL when n is
 * more than FAULT_RANGES.  The same threads rule: the guard is the
 * calling thread's, so every thread that reads the ranges runs under its
 * own fault_run. */
int fault_run(const struct fault_range *r, int n, int (*fn)(void *),
              void *arg);

#ifdef ATTND_TEST_HOOKS
/* How many faults the calling thread's guarded copies have caught since
 * it started: for tests (the test build only), which check that a
 * refusal came from the guard and not from some check before it. */
unsigned long fault_caught(void);
#endif

#endif /* ATTND_FAULT_H */
