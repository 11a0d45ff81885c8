/* http.h - attnd's HTTP front end (libmicrohttpd).
 *
 * Routes:
 *   POST /v1/attention   decode (proto/), batch (batcher), answer
 *   GET  /healthz        200 {"status":"ok"} while the process serves
 *   GET  /readyz         200 when accepting work, 503 starting/draining
 *   GET  /metrics        Prometheus text exposition
 *   GET  /, /index.html, /app.js, /tensors.js, /style.css   the playground
 *   KServe v2: GET /v2, /v2/health/live, /v2/health/ready,
 *        /v2/models/{m}[/versions/{v}][/ready]; POST .../infer
 *   Triton's system shared memory: /v2/systemsharedmemory/... (shm_http.h)
 * Inference bodies may be gzip/deflate (Content-Encoding); responses are
 * compressed when Accept-Encoding asks.  With a token configured,
 * inference and v2 metadata routes (and, if asked, /metrics) need
 * "Authorization: Bearer <token>"; without it 401 with
 * WWW-Authenticate: Bearer realm="attnd" (plus error="invalid_token"
 * when a wrong token was sent).  With TLS PEM text configured the port
 * speaks HTTPS only.
 * An unknown path is 404, a known path with another method 405 + Allow.
 * Every error body is {"error": "..."}; every request gets one access-log
 * line and is counted in the metrics.
 *
 * Threads: http_start/http_quiesce/http_stop from the controlling thread;
 * http_set_state and http_active from any thread.  The access handler runs
 * on MHD's own threads (see the DESIGN note in http.c).
 */
#ifndef ATTND_HTTP_H
#define ATTND_HTTP_H

#include <stddef.h>

#include "server/sched/batcher.h"
#include "server/obs/metrics.h"
#include "server/shm/shm.h"

struct http_config {
  const char *host;         /* numeric IPv4 or IPv6 address */
  int port;                 /* 0 = ephemeral, see http_port */
  int threads;              /* MHD thread pool size */
  int workers;              /* compute workers (a v2 config's instances) */
  int max_conns;
  size_t conn_memory;       /* libmicrohttpd memory per connection, bytes */
  int conn_timeout_s;       /* 0 = never */
  size_t max_body;          /* bytes; larger bodies get 413 */
  long timeout_ms;          /* request deadline from arrival, 0 = none */
  double max_request_flop;  /* attn_cost_flops beyond which 413, 0 = none */
  int body_timeout_s;       /* a body's deadline after its headers, 0 =
                               none */
  size_t max_elems;         /* tensor element bound passed to proto/ */
  size_t max_inflight;      /* the batcher's byte budget: a request that
                               needs more on its own is refused (413) */
  const char *token;        /* bearer token required on inference and v2
                               metadata routes; NULL or "" = none.
                               Health and the playground page stay open
                               for probes. */
  int token_metrics;        /* 1: /metrics needs the token too */
  int max_conns_per_ip;     /* 0 = no per-address limit */
  const char *tls_cert;     /* PEM text; with tls_key, serve HTTPS only. */
  const char *tls_key;      /* NULL = plain HTTP.  Read while starting. */
  const char *unix_path;    /* also listen on this Unix socket; NULL or
                               "" = none */
  unsigned unix_mode;       /* its permission bits */
  struct shm_registry *shm; /* client shared memory regions (shm.h) */
  int allow_client_shm;     /* 1: register and unregister are served */
};

enum http_state {
  HTTP_STARTING = 0,        /* /readyz 503 */
  HTTP_READY = 1,           /* /readyz 200 */
  HTTP_DRAINING = 2         /* /readyz 503; inference still accepted */
};

struct http;

/* Starts listening.  b and m must outlive the server.  The state starts at
 * HTTP_STARTING.  Returns NULL after logging why (bad address, port in
 * use, out of memory). */
struct http *http_start(const struct http_config *cfg, struct batcher *b,
                        struct metrics *m);

/* The port actually bound (useful with port 0). */
int http_port(struct http *h);

/* Sets what /readyz reports. */
void http_set_state(struct http *h, enum http_state s);

/* Stops accepting: from now on new connections are refused, those
 * waiting in the listen sockets' backlogs are taken in (see acceptor.h),
 * and any further request on a connection is answered 503 with
 * Connection: close.  Returns once the connections taken in have begun
 * their first requests (bounded; see acceptor_quiesce), so that
 * http_active counts them.  Idempotent. */
void http_quiesce(struct http *h);

/* Requests that have started and not yet completed (including suspended
 * ones waiting for the batcher). */
size_t http_active(struct http *h);

/* Stops the daemon and frees everything.  Precondition: no connection is
 * suspended, i.e. every job submitted to the batcher has completed. */
void http_stop(struct http *h);

#endif /* ATTND_HTTP_H */
