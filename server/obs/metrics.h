/* metrics.h - attnd's Prometheus counters, gauges and histograms.
 *
 * One struct metrics per process, created by main() and handed to the
 * modules that record into it.  Every recording function is lock-free
 * (C11 relaxed atomics) and safe from any thread; metrics_render() reads a
 * consistent-enough snapshot (each value is read atomically, the set is
 * not) for the text exposition format, version 0.0.4.
 */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* The routes metrics are labelled with; anything else counts as OTHER. */
enum metrics_route {
  METRICS_ROUTE_ATTENTION = 0,  /* /v1/attention */
  METRICS_ROUTE_HEALTHZ,
  METRICS_ROUTE_READYZ,
  METRICS_ROUTE_METRICS,
  METRICS_ROUTE_STATIC,         /* the playground's embedded files */
  METRICS_ROUTE_V2,             /* GET /v2 (server metadata) */
  METRICS_ROUTE_V2_LIVE,
  METRICS_ROUTE_V2_READY,
  METRICS_ROUTE_V2_MODEL,       /* /v2/models/{m}[/versions/{v}] */
  METRICS_ROUTE_V2_MODEL_READY,
  METRICS_ROUTE_V2_INFER,       /* POST /v2/models/{m}/infer */
  METRICS_ROUTE_V2_MODEL_CONFIG, /* /v2/models/{m}/config */
  METRICS_ROUTE_V2_STATS,       /* /v2/models[/{m}]/stats */
  /* /v2/systemsharedmemory[/region/{r}]/status, .../region/{r}/register,
   * /v2/systemsharedmemory[/region/{r}]/unregister */
  METRICS_ROUTE_SHM_STATUS,
  METRICS_ROUTE_SHM_REGISTER,
  METRICS_ROUTE_SHM_UNREGISTER,
  METRICS_ROUTE_OTHER,
  METRICS_ROUTE_COUNT
};

struct metrics;

/* Returns a zeroed metrics set, or NULL when out of memory. */
struct metrics *metrics_new(void);

/* Frees the set; NULL is fine.  No thread may still record into it. */
void metrics_free(struct metrics *m);

/* One finished request: its route, HTTP status, body sizes and duration. */
void metrics_record_request(struct metrics *m, enum metrics_route route,
                            unsigned int status, size_t bytes_in,
                            size_t bytes_out, uint64_t duration_ns);

/* One request that ran in a batch: time waiting and time computing. */
void metrics_record_job(struct metrics *m, uint64_t queue_ns,
                        uint64_t compute_ns);

/* One batch handed to a worker. */
void metrics_record_batch(struct metrics *m, int size);

/* One request run on its HTTP thread (batcher_run_here): below the
 * always-inline bound, or in an idle worker's place. */
enum metrics_inline { METRICS_INLINE_CHEAP = 0, METRICS_INLINE_IDLE,
                      METRICS_INLINE_COUNT };
void metrics_record_inline(struct metrics *m, enum metrics_inline why);

/* One request stopped or dropped before its answer: its client left
 * (an ATTND_ECANCELED job), or its deadline passed (ATTND_ETIMEDOUT),
 * queued or computing. */
enum metrics_cancel { METRICS_CANCEL_DISCONNECT = 0, METRICS_CANCEL_DEADLINE,
                      METRICS_CANCEL_COUNT };
void metrics_record_cancel(struct metrics *m, enum metrics_cancel why);

/* One request split across workers (exec.c), of whose tasks the helping
 * workers ran helped (0: the owner ran them all). */
void metrics_record_split(struct metrics *m, size_t helped);

/* Triton's statistics extension (GET /v2/models[/{m}]/stats), per v2
 * model (enum proto_model; anything else is ignored): the phases of its
 * inference requests, each a count and a sum of nanoseconds.  SUCCESS
 * and FAIL are whole requests, arrival to answer; a success also stamps
 * the model's last inference.  INFER counts the requests computed. */
enum metrics_phase {
  METRICS_PHASE_SUCCESS = 0, METRICS_PHASE_FAIL, METRICS_PHASE_QUEUE,
  METRICS_PHASE_INPUT, METRICS_PHASE_INFER, METRICS_PHASE_OUTPUT,
  METRICS_PHASE_COUNT
};
void metrics_record_model(struct metrics *m, int model,
                          enum metrics_phase phase, uint64_t ns);
struct proto_model_stats;
/* Fills *out with model's figures so far. */
void metrics_model_stats(struct metrics *m, int model,
                         struct proto_model_stats *out);
/* Gauges: requests being handled (first handler call to completion) and
 * requests waiting for a worker. */
void metrics_add_inflight(struct metrics *m, int delta);
void metrics_add_queue_depth(struct metrics *m, int delta);

/* The in-flight memory budget (--max-inflight-mb): bytes held by bodies
 * and admitted requests, and the limit, as two gauges. */
void metrics_add_inflight_bytes(struct metrics *m, int64_t delta);
void metrics_set_inflight_limit(struct metrics *m, size_t bytes);

/* Whether the core may use AMX (attn_problem.amx), for the kernel names
 * of attnd_kernel_info; set before any thread reads the metrics. */
void metrics_set_amx(struct metrics *m, int amx);

/* A request's estimated cost (attn_cost_flops), before it runs. */
void metrics_record_flops(struct metrics *m, double flops);

/* Renders the exposition text: attnd's series, with a latency histogram
 * on the inference routes and a count and sum on the others, then the
 * process_* family read from /proc now (procself.h; a value that cannot
 * be read is left out).  *body is malloc'd (caller frees), *len excludes
 * the NUL.  Returns 0 or ATTND_ENOMEM. */
int metrics_render(struct metrics *m, char **body, size_t *len);

/* The Content-Type of metrics_render()'s output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif /* ATTND_METRICS_H */
