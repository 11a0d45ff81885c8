/* mem.c - the allocation wrapper and its failure injection (see mem.h). */
#include "mem.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static _Thread_local unsigned long mem_thread_failed;

#ifdef ATTND_TEST_HOOKS
/* Set by mem_fail_at(n > 0), cleared by mem_fail_at(0, 0).  Only then
 * is anything shared written: counters bumped by every thread on every
 * allocation would bounce their cache line between the cores. */
static _Atomic int mem_armed;
/* > 0: the allocation that brings it from 1 to 0 fails; 0: off. */
static _Atomic long mem_countdown;
static _Atomic int mem_persistent;  /* 1: every allocation fails */
static _Atomic int mem_sticky;      /* persistent failure has started */
static _Atomic unsigned long mem_injected_n;
static _Atomic unsigned long mem_calls;
static _Thread_local long mem_live_n;
#define MEM_LIVE(delta) (mem_live_n += (delta))
#else
#define MEM_LIVE(delta) ((void)0)
#endif

/* The calling thread's parse arena (mem.h).  Static thread-local storage,
 * so no thread ever allocates or frees it. */
typedef struct mem_arena {
  _Alignas(16) unsigned char buf[MEM_JSON_ARENA_BYTES];
  size_t used;
  int depth;  /* open brackets */
} mem_arena;
static _Thread_local mem_arena mem_json_arena;

/* The calling thread's decode hold (mem.h). */
static _Thread_local mem_hold_fn mem_hold_f;
static _Thread_local void *mem_hold_arg;

void mem_hold_begin(mem_hold_fn fn, void *arg) {
  mem_hold_f = fn;
  mem_hold_arg = arg;
}

void mem_hold_end(void) {
  mem_hold_f = NULL;
  mem_hold_arg = NULL;
}

int mem_hold(size_t n) {
  return mem_hold_f && n ? mem_hold_f(mem_hold_arg, n) : 0;
}

#ifdef ATTND_TEST_HOOKS
/* 1 when this allocation is to fail. */
static int mem_should_fail(void) {
  long v;
  if (!atomic_load_explicit(&mem_armed, memory_order_relaxed))
    return 0;
  atomic_fetch_add_explicit(&mem_calls, 1, memory_order_relaxed);
  if (atomic_load_explicit(&mem_sticky, memory_order_relaxed))
    goto fail;
  v = atomic_load_explicit(&mem_countdown, memory_order_relaxed);
  while (v > 0 && !atomic_compare_exchange_weak(&mem_countdown, &v, v - 1)) {
  }
  if (v != 1)
    return 0;
  if (atomic_load(&mem_persistent))
    atomic_store(&mem_sticky, 1);
fail:
  atomic_fetch_add(&mem_injected_n, 1);
  return 1;
}
#else
/* The release build injects nothing. */
static inline int mem_should_fail(void) { return 0; }
#endif

/* Counts p as a new live block, or a failure when it is NULL. */
static void *mem_track(void *p) {
  if (p)
    MEM_LIVE(1);
  else
    mem_thread_failed++;
  return p;
}

void *mem_malloc(size_t n) {
  if (mem_should_fail())
    return mem_track(NULL);
  return mem_track(malloc(n ? n : 1));
}

void *mem_calloc(size_t count, size_t size) {
  if (mem_should_fail())
    return mem_track(NULL);
  return mem_track(calloc(count ? count : 1, size ? size : 1));
}

void *mem_realloc(void *p, size_t n) {
  void *np;
  if (!p)
    return mem_malloc(n);
  if (mem_should_fail()) {
    mem_thread_failed++;
    return NULL;
  }
  np = realloc(p, n ? n : 1);
  if (!np)
    mem_thread_failed++;
  return np;
}

void *mem_aligned_alloc(size_t align, size_t n) {
  n = (n + align - 1) / align * align;
  if (mem_should_fail())
    return mem_track(NULL);
  return mem_track(aligned_alloc(align, n ? n : align));
}

char *mem_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = mem_malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

void mem_free(void *p) {
  if (!p)
    return;
  MEM_LIVE(-1);
  free(p);
}

void *mem_zalloc(void *opaque, unsigned items, unsigned size) {
  (void)opaque;
  if (size && items > SIZE_MAX / size)
    return NULL;
  return mem_malloc((size_t)items * size);
}

void mem_zfree(void *opaque, void *p) {
  (void)opaque;
  mem_free(p);
}

void mem_json_arena_begin(void) { mem_json_arena.depth++; }

void mem_json_arena_end(void) {
  mem_arena *a = &mem_json_arena;
  if (a->depth > 0 && --a->depth == 0)
    a->used = 0;
}

static int mem_in_arena(const mem_arena *a, const void *p) {
  uintptr_t u = (uintptr_t)p, b = (uintptr_t)a->buf;
  return u >= b && u < b + sizeof a->buf;
}

/* cJSON's malloc: the arena when a bracket is open and the block fits. */
static void *mem_json_malloc(size_t n) {
  mem_arena *a = &mem_json_arena;
  size_t need = (n + 15) & ~(size_t)15;
  if (a->depth == 0 || n == 0 || need > sizeof a->buf - a->used)
    return mem_malloc(n);
  if (mem_should_fail()) {
    mem_thread_failed++;
    return NULL;
  }
  void *p = a->buf + a->used;
  a->used += need;
  return p;
}

static void mem_json_free(void *p) {
  if (!mem_in_arena(&mem_json_arena, p))
    mem_free(p);
}

void mem_init(void) {
  cJSON_Hooks hooks = {mem_json_malloc, mem_json_free};
  cJSON_InitHooks(&hooks);
}

unsigned long mem_thread_failures(void) { return mem_thread_failed; }

#ifdef ATTND_TEST_HOOKS
void mem_fail_at(long n, int persistent) {
  atomic_store(&mem_armed, 0);
  atomic_store(&mem_countdown, 0);
  atomic_store(&mem_sticky, 0);
  atomic_store(&mem_persistent, persistent != 0);
  atomic_store(&mem_countdown, n > 0 ? n : 0);
  atomic_store(&mem_armed, n > 0);
}

long mem_fail_from_env(void) {
  const char *s = getenv("ATTND_FAIL_ALLOC_AT");
  char *end;
  long n;
  if (!s || !*s)
    return 0;
  n = strtol(s, &end, 10);
  if (n <= 0 || (*end && strcmp(end, "+")))
    return -1;
  mem_fail_at(n, *end == '+');
  return n;
}

unsigned long mem_injected(void) { return atomic_load(&mem_injected_n); }

unsigned long mem_allocations(void) { return atomic_load(&mem_calls); }

long mem_live(void) { return mem_live_n; }
#endif /* ATTND_TEST_HOOKS */
