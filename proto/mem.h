/* mem.h - the one allocation wrapper of proto/ and server/.
 *
 * Every allocation on the request path (decode, batching, encode, the
 * HTTP context and body) goes through these functions, cJSON's included
 * (mem_init installs them as its hooks) and zlib's (mem_zalloc and
 * mem_zfree as z_stream.zalloc/zfree).  The core allocates nothing on
 * the server's path (workers pass it their own scratch).
 *
 * They are thin: a pointer from mem_malloc is the C library's, so a
 * library that frees with free() (MHD's MHD_RESPMEM_MUST_FREE) may be
 * handed one.  What they add:
 *
 * - Allocations that failed on the calling thread, so that a caller
 *   whose library reports an allocation failure no differently from bad
 *   input (cJSON_Parse returns NULL for both) can tell them apart.
 * - In the test build only (ATTND_TEST_HOOKS: the unit tests and
 *   build/attnd-test; build/attnd has none of it), failure injection,
 *   the way SQLite tests out-of-memory paths (test/malloc*.test, "cause
 *   the N-th malloc to fail"): mem_fail_at(n, persistent) makes the n-th
 *   wrapped allocation from now on fail (return NULL) - and, when
 *   persistent, every one after it - until mem_fail_at(0, 0).
 *   attnd-test arms it from the environment variable ATTND_FAIL_ALLOC_AT=N
 *   once it is ready (main.c), for the integration test; unit tests call
 *   mem_fail_at directly.  With it come counters: allocation calls while
 *   injection is armed, injected failures, and live blocks of the calling
 *   thread (mem_live, exact while every block it allocates is released on
 *   it with mem_free or mem_realloc, which single-threaded unit tests use
 *   to check that an error path freed everything).
 *
 * This module's counters are the only mutable state of
 * proto/: atomics and thread-locals, safe from any thread.
 */
#ifndef ATTND_MEM_H
#define ATTND_MEM_H

#include <stddef.h>

/* Installs the wrapper as cJSON's allocator (cJSON_InitHooks).  Call once
 * at startup, before any thread uses cJSON. */
void mem_init(void);

/* The parse arena: between mem_json_arena_begin and mem_json_arena_end
 * on one thread, cJSON's allocations on that thread are carved from a
 * small per-thread block (MEM_JSON_ARENA_BYTES) instead of malloc, and
 * its frees of them do nothing; what does not fit goes to mem_malloc as
 * before.  A decoder's envelope tree is some 40 small nodes and names
 * that live for one call: the arena turns their 80 malloc and free calls
 * into pointer bumps.
 *
 * Contract: every cJSON tree made inside the bracket is deleted inside it,
 * on the same thread (a decoder parses, reads and deletes its tree in one
 * call), because end recycles the block.  Brackets nest (a count); only
 * the outermost end recycles.  Failure injection counts arena
 * allocations like any other, and a failed one counts for
 * mem_thread_failures.  Arena blocks are not counted by mem_live: they
 * are released by end, not one by one. */
#define MEM_JSON_ARENA_BYTES 16384
void mem_json_arena_begin(void);
void mem_json_arena_end(void);

/* The decode's hold on the in-flight budget: between mem_hold_begin and
 * mem_hold_end on one thread, mem_hold(n) asks fn(arg, n) to hold n more
 * bytes of the budget, before the caller allocates them; the holder gives
 * them back when its request ends.  fn returns 0 (held), MEM_HOLD_BUSY
 * (not now), MEM_HOLD_NEVER (not with what the request holds already,
 * even in an empty budget) or MEM_HOLD_OVER (n alone is more than the
 * whole budget).  Outside a bracket (unit tests, benchmarks) mem_hold
 * holds nothing and returns 0.  Brackets do not nest. */
#define MEM_HOLD_BUSY 1
#define MEM_HOLD_NEVER 2
#define MEM_HOLD_OVER 3
typedef int (*mem_hold_fn)(void *arg, size_t n);
void mem_hold_begin(mem_hold_fn fn, void *arg);
void mem_hold_end(void);
int mem_hold(size_t n);

void *mem_malloc(size_t n);
void *mem_calloc(size_t count, size_t size);
/* As realloc; mem_realloc(NULL, n) allocates.  On failure the old block
 * is left as it was. */
void *mem_realloc(void *p, size_t n);
/* As aligned_alloc, with n rounded up to a multiple of align. */
void *mem_aligned_alloc(size_t align, size_t n);
char *mem_strdup(const char *s);
void mem_free(void *p);

/* zlib's allocator signature (z_stream.zalloc and zfree). */
void *mem_zalloc(void *opaque, unsigned items, unsigned size);
void mem_zfree(void *opaque, void *p);

/* Failed allocations on the calling thread so far (injected or real). */
unsigned long mem_thread_failures(void);

#ifdef ATTND_TEST_HOOKS
/* Arms failure injection: the n-th wrapped allocation from now fails;
 * persistent != 0 makes every later one fail too.  n = 0 disarms. */
void mem_fail_at(long n, int persistent);

/* Reads ATTND_FAIL_ALLOC_AT ("N", or "N+" for persistent) and arms
 * mem_fail_at accordingly.  Returns N, 0 when the variable is unset, or
 * -1 when it is not a positive integer. */
long mem_fail_from_env(void);

/* Injected failures so far, in the whole process. */
unsigned long mem_injected(void);

/* Wrapped allocation calls (failed ones included) in the whole process
 * while failure injection was armed: what an N for mem_fail_at counts. */
unsigned long mem_allocations(void);

/* Blocks allocated on the calling thread through this wrapper, less those
 * released on it. */
long mem_live(void);
#endif /* ATTND_TEST_HOOKS */

#endif /* ATTND_MEM_H */
