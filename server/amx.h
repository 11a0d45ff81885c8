/* amx.h - the process's permission to use AMX tile data, which BF16
 * mode's AMX kernels need (attn_problem.amx).
 *
 * Linux hands a process AMX's tile data (XSTATE component 18, 8 KiB a
 * thread) only when asked, with arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA); a tile instruction before that is SIGILL.  The
 * permission holds for every thread of the process, those that exist and
 * those made later, and for children made by fork; exec clears it.  It
 * makes room for the tile state in every signal frame (8 KiB more), so
 * the kernel refuses it while a thread has an alternate signal stack too
 * small for that, and refuses such stacks afterwards.  attnd installs no
 * alternate signal stack: its handlers (main.c, shm/fault.c) run on the
 * threads' own stacks, which are megabytes.
 *
 * Threads: call amx_request once, on the main thread, before the threads
 * that run the core exist (main.c does, before the batcher starts; the
 * test and benchmark programs at their start).  Not thread-safe.
 */
#ifndef ATTND_AMX_H
#define ATTND_AMX_H

#include <stddef.h>

/* 1 when this CPU has AMX-TILE and AMX-BF16, the OS enables their state
 * (XCR0) and the kernel granted the tile-data permission: the core may
 * then use AMX (attn_problem.amx = 1).  0 otherwise, with why (n bytes)
 * saying what was missing, or empty when the CPU simply has no AMX.
 * Asking again after a grant returns 1 again. */
int amx_request(char *why, size_t n);

#endif /* ATTND_AMX_H */
