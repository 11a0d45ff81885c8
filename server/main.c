/* main.c - attnd: configuration, signals, start and stop order.
 *
 * DESIGN
 * - Start: parse the configuration (exit 2 on a bad value), pin OpenBLAS
 *   to one thread per caller, ask for AMX's tile data (amx.h) before any
 *   thread of ours exists, start the batcher (loop thread + workers),
 *   then HTTP; only then mark ready and print "listening on", which is what
 *   supervisors and the test harness wait for.
 * - Signals: SIGTERM/SIGINT handlers only write a byte to a self-pipe
 *   (async-signal-safe, and correct whichever thread - MHD, libuv,
 *   OpenBLAS - the kernel picks to run the handler).  The main thread
 *   sleeps in poll() on that pipe.  A second signal _exits at once.
 * - Drain: /readyz 503; after --drain-delay-ms stop accepting connections
 *   and close the batcher to new work; wait until every started request
 *   has been answered, bounded by --drain-s; then cancel what is left,
 *   queued or running (batcher_cancel_all: each stops within a key block
 *   and is answered 503), wait for those answers; then stop MHD (no
 *   connection is suspended by then), then the batcher, and free
 *   everything: the shared memory regions (shm.h) last, when no request
 *   holds one.
 */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "proto/mem.h"
#include "proto/proto.h"
#include "server/sched/batcher.h"
#include "server/amx.h"
#include "server/clock.h"
#include "server/config.h"
#include "server/http/http.h"
#include "server/obs/log.h"
#include "server/obs/metrics.h"
#include "server/conn/probe.h"
#include "server/obs/reqid.h"
#include "server/shm/shm.h"
#include "server/conn/tls.h"

/* The self-pipe: written by the signal handler, read by main.  These two
 * are the only file-scope state, because a signal handler has no other
 * way to reach main. */
static int main_sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t main_sig_count;

static void main_on_signal(int sig) {
  int saved = errno;
  char c = (char)sig;
  if (main_sig_count++ > 0)
    _exit(1);  /* second signal: the operator wants out now */
  if (write(main_sig_pipe[1], &c, 1) < 0) {
    /* Nothing to do: the pipe is non-blocking and one byte suffices. */
  }
  errno = saved;
}

static int main_signals(void) {
  struct sigaction sa;
  int i;
  if (pipe(main_sig_pipe) != 0)
    return -1;
  for (i = 0; i < 2; i++) {
    fcntl(main_sig_pipe[i], F_SETFL, O_NONBLOCK);
    fcntl(main_sig_pipe[i], F_SETFD, FD_CLOEXEC);
  }
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = main_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* MHD sends with MSG_NOSIGNAL on Linux, but nothing else guarantees it. */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

/* Sleeps up to ms milliseconds (-1: forever); returns 1 if a signal
 * arrived meanwhile. */
static int main_wait_signal(int ms) {
  struct pollfd p = {main_sig_pipe[0], POLLIN, 0};
  char buf[16];
  int n = poll(&p, 1, ms);
  if (n > 0 && (p.revents & POLLIN)) {
    while (read(main_sig_pipe[0], buf, sizeof buf) > 0) {
    }
    return 1;
  }
  return 0;
}

/* Enough descriptors for --max-conns, as many lingering sockets (at most
 * --max-conns of them, linger.h), the shared memory regions and our own. */
static void main_raise_nofile(int max_conns, int shm_regions) {
  struct rlimit rl;
  rlim_t want = (rlim_t)max_conns * 2 + (rlim_t)shm_regions + 64;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
    return;
  rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
    log_info("only %llu file descriptors; --max-conns %d may not be reached",
             (unsigned long long)rl.rlim_cur, max_conns);
}

/* Waits until cond(h, b) is false or the deadline passes; 1 if it held. */
static int main_wait_while(int (*cond)(struct http *, struct batcher *),
                           struct http *h, struct batcher *b,
                           uint64_t deadline_ns) {
  while (cond(h, b)) {
    if (clock_now_ns() >= deadline_ns)
      return 0;
    main_wait_signal(10);
  }
  return 1;
}

static int main_busy(struct http *h, struct batcher *b) {
  return http_active(h) > 0 || batcher_outstanding(b) > 0;
}

static int main_jobs_left(struct http *h, struct batcher *b) {
  (void)h;
  return batcher_outstanding(b) > 0;
}

/* The graceful part of SIGTERM; returns 0, or -1 when a cancelled job
 * has still not stopped after a grace (a bug: MHD cannot then be stopped
 * safely). */
static int main_drain(struct http *h, struct batcher *b,
                      const struct config *cfg) {
  uint64_t start = clock_now_ns();
  uint64_t deadline = start + (uint64_t)cfg->drain_s * 1000000000u;
  http_set_state(h, HTTP_DRAINING);
  log_info("draining: readiness is 503; accepting for %ld ms more",
           cfg->drain_delay_ms);
  main_wait_signal((int)cfg->drain_delay_ms);
  http_quiesce(h);
  batcher_close(b);
  if (main_wait_while(main_busy, h, b, deadline))
    return 0;
  log_error("drain: %zu requests unfinished after %ld s; cancelling them "
            "(503)", http_active(h), cfg->drain_s);
  /* Queued jobs complete at once; running ones stop within a key block
   * or before their next phase.  The grace is for a loaded machine, then
   * their answers go out. */
  batcher_cancel_all(b);
  if (!main_wait_while(main_jobs_left, h, b, clock_now_ns() + 2000000000u))
    return -1;
  main_wait_while(main_busy, h, b, clock_now_ns() + 500000000u);
  return 0;
}

/* glibc serves an allocation past its mmap threshold (128 KiB at first,
 * raised up to the largest freed one) with a fresh mapping and gives the
 * top of a heap back to the kernel beyond a trim threshold: a request
 * whose tensors and bodies take a few MiB would then fault in every page
 * it touches, on every request.  Keeping allocations up to 32 MiB (the
 * most glibc allows on 64-bit) in the heaps, and up to 64 MiB of free heap
 * before trimming, lets requests reuse warm memory; bigger requests still
 * get their own mappings.  Under the sanitizers, their allocator ignores
 * these. */
static void main_tune_malloc(void) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

static void main_config_parts(const struct config *cfg,
                              const struct tls_pem *tls,
                              struct batcher_config *bc,
                              struct http_config *hc) {
  size_t budget = (size_t)cfg->max_inflight_mb << 20;
  memset(bc, 0, sizeof *bc);
  bc->workers = cfg->workers;
  bc->max_batch = cfg->max_batch;
  bc->max_delay_us = cfg->max_delay_us;
  bc->inline_ns = (uint64_t)cfg->inline_us * 1000u;
  bc->inline_idle_ns = (uint64_t)cfg->inline_idle_us * 1000u;
  bc->max_queue = (size_t)cfg->max_queue;
  bc->max_bytes = budget;
  memset(hc, 0, sizeof *hc);
  hc->host = cfg->host;
  hc->port = cfg->port;
  hc->threads = cfg->http_threads;
  hc->workers = cfg->workers;
  hc->max_conns = cfg->max_conns;
  hc->conn_memory = (size_t)cfg->conn_memory_kb * 1024;
  hc->conn_timeout_s = cfg->conn_timeout_s;
  hc->max_body = (size_t)cfg->max_body_mb << 20;
  hc->timeout_ms = cfg->timeout_ms;
  hc->max_request_flop = (double)cfg->max_request_gflop * 1e9;
  hc->body_timeout_s = cfg->body_timeout_s;
  /* One request may never decode into more floats than the whole
   * in-flight budget could hold. */
  hc->max_elems = budget / sizeof(float);
  hc->max_inflight = budget;
  hc->token = cfg->token;
  hc->token_metrics = cfg->token_metrics;
  hc->max_conns_per_ip = cfg->max_conns_per_ip;
  hc->tls_cert = tls->cert;
  hc->tls_key = tls->key;
  hc->unix_path = cfg->unix_socket;
  hc->unix_mode = cfg->unix_socket_mode;
  hc->allow_client_shm = cfg->allow_client_shm;
}

/* AMX for BF16 mode where the CPU has it (amx.h): the batcher passes
 * the answer to every job.  Said once when the CPU has AMX but attnd may
 * not use it. */
static int main_amx(void) {
  char why[160];
  int amx = amx_request(why, sizeof why);
  if (!amx && why[0])
    log_info("AMX: %s; BF16 mode runs without it", why);
  return amx;
}

/* With --tls-cert/--tls-key: reads both PEM files now, at startup (the
 * only time attnd reads them).  0, or -1 after writing why to stderr. */
static int main_load_tls(const struct config *cfg, struct tls_pem *tls) {
  memset(tls, 0, sizeof *tls);
  if (!cfg->tls_cert[0])
    return 0;
  if (!tls_supported()) {
    fprintf(stderr, "attnd: --tls-cert: this libmicrohttpd was built "
            "without TLS support\n");
    return -1;
  }
  return tls_load(cfg->tls_cert, cfg->tls_key, tls, stderr) == 0 ? 0 : -1;
}

#ifdef ATTND_TEST_HOOKS
/* build/attnd-test only (proto/mem.h): fail the N-th allocation from
 * here on when ATTND_FAIL_ALLOC_AT says so, and say at the end how many
 * failed. */
static long main_fail_at;
static unsigned long main_allocs;

static void main_fail_from_env(void) {
  if ((main_fail_at = mem_fail_from_env()) > 0)
    log_info("ATTND_FAIL_ALLOC_AT: allocation %ld from now will fail",
             main_fail_at);
  else if (main_fail_at < 0)
    log_error("ATTND_FAIL_ALLOC_AT: not a positive integer; ignored");
  main_allocs = mem_allocations();
}

static void main_fail_report(void) {
  if (main_fail_at > 0)
    log_info("failure injection: %lu of %lu allocations failed",
             mem_injected(), mem_allocations() - main_allocs);
}
#else
static void main_fail_from_env(void) {}
static void main_fail_report(void) {}
#endif

int main(int argc, char **argv) {
  struct config cfg;
  struct batcher_config bc;
  struct http_config hc;
  struct metrics *m = NULL;
  struct batcher *b = NULL;
  struct http *h = NULL;
  struct shm_registry *shm = NULL;
  struct tls_pem tls = {NULL, NULL};
  char err[PROTO_ERR_MAX];
  int rc = config_parse(&cfg, argc, argv, stdout, stderr);

  if (rc == CONFIG_EXIT)
    return 0;
  if (rc == CONFIG_PROBE)
    return probe_run(cfg.host, cfg.port, 3000, cfg.tls_cert[0] != '\0') == 0
               ? 0
               : 1;
  if (rc != CONFIG_RUN || main_load_tls(&cfg, &tls) != 0)
    return 2;
  /* Checked by config_parse already; before any thread reads the name. */
  if (proto_v2_set_model_name(cfg.model_name, err) != 0) {
    fprintf(stderr, "attnd: --model-name: %s\n", err);
    return 2;
  }
  log_init(cfg.log_json ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT, cfg.access_log);
  reqid_init();
  main_config_parts(&cfg, &tls, &bc, &hc);
  main_raise_nofile(cfg.max_conns, cfg.shm_max_regions);
  main_tune_malloc();
  mem_init();  /* cJSON's allocator, before any thread */
  /* One BLAS thread per worker: the workers are the parallelism. */
  openblas_set_num_threads(1);
  bc.amx = main_amx();
  if (main_signals() != 0 || !(m = metrics_new()) ||
      !(shm = shm_new((size_t)cfg.shm_max_regions,
                      (uint64_t)cfg.shm_max_mb << 20)) ||
      !(b = batcher_start(&bc, m))) {
    log_error("cannot start: out of memory or threads");
    rc = 1;
    goto out;
  }
  hc.shm = shm;
  if (!(h = http_start(&hc, b, m))) {
    rc = 1;
    goto out;
  }
  http_set_state(h, HTTP_READY);
  main_fail_from_env();
  if (tls.cert)
    log_info(cfg.unix_socket[0] ? "TLS: this port and the unix socket speak "
                                  "HTTPS only"
                                : "TLS: this port speaks HTTPS only");
  if (cfg.unix_socket[0])
    log_info("listening on unix socket %s (mode %04o)", cfg.unix_socket,
             cfg.unix_socket_mode);
  log_info(strchr(cfg.host, ':') ? "listening on [%s]:%d (%d workers)"
                                  : "listening on %s:%d (%d workers)",
           cfg.host, http_port(h), cfg.workers);
  while (!main_wait_signal(-1)) {
  }
  if (main_drain(h, b, &cfg) != 0) {
    log_error("drain: cancelled jobs still running; exiting without "
              "cleanup");
    _exit(1);
  }
  main_fail_report();
  log_info("stopped");
  rc = 0;
out:
  if (h)
    http_stop(h);
  if (b)
    batcher_stop(b);
  shm_free(shm);  /* no request holds a region any more */
  metrics_free(m);
  tls_free(&tls);
  if (main_sig_pipe[0] >= 0) {
    close(main_sig_pipe[0]);
    close(main_sig_pipe[1]);
  }
  uv_library_shutdown();
  return rc;
}
