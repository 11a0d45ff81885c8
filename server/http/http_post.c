/* http_post.c - the POST routes: /v1/attention, /v2/models/{m}/infer and
 * /v2/systemsharedmemory/... (http_impl.h).  A request's body is
 * accumulated, decoded and admitted here; then its job runs right here or
 * is queued to the batcher (http_post_end), and the answer it produced is
 * queued (http_post_answer).
 *
 * DESIGN
 *
 * Everything here runs on the MHD thread that owns the request's
 * connection except http_on_job_done, which a worker or the batcher's
 * loop thread calls: it removes the request's watch (watch.h; from then
 * on the watch thread touches neither r's cancel word nor its socket),
 * takes over the answer's hold on the budget (http_limits_job_done), sets
 * r->state to REQ_JOB_DONE and resumes the connection, and from then on
 * only the MHD thread touches r.  The watch thread may set the
 * job's cancel word at any time before that (an atomic).  A job run
 * here (batcher_run_here) is watched too, from before it starts until
 * it returns, while this thread is inside MHD's callback, unless it is
 * brief (BATCHER_HERE_BRIEF), which is not watched at all.  The
 * suspend comes before the submit, and a suspended request cannot
 * complete, so r outlives its job (the states and why: the DESIGN
 * comment of http.c).  h->quiesced is an atomic the controlling thread
 * sets; the batcher does its own locking (batcher.h).  No locks here.
 */
#include "server/http/http_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/clock.h"
#include "server/conn/watch.h"
#include "proto/mem.h"

/* First call of a POST: refuse early what we already know we will refuse,
 * otherwise get ready to receive the body. */
enum MHD_Result http_post_begin(struct http_req *r) {
  const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_CONTENT_LENGTH);
  unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;
  char msg[256];
  int rc;

  /* Answered at the end of the body: an answer sent mid-upload tends to
   * reach the client as a connection reset. */
  r->auth = http_auth(r, r->rt);
  /* A body to be dropped (no token) holds nothing; one too large, or
   * that does not fit in the budget now, is refused before it is read. */
  if (n > r->h->cfg.max_body || r->auth == AUTH_OK) {
    rc = http_limits_begin(r, n, msg, sizeof msg);
    if (rc != 0)
      return http_fail(r, rc, msg, NULL);
  }
  /* Reserve once; a wrong Content-Length only costs a realloc, and a
   * failed reservation is answered when an append fails too. */
  if (r->auth == AUTH_OK)
    (void)proto_body_init(
        &r->body, (size_t)n,
        r->rt->body == BODY_V2
            ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                          "Inference-Header-Content-Length")
            : NULL);
  r->state = REQ_RECEIVING;
  return MHD_YES;
}

/* Copies one body chunk; beyond max_body, past the in-flight budget or
 * past the body's deadline the rest is counted and dropped (MHD cannot
 * answer until the final call). */
void http_post_chunk(struct http_req *r, const char *data, size_t n) {
  r->bytes_in += n;
  if (r->body_fault != FAULT_NONE || r->auth != AUTH_OK || r->refused)
    return;
  if (http_limits_late(r)) {
    http_limits_drop(r, REFUSE_LATE);
    return;
  }
  if (n > r->h->cfg.max_body - r->body.len) {
    r->body_fault = FAULT_OVER_MAX;
    http_limits_drop(r, REFUSE_NONE);
    return;
  }
  if (http_limits_grow(r, r->body.len + n) != 0) {
    http_limits_drop(r, REFUSE_BUDGET);
    return;
  }
  if (proto_body_append(&r->body, data, n)) {
    r->body_fault = FAULT_NO_MEMORY; /* answered on the final call */
    return;
  }
  if (!r->flops_checked)
    http_limits_early_flops(r);
}

/* A refused body's drain is bounded: HTTP_DRAIN_FACTOR (http_impl.h),
 * and for a late one another --body-timeout-s. */
int http_refused_too_long(const struct http_req *r) {
  return ((r->body_fault == FAULT_OVER_MAX || r->auth != AUTH_OK ||
           r->refused) &&
          r->bytes_in / HTTP_DRAIN_FACTOR > r->h->cfg.max_body) ||
         http_limits_cut(r);
}

/* Runs on a worker or the loop thread: store the outcome, then resume.
 * After MHD_resume_connection this thread must not touch r. */
static void http_on_job_done(struct batcher_job *job) {
  struct http_req *r = job->arg;
  watch_remove(r->h->watch, r->watch);  /* before MHD may close the fd */
  r->watch = 0;
  http_limits_job_done(r);
  r->state = REQ_JOB_DONE;
  MHD_resume_connection(r->conn);
}

/* Has the watcher (watch.h) look out, while r's job runs on this
 * thread or r is suspended, for its client leaving and its deadline
 * passing: either stops its job, computing or queued (then the batcher
 * is woken to complete it at once: batcher.h).  A connection the watcher
 * cannot take runs unwatched.  MHD leaves the descriptor open while this
 * thread is inside its callback and while the connection is suspended;
 * the watch is removed before either ends. */
static void http_watch(struct http_req *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (r->h->watch && ci)
    r->watch = watch_add(r->h->watch, ci->connect_fd, &r->job.cancel,
                         BATCHER_GONE, r->job.deadline_ns, BATCHER_LATE,
                         batcher_wake_cancelled, r->h->b);
}

/* The Content-Encoding lines of a request, joined (http_post_coding).
 * Two lines or more make a list with a comma, which proto_inflate
 * refuses quoting its first 40 bytes: a longer list is cut past that. */
struct http_coding {
  const char *first;  /* the first line's value */
  int lines;
  size_t len;
  char joined[128];   /* every line's value, ", "-joined, cut */
};

static enum MHD_Result http_coding_line(void *cls, enum MHD_ValueKind kind,
                                        const char *key, const char *value) {
  struct http_coding *c = cls;
  size_t room = sizeof c->joined - 1 - c->len;
  (void)kind;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_ENCODING))
    return MHD_YES;
  value = value ? value : "";
  if (!c->lines++)
    c->first = value;
  c->len += (size_t)snprintf(c->joined + c->len, room + 1, "%s%s",
                             c->lines > 1 ? ", " : "", value);
  if (c->len > sizeof c->joined - 1)
    c->len = sizeof c->joined - 1;
  return MHD_YES;
}

/* The request's content codings as one list (RFC 9110 section 5.3):
 * its one Content-Encoding line, or every line's value in order, joined
 * as if sent in one line, so both forms get the same answer.  NULL when
 * it has none. */
static const char *http_post_coding(struct http_req *r,
                                    struct http_coding *c) {
  memset(c, 0, sizeof *c);
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, http_coding_line, c);
  return c->lines > 1 ? c->joined : c->first;
}

/* The body as sent, or inflated per Content-Encoding into *plain (which
 * the caller frees).  0 or ATTND_E* with a message in err. */
static int http_post_plain(struct http_req *r, char **plain, const char **b,
                           size_t *n, char err[PROTO_ERR_MAX]) {
  struct http_coding lines;
  const char *coding = http_post_coding(r, &lines);
  size_t room;
  int rc;
  *plain = NULL;
  *b = r->body.p ? r->body.p : "";
  *n = r->body.len;
  if (!coding)
    return 0;
  /* It inflates into what is left of the budget, holding it as it grows
   * (r->held, the decode's holder). */
  room = http_limits_inflate_room(r);
  rc = proto_inflate(coding, *b, *n, room, plain, n, err);
  if (rc == ATTND_EBUSY ||
      (rc == ATTND_ETOOBIG && room < r->h->cfg.max_body)) {
    snprintf(err, PROTO_ERR_MAX, "request body inflates past what is left "
             "of the server's in-flight memory (%zu of %zu MiB, "
             "--max-inflight-mb); retry later", room >> 20,
             r->h->cfg.max_inflight >> 20);
    return ATTND_EBUSY;
  }
  if (rc == ATTND_ETOOBIG)
    snprintf(err, PROTO_ERR_MAX, "request body inflates past the limit of "
             "%zu MiB (--max-body-mb)", r->h->cfg.max_body >> 20);
  if (rc == 0 && *plain)
    *b = *plain;
  else if (rc == 0)
    *n = r->body.len;  /* identity */
  return rc;
}

/* Decodes the body with the route's codec into r->job.req. */
static int http_post_decode(struct http_req *r, char err[PROTO_ERR_MAX]) {
  struct http *h = r->h;
  const char *b;
  char *plain;
  size_t n;
  /* what the inflating and the decode allocate is held first (mem.h) */
  http_limits_decode_begin(r);
  int rc = http_post_plain(r, &plain, &b, &n, err);
  proto_shm shm;
  if (rc == 0 && r->rt->body == BODY_V2) {
    const char *hlen = MHD_lookup_connection_value(
        r->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    shm_http_req_begin(&r->shm, h->cfg.shm, &shm);
    /* As received, the body may lend the decoder its FP32 tensors. */
    rc = plain ? proto_v2_decode_shm(b, n, hlen, r->model, &shm, &r->job.req,
                                     h->cfg.max_elems, err)
               : proto_v2_decode_body_shm(&r->body, hlen, r->model, &shm,
                                          &r->job.req, h->cfg.max_elems,
                                          err);
  } else if (rc == 0) {
    rc = proto_v1_decode(b, n, &r->job.req, h->cfg.max_elems, err);
  }
  http_limits_decode_end();
  mem_free(plain);
  proto_body_free(&r->body);
  return rc;
}

/* The earlier of the server's --timeout-ms and the request's own
 * timeout (v2 parameter, microseconds), from its arrival; 0 = none. */
static uint64_t http_deadline(struct http_req *r) {
  uint64_t d = 0, own = r->job.req.timeout_us;
  if (r->h->cfg.timeout_ms)
    d = r->start_ns + (uint64_t)r->h->cfg.timeout_ms * 1000000u;
  r->own_timeout_us = 0;
  if (own && (d == 0 || r->start_ns + own * 1000u < d)) {
    d = r->start_ns + own * 1000u;
    r->own_timeout_us = own;
  }
  return d;
}

/* The 504's message: which deadline passed, the request's own or the
 * server's. */
static void http_late_msg(const struct http_req *r, char *msg, size_t cap) {
  if (r->own_timeout_us)
    snprintf(msg, cap, "deadline passed before the request finished: its "
             "\"timeout\" parameter of %llu us", (unsigned long long)
             r->own_timeout_us);
  else
    snprintf(msg, cap, "deadline passed before the request finished: the "
             "server's --timeout-ms of %ld ms", r->h->cfg.timeout_ms);
}

/* The batcher's job->finish: outputs into their regions, once the answer
 * is encoded (a failed request writes nothing there). */
static int http_job_finish(struct batcher_job *job) {
  struct http_req *r = job->arg;
  return shm_http_write_outputs(&r->shm, &job->req);
}

/* Final call of a POST to /v2/systemsharedmemory/...: register or
 * unregister; 200 with an empty body, as Triton. */
static enum MHD_Result http_post_shm(struct http_req *r) {
  static char empty[] = "";
  char err[PROTO_ERR_MAX] = "", *plain;
  const char *b;
  size_t n;
  http_limits_decode_begin(r);
  int rc = http_post_plain(r, &plain, &b, &n, err);
  if (rc == 0)
    rc = shm_http_post(r->h->cfg.shm, r->h->cfg.allow_client_shm, r->url, b,
                       n, err);
  http_limits_decode_end();
  mem_free(plain);
  proto_body_free(&r->body);
  if (rc != 0)
    return http_fail(r, rc, err[0] ? err : NULL, NULL);
  return http_answer(r, 200, empty, 0, 0, http_json, NULL);
}

/* Sets r->job.hold_bytes, what the request holds from admission until its
 * job is computed: its tensors and an upper bound of its encoded answer
 * (twice when compressed, the plain text and the compressed copy living
 * together); then the answer's own bytes alone, until it is sent
 * (http_limits.c).  ATTND_ETOOBIG, with a
 * message in msg, when that alone exceeds the in-flight budget: it could
 * never be admitted, so 413 rather than a 503 to retry.  The advice is
 * proto's, as for the decoder's element limit (proto_budget_advice). */
static int http_post_hold_bytes(struct http_req *r, char *msg, size_t cap) {
  const proto_request *q = &r->job.req;
  const attn_problem *p = &q->prob;
  int copies = r->job.coding ? 2 : 1;
  size_t answer = proto_answer_bytes(q), w = 0, rows;
  char advice[160];
  r->job.hold_bytes = q->in_bytes + q->out_bytes + answer * copies;
  if (r->job.hold_bytes <= r->h->cfg.max_inflight)
    return 0;
  /* the weights' part: computed, and when returned, printed (16 bytes a
   * number, 4 a row, as proto_answer_bytes) or sent binary */
  rows = (size_t)p->B * (size_t)p->H * (size_t)p->Lq;
  if (q->weights) {
    w = rows * (size_t)p->Lk * sizeof(float);
    if (q->return_weights)
      w += copies * (q->codec == PROTO_CODEC_V2 &&
                             q->binary[PROTO_OUT_WEIGHTS]
                         ? w
                         : w * 4 + rows * 4);
  }
  proto_budget_advice(q, r->job.hold_bytes - (w < r->job.hold_bytes ? w : 0),
                      r->h->cfg.max_inflight, advice, sizeof advice);
  snprintf(msg, cap, "request needs about %zu MiB for its tensors and "
           "answer, more than the server's in-flight limit of %zu MiB "
           "(--max-inflight-mb)%s", (r->job.hold_bytes >> 20) + 1,
           r->h->cfg.max_inflight >> 20, advice);
  return ATTND_ETOOBIG;
}

/* Final call: decode, admit, then run here or suspend and submit. */
enum MHD_Result http_post_end(struct http_req *r) {
  struct http *h = r->h;
  char err[PROTO_ERR_MAX], msg[384];
  enum batcher_here here;
  uint64_t t0;
  int rc;

  http_limits_body_done(r);
  if (r->auth != AUTH_OK)
    return http_fail(r, ATTND_EUNAUTH, NULL, NULL);
  if (r->body_fault == FAULT_OVER_MAX) {
    snprintf(msg, sizeof msg, "request body exceeds the limit of %zu MiB "
             "(--max-body-mb)", h->cfg.max_body >> 20);
    return http_fail(r, ATTND_ETOOBIG, msg, NULL);
  }
  if (r->refused)
    return http_fail(r, http_limits_refusal(r, msg, sizeof msg), msg, NULL);
  if (r->body_fault == FAULT_NO_MEMORY)
    return http_fail(r, ATTND_ENOMEM, NULL, NULL);
  /* Served while draining too: a client may still clean its regions up. */
  if (r->rt->body == BODY_SHM)
    return http_post_shm(r);
  /* Refused only now, after reading the body: an answer sent while the
   * client is still uploading tends to reach it as a connection reset. */
  if (atomic_load(&h->quiesced))
    return http_fail(r, ATTND_EDRAINING, NULL, NULL);
  err[0] = '\0';
  t0 = clock_now_ns();
  rc = http_post_decode(r, err);
  if (rc != 0)
    return http_fail(r, rc, err[0] ? err : NULL, NULL);
  if (r->rt->body == BODY_V2)
    metrics_record_model(h->m, r->model, METRICS_PHASE_INPUT,
                         clock_now_ns() - t0);
  r->job.coding = proto_accept_coding(MHD_lookup_connection_value(
      r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));
  msg[0] = '\0';
  rc = http_limits_flops(r, &r->job.req, msg, sizeof msg);
  if (rc == 0)
    rc = http_post_hold_bytes(r, msg, sizeof msg);
  if (rc == 0) {
    rc = batcher_reserve_held(h->b, r->job.hold_bytes, r->held, msg,
                              sizeof msg);
    r->held = 0;
  }
  if (rc != 0) {
    proto_request_free(&r->job.req);
    return http_fail(r, rc, msg[0] ? msg : NULL, NULL);
  }
  r->job.deadline_ns = http_deadline(r);
  r->job.done = http_on_job_done;
  r->job.arg = r;
  if (r->shm.n)
    r->job.finish = http_job_finish;
  if (r->job.req.n_shared)
    r->job.guarded = shm_http_guarded;
  /* h->posts counts this POST and every other one from its first byte to
   * its completion: 1 means none is being received, queued or computing
   * besides it (GETs, answered at once, do not count: a client's
   * /metrics answered just before would otherwise). */
  here = batcher_take_here(h->b, &r->job, atomic_load(&h->posts) == 1);
  /* Watched from here, whether it runs on this thread or is queued, but
   * for a brief job: watching would cost it more than stopping it early
   * could save (BATCHER_BRIEF_NS). */
  if (here != BATCHER_HERE_BRIEF)
    http_watch(r);
  if (here != BATCHER_QUEUE) {
    batcher_run_here(h->b, &r->job, here);
    watch_remove(h->watch, r->watch);  /* before MHD may close the fd */
    r->watch = 0;
    http_limits_job_done(r);
    r->state = REQ_JOB_DONE;
    return http_post_answer(r);
  }
  r->state = REQ_QUEUED;
  MHD_suspend_connection(r->conn);
  batcher_submit(h->b, &r->job);
  return MHD_YES;
}

/* Called again after the resume: queue what the worker produced, with
 * the headers its form needs (v2 binary outputs, content coding). */
enum MHD_Result http_post_answer(struct http_req *r) {
  struct batcher_job *job = &r->job;
  const char *hdrs[7];
  char hlen[32];
  int n = 0, binary = job->json_len < job->plain_len;
  char *body = job->body;

  /* A client that left (ATTND_ECANCELED): 499, as nginx logs it; the
   * connection closes after it, if it is still there to write to. */
  if (job->err == ATTND_ECANCELED)
    r->close = 1;
  /* Only the drain stops an admitted job with ATTND_EDRAINING. */
  if (job->err == ATTND_EDRAINING)
    return http_fail(r, job->err, "server is shutting down: the request "
                     "did not finish within the drain (--drain-s)", NULL);
  if (job->err == ATTND_ETIMEDOUT) {
    char late[160];
    http_late_msg(r, late, sizeof late);
    return http_fail(r, job->err, late, NULL);
  }
  /* The core's only ATTND_EINVAL: an input read in place lost pages. */
  if (job->err == ATTND_EINVAL && !r->shm.msg[0])
    return http_fail(r, job->err, "a shared memory region an input was "
                     "read from lost pages while the request was computed "
                     "(its object truncated after registration?)", NULL);
  if (job->err != 0)
    return http_fail(r, job->err, r->shm.msg[0] ? r->shm.msg : NULL, NULL);
  if (binary) {
    snprintf(hlen, sizeof hlen, "%zu", job->json_len);
    hdrs[n++] = "Inference-Header-Content-Length";
    hdrs[n++] = hlen;
  }
  if (job->compressed) {
    hdrs[n++] = MHD_HTTP_HEADER_CONTENT_ENCODING;
    hdrs[n++] = job->coding;
  }
  if (job->coding) {
    hdrs[n++] = MHD_HTTP_HEADER_VARY;
    hdrs[n++] = MHD_HTTP_HEADER_ACCEPT_ENCODING;
  }
  hdrs[n] = NULL;
  if (job->parts.n) {
    enum MHD_Result ret = http_answer_parts(r, &job->parts, hdrs);
    /* Out of memory before anything was queued: 503, not a close. */
    if (ret == MHD_NO && r->state != REQ_ANSWERED)
      return http_fail(r, ATTND_ENOMEM, NULL, NULL);
    return ret;
  }
  job->body = NULL;
  return http_answer(r, 200, body, job->body_len, 1,
                     binary ? "application/octet-stream" : http_json, hdrs);
}
