/* core_rate.c - in-process attention calls per second, the ceiling an
 * HTTP request of the same shape is compared against.
 *
 *   core_rate B H Lq Lk D SECONDS THREADS WEIGHTS [SLEEP_US]
 *
 * THREADS threads (attnd's workers) each run whole problems back to back
 * on their own inputs and outputs, the way a worker runs one request:
 * attn_run_tasks over every task with a scratch buffer allocated once,
 * OpenBLAS at one thread.  WEIGHTS 1 also writes the (Lq, Lk) weights.
 * SLEEP_US (default 0) puts each thread to sleep that long before every
 * call, the way a server thread waits for a lone client's next request:
 * the sleep itself is not CPU time, but whatever waking costs the call
 * after it (on a virtual machine, waking the halted vCPU) is counted.
 * Prints one line:
 *
 *   CORE_RESULT {"calls":N,"seconds":S,"calls_per_s":R,"gflops":G,
 *                "cpu_s":C,"cpu_us_per_call":U}
 *
 * cpu_s is the CPU time the THREADS threads spent in their loops of calls
 * (each from its own clock), so cpu_us_per_call is what one call costs
 * whatever else the machine runs.  Not the process's: at start
 * OpenBLAS's idle threads spin for about a tenth of a second, which is
 * no call's cost.
 *
 * FLOPs per call are 4 * B * H * Lq * Lk * D (the two products).
 * Built and run by tests/load/bench_http.sh, bench_shm.sh and
 * bench_budget.sh against build/libattnd.a.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/attn.h"

void openblas_set_num_threads(int n);

static int B, H, Lq, Lk, D, with_w, sleep_us;
static double seconds;
static atomic_long calls;
static double loop_cpu_s[64]; /* each thread's CPU time over its calls */

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static float *rand_buf(size_t n, unsigned seed) {
  float *x = malloc(n * sizeof *x);
  size_t i;
  if (!x) {
    fprintf(stderr, "core_rate: out of memory\n");
    exit(1);
  }
  for (i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)(seed >> 8) * 0x1p-23f - 1.0f;
  }
  return x;
}

static void *run(void *arg) {
  unsigned seed = (unsigned)(size_t)arg * 7919u + 1;
  size_t nq = (size_t)B * H * Lq * D, nk = (size_t)B * H * Lk * D;
  attn_problem p;
  float *out, *w = NULL;
  void *scratch;
  size_t tasks, bytes;
  double end, t0;
  struct timespec nap;
  long n = 0;

  attn_problem_init(&p);
  p.B = B;
  p.H = p.Hkv = H;
  p.Lq = Lq;
  p.Lk = Lk;
  p.D = p.Dk = p.Dv = D;
  p.scale = 0.125f;
  p.q = rand_buf(nq, seed);
  p.k = rand_buf(nk, seed + 1);
  p.v = rand_buf(nk, seed + 2);
  out = rand_buf(nq, seed + 3);
  if (with_w)
    w = rand_buf((size_t)B * H * Lq * Lk, seed + 4);
  if (attn_check(&p) != 0) {
    fprintf(stderr, "core_rate: bad problem\n");
    exit(1);
  }
  tasks = attn_task_count(&p, with_w);
  bytes = attn_scratch_bytes(&p, with_w);
  scratch = aligned_alloc(64, (bytes + 127) / 64 * 64);
  if (!scratch)
    exit(1);
  t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  end = now_s() + seconds;
  nap.tv_sec = sleep_us / 1000000;
  nap.tv_nsec = (long)(sleep_us % 1000000) * 1000;
  while (now_s() < end) {
    if (sleep_us)
      nanosleep(&nap, NULL);
    if (attn_run_tasks(&p, 0, tasks, out, w, scratch) != 0)
      exit(1);
    n++;
  }
  atomic_fetch_add(&calls, n);
  loop_cpu_s[(size_t)arg] = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  free(scratch);
  free(out);
  free(w);
  free((void *)p.q);
  free((void *)p.k);
  free((void *)p.v);
  return NULL;
}

int main(int argc, char **argv) {
  int threads, i;
  pthread_t tid[64];
  double t0, t1, cpu = 0, flops;
  if (argc != 9 && argc != 10) {
    fprintf(stderr, "usage: core_rate B H Lq Lk D SECONDS THREADS WEIGHTS "
                    "[SLEEP_US]\n");
    return 2;
  }
  B = atoi(argv[1]);
  H = atoi(argv[2]);
  Lq = atoi(argv[3]);
  Lk = atoi(argv[4]);
  D = atoi(argv[5]);
  seconds = atof(argv[6]);
  threads = atoi(argv[7]);
  with_w = atoi(argv[8]);
  sleep_us = argc > 9 ? atoi(argv[9]) : 0;
  if (threads < 1 || threads > 64 || B < 1 || H < 1 || Lq < 1 || Lk < 1 ||
      D < 1 || seconds <= 0 || sleep_us < 0 || sleep_us > 1000000)
    return 2;
  openblas_set_num_threads(1);
  t0 = now_s();
  for (i = 0; i < threads; i++)
    pthread_create(&tid[i], NULL, run, (void *)(size_t)i);
  for (i = 0; i < threads; i++)
    pthread_join(tid[i], NULL);
  t1 = now_s();
  for (i = 0; i < threads; i++)
    cpu += loop_cpu_s[i];
  flops = 4.0 * B * H * Lq * Lk * D;
  printf("CORE_RESULT {\"calls\":%ld,\"seconds\":%.3f,\"calls_per_s\":%.1f,"
         "\"gflops\":%.2f,\"cpu_s\":%.3f,\"cpu_us_per_call\":%.1f}\n",
         (long)calls, t1 - t0, calls / (t1 - t0),
         calls * flops / (t1 - t0) / 1e9, cpu,
         calls ? cpu * 1e6 / (double)calls : 0.0);
  return 0;
}
