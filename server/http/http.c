/* http.c - the HTTP daemon and its lifecycle, a request's first call and
 * its states, routing and the route table, the token check, framing and
 * the access log.  The rest of the front end (http_impl.h): http_post.c
 * (the POST routes' body, decode and hand-off to the batcher),
 * http_answer.c (queueing an answer), http_v2meta.c (the v2 metadata,
 * configuration and statistics GETs).
 *
 * DESIGN
 *
 * Threads: one MHD daemon per lane, each an epoll loop on one internal
 * thread (MHD_USE_EPOLL_INTERNAL_THREAD) without a listen socket of its
 * own: the accept thread (acceptor.h) picks a lane for each connection
 * and hands it to that lane's daemon (http_on_accept, MHD_add_connection);
 * MHD's connection notifications tell the acceptor when one starts and
 * closes.  A connection belongs to one lane thread; its access handler
 * calls, its notifications and its completion callback all run there,
 * and so does every touch of its struct http_conn.
 * Workers (and the batcher loop thread) touch a request only through
 * http_on_job_done (http_post.c), which stores the outcome and resumes
 * the connection.
 *
 * One struct http_req per request, allocated on the first handler call,
 * stored in *con_cls and freed in the completion callback.  Its life:
 *   HEADERS    GET/HEAD only: routed and answered on the next call, once
 *              MHD holds the whole request (an answer queued from the
 *              first call makes MHD close the connection after it)
 *   RECEIVING  body chunks are appended to r->body (bounded by max_body;
 *              beyond it they are counted and dropped, body_fault is set;
 *              likewise past the in-flight budget, the body's deadline
 *              or, for binary v2, the flops limit: http_limits.c)
 *   QUEUED     final call (http_post_end, http_post.c): decoded,
 *              admitted (batcher_reserve), the connection suspended,
 *              THEN the job submitted.  Suspending first matters: MHD
 *              0.9.75 cancels a resume that arrives before the suspend,
 *              which would strand the request.  A cheap job, or one
 *              alone on the server (batcher_run_here), runs right here on
 *              the MHD thread instead and goes straight to JOB_DONE,
 *              unsuspended.
 *   JOB_DONE   set by http_on_job_done just before MHD_resume_connection;
 *              the handler, called again on the MHD thread, queues the
 *              stored response.  Nothing but MHD touches r after resume.
 *   ANSWERED   a response is queued; MHD sends it, then completes.
 * A suspended connection never times out and its completion cannot run,
 * so r always outlives its job.
 *
 * An answer queued from the first call of a request with a body makes
 * MHD close without reading the body: the MHD thread keeps a duplicate
 * of the socket (r->linger_fd) and, in the completion callback, hands it
 * to the linger thread (linger.h), which then owns it.
 *
 * Shared state: h->state (readiness) and h->quiesced are atomics written
 * by the controlling thread; h->active counts started-not-completed
 * requests for the drain, h->posts the POSTs among them for the inline
 * bound's "alone".  No locks of our own.
 */
#include "server/http/http_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "server/conn/acceptor.h"
#include "server/http/assets.h"
#include "server/clock.h"
#include "server/conn/handoff.h"
#include "server/conn/linger.h"
#include "server/conn/watch.h"
#include "server/obs/log.h"
#include "server/http/mhdlog.h"
#include "server/conn/net.h"
#include "server/obs/reqid.h"
#include "server/shm/shm_http.h"
#include "proto/mem.h"

/* ---- synchronous routes ------------------------------------------------ */

static enum MHD_Result http_get_healthz(struct http_req *r) {
  static char ok[] = "{\"status\": \"ok\"}";
  return http_answer(r, 200, ok, sizeof ok - 1, 0, http_json, NULL);
}

static enum MHD_Result http_get_readyz(struct http_req *r) {
  static char ready[] = "{\"status\": \"ready\"}";
  int s = atomic_load(&r->h->state);
  if (s == HTTP_READY)
    return http_answer(r, 200, ready, sizeof ready - 1, 0, http_json, NULL);
  return http_fail(r, s == HTTP_DRAINING ? ATTND_EDRAINING : ATTND_ENOTREADY,
                   NULL, NULL);
}

static enum MHD_Result http_get_metrics(struct http_req *r) {
  char *body;
  size_t len;
  if (metrics_render(r->h->m, &body, &len) != 0)
    return http_fail(r, ATTND_ENOMEM, NULL, NULL);
  return http_answer(r, 200, body, len, 1, METRICS_CONTENT_TYPE, NULL);
}

/* The playground page's embedded files (assets.h); 1 if path is one. */
static int http_is_asset(const char *path) {
  return assets_lookup(path, NULL, NULL, NULL) == 0;
}

static enum MHD_Result http_get_asset(struct http_req *r) {
  const unsigned char *data;
  const char *ctype;
  size_t len;
  if (assets_lookup(r->url, &data, &len, &ctype) != 0)
    return http_fail(r, ATTND_ENOTFOUND, NULL, NULL);
  /* Static storage for the life of the process: PERSISTENT, no copy. */
  return http_answer(r, 200, (char *)data, len, 0, ctype, NULL);
}

/* ---- routing ---------------------------------------------------------- */

static const struct http_route http_routes[] = {
  {"/v1/attention", METRICS_ROUTE_ATTENTION, "POST", NULL, BODY_V1, 1},
  {"/healthz", METRICS_ROUTE_HEALTHZ, "GET, HEAD", http_get_healthz, 0, 0},
  {"/readyz", METRICS_ROUTE_READYZ, "GET, HEAD", http_get_readyz, 0, 0},
  {"/metrics", METRICS_ROUTE_METRICS, "GET, HEAD", http_get_metrics, 0, 2},
  {"/v2", METRICS_ROUTE_V2, "GET, HEAD", http_get_v2_server, 0, 1},
  {"/v2/health/live", METRICS_ROUTE_V2_LIVE, "GET, HEAD", http_get_v2_live, 0,
   0},
  {"/v2/health/ready", METRICS_ROUTE_V2_READY, "GET, HEAD", http_get_v2_ready,
   0, 0},
  {"/v2/models/stats", METRICS_ROUTE_V2_STATS, "GET, HEAD",
   http_get_v2_stats_all, 0, 1},
};

/* /v2/models/{m}[/versions/{v}][/ready|/infer|/config|/stats], resolved after
 * the model. */
static const struct http_route http_v2_model_route = {
  "/v2/models/{m}", METRICS_ROUTE_V2_MODEL, "GET, HEAD", http_get_v2_model, 0,
  1};
static const struct http_route http_v2_ready_route = {
  "/v2/models/{m}/ready", METRICS_ROUTE_V2_MODEL_READY, "GET, HEAD",
  http_get_v2_model_ready, 0, 1};
static const struct http_route http_v2_infer_route = {
  "/v2/models/{m}/infer", METRICS_ROUTE_V2_INFER, "POST", NULL, BODY_V2, 1};
static const struct http_route http_v2_config_route = {
  "/v2/models/{m}/config", METRICS_ROUTE_V2_MODEL_CONFIG, "GET, HEAD",
  http_get_v2_model_config, 0, 1};
static const struct http_route http_v2_stats_route = {
  "/v2/models/{m}/stats", METRICS_ROUTE_V2_STATS, "GET, HEAD",
  http_get_v2_stats, 0, 1};

/* The routes under /v2/models/{m}[/versions/{v}], by the last segment. */
static const struct {
  const char *action;
  const struct http_route *route;
} http_v2_actions[] = {
  {"", &http_v2_model_route},          {"ready", &http_v2_ready_route},
  {"infer", &http_v2_infer_route},     {"config", &http_v2_config_route},
  {"stats", &http_v2_stats_route}};

static enum MHD_Result http_get_shm_status(struct http_req *r) {
  char *body, err[PROTO_ERR_MAX] = "";
  size_t len;
  int rc = shm_http_status(r->h->cfg.shm, r->url, &body, &len, err);
  if (rc != 0)
    return http_fail(r, rc, err[0] ? err : NULL, NULL);
  return http_answer(r, 200, body, len, 1, http_json, NULL);
}

/* /v2/systemsharedmemory[/region/{region}]/{status,register,unregister}
 * (shm_http.h): status and unregister with or without a region. */
static const struct http_route http_shm_status_route = {
  "/v2/systemsharedmemory/status", METRICS_ROUTE_SHM_STATUS, "GET, HEAD",
  http_get_shm_status, 0, 1};
static const struct http_route http_shm_register_route = {
  "/v2/systemsharedmemory/region/{region}/register",
  METRICS_ROUTE_SHM_REGISTER, "POST", NULL, BODY_SHM, 1};
static const struct http_route http_shm_unregister_route = {
  "/v2/systemsharedmemory/unregister", METRICS_ROUTE_SHM_UNREGISTER, "POST",
  NULL, BODY_SHM, 1};

/* Every embedded file shares one route entry; its path is the URL. */
static const struct http_route http_asset_route = {
  "(static file)", METRICS_ROUTE_STATIC, "GET, HEAD", http_get_asset, 0, 0};

/* Splits the part of a /v2/models/ URL after the prefix into model,
 * version (or NULL) and action ("" when none), in buf.  0 or -1. */
static int http_v2_split(const char *rest, char *buf, size_t cap,
                         const char **m, const char **v, const char **act) {
  char *seg[4], *p;
  int n = 0;
  if (strlen(rest) >= cap)
    return -1;
  strcpy(buf, rest);
  for (p = buf; n < 4; n++) {
    seg[n] = p;
    p = strchr(p, '/');
    if (!p) {
      n++;
      break;
    }
    *p++ = '\0';
  }
  if (p || seg[0][0] == '\0')
    return -1;  /* more than four segments, or no model name */
  *m = seg[0];
  *v = NULL;
  *act = "";
  if (n >= 3 && strcmp(seg[1], "versions") == 0) {
    *v = seg[2];
    if (n == 4)
      *act = seg[3];
    return 0;
  }
  if (n == 2)
    *act = seg[1];
  return n <= 2 ? 0 : -1;
}

/* Resolves /v2/models/... into a route and r->model; on failure fills msg
 * (404: unknown path, model or version) and returns NULL. */
static const struct http_route *http_find_v2_model(struct http_req *r,
                                                   const char *url,
                                                   char *msg, size_t cap) {
  char buf[256], err[PROTO_ERR_MAX];
  const char *m, *v, *act;
  const struct http_route *route = NULL;
  size_t i;
  if (http_v2_split(url + 11, buf, sizeof buf, &m, &v, &act) == 0)
    for (i = 0; i < sizeof http_v2_actions / sizeof http_v2_actions[0]; i++)
      if (!strcmp(act, http_v2_actions[i].action))
        route = http_v2_actions[i].route;
  if (!route) {
    snprintf(msg, cap, "no route for %.120s", url);
    return NULL;
  }
  err[0] = '\0';
  r->model = proto_v2_model_find(m, v, err);
  if (r->model < 0) {
    /* Counted under the route it would have been, like any 404 there. */
    r->route = route->metric;
    snprintf(msg, cap, "%s", err[0] ? err : "unknown model");
    return NULL;
  }
  return route;
}

static const struct http_route *http_find_route(struct http_req *r,
                                                const char *url, char *msg,
                                                size_t cap) {
  size_t i;
  int shm;
  for (i = 0; i < sizeof http_routes / sizeof http_routes[0]; i++)
    if (strcmp(url, http_routes[i].path) == 0)
      return &http_routes[i];
  if (strncmp(url, "/v2/models/", 11) == 0)
    return http_find_v2_model(r, url, msg, cap);
  if ((shm = shm_http_action(url)) >= 0)
    return shm == SHM_HTTP_STATUS     ? &http_shm_status_route
           : shm == SHM_HTTP_REGISTER ? &http_shm_register_route
                                      : &http_shm_unregister_route;
  if (http_is_asset(url))
    return &http_asset_route;
  snprintf(msg, cap, "no route for %.120s", url);
  return NULL;
}

/* ---- the token ------------------------------------------------------- */

/* AUTH_OK when the request carries "Authorization: Bearer <token>" (the
 * scheme is case-insensitive, RFC 7235), else AUTH_MISSING (no bearer
 * credentials, or an empty token) or AUTH_INVALID (a wrong token).
 * The comparison always runs over the whole configured token and folds
 * a length difference into the result, so its time depends only on the
 * configured token's length: it leaks neither where the first
 * difference is nor the length. */
static int http_check_token(struct http *h, struct MHD_Connection *c) {
  const char *want = h->cfg.token, *got;
  size_t n, m, i;
  unsigned char diff;
  got = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION);
  if (!got || strncasecmp(got, "Bearer ", 7) != 0)
    return AUTH_MISSING;
  for (got += 7; *got == ' ' || *got == '\t'; got++) {
  }
  /* Whitespace around a field value is not part of it (RFC 9112, 5.1):
   * libmicrohttpd 1.0 trims it, 0.9.75 keeps what follows the value. */
  for (m = strlen(got); m > 0 && (got[m - 1] == ' ' || got[m - 1] == '\t');
       m--) {
  }
  if (!m)
    return AUTH_MISSING;
  n = strlen(want);
  diff = n != m;
  for (i = 0; i < n; i++)
    diff |= (unsigned char)(want[i] ^ got[i < m ? i : 0]);
  return diff == 0 ? AUTH_OK : AUTH_INVALID;
}

/* The route's auth verdict (AUTH_OK when it is open or no token is
 * configured); a NULL route is an unknown /v2/models/ path. */
int http_auth(struct http_req *r, const struct http_route *rt) {
  const struct http_config *cfg = &r->h->cfg;
  int need = rt ? rt->auth == AUTH_ALWAYS ||
                      (rt->auth == AUTH_IF_METRICS && cfg->token_metrics)
                : 1;
  if (!need || !cfg->token || !cfg->token[0])
    return AUTH_OK;
  return http_check_token(r->h, r->conn);
}

/* ---- MHD callbacks ---------------------------------------------------- */

/* The context of a request whose own context could not be allocated: its
 * body is read and dropped, then it is answered 503 (http_answer_oom). */
static char http_oom_ctx;

static enum MHD_Result http_answer_oom(struct MHD_Connection *c) {
  static char oom[] = "{\"error\": \"out of memory\"}";
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      sizeof oom - 1, oom, MHD_RESPMEM_PERSISTENT);
  enum MHD_Result ret;
  char rid[REQID_LEN + 1];
  if (!resp)
    return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, http_json);
  MHD_add_response_header(
      resp, REQID_HEADER,
      reqid_pick(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                             REQID_HEADER), rid));
  MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  ret = MHD_queue_response(c, 503, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* Routes r: answers it, or for a POST route starts receiving its body. */
static enum MHD_Result http_dispatch(struct http_req *r) {
  const char *url = r->url, *method = r->method;
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  const struct http_route *route;
  char msg[PROTO_ERR_MAX];

  route = r->rt = http_find_route(r, url, msg, sizeof msg);
  if (route)
    r->route = route->metric;
  /* Which models exist is metadata too: without the token an unknown
   * /v2/models/ path is 401 like a known one, not 404. */
  if (!route && strncmp(url, "/v2/models/", 11) == 0 &&
      (r->auth = http_auth(r, NULL)) != AUTH_OK)
    return http_fail(r, ATTND_EUNAUTH, NULL, NULL);
  if (!route)
    return http_fail(r, ATTND_ENOTFOUND, msg, NULL);
  /* A POST to a POST route learns its verdict now, answered after the
   * body (http_post_begin); every other request is refused at once. */
  if (!route->get && !strcmp(method, "POST")) {
    r->posting = 1;
    atomic_fetch_add(&r->h->posts, 1);
    return http_post_begin(r);
  }
  if ((r->auth = http_auth(r, route)) != AUTH_OK)
    return http_fail(r, ATTND_EUNAUTH, NULL, NULL);
  if (route->get && get)
    return route->get(r);
  snprintf(msg, sizeof msg, "method %.16s not allowed on %.64s (allowed: %s)",
           method, url, route->allow);
  return http_fail(r, ATTND_EMETHOD, msg, route->allow);
}

/* 1 when the request announces a body. */
static int http_has_body(struct MHD_Connection *c) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH) ||
         MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

/* What http_framing_error gathers from the headers. */
struct http_framing {
  const char *length;       /* the first Content-Length */
  int lengths_differ, chunked;
};

static enum MHD_Result http_framing_header(void *cls, enum MHD_ValueKind kind,
                                           const char *key,
                                           const char *value) {
  struct http_framing *f = cls;
  (void)kind;
  if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
    f->chunked = 1;
  else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) && value) {
    if (f->length && strcmp(f->length, value))
      f->lengths_differ = 1;
    if (!f->length)
      f->length = value;
  }
  return MHD_YES;
}

/* RFC 9112 section 6.3: a request with both Transfer-Encoding and
 * Content-Length, or with Content-Lengths that disagree, has no one
 * framing.  libmicrohttpd 0.9.75 picks one; a proxy in front may have
 * picked the other and sent what we would read as its body as the next
 * request (request smuggling).  Returns 1 with the reason in msg. */
static int http_framing_error(struct MHD_Connection *c, char *msg,
                              size_t cap) {
  struct http_framing f = {NULL, 0, 0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, http_framing_header, &f);
  if (f.chunked && f.length)
    snprintf(msg, cap, "request has both Transfer-Encoding and "
             "Content-Length; send one of them");
  else if (f.lengths_differ)
    snprintf(msg, cap, "request has Content-Length headers that "
             "disagree; send one");
  else
    return 0;
  return 1;
}

/* An answer queued from the first call of a request with a body: MHD
 * sends it and closes without reading the body, which would reach a
 * client still writing it as a reset.  Keep a duplicate of the socket
 * for a lingering close (linger.h), handed over on completion. */
static enum MHD_Result http_linger_if_early(struct http_req *r,
                                            enum MHD_Result ret) {
  const union MHD_ConnectionInfo *ci;
  if (r->state != REQ_ANSWERED || !r->h->lg || !http_has_body(r->conn))
    return ret;
  ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci)
    r->linger_fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0);
  return ret;
}

/* The connection's first request has begun: tells the acceptor, which
 * waits for that while it quiesces.  The connection's struct http_conn
 * records it (none: the acceptor was told when the connection started). */
static void http_mark_served(struct http *h, struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  struct http_conn *hc = ci ? ci->socket_context : NULL;
  if (!hc || hc->served)
    return;
  hc->served = 1;
  acceptor_served(h->acc);
}

/* First call of any request: allocate the context; route it now, or for
 * a GET or HEAD without a body on the next call. */
static enum MHD_Result http_begin(struct http *h, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  void **con_cls) {
  struct http_req *r = mem_calloc(1, sizeof *r);
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  char msg[96];

  if (!r) {
    *con_cls = &http_oom_ctx;
    http_mark_served(h, c);
    return MHD_YES;
  }
  r->h = h;
  r->conn = c;
  r->url = url;
  r->method = method;
  r->start_ns = clock_now_ns();
  r->linger_fd = -1;
  r->rid = reqid_pick(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  REQID_HEADER), r->rid_buf);
  *con_cls = r;
  atomic_fetch_add(&h->active, 1);
  http_mark_served(h, c);
  metrics_add_inflight(h->m, 1);
  r->route = METRICS_ROUTE_OTHER;
  /* Answered from this first call, with Connection: close: not one byte
   * after the headers is read, as a body or as a request. */
  if (http_framing_error(c, msg, sizeof msg)) {
    r->close = 1;
    return http_linger_if_early(r, http_fail(r, ATTND_EINVAL, msg, NULL));
  }
  /* MHD 0.9.75 closes the connection after an answer queued from this
   * first call, even for a GET without a body: that would drop
   * keep-alive and every request pipelined behind it.  So a bodiless GET
   * or HEAD is answered on the next call; anything with a body keeps the
   * early answer (and the close), which spares reading a refused body. */
  if (get && !http_has_body(c))
    return MHD_YES;  /* r->state is REQ_HEADERS */
  return http_linger_if_early(r, http_dispatch(r));
}

static enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c,
                                       const char *url, const char *method,
                                       const char *version,
                                       const char *upload_data,
                                       size_t *upload_data_size,
                                       void **con_cls) {
  struct http_req *r = *con_cls;
  (void)version;
  if (!r)
    return http_begin(cls, c, url, method, con_cls);
  if (*con_cls == &http_oom_ctx) {
    if (!*upload_data_size)
      return http_answer_oom(c);
    *upload_data_size = 0;
    return MHD_YES;
  }
  switch (r->state) {
  case REQ_HEADERS:   /* a bodiless GET or HEAD, now complete */
    *upload_data_size = 0;
    return http_dispatch(r);
  case REQ_RECEIVING:
    if (*upload_data_size) {
      http_post_chunk(r, upload_data, *upload_data_size);
      *upload_data_size = 0;
      return http_refused_too_long(r) ? MHD_NO : MHD_YES;
    }
    return http_post_end(r);
  case REQ_JOB_DONE:
    return http_post_answer(r);
  case REQ_QUEUED:    /* not called while suspended; be safe anyway */
  case REQ_ANSWERED:  /* MHD may call again with leftover body bytes */
    *upload_data_size = 0;
    return MHD_YES;
  }
  return MHD_NO;
}

/* r's access-log line (log.h), written once it is complete. */
static void http_log_access(struct http_req *r, struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  struct log_access a;
  a.method = r->method;
  a.path = r->url;
  a.status = r->status;
  a.bytes_in = r->bytes_in;
  a.bytes_out = r->bytes_out;
  a.total_ns = clock_now_ns() - r->start_ns;
  a.batch_size = r->job.batch_size;
  a.queue_ns = r->job.started_ns ? r->job.started_ns - r->job.enqueued_ns : 0;
  a.compute_ns = r->job.started_ns ? r->job.finished_ns - r->job.started_ns
                                   : 0;
  a.client = ci ? ci->client_addr : NULL;
  a.request_id = r->rid;
  a.traceparent = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                              "traceparent");
  a.reason = r->status < 400 ? NULL
             : r->reason[0]  ? r->reason
                             : MHD_get_reason_phrase_for(r->status);
  log_access(&a);
}

static void http_on_completed(void *cls, struct MHD_Connection *c,
                              void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
  struct http *h = cls;
  struct http_req *r = *con_cls;
  if (!r || *con_cls == &http_oom_ctx) {
    *con_cls = NULL;
    return;
  }
  /* The answer has been written: only now may the client's rest be read
   * and dropped.  After a failure there is no answer to wait for. */
  if (r->linger_fd >= 0) {
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
      linger_add(h->lg, r->linger_fd);
    else
      close(r->linger_fd);
  }
  /* Its client left while it was suspended, and libmicrohttpd noticed
   * before the answer could be queued: logged as nginx logs it. */
  if (!r->status && r->job.err == ATTND_ECANCELED)
    r->status = 499;
  if (log_access_enabled())
    http_log_access(r, c);
  http_limits_end(r);
  proto_body_free(&r->body);
  mem_free(r->job.body);
  proto_parts_free(&r->job.parts);
  proto_request_free(&r->job.req);
  shm_http_req_end(&r->shm);
  if (r->posting)
    atomic_fetch_sub(&h->posts, 1);
  mem_free(r);
  *con_cls = NULL;
  metrics_add_inflight(h->m, -1);
  atomic_fetch_sub(&h->active, 1);
}

/* MHD's word that a connection handed over has started or closed, on
 * its lane's thread (cls is the lane).  Its struct http_conn lives
 * between the two; without memory for one, the acceptor is told at once
 * that it was served, so that the drain never waits for it. */
static void http_on_connection(void *cls, struct MHD_Connection *c,
                               void **socket_context,
                               enum MHD_ConnectionNotificationCode toe) {
  struct http_lane *lane = cls;
  struct http *h = lane->h;
  struct http_conn *hc;
  const union MHD_ConnectionInfo *i;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    acceptor_started(h->acc);
    if (!(*socket_context = mem_calloc(1, sizeof(struct http_conn))))
      acceptor_served(h->acc);
  } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    hc = *socket_context;
    i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    acceptor_closed(h->acc, lane->idx, hc ? hc->served : 1,
                    i ? i->client_addr : NULL);
    mem_free(hc);
    *socket_context = NULL;
  }
}

/* The accept thread's hand-off to the lane's daemon (handoff.h).  MHD
 * closes fd when it refuses it (out of memory) and then reports
 * nothing. */
static int http_on_accept(void *arg, int fd, const struct sockaddr *sa,
                          socklen_t len, unsigned lane) {
  struct http *h = arg;
  return handoff_add(h->lanes[lane].d, fd, sa, len);
}

/* A connection attnd will not serve: from the backlog while draining,
 * with no room, a 503 at once and then a lingering close, which reads
 * its request away; over --max-conns-per-ip, a 429 and a close (that
 * client holds the limit already: no lingering for it). */
static void http_on_refuse(void *arg, int fd, int why) {
  struct http *h = arg;
  size_t n;
  if (why == ACCEPTOR_PER_ADDRESS) {
    n = handoff_refuse_per_address(fd, (size_t)h->cfg.max_conns_per_ip);
    metrics_record_request(h->m, METRICS_ROUTE_OTHER, 429, 0, n, 0);
    close(fd);
    return;
  }
  n = handoff_refuse(fd);
  metrics_record_request(h->m, METRICS_ROUTE_OTHER, 503, 0, n, 0);
  linger_add(h->lg, fd);
}

static void http_on_mhd_log(void *cls, const char *fmt, va_list ap) {
  struct http *h = cls;
  unsigned status = mhdlog_answer_status(fmt, ap);
  /* An answer the library sent itself, never seen by the handler. */
  if (status)
    metrics_record_request(h->m, METRICS_ROUTE_OTHER, status, 0, 0, 0);
  mhdlog_message(fmt, ap);
}

/* ---- lifecycle ------------------------------------------------------- */

/* TLS 1.2 and 1.3 only, GnuTLS's default ciphers within them. */
static const char http_tls_priorities[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";

/* The TLS options (an MHD_OPTION_ARRAY): just the end mark when the
 * server speaks plain HTTP. */
static void http_tls_options(const struct http_config *cfg,
                             struct MHD_OptionItem o[4]) {
  int n = 0;
  if (cfg->tls_cert && cfg->tls_key) {
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
                                     (void *)cfg->tls_cert};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0,
                                     (void *)cfg->tls_key};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                     (void *)http_tls_priorities};
  }
  o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

/* MHD_OPTION_CONNECTION_MEMORY_INCREMENT for a connection memory of
 * mem bytes.  libmicrohttpd 0.9.75 grows its read buffer (by an eighth
 * of the pool's free room, while that is at least 8 KiB) only when fewer
 * than this many bytes of it are free before a read; its default, 1 KiB,
 * leaves a body read half the pool at a time.  The whole pool makes
 * every read try to grow it, so a body is read about three quarters of
 * the pool at a time: 25 KiB instead of 16 KiB with 32 KiB, a third fewer
 * reads and polls, at no cost in memory.  Header limits are unchanged:
 * MHD takes room for header fields back from the unused end of the read
 * buffer.  libmicrohttpd 1.0 takes at most a quarter of the pool, warns
 * at every start about anything larger, and reads a body half the pool
 * at a time whatever the value (docs/decisions.md, "Read sizes"): it
 * gets that quarter. */
static size_t http_memory_increment(size_t mem) {
#if MHD_VERSION >= 0x01000000
  return mem / 4;
#else
  return mem;
#endif
}

/* Lane lane's daemon (handoff.h): one thread; a connection limit of the
 * whole --max-conns, which the acceptor enforces over all lanes, as it
 * does --max-conns-per-ip. */
static struct MHD_Daemon *http_start_daemon(struct http *h,
                                            struct http_lane *lane) {
  unsigned int flags = HANDOFF_MHD_FLAGS;
  struct MHD_OptionItem tls[4], limit[2];
  handoff_daemon_options((size_t)h->cfg.max_conns, limit);
  if (h->cfg.tls_cert && h->cfg.tls_key)
    flags |= MHD_USE_TLS;
  http_tls_options(&h->cfg, tls);
  return MHD_start_daemon(
      flags, 0, NULL, NULL, http_on_request, h,
      /* First, so that MHD reports even option errors through it. */
      MHD_OPTION_EXTERNAL_LOGGER, http_on_mhd_log, h,
      MHD_OPTION_ARRAY, limit,
      MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, lane,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)h->cfg.conn_timeout_s,
      /* --conn-memory-kb, 32 KiB (MHD's default) unless the operator
       * asks for more: MHD zeroes the pool after every request and maps
       * a larger one afresh for each connection, which costs clients
       * that connect for each request more than larger reads save
       * keep-alive uploads (docs/decisions.md, "Connection memory: 32
       * KiB unless asked"). */
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, h->cfg.conn_memory,
      MHD_OPTION_CONNECTION_MEMORY_INCREMENT,
      http_memory_increment(h->cfg.conn_memory),
      MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, h,
      MHD_OPTION_ARRAY, tls,
      MHD_OPTION_END);
}

/* Starts every lane's daemon; 0, or -1 after logging why. */
static int http_start_lanes(struct http *h) {
  unsigned n = (unsigned)h->cfg.threads;
  if (!(h->lanes = calloc(n, sizeof *h->lanes))) {
    log_error("http: out of memory");
    return -1;
  }
  for (unsigned i = 0; i < n; i++) {
    h->lanes[i] = (struct http_lane){h, NULL, i};
    if (!(h->lanes[i].d = http_start_daemon(h, &h->lanes[i]))) {
      log_error("http: cannot listen on %s:%d: libmicrohttpd did not "
                "start (see above)", h->cfg.host, h->cfg.port);
      return -1;
    }
  }
  return 0;
}

/* Stops the lanes' daemons started so far, and frees the lanes. */
static void http_stop_lanes(struct http *h) {
  for (unsigned i = 0; h->lanes && i < (unsigned)h->cfg.threads; i++)
    if (h->lanes[i].d)
      MHD_stop_daemon(h->lanes[i].d);
  free(h->lanes);
  h->lanes = NULL;
}

struct http *http_start(const struct http_config *cfg, struct batcher *b,
                        struct metrics *m) {
  struct http *h = calloc(1, sizeof *h);
  struct sockaddr_storage ss;
  socklen_t len;

  if (!h) {
    log_error("http: out of memory");
    return NULL;
  }
  h->cfg = *cfg;
  h->b = b;
  h->m = m;
  if (!(len = net_sockaddr(cfg->host, cfg->port, &ss, NULL))) {
    log_error("http: bad listen address '%s'", cfg->host);
    goto err;
  }
  h->acc = acceptor_listen((struct sockaddr *)&ss, len,
                           (unsigned)cfg->threads);
  if (!h->acc) {
    log_error("http: cannot listen on %s:%d: %s", cfg->host, cfg->port,
              strerror(errno));
    goto err;
  }
  if (cfg->unix_path && cfg->unix_path[0] &&
      acceptor_listen_unix(h->acc, cfg->unix_path, cfg->unix_mode) != 0)
    goto err;
  if (acceptor_limit_per_address(h->acc, (size_t)cfg->max_conns_per_ip)) {
    log_error("http: out of memory");
    goto err;
  }
  if (http_start_lanes(h) != 0)
    goto err;
  if (!(h->watch = watch_start()))
    log_warn("http: cannot start the watcher thread (%s): requests whose "
             "clients leave run to the end", strerror(errno));
  /* Without it (logged) early answers close as libmicrohttpd does. */
  h->lg = linger_start((size_t)cfg->max_conns,
                       (unsigned long long)cfg->max_body * HTTP_DRAIN_FACTOR);
  if (acceptor_run(h->acc, (size_t)cfg->max_conns, http_on_accept,
                   http_on_refuse, h) != 0) {
    log_error("http: cannot start the accept thread");
    linger_stop(h->lg);
    goto err;
  }
  return h;
err:
  http_stop_lanes(h);
  watch_stop(h->watch);
  acceptor_stop(h->acc);
  free(h);
  return NULL;
}

int http_port(struct http *h) { return acceptor_port(h->acc); }

void http_set_state(struct http *h, enum http_state s) {
  atomic_store(&h->state, (int)s);
}

/* Closing the listen sockets (the acceptor's, which MHD never sees) makes
 * the kernel refuse new clients and reset those in the backlogs.
 * (libmicrohttpd 0.9.75's own MHD_quiesce_daemon races its pool threads
 * on a busy server and can abort the process: attnd never calls it.) */
void http_quiesce(struct http *h) {
  if (atomic_exchange(&h->quiesced, 1))
    return;
  acceptor_quiesce(h->acc);
}

size_t http_active(struct http *h) { return atomic_load(&h->active); }

void http_stop(struct http *h) {
  /* Accepting stops first: a connection handed over after MHD stopped
   * would be refused.  MHD reports each close to the acceptor, which
   * therefore outlives MHD_stop_daemon. */
  acceptor_quiesce(h->acc);
  http_stop_lanes(h);
  watch_stop(h->watch);  /* no connection is suspended any more */
  acceptor_stop(h->acc);
  linger_stop(h->lg);
  free(h);
}
