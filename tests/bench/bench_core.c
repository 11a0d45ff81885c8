/* bench_core.c - throughput of attn_forward against plain sgemm.
 *
 * Prints GFLOP/s of attn_forward for (B, H, Lq, Lk, D) = (4, 16, 512, 512,
 * 64) with Dv = D, with and without weights, next to one-thread
 * cblas_sgemm 512x512x64 measured in the same run.  Both run on one BLAS
 * thread, as an attnd worker does.  The attention FLOP count is that of its
 * two products, 2 * B * H * Lq * Lk * (D + Dv); softmax and masking are
 * the overhead this bench shows.
 *
 *   cc -std=c11 -D_GNU_SOURCE -O3 -I. $(pkg-config --cflags openblas) \
 *      tests/bench/bench_core.c $(ls core/[a-z]*.c) -o build/bench_core \
 *      $(pkg-config --libs openblas) -lm
 *
 * Optional arguments: B H Lq Lk D [causal(0/1)].
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/attn.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *rand_buf(size_t n, unsigned *seed) {
  float *x = malloc(n * sizeof *x);
  if (!x) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) x[i] = (float)rand_r(seed) / RAND_MAX - 0.5f;
  return x;
}

/* Best time of reps runs of fn (best-of filters out a loaded machine). */
typedef void bench_fn(void *ctx);

static double best_time(bench_fn *fn, void *ctx, int reps) {
  double best = 1e30;
  fn(ctx); /* warm-up: page faults, BLAS buffers */
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    fn(ctx);
    double t = now_s() - t0;
    best = t < best ? t : best;
  }
  return best;
}

typedef struct gemm_ctx { float *a, *b, *c; int m, n, k, iters; } gemm_ctx;

static void run_gemm(void *v) {
  gemm_ctx *g = v;
  for (int i = 0; i < g->iters; i++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k,
                1.0f, g->a, g->k, g->b, g->k, 0.0f, g->c, g->n);
}

typedef struct attn_ctx { attn_problem p; float *out, *w; int rc; } attn_ctx;

static void run_attn(void *v) {
  attn_ctx *a = v;
  a->rc = attn_forward(&a->p, a->out, a->w);
}

int main(int argc, char **argv) {
  int B = 4, H = 16, Lq = 512, Lk = 512, D = 64, causal = 0;
  unsigned seed = 1;
  if (argc >= 6) {
    B = atoi(argv[1]); H = atoi(argv[2]); Lq = atoi(argv[3]);
    Lk = atoi(argv[4]); D = atoi(argv[5]);
  }
  if (argc >= 7) causal = atoi(argv[6]);
  openblas_set_num_threads(1);

  gemm_ctx g = {rand_buf(512 * 64, &seed), rand_buf(512 * 64, &seed),
                rand_buf(512 * 512, &seed), 512, 512, 64, 20};
  double tg = best_time(run_gemm, &g, 5) / g.iters;
  double gemm_gf = 2.0 * 512 * 512 * 64 / tg * 1e-9;
  printf("sgemm 512x512x64 (1 thread): %7.2f GFLOP/s\n", gemm_gf);

  attn_ctx a;
  attn_problem_init(&a.p);
  a.p.B = B; a.p.H = H; a.p.Hkv = H; a.p.Lq = Lq; a.p.Lk = Lk;
  a.p.D = a.p.Dk = a.p.Dv = D;
  a.p.q = rand_buf((size_t)B * H * Lq * D, &seed);
  a.p.k = rand_buf((size_t)B * H * Lk * D, &seed);
  a.p.v = rand_buf((size_t)B * H * Lk * D, &seed);
  a.p.scale = 0.125f;
  a.p.causal = causal ? ATTN_CAUSAL_UPPER_LEFT : ATTN_CAUSAL_NONE;
  a.out = rand_buf((size_t)B * H * Lq * D, &seed);
  double flops = 2.0 * B * H * Lq * Lk * (2.0 * D);
  for (int with_w = 1; with_w >= 0; with_w--) {
    a.w = with_w ? rand_buf((size_t)B * H * Lq * Lk, &seed) : NULL;
    double t = best_time(run_attn, &a, 3);
    if (a.rc != 0) {
      fprintf(stderr, "attn_forward: %s\n", attnd_strerror(a.rc));
      return 1;
    }
    printf("attn_forward (%d,%d,%d,%d,%d)%s %s weights: %7.2f GFLOP/s "
           "(%.1f ms, %.0f%% of sgemm)\n", B, H, Lq, Lk, D,
           causal ? " causal (dense-equivalent FLOPs)" : "",
           with_w ? "with   " : "without",
           flops / t * 1e-9, t * 1e3, 100.0 * flops / t * 1e-9 / gemm_gf);
    free(a.w);
  }
  free((void *)a.p.q); free((void *)a.p.k); free((void *)a.p.v);
  free(a.out); free(g.a); free(g.b); free(g.c);
  return 0;
}
