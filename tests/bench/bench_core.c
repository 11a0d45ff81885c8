/* bench_core.c - throughput of core/ the way attnd's workers run it.
 *
 * build/attnd-bench (make bench builds it and tests/bench/run.sh runs it)
 * prints one JSON object per line:
 *
 *   {"kind":"ceiling", ...}   one-thread cblas_sgemm 512x512x64 GFLOP/s,
 *                             the best of many timings spread over the run
 *                             (and the OpenBLAS kernel that ran it)
 *   {"kind":"gemm", ...}      the same product (C = A B^T, the score
 *                             shape) through the core's native kernel,
 *                             one thread, timed the same way; "auto" is
 *                             the GEMM the core picks for the problems
 *                             below (blas or native)
 *   {"kind":"core", ...}      one shape, path (weights or not), thread
 *                             count: best wall time per call, GFLOP/s,
 *                             and the best CPU seconds per call summed
 *                             over the workers (blind to time other
 *                             processes take from them)
 *   {"kind":"mem", ...}       (mode "mem") peak resident memory beyond the
 *                             inputs and outputs of the no-weights path
 *   {"kind":"variant", ...}   (mode "variants") best CPU seconds per call
 *                             on one thread, no weights: (1, 8, 1024,
 *                             1024, 64) plain and with sinks, softcap and
 *                             ALiBi together (scores under the cap, and
 *                             every score past it); 8 sequences of 512 packed
 *                             into 4096, the 4096 square, and the 8
 *                             sequences as separate problems
 *
 * Work is split as in the server: T threads, each with its own scratch of
 * attn_scratch_bytes() allocated before timing, claim chunks of tasks
 * from an atomic counter and call attn_run_tasks on them; OpenBLAS runs
 * one thread per worker (openblas_set_num_threads(1)).  The calling
 * thread is worker 0; the others wait on a barrier between calls, so a
 * call costs no thread creation.
 *
 * FLOPs are those of the two products, 4 * B * H * Lq * Lk * D (Dv = D);
 * for causal shapes the same dense count is used and the line says so.
 * Every shape uses valid_lens (B,) = Lk, so the masked code path runs
 * with every key allowed and the FLOP count is exact.
 *
 *   attnd-bench [--threads N] [--quick] [--gemm auto|blas|native]
 *                                            the core table (--gemm
 *                                            forces attn_problem.gemm)
 *   attnd-bench mem L D [--threads N]        the memory figure
 *   attnd-bench variants                     the variant figures
 *   attnd-bench precision                    the BF16 mode figures
 *   attnd-bench peak                         the float32 core against
 *                                            the FMA peak
 *   attnd-bench split                        one worker against two
 *   attnd-bench estimate                     the cost estimate's rate
 *   attnd-bench peers B H L D QKV OUT        the core's side of make
 *                                            bench-peers (bench_peers)
 *
 * The modes peak, split, peers and estimate are in bench_modes.c; what
 * the two files share (the worker pool, problems, timings) in bench_core.h.
 *
 *   {"kind":"precision", ...} (mode "precision") one shape, one thread,
 *                             no weights: best CPU seconds per call in
 *                             float32 and in BF16 mode, rounds that
 *                             alternate the two, their ratio, the target
 *                             ratio and the kernels that ran; and BF16
 *                             mode on VDPBF16PS forced, where the CPU
 *                             has it (0 where not)
 *   {"kind":"of_peak", ...}   (mode "peak") one shape, one thread, no
 *                             weights: CPU seconds per call, the FMA
 *                             peak measured around it (GFLOP/s, lanes)
 *                             and the share of it, FLOPs 4 D per allowed
 *                             (query, key) pair; the median of rounds
 *                             alternating the shapes
 *   {"kind":"split", ...}     (mode "split") (1, 16, 2048, 2048, 64) on
 *                             one worker and split over two as the
 *                             server splits it: best wall times, their
 *                             ratio, each worker's CPU seconds and tasks
 *   {"kind":"estimate_rate", ...} (mode "estimate") one problem, one
 *                             thread, with weights or not: attn_cost_flops
 *                             in GFLOP, the best CPU seconds of a call and
 *                             their ratio, against the band docs/api.md
 *                             promises ("Cost limit")
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "server/amx.h"

#include "bench_core.h"
#include "core/attn.h"
#include "core/attn_impl.h"
#include "server/sched/work.h" /* WORK_SPLIT_CHUNKS: the server's split */

int bench_amx;

int bench_amx_start(void) {
  char why[160];
  int amx = amx_request(why, sizeof why);
  if (why[0]) fprintf(stderr, "attnd-bench: AMX: %s\n", why);
  return amx;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *xalloc(size_t bytes) {
  void *x = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!x) {
    fprintf(stderr, "attnd-bench: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return x;
}

float *rand_buf(size_t n, uint64_t *seed) {
  float *x = xalloc(n * sizeof *x);
  uint64_t s = *seed;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)(s >> 40) * 0x1p-24f - 0.5f;
  }
  *seed = s;
  return x;
}

/* ------------------------------------------------------------------ */
/* Workers: T threads run one problem's tasks per call. */

struct run {
  const attn_problem *p;
  float *out, *w;
  size_t ntasks, chunk;
  atomic_size_t next;
  atomic_int err;
  pthread_mutex_t mu;
  int cpu_clock;  /* 1: read the thread CPU clocks around the work */
  double cpu;     /* CPU seconds of all workers on this call */
  size_t chunks_per_thread;  /* the split: tasks / (threads x this) */
  split_stats st;
};


double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void claim(run *r, void *scratch, int id) {
  double c0 = r->cpu_clock ? cpu_s() : 0.0;
  size_t done = 0;
  for (;;) {
    size_t t0 = atomic_fetch_add(&r->next, r->chunk), t1;
    if (t0 >= r->ntasks) break;
    t1 = t0 + r->chunk < r->ntasks ? t0 + r->chunk : r->ntasks;
    if (attn_run_tasks(r->p, t0, t1, r->out, r->w, scratch) != 0)
      atomic_store(&r->err, 1);
    done += t1 - t0;
  }
  if (!r->cpu_clock) return;
  double c = cpu_s() - c0;
  pthread_mutex_lock(&r->mu);
  r->cpu += c;
  if (id < SPLIT_MAX) r->st.cpu_of[id] = c, r->st.tasks_of[id] = done;
  pthread_mutex_unlock(&r->mu);
}

static void *worker_main(void *v) {
  worker_arg *a = v;
  pool *pl = a->pl;
  for (;;) {
    pthread_barrier_wait(&pl->start);
    if (!pl->job) return NULL;
    claim(pl->job, pl->scratch[a->id], a->id);
    pthread_barrier_wait(&pl->done);
  }
}

void pool_init(pool *pl, int n) {
  pl->n = n;
  pl->th = calloc((size_t)n, sizeof *pl->th);
  pl->scratch = calloc((size_t)n, sizeof *pl->scratch);
  pl->args = calloc((size_t)n, sizeof *pl->args);
  pl->cap = 0;
  pl->job = NULL;
  pthread_barrier_init(&pl->start, NULL, (unsigned)n);
  pthread_barrier_init(&pl->done, NULL, (unsigned)n);
  for (int i = 1; i < n; i++) {
    pl->args[i].pl = pl;
    pl->args[i].id = i;
    pthread_create(&pl->th[i], NULL, worker_main, &pl->args[i]);
  }
}

void pool_free(pool *pl) {
  pl->job = NULL;
  pthread_barrier_wait(&pl->start);
  for (int i = 1; i < pl->n; i++) pthread_join(pl->th[i], NULL);
  for (int i = 0; i < pl->n; i++) free(pl->scratch[i]);
  pthread_barrier_destroy(&pl->start);
  pthread_barrier_destroy(&pl->done);
  free(pl->th); free(pl->scratch); free(pl->args);
}

/* Scratch for every worker, allocated (and touched) outside the timing. */
void pool_reserve(pool *pl, size_t bytes) {
  if (bytes <= pl->cap) return;
  for (int i = 0; i < pl->n; i++) {
    free(pl->scratch[i]);
    pl->scratch[i] = xalloc(bytes);
    memset(pl->scratch[i], 0, bytes);
  }
  pl->cap = bytes;
}

/* One call: every task of p on the pool's threads, in chunks of tasks /
 * (threads x chunks_per_thread); 0 or -1.  *cpu (when cpu is not NULL)
 * gets the CPU seconds the workers spent on it, and split (when not
 * NULL) each worker's. */
int pool_run_split(pool *pl, const attn_problem *p, float *out,
                   float *w, double *cpu, size_t chunks_per_thread,
                   split_stats *split) {
  run r;
  memset(&r, 0, sizeof r);
  r.chunks_per_thread = chunks_per_thread;
  pthread_mutex_init(&r.mu, NULL);
  r.cpu_clock = cpu != NULL;
  r.cpu = 0.0;
  r.p = p;
  r.out = out;
  r.w = w;
  r.ntasks = attn_task_count(p, w != NULL);
  r.chunk = r.ntasks / ((size_t)pl->n * r.chunks_per_thread);
  if (r.chunk < 1) r.chunk = 1;
  atomic_init(&r.next, 0);
  atomic_init(&r.err, 0);
  if (pl->n == 1) {
    claim(&r, pl->scratch[0], 0);
  } else {
    pl->job = &r;
    pthread_barrier_wait(&pl->start);
    claim(&r, pl->scratch[0], 0);
    pthread_barrier_wait(&pl->done);
  }
  pthread_mutex_destroy(&r.mu);
  if (cpu) *cpu = r.cpu;
  r.st.chunk = r.chunk;
  if (split) *split = r.st;
  return atomic_load(&r.err) ? -1 : 0;
}

/* A few chunks per thread, as the server's split does. */
int pool_run(pool *pl, const attn_problem *p, float *out, float *w,
             double *cpu) {
  return pool_run_split(pl, p, out, w, cpu, 8, NULL);
}

/* ------------------------------------------------------------------ */
/* The sgemm ceiling. */

typedef struct ceiling {
  float *a, *b, *c, *pack;
  double best;      /* seconds per product, best seen so far */
  double best_cpu;  /* the same in CPU seconds */
  double native, native_cpu; /* the same through the native kernel */
} ceiling;

static void ceiling_init(ceiling *cl, uint64_t *seed) {
  cl->a = rand_buf(512 * 64, seed);
  cl->b = rand_buf(512 * 64, seed);
  cl->c = rand_buf(512 * 512, seed);
  cl->pack = rand_buf(64 * 64, seed);
  cl->best = cl->best_cpu = cl->native = cl->native_cpu = 1e30;
}

static void ceiling_product(ceiling *cl, int native) {
#if ATTN__HAVE_AVX2_FMA
  if (native) {
    attn__gemm_nt_avx512(512, 512, 64, 1.0f, cl->a, 64, cl->b, 64, cl->c,
                         512, cl->pack);
    return;
  }
#endif
  (void)native;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 512, 512, 64, 1.0f,
              cl->a, 64, cl->b, 64, 0.0f, cl->c, 512);
}

/* Times reps batches of 10 products and keeps the best per product, for
 * cblas_sgemm and (where the CPU has it) the native kernel. */
static void ceiling_sample(ceiling *cl, int reps) {
  int kinds = attn__use_avx512() ? 2 : 1;
  for (int r = 0; r < reps; r++)
    for (int native = 0; native < kinds; native++) {
      double t0 = now_s(), c0 = cpu_s();
      for (int i = 0; i < 10; i++) ceiling_product(cl, native);
      double t = (now_s() - t0) / 10, c = (cpu_s() - c0) / 10;
      double *bt = native ? &cl->native : &cl->best;
      double *bc = native ? &cl->native_cpu : &cl->best_cpu;
      *bt = t < *bt ? t : *bt;
      *bc = c < *bc ? c : *bc;
    }
}

static double ceiling_gflops(const ceiling *cl) {
  return 2.0 * 512 * 512 * 64 / cl->best * 1e-9;
}

/* ------------------------------------------------------------------ */
/* One shape. */

void problem_init(problem *pb, const shape *s, int with_w, int gemm,
                  uint64_t *seed) {
  size_t nq = (size_t)s->B * s->H * s->L * s->D;
  attn_problem_init(&pb->p);
  pb->p.B = s->B; pb->p.H = pb->p.Hkv = s->H;
  pb->p.Lq = pb->p.Lk = s->L;
  pb->p.D = pb->p.Dk = pb->p.Dv = s->D;
  pb->q = rand_buf(nq, seed);
  pb->k = rand_buf(nq, seed);
  pb->v = rand_buf(nq, seed);
  pb->out = rand_buf(nq, seed);
  pb->w = with_w ? rand_buf((size_t)s->B * s->H * s->L * s->L, seed) : NULL;
  pb->vl = xalloc((size_t)s->B * sizeof *pb->vl);
  for (int b = 0; b < s->B; b++) pb->vl[b] = s->L;
  pb->p.q = pb->q; pb->p.k = pb->k; pb->p.v = pb->v;
  pb->p.valid_lens = pb->vl;
  pb->p.scale = 1.0f / 8.0f;
  pb->p.causal = s->causal ? ATTN_CAUSAL_UPPER_LEFT : ATTN_CAUSAL_NONE;
  pb->p.gemm = gemm;
  pb->p.amx = bench_amx;
}

void problem_free(problem *pb) {
  free(pb->q); free(pb->k); free(pb->v); free(pb->out); free(pb->w);
  free(pb->vl);
}

/* Best wall seconds per call (and best CPU seconds summed over the
 * workers in *cpu): at least min_reps calls and min_s seconds.  Reading a
 * thread's CPU clock is a system call (about a microsecond here, as long
 * as a whole tiny call), so for calls under a millisecond on one thread
 * the wall timings read no CPU clock and the CPU time comes from batches
 * of calls between two reads instead. */
double time_calls(pool *pl, problem *pb, float *w, int min_reps,
                  double min_s, double *cpu) {
  double best = 1e30, start = now_s(), c;
  *cpu = 1e30;
  pool_reserve(pl, attn_scratch_bytes(&pb->p, w != NULL));
  double t0 = now_s();
  if (pool_run(pl, &pb->p, pb->out, w, &c) != 0) { /* warm-up */
    fprintf(stderr, "attnd-bench: attn_run_tasks failed\n");
    exit(1);
  }
  int batched = pl->n == 1 && now_s() - t0 < 1e-3;
  for (int r = 0; r < min_reps || now_s() - start < min_s; r++) {
    t0 = now_s();
    pool_run(pl, &pb->p, pb->out, w, batched ? NULL : &c);
    double t = now_s() - t0;
    best = t < best ? t : best;
    if (!batched) *cpu = c < *cpu ? c : *cpu;
    if (r > 100000) break;
  }
  if (batched) {
    int calls = (int)(1e-3 / best) + 1;
    for (int r = 0; r < 20; r++) {
      double c0 = cpu_s();
      for (int i = 0; i < calls; i++)
        pool_run(pl, &pb->p, pb->out, w, NULL);
      c = (cpu_s() - c0) / calls;
      *cpu = c < *cpu ? c : *cpu;
    }
  }
  return best;
}

static void bench_shape(const shape *s, pool **pools, const int *nthreads,
                        int npools, ceiling *cl, int quick, int gemm,
                        uint64_t *seed) {
  problem pb;
  double flops = 4.0 * s->B * s->H * (double)s->L * s->L * s->D;
  int reps = quick ? 2 : 5;
  double min_s = quick ? 0.05 : s->min_s, cpu;
  problem_init(&pb, s, s->weights_too, gemm, seed);
  for (int with_w = s->weights_too; with_w >= 0; with_w--)
    for (int k = 0; k < npools; k++) {
      if (s->one_thread && nthreads[k] != 1) continue;
      ceiling_sample(cl, 3);
      double t = time_calls(pools[k], &pb, with_w ? pb.w : NULL, reps, min_s,
                            &cpu);
      printf("{\"kind\":\"core\",\"shape\":\"%s\",\"B\":%d,\"H\":%d,"
             "\"Lq\":%d,\"Lk\":%d,\"D\":%d,\"causal\":%d,\"weights\":%d,"
             "\"threads\":%d,\"sec\":%.9g,\"gflops\":%.6g,"
             "\"cpu_sec\":%.9g}\n",
             s->name, s->B, s->H, s->L, s->L, s->D, s->causal, with_w,
             nthreads[k], t, flops / t * 1e-9, cpu);
      fflush(stdout);
    }
  problem_free(&pb);
}

/* ------------------------------------------------------------------ */
/* Memory of the no-weights path at length L: resident set before the
 * call (inputs and outputs touched) against the peak after it. */

static long rss_kib(void) {
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &pages, &res) != 2) {
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int bench_mem(int L, int D, int threads) {
  shape s = {"nw", 1, 1, L, D, 0, 0, 0, 0.0};
  uint64_t seed = 7;
  problem pb;
  pool pl;
  struct rusage ru;
  problem_init(&pb, &s, 0, ATTN_GEMM_AUTO, &seed);
  long before = rss_kib();
  pool_init(&pl, threads);
  size_t scratch = attn_scratch_bytes(&pb.p, 0);
  pool_reserve(&pl, scratch);
  double t0 = now_s();
  int rc = pool_run(&pl, &pb.p, pb.out, NULL, NULL);
  double t = now_s() - t0;
  getrusage(RUSAGE_SELF, &ru);
  pool_free(&pl);
  size_t io = (size_t)4 * L * D * sizeof(float);
  printf("{\"kind\":\"mem\",\"L\":%d,\"D\":%d,\"threads\":%d,\"rc\":%d,"
         "\"inputs_outputs_mib\":%.3f,\"rss_before_kib\":%ld,"
         "\"maxrss_kib\":%ld,\"peak_beyond_io_mib\":%.3f,"
         "\"scratch_per_thread_kib\":%.1f,\"sec\":%.6g}\n",
         L, D, threads, rc, io / 1048576.0, before, ru.ru_maxrss,
         (ru.ru_maxrss - before) / 1024.0, scratch / 1024.0, t);
  problem_free(&pb);
  return rc != 0;
}

/* What weighing a request before it runs costs (attn_cost_flops, which
 * attnd calls for every inference request), against the request's own
 * compute on one thread: best of many calls, in nanoseconds. */
static void bench_checks(const shape *s, pool *p1, int gemm, uint64_t *seed) {
  problem pb;
  double best = 1e30, cpu, sink = 0.0;
  problem_init(&pb, s, 1, gemm, seed);
  for (int r = 0; r < 200; r++) {
    double t0 = now_s();
    for (int i = 0; i < 1000; i++) {
      pb.p.Lq = s->L + (i & 1);  /* no hoisting out of the loop */
      sink += attn_cost_flops(&pb.p, 1, 0);
    }
    double t = (now_s() - t0) / 1000;
    best = t < best ? t : best;
  }
  pb.p.Lq = s->L;
  double compute = time_calls(p1, &pb, pb.w, 20, 0.3, &cpu);
  printf("{\"kind\":\"checks\",\"shape\":\"%s\",\"B\":%d,\"H\":%d,"
         "\"L\":%d,\"D\":%d,\"cost_ns\":%.4g,\"compute_ns\":%.6g,"
         "\"share\":%.3g,\"sink\":%.3g}\n", s->name, s->B, s->H, s->L, s->D,
         best * 1e9, compute * 1e9, best / compute, sink > 0 ? 1.0 : 0.0);
  problem_free(&pb);
}

/* ------------------------------------------------------------------ */
/* The attention variants' cost: rounds that alternate the cases, so that
 * a noisy neighbour hurts each case alike; the best per case is kept. */

typedef struct variant {
  const char *name;
  problem pb;
  float *sinks, *slopes;
  int32_t cu[9];
  double cpu, wall;
} variant;

/* extras: 0 plain; 1 sinks, softcap 30 (the scores, |s| < 2 here, stay
 * where the cap barely bends them, as in Gemma 2's cap of 50) and ALiBi;
 * 2 the same with softcap 0.1, so that every score is past the cap */
static void variant_init(variant *vr, const char *name, int L, int H,
                         int extras, int packed, uint64_t *seed) {
  shape s = {name, 1, H, L, 64, 0, 0, 1, 0.0};
  memset(vr, 0, sizeof *vr);
  vr->name = name;
  problem_init(&vr->pb, &s, 0, ATTN_GEMM_AUTO, seed);
  vr->pb.p.valid_lens = NULL;
  vr->cpu = vr->wall = 1e30;
  if (extras) {
    vr->sinks = rand_buf((size_t)H, seed);
    vr->slopes = xalloc((size_t)H * sizeof *vr->slopes);
    for (int h = 0; h < H; h++) vr->slopes[h] = 1.0f / (float)(2 << h);
    vr->pb.p.sinks = vr->sinks;
    vr->pb.p.softcap = extras == 2 ? 0.1f : 30.0f;
    vr->pb.p.alibi_slopes = vr->slopes;
  }
  if (packed) {
    for (int n = 0; n <= packed; n++) vr->cu[n] = n * (L / packed);
    vr->pb.p.cu_seqlens_q = vr->pb.p.cu_seqlens_k = vr->cu;
    vr->pb.p.n_seqs = packed;
  }
}

static void variant_time(variant *vr, pool *pl, int calls) {
  double cpu, t = time_calls(pl, &vr->pb, NULL, 1, 0.0, &cpu);
  for (int i = 1; i < calls; i++) {
    double c, w = time_calls(pl, &vr->pb, NULL, 1, 0.0, &c);
    t = w < t ? w : t;
    cpu = c < cpu ? c : cpu;
  }
  vr->wall = t < vr->wall ? t : vr->wall;
  vr->cpu = cpu < vr->cpu ? cpu : vr->cpu;
}

static int bench_variants(int quick) {
  uint64_t seed = 11;
  variant v[6];
  int rounds = quick ? 2 : 12, n = 6;
  pool pl;
  variant_init(&v[0], "plain 1x8x1024x1024x64", 1024, 8, 0, 0, &seed);
  variant_init(&v[1], "sinks+softcap+alibi 1x8x1024x1024x64", 1024, 8, 1, 0,
               &seed);
  variant_init(&v[2], "square 1x8x4096x4096x64", 4096, 8, 0, 0, &seed);
  variant_init(&v[3], "packed 8 x 512 in 1x8x4096x4096x64", 4096, 8, 0, 8,
               &seed);
  variant_init(&v[4], "one sequence 1x8x512x512x64", 512, 8, 0, 0, &seed);
  variant_init(&v[5], "sinks+softcap+alibi, softcap 0.1 (most scores past it), "
               "1x8x1024x1024x64", 1024, 8, 2, 0, &seed);
  pool_init(&pl, 1);
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < n; i++) {
      if (quick && i == 2) continue;
      variant_time(&v[i], &pl, i == 2 ? 1 : 3);
    }
  for (int i = 0; i < n; i++) {
    printf("{\"kind\":\"variant\",\"case\":\"%s\",\"threads\":1,"
           "\"sec\":%.9g,\"cpu_sec\":%.9g}\n", v[i].name, v[i].wall,
           v[i].cpu);
    problem_free(&v[i].pb);
    free(v[i].sinks);
    free(v[i].slopes);
  }
  pool_free(&pl);
  return 0;
}

/* ------------------------------------------------------------------ */
/* BF16 mode against float32: (B, H, L, D, target ratio), one thread,
 * no weights, rounds alternating float32, what auto runs in BF16 mode
 * (AMX where the CPU has it and the permission came), and where the CPU
 * has AVX512-BF16 the VDPBF16PS kernels and the float32 ones on rounded
 * operands, each forced. */

typedef struct precision_case { int B, H, L, D; double target; } precision_case;

static const precision_case precision_cases[] = {
  {1, 16, 2048, 64, 1.5}, {1, 16, 2048, 128, 1.6}, {1, 8, 128, 64, 1.3},
};

double precision_cpu(pool *pl, problem *pb, int rounds) {
  double best = 1e30, cpu;
  for (int r = 0; r < rounds; r++) {
    (void)time_calls(pl, pb, NULL, 1, 0.0, &cpu);
    best = cpu < best ? cpu : best;
  }
  return best;
}

static int bench_precision(int quick) {
  uint64_t seed = 5;
  int rounds = quick ? 2 : 8;
  pool pl;
  pool_init(&pl, 1);
  for (size_t i = 0; i < sizeof precision_cases / sizeof precision_cases[0];
       i++) {
    const precision_case *c = &precision_cases[i];
    shape s = {"precision", c->B, c->H, c->L, c->D, 0, 0, 1, 0.0};
    problem pb;
    double f32 = 1e30, b16 = 1e30, dp = 1e30, rn = 1e30;
    int small = c->L <= 256;
    problem_init(&pb, &s, 0, ATTN_GEMM_AUTO, &seed);
    pb.p.valid_lens = NULL;
    for (int r = 0; r < rounds; r++) {
      double t;
      pb.p.precision = ATTN_PRECISION_FP32;
      t = precision_cpu(&pl, &pb, small ? 20 : 1);
      f32 = t < f32 ? t : f32;
      pb.p.precision = ATTN_PRECISION_BF16;
      t = precision_cpu(&pl, &pb, small ? 20 : 1);
      b16 = t < b16 ? t : b16;
      if (!attn__use_avx512bf16()) continue;
      pb.p.gemm = ATTN_GEMM_BF16; /* VDPBF16PS, wherever it runs */
      t = precision_cpu(&pl, &pb, small ? 20 : 1);
      dp = t < dp ? t : dp;
      pb.p.gemm = ATTN_GEMM_NATIVE; /* float32 kernels, rounded operands */
      t = precision_cpu(&pl, &pb, small ? 20 : 1);
      rn = t < rn ? t : rn;
      pb.p.gemm = ATTN_GEMM_AUTO;
    }
    printf("{\"kind\":\"precision\",\"B\":%d,\"H\":%d,\"Lq\":%d,"
           "\"Lk\":%d,\"D\":%d,\"threads\":1,\"weights\":0,"
           "\"fp32_cpu_sec\":%.9g,\"bf16_cpu_sec\":%.9g,\"ratio\":%.4g,"
           "\"target\":%.2g,\"fp32_kernel\":\"%s\","
           "\"bf16_kernel\":\"%s\",\"vdpbf16ps_cpu_sec\":%.9g,"
           "\"vdpbf16ps_ratio\":%.4g,\"rounded_fp32_cpu_sec\":%.9g,"
           "\"rounded_fp32_ratio\":%.4g}\n",
           c->B, c->H, c->L, c->L, c->D, f32, b16, f32 / b16, c->target,
           attn_kernel_name(ATTN_PRECISION_FP32, bench_amx),
           attn_kernel_name(ATTN_PRECISION_BF16, bench_amx),
           dp < 1e30 ? dp : 0.0, dp < 1e30 ? f32 / dp : 0.0,
           rn < 1e30 ? rn : 0.0, rn < 1e30 ? f32 / rn : 0.0);
    fflush(stdout);
    problem_free(&pb);
  }
  pool_free(&pl);
  return 0;
}

/* ------------------------------------------------------------------ */

/* The shared machines this runs on are noisy: the best of many calls
 * over a second or more per figure finds the quiet moments. */
static const shape shapes[] = {
  {"tiny", 1, 1, 16, 32, 0, 1, 1, 0.5},
  {"small", 2, 8, 128, 64, 0, 1, 0, 1.0},
  {"medium", 4, 16, 512, 64, 0, 1, 0, 2.0},
  {"large", 1, 16, 2048, 64, 0, 1, 0, 3.0},
  {"large-causal", 1, 16, 2048, 64, 1, 1, 0, 2.0},
  {"xl", 1, 1, 16384, 64, 0, 1, 0, 3.0},
};

static int gemm_of(const char *name) {
  if (!strcmp(name, "blas")) return ATTN_GEMM_BLAS;
  if (!strcmp(name, "native")) return ATTN_GEMM_NATIVE;
  if (strcmp(name, "auto") != 0)
    fprintf(stderr, "attnd-bench: --gemm %s: auto, blas or native; using "
                    "auto\n", name);
  return ATTN_GEMM_AUTO;
}

/* The GEMM the core runs for the benchmark's problems. */
static const char *gemm_used(int gemm) {
  shape s = {"probe", 1, 1, 16, 32, 0, 0, 0, 0.0};
  uint64_t seed = 3;
  problem pb;
  problem_init(&pb, &s, 0, gemm, &seed);
  int pick = attn__gemm_pick(&pb.p);
  problem_free(&pb);
  return pick == ATTN_GEMM_NATIVE ? "native" : "blas";
}

int main(int argc, char **argv) {
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), quick = 0;
  int gemm = ATTN_GEMM_AUTO;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--gemm") && i + 1 < argc)
      gemm = gemm_of(argv[++i]);
  }
  if (threads < 1) threads = 1;
  openblas_set_num_threads(1);
  bench_amx = bench_amx_start();
  if (argc >= 4 && !strcmp(argv[1], "mem"))
    return bench_mem(atoi(argv[2]), atoi(argv[3]), threads);
  if (argc >= 2 && !strcmp(argv[1], "variants"))
    return bench_variants(quick);
  if (argc >= 2 && !strcmp(argv[1], "precision"))
    return bench_precision(quick);
  if (argc >= 2 && !strcmp(argv[1], "peak"))
    return bench_peak(quick);
  if (argc >= 2 && !strcmp(argv[1], "split"))
    return bench_split(quick);
  if (argc >= 2 && !strcmp(argv[1], "peers"))
    return bench_peers(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "estimate"))
    return bench_estimate(quick);

  ceiling cl;
  ceiling_init(&cl, &seed);
  ceiling_sample(&cl, 20);
  pool p1, pn;
  pool_init(&p1, 1);
  pool_init(&pn, threads);
  pool *pools[2] = {&p1, &pn};
  int nth[2] = {1, threads};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int np = threads > 1 ? 2 : 1;
    if (quick && shapes[i].L > 4096) continue;
    bench_shape(&shapes[i], pools, nth, np, &cl, quick, gemm, &seed);
  }
  bench_checks(&shapes[0], &p1, gemm, &seed);
  bench_checks(&shapes[1], &p1, gemm, &seed);
  ceiling_sample(&cl, 20);
  printf("{\"kind\":\"ceiling\",\"m\":512,\"n\":512,\"k\":64,"
         "\"threads\":1,\"gflops\":%.6g,\"cpu_gflops\":%.6g,"
         "\"workers\":%d,\"corename\":\"%s\"}\n",
         ceiling_gflops(&cl), 2.0 * 512 * 512 * 64 / cl.best_cpu * 1e-9,
         threads, openblas_get_corename());
  if (cl.native < 1e30)
    printf("{\"kind\":\"gemm\",\"impl\":\"native\",\"m\":512,"
           "\"n\":512,\"k\":64,\"threads\":1,\"gflops\":%.6g,"
           "\"cpu_gflops\":%.6g,\"auto\":\"%s\",\"used\":\"%s\"}\n",
           2.0 * 512 * 512 * 64 / cl.native * 1e-9,
           2.0 * 512 * 512 * 64 / cl.native_cpu * 1e-9,
           gemm_used(ATTN_GEMM_AUTO), gemm_used(gemm));
  else
    printf("{\"kind\":\"gemm\",\"impl\":\"native\",\"gflops\":null,"
           "\"auto\":\"%s\",\"used\":\"%s\"}\n",
           gemm_used(ATTN_GEMM_AUTO), gemm_used(gemm));
  pool_free(&p1);
  pool_free(&pn);
  free(cl.a); free(cl.b); free(cl.c); free(cl.pack);
  return 0;
}
