/* http_impl.h - internals shared by the server/http*.c files; not a
 * public API (that is http.h), and included by nothing else.
 *
 * The HTTP front end is eight files, one job each:
 *   http_daemon.c  the daemons and their lifecycle, the acceptor's
 *                  hand-off to a lane and its connection notices;
 *   http.c         one request's life on its lane: its first call, its
 *                  states, framing, completion and the access log;
 *   http_route.c   which route a request is (the route table, method and
 *                  token checks) and the GETs answered at once;
 *   http_auth.c    the bearer token;
 *   http_answer.c  queueing a request's one answer: its headers, its
 *                  status and what it counts in the metrics;
 *   http_post.c    the POST routes: the body, its decode, admission, the
 *                  choice between running the job here and queueing it to
 *                  the batcher, and the answer the job produced;
 *   http_limits.c  what a POST may take before it runs: its body's hold
 *                  on the in-flight budget, the body's deadline, the
 *                  request's estimated flops;
 *   http_v2meta.c  the KServe v2 metadata, health, model configuration
 *                  and statistics GETs.
 *
 * Threads: a request's life, and which thread touches what, is the DESIGN
 * comment of http.c.  In short: a struct http_req belongs to the MHD
 * thread serving its connection, and every function declared here runs on
 * that thread; a batcher job reaches back to it only through http_post.c's
 * completion callback.  struct http is shared by every thread and, once
 * http_start has returned, only its atomics change.
 *
 * Names keep the module's http_ prefix.  The handlers return MHD_YES, or
 * MHD_NO when MHD must drop the connection (an answer could not be
 * queued); a client's error is an answer like any other (http_fail).
 */
#ifndef ATTND_HTTP_IMPL_H
#define ATTND_HTTP_IMPL_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "server/sched/batcher.h"
#include "server/http/http.h"
#include "server/obs/metrics.h"
#include "server/obs/reqid.h"
#include "server/shm/shm_http.h"
#include "proto/proto.h"

struct acceptor;
struct linger_set;

/* ---- the server and a request ------------------------------------------ */

enum http_req_state {
  REQ_HEADERS,              /* GET/HEAD: routed on the next call */
  REQ_RECEIVING, REQ_QUEUED, REQ_JOB_DONE, REQ_ANSWERED
};

/* Why a POST's body is being dropped before its end (http_limits.c). */
enum http_refusal {
  REFUSE_NONE = 0,
  REFUSE_BUDGET,            /* it outgrew what is left of the budget */
  REFUSE_FLOPS,             /* its v2 JSON part needs too many flops */
  REFUSE_LATE               /* its deadline passed (--body-timeout-s) */
};

/* What the Authorization header says, for a route that needs the token. */
enum http_auth { AUTH_OK = 0, AUTH_MISSING = 1, AUTH_INVALID = 2 };

/* Why a body's bytes stopped being kept (http_req.body_fault); the drop
 * for a refusal is http_req.refused. */
enum http_body_fault {
  FAULT_NONE = 0,   /* every byte so far is kept */
  FAULT_OVER_MAX,   /* past --max-body-mb: 413 at the end */
  FAULT_NO_MEMORY   /* an append found no memory: 500 at the end */
};

/* One lane: a libmicrohttpd daemon with one thread (handoff.h). */
struct http_lane {
  struct http *h;
  struct MHD_Daemon *d;     /* NULL until started */
  unsigned idx;
};

/* What attnd keeps of a connection, from libmicrohttpd's connection-
 * started notification to its closed one, through the notification's
 * writable socket context: its contents change, never the pointer.  Only
 * the connection's lane thread touches it. */
struct http_conn {
  int served;               /* acceptor_served was reported */
};

struct http {
  struct http_config cfg;
  struct batcher *b;
  struct metrics *m;
  struct http_lane *lanes;  /* [cfg.threads] */
  struct acceptor *acc;     /* the listen sockets and accept thread */
  struct watch *watch;      /* suspended requests' clients and deadlines;
                               NULL: unwatched (watch.h) */
  struct linger_set *lg;    /* NULL: early answers close at once */
  _Atomic int state;        /* enum http_state */
  _Atomic int quiesced;
  _Atomic size_t active;
  _Atomic size_t posts;     /* POSTs to a POST route from their first byte
                               to their completion: the requests that are
                               received, queued or computed (a GET already
                               answered is not among them) */
};

struct http_route;

struct http_req {
  struct http *h;
  struct MHD_Connection *conn;
  const char *method, *url; /* MHD keeps them valid until completion */
  const struct http_route *rt;  /* NULL: no route */
  enum metrics_route route;
  int model;                /* /v2/models/{m}: enum proto_model */
  enum http_req_state state;
  proto_body body;          /* accumulated request body */
  size_t bytes_in;          /* every body byte received, kept or not */
  int body_fault;           /* enum http_body_fault */
  int refused;              /* enum http_refusal */
  size_t held;              /* bytes of the in-flight budget its body
                               holds (the body, its inflated copy, what
                               its decode allocated): until it is
                               reserved as a job, dropped or answered */
  size_t answer_held;       /* bytes of the budget its job's answer holds
                               (batcher_job.answer_bytes): from the job's
                               completion until the request's, when MHD
                               has sent the answer (or given up) */
  size_t declared;          /* its Content-Length, 0 when none */
  unsigned timeout_s;       /* the idle timeout set for its body, 0 none */
  int flops_checked;        /* the early v2 flops check has run */
  double cost_flops;        /* attn_cost_flops, once known */
  int auth;                 /* enum http_auth: 401 at the end if not OK */
  int close;                /* answer with Connection: close */
  int posting;              /* counted in h->posts */
  int linger_fd;            /* answered before its body: a duplicate of
                               the socket for linger_add, else -1 */
  uint64_t start_ns;
  uint64_t own_timeout_us;  /* its own "timeout" when that, not
                               --timeout-ms, is its deadline; else 0
                               (for the 504's message) */
  unsigned int status;      /* what we queued; 0 if nothing was */
  size_t bytes_out;
  const char *rid;          /* X-Request-ID: the client's or rid_buf */
  char rid_buf[REQID_LEN + 1];
  char reason[PROTO_ERR_MAX];  /* a 4xx/5xx's message, for the log */
  struct batcher_job job;
  uint64_t watch;           /* its watch (watch.h) while suspended, or 0 */
  struct shm_http_req shm;  /* the shared memory regions it holds */
};

/* ---- routes (the table itself is in http.c) ---------------------------- */

enum http_body { BODY_NONE, BODY_V1, BODY_V2, BODY_SHM };

struct http_route {
  const char *path;
  enum metrics_route metric;
  const char *allow;        /* the Allow header for a 405 */
  enum MHD_Result (*get)(struct http_req *r);  /* NULL for POST routes */
  enum http_body body;      /* POST routes: how to decode the body */
  int auth;                 /* when a configured token is required:
                               1 AUTH_ALWAYS, 2 AUTH_IF_METRICS, 0 never */
};

/* http_route.auth (the table spells the numbers: docs tests read it). */
enum { AUTH_ALWAYS = 1, AUTH_IF_METRICS = 2 };

/* A refused body (past the limit, or without the token) is read and
 * dropped so that its answer reaches a client that sends all before it
 * reads, however far over the limit a real upload goes; but not forever:
 * past 64 times the limit, a chunked upload that does not end is cut off
 * (libmicrohttpd 0.9.75 cannot answer mid-body, so the connection is
 * closed). */
#define HTTP_DRAIN_FACTOR 64

/* The Content-Type of every JSON answer. */
extern const char http_json[];

/* ---- answers (http_answer.c) --------------------------------------------
 *
 * Each queues r's one answer, adding Content-Type, X-Request-ID and the
 * headers its status calls for, records it in the metrics and leaves r
 * REQ_ANSWERED.  hdrs: name/value pairs, NULL-terminated; NULL for none.
 * Each returns what MHD_queue_response did (MHD_NO also when out of
 * memory). */

/* body (len bytes) with status.  own != 0 hands body to MHD, which frees
 * it (freed here if MHD cannot take it); own == 0: body is static. */
enum MHD_Result http_answer(struct http_req *r, unsigned int status,
                            char *body, size_t len, int own,
                            const char *ctype, const char *const *hdrs);

/* A 200 of parts (v2 binary outputs), sent as one iovec.  *parts is
 * taken over and zeroed, or left as it was when memory runs out. */
enum MHD_Result http_answer_parts(struct http_req *r, proto_parts *parts,
                                  const char *const *hdrs);

/* {"error": msg} (msg NULL: attnd_strerror(err)) with the HTTP status for
 * err (503 if the body cannot be made) and, if allow is not NULL, an
 * Allow header; the message is kept in r->reason for the access log. */
enum MHD_Result http_fail(struct http_req *r, int err, const char *msg,
                          const char *allow);

/* The malloc'd JSON body of a proto_v2_* call that returned rc: status
 * with body when rc is 0, else http_fail(rc) (body is not read). */
enum MHD_Result http_send(struct http_req *r, unsigned int status, int rc,
                          char *body, size_t len);

/* ---- a request's life (http.c) -------------------------------------------
 *
 * libmicrohttpd's access handler and completion callback for every lane's
 * daemon (http_daemon.c starts them with h as cls). */
enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c,
                                const char *url, const char *method,
                                const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls);
void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe);

/* ---- routing (http_route.c) ---------------------------------------------- */

/* Routes r: answers it, or for a POST route starts receiving its body
 * (http_post_begin); unknown paths, methods and tokens get their 404,
 * 405 and 401. */
enum MHD_Result http_dispatch(struct http_req *r);

/* ---- the token (http_auth.c) --------------------------------------------- */

/* r's verdict for route rt: AUTH_OK when rt is open or no token is
 * configured, else the Authorization header's (enum http_auth).  A NULL
 * rt is an unknown /v2/models/ path, which needs the token. */
int http_auth(struct http_req *r, const struct http_route *rt);

/* ---- POST routes (http_post.c) -------------------------------------------
 *
 * A POST route's request, called by http.c's access handler in order:
 * http_post_begin once (from dispatch), http_post_chunk for each piece of
 * body, http_post_end once the body is complete, and, if that left r
 * REQ_QUEUED, http_post_answer once the job is done and MHD has resumed
 * the connection (r->state REQ_JOB_DONE). */

/* First call: an early refusal (413 by Content-Length), else r becomes
 * REQ_RECEIVING with its body buffer reserved and its auth verdict kept
 * for the end. */
enum MHD_Result http_post_begin(struct http_req *r);

/* Appends n bytes of body (counted and dropped once refused). */
void http_post_chunk(struct http_req *r, const char *data, size_t n);

/* 1 when a refused body has run on past HTTP_DRAIN_FACTOR times the limit:
 * the caller drops the connection. */
int http_refused_too_long(const struct http_req *r);

/* The body is complete: answers a refusal or a shared memory POST, or
 * decodes and admits the job, then runs it here and answers, or suspends
 * the connection (REQ_QUEUED) and submits it to the batcher. */
enum MHD_Result http_post_end(struct http_req *r);

/* Queues the answer of r's finished job. */
enum MHD_Result http_post_answer(struct http_req *r);

/* ---- limits before a POST runs (http_limits.c) ---------------------------
 *
 * The body's share of the in-flight budget (r->held), its answer's
 * (r->answer_held), the body's deadline and the request's estimated
 * flops.  Messages name the flag to change. */

/* First call: length is the Content-Length (0 when none).  Holds its
 * first step (http_limits.c).  0, or ATTND_ETOOBIG (over --max-body-mb
 * or the whole budget) or ATTND_EBUSY (the whole length does not fit
 * now) with the message in msg.  Starts the body's deadline. */
int http_limits_begin(struct http_req *r, unsigned long long length,
                      char *msg, size_t cap);

/* Holds the budget for need bytes of body in all, and a step ahead
 * when it fits: 0 or ATTND_EBUSY. */
int http_limits_grow(struct http_req *r, size_t need);

/* 1 when the body's deadline has passed; else moves the connection's
 * idle timeout to it. */
int http_limits_late(struct http_req *r);

/* 1 when a body dropped for its deadline is still arriving another
 * --body-timeout-s later: the caller closes the connection. */
int http_limits_cut(const struct http_req *r);

/* The body is in: the connection's idle timeout goes back to
 * --conn-timeout-s. */
void http_limits_body_done(struct http_req *r);

/* Drops the body (enum http_refusal why) and gives its hold back. */
void http_limits_drop(struct http_req *r, int why);

/* The error code and message of r->refused, 0 when it is REFUSE_NONE. */
int http_limits_refusal(struct http_req *r, char *msg, size_t cap);

/* The most an inflating body may grow to: what is left of the budget,
 * at most --max-body-mb. */
size_t http_limits_inflate_room(struct http_req *r);

/* Between these two, on r's MHD thread, what the inflating and the decode
 * of r's body allocate is held in the budget before it is allocated
 * (mem_hold), into r->held: given back when the request is reserved as a
 * job (batcher_reserve_held), answered or ends. */
void http_limits_decode_begin(struct http_req *r);
void http_limits_decode_end(void);

/* A decoded request's flops: recorded in the metrics, and ATTND_ETOOBIG
 * with msg when it is over --max-request-gflop. */
int http_limits_flops(struct http_req *r, const proto_request *q, char *msg,
                     size_t cap);

/* For a v2 body whose JSON part has arrived: drops the body
 * (REFUSE_FLOPS) when its shapes alone need too many flops.  Runs once. */
void http_limits_early_flops(struct http_req *r);

/* r's job is done (on the thread that completed it, before the MHD
 * thread may touch r again): its answer's bytes, which the batcher left
 * held, are r's to give back (r->answer_held) when the request ends. */
void http_limits_job_done(struct http_req *r);

/* r's answer is being queued: its body, and whatever its decode left, are
 * freed and their hold given back (r->held), so that a client hearing a
 * refusal finds the budget as it would without it.  r->answer_held
 * stays: MHD still sends that answer. */
void http_limits_answered(struct http_req *r);

/* Completion: gives back whatever r still holds (an answer's bytes, or a
 * body never answered). */
void http_limits_end(struct http_req *r);

/* ---- KServe v2 metadata, health and statistics GETs (http_v2meta.c) ----
 *
 * struct http_route.get handlers: r->model is the model of a
 * /v2/models/{m} route (http_get_v2_stats: -1 for every model). */

enum MHD_Result http_get_v2_server(struct http_req *r);
enum MHD_Result http_get_v2_live(struct http_req *r);
enum MHD_Result http_get_v2_ready(struct http_req *r);
enum MHD_Result http_get_v2_model(struct http_req *r);
enum MHD_Result http_get_v2_model_config(struct http_req *r);
enum MHD_Result http_get_v2_stats(struct http_req *r);
enum MHD_Result http_get_v2_stats_all(struct http_req *r);
enum MHD_Result http_get_v2_model_ready(struct http_req *r);

#endif /* ATTND_HTTP_IMPL_H */
