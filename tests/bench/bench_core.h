/* bench_core.h - what the modes of build/attnd-bench share (bench_core.c
 * and bench_modes.c): the worker pool that runs a problem's tasks as the
 * server's workers do, one problem's buffers, and the timings.
 *
 * pool_init starts n - 1 threads (the caller is worker 0), pool_reserve
 * gives every worker scratch of at least bytes, pool_run_split runs every
 * task of p in chunks of tasks / (threads x chunks_per_thread) and returns
 * 0 or -1, with the workers' CPU seconds in *cpu and each worker's in
 * *split when not NULL; pool_run is the same with the server's few chunks
 * per thread.  problem_init fills q, k, v (and w when with_w) with random
 * values for shape s; problem_free frees them.  time_calls returns the best
 * wall seconds per call (best CPU seconds in *cpu) over at least min_reps
 * calls and min_s seconds; precision_cpu the best CPU seconds of rounds
 * calls.  xalloc aborts the benchmark when memory runs out; rand_buf
 * returns n floats in [-0.5, 0.5) from *seed, which it advances. */
#ifndef ATTND_BENCH_CORE_H
#define ATTND_BENCH_CORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/attn.h"

/* Workers whose CPU time and tasks a call records one by one. */
enum { SPLIT_MAX = 8 };

typedef struct split_stats {
  double cpu_of[SPLIT_MAX];  /* CPU seconds and tasks of each worker */
  size_t tasks_of[SPLIT_MAX];
  size_t chunk;              /* tasks per chunk */
} split_stats;

typedef struct run run;
typedef struct pool pool;
typedef struct worker_arg { pool *pl; int id; } worker_arg;

struct pool {
  int n;
  pthread_t *th;
  pthread_barrier_t start, done;
  void **scratch;
  size_t cap;
  worker_arg *args;
  run *job;       /* NULL tells the workers to exit */
};

typedef struct shape {
  const char *name;
  int B, H, L, D, causal;
  int weights_too;  /* 0: the no-weights path only */
  int one_thread;   /* 1: too small to split, one thread only */
  double min_s;     /* time each figure for at least this long */
} shape;

typedef struct problem {
  attn_problem p;
  float *q, *k, *v, *out, *w;
  int32_t *vl;
} problem;

/* 1 when AMX's tile-data permission came (bench_amx_start, at the start
 * of main, before any thread): problem_init sets attn_problem.amx from
 * it, so BF16 mode runs where attnd would run it. */
extern int bench_amx;
int bench_amx_start(void);

double now_s(void);
double cpu_s(void);
void *xalloc(size_t bytes);
float *rand_buf(size_t n, uint64_t *seed);
void pool_init(pool *pl, int n);
void pool_free(pool *pl);
void pool_reserve(pool *pl, size_t bytes);
int pool_run_split(pool *pl, const attn_problem *p, float *out, float *w,
                   double *cpu, size_t chunks_per_thread, split_stats *split);
int pool_run(pool *pl, const attn_problem *p, float *out, float *w,
             double *cpu);
void problem_init(problem *pb, const shape *s, int with_w, int gemm,
                  uint64_t *seed);
void problem_free(problem *pb);
double time_calls(pool *pl, problem *pb, float *w, int min_reps,
                  double min_s, double *cpu);
double precision_cpu(pool *pl, problem *pb, int rounds);

/* The modes of bench_modes.c: the float32 core against the FMA peak, one
 * worker against two, the core's side of make bench-peers, and the cost
 * estimate's rate against CPU time. */
int bench_peak(int quick);
int bench_split(int quick);
int bench_peers(int argc, char **argv);
int bench_estimate(int quick);

#endif
