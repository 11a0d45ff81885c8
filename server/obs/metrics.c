/* metrics.c - Prometheus metrics (see metrics.h).
 *
 * DESIGN: every value is an _Atomic uint64_t (or int64_t for gauges)
 * updated with relaxed atomics from MHD threads, workers and the batcher
 * loop thread; there is no lock.  A histogram is a fixed array of
 * per-bucket counts (not cumulative: render() accumulates them) plus a
 * sum in nanoseconds or units and a count.  render() runs on an MHD
 * thread and tolerates values moving while it reads them.
 *
 * Series stay few: a full latency histogram only on the inference routes
 * (/v1/attention and v2 infer), whose latency is what an operator
 * watches; every other route gets a count and a sum of its latency.
 * The process_* family is read from /proc at each scrape (procself.h).
 */
#include "server/obs/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/attn.h"
#include "core/attnd_err.h"
#include "proto/mem.h"
#include "proto/proto.h"
#include "server/config.h"
#include "server/obs/procself.h"

/* HTTP statuses attnd can send; anything else is counted as "other". */
static const unsigned int metrics_codes[] = {200, 400, 401, 404, 405, 408,
                                             413, 414, 431, 500, 501, 503,
                                             504, 505};
#define N_CODES (sizeof metrics_codes / sizeof metrics_codes[0])

static const char *const metrics_route_names[METRICS_ROUTE_COUNT] = {
  "/v1/attention", "/healthz", "/readyz", "/metrics", "static", "/v2",
  "/v2/health/live", "/v2/health/ready", "/v2/models/:m",
  "/v2/models/:m/ready", "/v2/models/:m/infer", "/v2/models/:m/config",
  "/v2/models[/:m]/stats", "/v2/systemsharedmemory[/region/:r]/status",
  "/v2/systemsharedmemory/region/:r/register",
  "/v2/systemsharedmemory[/region/:r]/unregister", "other"};

/* Seconds buckets for the latency histograms. */
static const double metrics_time_bounds[] = {
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
  0.25, 0.5, 1, 2.5, 5, 10};
#define N_TIME (sizeof metrics_time_bounds / sizeof metrics_time_bounds[0])

static const double metrics_batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128,
                                              256};

/* GFLOP buckets for the flops estimate: a decade apart from a tiny
 * request to far past the default --max-request-gflop. */
static const double metrics_gflop_bounds[] = {0.0001, 0.001, 0.01, 0.1, 1,
                                             10, 100, 1000, 10000};
#define N_GFLOP (sizeof metrics_gflop_bounds / sizeof metrics_gflop_bounds[0])
#define N_BATCH (sizeof metrics_batch_bounds / sizeof metrics_batch_bounds[0])

struct metrics_hist {
  _Atomic uint64_t bucket[N_TIME + 1];  /* last one is +Inf only */
  _Atomic uint64_t sum;                 /* ns for times, units for sizes */
  _Atomic uint64_t count;
};

/* The routes with a latency histogram, by slot; the others' latency is
 * a count and a sum (metrics.route_ns, route_count). */
static const enum metrics_route metrics_hist_routes[] = {
  METRICS_ROUTE_ATTENTION, METRICS_ROUTE_V2_INFER};
#define N_HIST_ROUTES \
  (sizeof metrics_hist_routes / sizeof metrics_hist_routes[0])

struct metrics {
  _Atomic uint64_t requests[METRICS_ROUTE_COUNT][N_CODES + 1];
  _Atomic uint64_t bytes_in, bytes_out;
  _Atomic int64_t inflight, queue_depth;
  _Atomic int64_t inflight_bytes, inflight_limit;
  int amx;                  /* attn_problem.amx, set before threads */
  _Atomic uint64_t inline_runs[METRICS_INLINE_COUNT];
  _Atomic uint64_t splits, split_helped;
  _Atomic uint64_t cancelled[METRICS_CANCEL_COUNT];
  struct metrics_hist request_time[N_HIST_ROUTES];
  _Atomic uint64_t route_ns[METRICS_ROUTE_COUNT];
  _Atomic uint64_t route_count[METRICS_ROUTE_COUNT];
  struct metrics_hist queue_time, compute_time, batch_size, flops;
  struct metrics_model {
    _Atomic uint64_t count[METRICS_PHASE_COUNT], ns[METRICS_PHASE_COUNT];
    _Atomic uint64_t last_ms;
  } models[PROTO_MODEL_COUNT];
};

#define RELAXED memory_order_relaxed

struct metrics *metrics_new(void) { return calloc(1, sizeof(struct metrics)); }

void metrics_free(struct metrics *m) { free(m); }

static void metrics_observe(struct metrics_hist *h, const double *bounds,
                            size_t n, double value, uint64_t raw) {
  size_t i = 0;
  while (i < n && value > bounds[i])
    i++;
  atomic_fetch_add_explicit(&h->bucket[i], 1, RELAXED);
  atomic_fetch_add_explicit(&h->sum, raw, RELAXED);
  atomic_fetch_add_explicit(&h->count, 1, RELAXED);
}

static void metrics_observe_ns(struct metrics_hist *h, uint64_t ns) {
  metrics_observe(h, metrics_time_bounds, N_TIME, ns / 1e9, ns);
}

/* route's slot in metrics_hist_routes, or -1 when it has none. */
static int metrics_hist_slot(enum metrics_route route) {
  for (size_t i = 0; i < N_HIST_ROUTES; i++)
    if (metrics_hist_routes[i] == route)
      return (int)i;
  return -1;
}

void metrics_record_request(struct metrics *m, enum metrics_route route,
                            unsigned int status, size_t bytes_in,
                            size_t bytes_out, uint64_t duration_ns) {
  size_t c = 0;
  int slot;
  if ((unsigned)route >= METRICS_ROUTE_COUNT)
    route = METRICS_ROUTE_OTHER;
  while (c < N_CODES && metrics_codes[c] != status)
    c++;
  atomic_fetch_add_explicit(&m->requests[route][c], 1, RELAXED);
  atomic_fetch_add_explicit(&m->bytes_in, bytes_in, RELAXED);
  atomic_fetch_add_explicit(&m->bytes_out, bytes_out, RELAXED);
  if ((slot = metrics_hist_slot(route)) >= 0) {
    metrics_observe_ns(&m->request_time[slot], duration_ns);
  } else {
    atomic_fetch_add_explicit(&m->route_ns[route], duration_ns, RELAXED);
    atomic_fetch_add_explicit(&m->route_count[route], 1, RELAXED);
  }
}

void metrics_record_job(struct metrics *m, uint64_t queue_ns,
                        uint64_t compute_ns) {
  metrics_observe_ns(&m->queue_time, queue_ns);
  metrics_observe_ns(&m->compute_time, compute_ns);
}

void metrics_record_batch(struct metrics *m, int size) {
  metrics_observe(&m->batch_size, metrics_batch_bounds, N_BATCH, size,
                  (uint64_t)size);
}

void metrics_record_cancel(struct metrics *m, enum metrics_cancel why) {
  if (why < METRICS_CANCEL_COUNT)
    atomic_fetch_add_explicit(&m->cancelled[why], 1, RELAXED);
}

void metrics_record_split(struct metrics *m, size_t helped) {
  atomic_fetch_add_explicit(&m->splits, 1, RELAXED);
  atomic_fetch_add_explicit(&m->split_helped, helped, RELAXED);
}

void metrics_record_inline(struct metrics *m, enum metrics_inline why) {
  if ((unsigned)why < METRICS_INLINE_COUNT)
    atomic_fetch_add_explicit(&m->inline_runs[why], 1, RELAXED);
}

void metrics_record_model(struct metrics *m, int model,
                          enum metrics_phase phase, uint64_t ns) {
  struct metrics_model *mm;
  if (model < 0 || model >= PROTO_MODEL_COUNT ||
      (unsigned)phase >= METRICS_PHASE_COUNT)
    return;
  mm = &m->models[model];
  atomic_fetch_add_explicit(&mm->count[phase], 1, RELAXED);
  atomic_fetch_add_explicit(&mm->ns[phase], ns, RELAXED);
  if (phase == METRICS_PHASE_SUCCESS) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store_explicit(&mm->last_ms,
                          (uint64_t)ts.tv_sec * 1000u +
                              (uint64_t)ts.tv_nsec / 1000000u,
                          RELAXED);
  }
}

static proto_stat metrics_phase_stat(struct metrics_model *mm,
                                     enum metrics_phase phase) {
  proto_stat st;
  st.count = atomic_load_explicit(&mm->count[phase], RELAXED);
  st.ns = atomic_load_explicit(&mm->ns[phase], RELAXED);
  return st;
}

void metrics_model_stats(struct metrics *m, int model,
                         proto_model_stats *out) {
  struct metrics_model *mm;
  memset(out, 0, sizeof *out);
  if (model < 0 || model >= PROTO_MODEL_COUNT)
    return;
  mm = &m->models[model];
  out->last_inference_ms = atomic_load_explicit(&mm->last_ms, RELAXED);
  out->success = metrics_phase_stat(mm, METRICS_PHASE_SUCCESS);
  out->fail = metrics_phase_stat(mm, METRICS_PHASE_FAIL);
  out->queue = metrics_phase_stat(mm, METRICS_PHASE_QUEUE);
  out->compute_input = metrics_phase_stat(mm, METRICS_PHASE_INPUT);
  out->compute_infer = metrics_phase_stat(mm, METRICS_PHASE_INFER);
  out->compute_output = metrics_phase_stat(mm, METRICS_PHASE_OUTPUT);
}

void metrics_add_inflight(struct metrics *m, int delta) {
  atomic_fetch_add_explicit(&m->inflight, delta, RELAXED);
}

void metrics_add_queue_depth(struct metrics *m, int delta) {
  atomic_fetch_add_explicit(&m->queue_depth, delta, RELAXED);
}

void metrics_add_inflight_bytes(struct metrics *m, int64_t delta) {
  atomic_fetch_add_explicit(&m->inflight_bytes, delta, RELAXED);
}

void metrics_set_inflight_limit(struct metrics *m, size_t bytes) {
  atomic_store_explicit(&m->inflight_limit, (int64_t)bytes, RELAXED);
}

void metrics_set_amx(struct metrics *m, int amx) { m->amx = amx; }

/* The sum is kept in MFLOP, so that it fits in its integer. */
void metrics_record_flops(struct metrics *m, double flops) {
  metrics_observe(&m->flops, metrics_gflop_bounds, N_GFLOP, flops / 1e9,
                  (uint64_t)(flops / 1e6));
}

/* A growing output buffer; a failed append sets oom and is ignored. */
struct metrics_buf {
  char *p;
  size_t len, cap;
  int oom;
};

static void metrics_printf(struct metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void metrics_printf(struct metrics_buf *b, const char *fmt, ...) {
  va_list ap;
  int n;
  if (b->oom)
    return;
  for (;;) {
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    char *np = mem_realloc(b->p, b->cap * 2 + (size_t)n);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = b->cap * 2 + (size_t)n;
  }
}

static void metrics_head(struct metrics_buf *b, const char *name,
                         const char *type, const char *help) {
  metrics_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Writes one histogram's series; labels is "" or `route="..."`. */
static void metrics_hist_render(struct metrics_buf *b, const char *name,
                                const char *labels, struct metrics_hist *h,
                                const double *bounds, size_t n, double unit) {
  const char *sep = labels[0] ? "," : "";
  uint64_t cum = 0, count = 0;
  size_t i;
  for (i = 0; i <= n; i++) {
    cum += atomic_load_explicit(&h->bucket[i], RELAXED);
    if (i < n)
      metrics_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                     bounds[i], (unsigned long long)cum);
  }
  /* The +Inf bucket and _count must agree, so both come from cum. */
  count = cum;
  metrics_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                 (unsigned long long)count);
  metrics_printf(b, "%s_sum%s%s%s %.9g\n", name, labels[0] ? "{" : "", labels,
                 labels[0] ? "}" : "",
                 atomic_load_explicit(&h->sum, RELAXED) / unit);
  metrics_printf(b, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "",
                 labels, labels[0] ? "}" : "", (unsigned long long)count);
}

static void metrics_render_requests(struct metrics_buf *b, struct metrics *m) {
  size_t r, c;
  metrics_head(b, "attnd_requests_total", "counter",
               "HTTP requests answered, by route and status code.");
  for (r = 0; r < METRICS_ROUTE_COUNT; r++)
    for (c = 0; c <= N_CODES; c++) {
      uint64_t v = atomic_load_explicit(&m->requests[r][c], RELAXED);
      if (v == 0)
        continue;
      if (c < N_CODES)
        metrics_printf(b, "attnd_requests_total{route=\"%s\",code=\"%u\"} "
                       "%llu\n", metrics_route_names[r], metrics_codes[c],
                       (unsigned long long)v);
      else
        metrics_printf(b, "attnd_requests_total{route=\"%s\",code=\"other\"}"
                       " %llu\n", metrics_route_names[r],
                       (unsigned long long)v);
    }
  metrics_head(b, "attnd_request_duration_seconds", "histogram",
               "Time from request headers to queued response on the "
               "inference routes.");
  for (r = 0; r < N_HIST_ROUTES; r++) {
    char labels[64];
    snprintf(labels, sizeof labels, "route=\"%s\"",
             metrics_route_names[metrics_hist_routes[r]]);
    metrics_hist_render(b, "attnd_request_duration_seconds", labels,
                        &m->request_time[r], metrics_time_bounds, N_TIME, 1e9);
  }
  /* A summary without quantiles: just _sum and _count. */
  metrics_head(b, "attnd_other_request_duration_seconds", "summary",
               "Time from request headers to queued response on every "
               "other route: a count and a total.");
  for (r = 0; r < METRICS_ROUTE_COUNT; r++) {
    uint64_t n = atomic_load_explicit(&m->route_count[r], RELAXED);
    if (n == 0)
      continue;
    metrics_printf(b, "attnd_other_request_duration_seconds_sum"
                   "{route=\"%s\"} %.9g\n", metrics_route_names[r],
                   atomic_load_explicit(&m->route_ns[r], RELAXED) / 1e9);
    metrics_printf(b, "attnd_other_request_duration_seconds_count"
                   "{route=\"%s\"} %llu\n", metrics_route_names[r],
                   (unsigned long long)n);
  }
}

static void metrics_render_gauges(struct metrics_buf *b, struct metrics *m) {
  metrics_head(b, "attnd_inflight_requests", "gauge",
               "Requests being handled right now.");
  metrics_printf(b, "attnd_inflight_requests %lld\n",
                 (long long)atomic_load_explicit(&m->inflight, RELAXED));
  metrics_head(b, "attnd_queue_depth", "gauge",
               "Requests waiting for a worker.");
  metrics_printf(b, "attnd_queue_depth %lld\n",
                 (long long)atomic_load_explicit(&m->queue_depth, RELAXED));
  metrics_head(b, "attnd_inflight_bytes", "gauge",
               "Bytes of --max-inflight-mb held: bodies being received, "
               "admitted requests' tensors and answers.");
  metrics_printf(b, "attnd_inflight_bytes %lld\n",
                 (long long)atomic_load_explicit(&m->inflight_bytes,
                                                 RELAXED));
  metrics_head(b, "attnd_inflight_limit_bytes", "gauge",
               "The in-flight memory budget, --max-inflight-mb.");
  metrics_printf(b, "attnd_inflight_limit_bytes %lld\n",
                 (long long)atomic_load_explicit(&m->inflight_limit,
                                                 RELAXED));
  metrics_head(b, "attnd_inline_requests_total", "counter",
               "Requests run on their HTTP thread instead of a worker: "
               "cheap ones, and others that were the only one in flight.");
  metrics_printf(b, "attnd_inline_requests_total{reason=\"cheap\"} %llu\n"
                 "attnd_inline_requests_total{reason=\"idle\"} %llu\n",
                 (unsigned long long)atomic_load_explicit(
                     &m->inline_runs[METRICS_INLINE_CHEAP], RELAXED),
                 (unsigned long long)atomic_load_explicit(
                     &m->inline_runs[METRICS_INLINE_IDLE], RELAXED));
  metrics_head(b, "attnd_cancelled_total", "counter",
               "Requests stopped or dropped before their answer: the "
               "client closed its connection, or the deadline passed.");
  metrics_printf(b, "attnd_cancelled_total{reason=\"disconnect\"} %llu\n"
                 "attnd_cancelled_total{reason=\"deadline\"} %llu\n",
                 (unsigned long long)atomic_load_explicit(
                     &m->cancelled[METRICS_CANCEL_DISCONNECT], RELAXED),
                 (unsigned long long)atomic_load_explicit(
                     &m->cancelled[METRICS_CANCEL_DEADLINE], RELAXED));
  metrics_head(b, "attnd_split_requests_total", "counter",
               "Requests split across idle workers.");
  metrics_printf(b, "attnd_split_requests_total %llu\n",
                 (unsigned long long)atomic_load_explicit(&m->splits,
                                                          RELAXED));
  metrics_head(b, "attnd_split_helper_tasks_total", "counter",
               "Tasks (batch item, head, query block) of split requests "
               "that a helping worker ran.");
  metrics_printf(b, "attnd_split_helper_tasks_total %llu\n",
                 (unsigned long long)atomic_load_explicit(&m->split_helped,
                                                          RELAXED));
  metrics_head(b, "attnd_request_bytes_total", "counter",
               "Request body bytes received.");
  metrics_printf(b, "attnd_request_bytes_total %llu\n",
                 (unsigned long long)atomic_load_explicit(&m->bytes_in,
                                                          RELAXED));
  metrics_head(b, "attnd_response_bytes_total", "counter",
               "Response body bytes sent.");
  metrics_printf(b, "attnd_response_bytes_total %llu\n",
                 (unsigned long long)atomic_load_explicit(&m->bytes_out,
                                                          RELAXED));
  metrics_head(b, "attnd_build_info", "gauge", "attnd build information.");
  metrics_printf(b, "attnd_build_info{version=\"%s\"} 1\n", ATTND_VERSION);
  metrics_head(b, "attnd_kernel_info", "gauge",
               "The matrix-product kernels each precision runs on this CPU.");
  metrics_printf(b, "attnd_kernel_info{fp32=\"%s\",bf16=\"%s\"} 1\n",
                 attn_kernel_name(ATTN_PRECISION_FP32, m->amx),
                 attn_kernel_name(ATTN_PRECISION_BF16, m->amx));
}

/* One gauge or counter of the process_* family, left out when its value
 * could not be read. */
static void metrics_process_value(struct metrics_buf *b, const char *name,
                                  const char *type, const char *help,
                                  double v) {
  if (v < 0)
    return;
  metrics_head(b, name, type, help);
  metrics_printf(b, "%s %.15g\n", name, v);
}

static void metrics_render_process(struct metrics_buf *b) {
  struct procself p;
  procself_read(&p);
  metrics_process_value(b, "process_cpu_seconds_total", "counter",
                        "CPU time used by the process, user and system, "
                        "in seconds.", p.cpu_seconds);
  metrics_process_value(b, "process_resident_memory_bytes", "gauge",
                        "Memory the process holds in RAM, in bytes.",
                        p.rss_bytes);
  metrics_process_value(b, "process_virtual_memory_bytes", "gauge",
                        "Address space the process has mapped, in bytes.",
                        p.vm_bytes);
  metrics_process_value(b, "process_open_fds", "gauge",
                        "File descriptors the process has open.",
                        p.open_fds);
  metrics_process_value(b, "process_max_fds", "gauge",
                        "Most file descriptors the process may open.",
                        p.max_fds);
  metrics_process_value(b, "process_start_time_seconds", "gauge",
                        "When the process started, in seconds since the "
                        "Unix epoch.", p.start_time_seconds);
}

int metrics_render(struct metrics *m, char **body, size_t *len) {
  struct metrics_buf b = {mem_malloc(8192), 0, 8192, 0};
  if (!b.p)
    return ATTND_ENOMEM;
  metrics_render_requests(&b, m);
  metrics_render_gauges(&b, m);
  metrics_head(&b, "attnd_queue_duration_seconds", "histogram",
               "Time a request waited for a worker.");
  metrics_hist_render(&b, "attnd_queue_duration_seconds", "", &m->queue_time,
                      metrics_time_bounds, N_TIME, 1e9);
  metrics_head(&b, "attnd_compute_duration_seconds", "histogram",
               "Time a worker spent computing and encoding one request.");
  metrics_hist_render(&b, "attnd_compute_duration_seconds", "",
                      &m->compute_time, metrics_time_bounds, N_TIME, 1e9);
  metrics_head(&b, "attnd_batch_size", "histogram",
               "Requests per batch handed to a worker.");
  metrics_hist_render(&b, "attnd_batch_size", "", &m->batch_size,
                      metrics_batch_bounds, N_BATCH, 1);
  metrics_head(&b, "attnd_request_cost_gflop", "histogram",
               "Estimated cost of inference requests, GFLOP (what "
               "--max-request-gflop is compared with).");
  metrics_hist_render(&b, "attnd_request_cost_gflop", "", &m->flops,
                      metrics_gflop_bounds, N_GFLOP, 1e3);
  metrics_render_process(&b);
  if (b.oom) {
    mem_free(b.p);
    return ATTND_ENOMEM;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}
