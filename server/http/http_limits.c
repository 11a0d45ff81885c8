/* http_limits.c - what a POST may take before it runs: its body's share of
 * the in-flight memory budget as it arrives, the body's own
 * deadline, and the request's estimated flops (http_impl.h).
 *
 * DESIGN
 *
 * Everything here runs on the MHD thread that owns the request's
 * connection (the threads and a request's states: the DESIGN comment of
 * http.c), but http_limits_job_done, which runs where the request's job
 * completed, before the connection is resumed.  The budget itself is the
 * batcher's (batcher_hold, batcher_unhold, batcher_reserve_held under
 * b->mu; the model is batcher.h's).  A request holds it in three stages:
 *   r->held         its body, as it arrives, and what the body's
 *                   inflating and decode allocate; given back exactly
 *                   once: when the body turns into a reserved job
 *                   (http_post.c), when it is dropped, when the request
 *                   is answered (http_limits_answered: a refusal's body
 *                   is let go as its answer is queued), or at the
 *                   request's completion (http_limits_end), whichever
 *                   comes first;
 *   the job's       hold_bytes, its tensors and answer, reserved by the
 *                   batcher, which gives back all but the answer's bytes
 *                   as the job completes;
 *   r->answer_held  those answer bytes, from the job's completion until
 *                   the request's (http_limits_end): libmicrohttpd owns
 *                   the answer until it has sent every byte of it, so a
 *                   client that reads slowly keeps it in the budget and
 *                   later requests get the 503 rather than memory
 *                   growing.  An error answer (a few hundred bytes) is
 *                   not counted.
 *
 * A body is held as it arrives, a step ahead of its bytes: at its
 * headers the first HTTP_HOLD_FIRST bytes of its Content-Length (a
 * Content-Length that does not fit in what is left is refused at once,
 * 503, before the body is read), then, whenever its bytes pass what is
 * held, twice that (up to its Content-Length, and at most HTTP_HOLD_STEP
 * beyond the bytes), so that an upload takes the lock once a step, not
 * for every piece.  What is held ahead of the
 * bytes is never more than the bytes that came, so headers alone cannot
 * reserve the budget: a client must send what it holds.  The buffer is
 * sized from the Content-Length at once (the binary part's alignment
 * needs it), but its pages become memory only as the bytes are written
 * into them.  A compressed body also holds what it inflates to, as it
 * grows.  While the body is
 * inflated and decoded, what that allocates is held first as well
 * (http_limits_decode_begin: mem_hold's holder is the request), into
 * r->held.  A body that stops fitting while it arrives is dropped (its
 * hold given back) and refused when it ends: libmicrohttpd cannot answer
 * in the middle of an upload.
 *
 * The body's deadline (--body-timeout-s) runs from the end of the
 * headers.  Each piece of body checks it; total silence is left to
 * libmicrohttpd's idle timeout for the connection, which is set to the
 * time left until the deadline (MHD_set_connection_option) while the
 * body arrives and put back to --conn-timeout-s once it is in.  A body
 * still arriving at the deadline is dropped and answered 408 if it ends
 * within one more --body-timeout-s; otherwise the connection is closed.
 */
#include "server/http/http_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/attn.h"
#include "proto/mem.h"
#include "server/clock.h"
#include "server/sched/work.h"

/* What a body holds at its headers: all of a small one, the first step
 * of a larger one or of a chunked one (http_limits_grow doubles it). */
#define HTTP_HOLD_FIRST ((size_t)64 << 10)

/* The most a body holds beyond its bytes once it has grown: budget held
 * ahead is budget others cannot have. */
#define HTTP_HOLD_STEP ((size_t)1 << 20)

/* A v2 JSON part longer than this is not parsed twice for the early
 * flops check: the check after the whole body catches it. */
#define HTTP_EARLY_HEADER_MAX ((size_t)64 << 10)

/* Nor is one whose body is as good as in: with less than this still to
 * come by its Content-Length, weighing it early would save nothing but
 * cost a second parse of its JSON part. */
#define HTTP_EARLY_REST_MIN ((size_t)256 << 10)

static size_t http_mib_up(size_t n) { return (n + (1u << 20) - 1) >> 20; }

/* ---- the body's deadline ------------------------------------------------ */

static void http_set_timeout(struct http_req *r, unsigned s) {
  if (r->timeout_s == s)
    return;
  r->timeout_s = s;
  MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, s);
}

/* Seconds left until the body's deadline (at least 1), for the idle
 * timeout. */
static unsigned http_left_s(const struct http_req *r, uint64_t now) {
  uint64_t limit = (uint64_t)r->h->cfg.body_timeout_s * 1000000000u,
           spent = now - r->start_ns;
  uint64_t left = spent >= limit ? 0 : (limit - spent + 999999999u) /
                                           1000000000u;
  return left ? (unsigned)left : 1u;
}

/* The idle timeout while the body arrives: the time left, or the
 * connection's own timeout when that is shorter. */
static void http_body_timeout(struct http_req *r, uint64_t now) {
  unsigned s = http_left_s(r, now), conn = (unsigned)r->h->cfg.conn_timeout_s;
  http_set_timeout(r, conn && conn < s ? conn : s);
}

void http_limits_body_done(struct http_req *r) {
  if (r->timeout_s)
    http_set_timeout(r, (unsigned)r->h->cfg.conn_timeout_s);
}

/* ---- holding the budget ------------------------------------------------- */

static void http_unhold(struct http_req *r) {
  batcher_unhold(r->h->b, r->held);
  r->held = 0;
}

void http_limits_drop(struct http_req *r, int why) {
  r->refused = why;
  proto_body_free(&r->body);
  http_unhold(r);
}

/* The message of a 503 for n bytes that do not fit in what is left. */
static int http_budget_full(struct http_req *r, size_t n, const char *what,
                            char *msg, size_t cap) {
  size_t limit = r->h->cfg.max_inflight;
  snprintf(msg, cap, "%s of %zu bytes does not fit in the server's "
           "in-flight memory now (%zu of %zu MiB in use, --max-inflight-mb); "
           "retry later", what, n,
           http_mib_up(batcher_bytes_in_use(r->h->b)), limit >> 20);
  return ATTND_EBUSY;
}

int http_limits_begin(struct http_req *r, unsigned long long length,
                      char *msg, size_t cap) {
  const struct http_config *cfg = &r->h->cfg;
  if (length > cfg->max_body) {
    snprintf(msg, cap, "request body of %llu bytes exceeds the limit of "
             "%zu MiB (--max-body-mb)", length, cfg->max_body >> 20);
    return ATTND_ETOOBIG;
  }
  if (length > cfg->max_inflight) {
    snprintf(msg, cap, "request body of %llu bytes is larger than the "
             "server's whole in-flight memory, %zu MiB (--max-inflight-mb)",
             length, cfg->max_inflight >> 20);
    return ATTND_ETOOBIG;
  }
  /* Refused now when it cannot fit, though only its first step is held:
   * a client with a large body learns it before sending any of it. */
  size_t first = length < HTTP_HOLD_FIRST ? (size_t)length : HTTP_HOLD_FIRST;
  if (length > first) {
    size_t used = batcher_bytes_in_use(r->h->b);
    if (used > cfg->max_inflight || length > cfg->max_inflight - used)
      return http_budget_full(r, (size_t)length, "request body", msg, cap);
  }
  if (first && batcher_hold(r->h->b, first) != 0)
    return http_budget_full(r, (size_t)length, "request body", msg, cap);
  r->held = first;
  r->declared = (size_t)length;
  if (cfg->body_timeout_s)
    http_body_timeout(r, r->start_ns);
  return 0;
}

int http_limits_grow(struct http_req *r, size_t need) {
  size_t ahead;
  if (need <= r->held)
    return 0;
  /* Twice what is held (at least HTTP_HOLD_FIRST), at most
   * HTTP_HOLD_STEP beyond the bytes and never past the Content-Length:
   * since need > held, what is held beyond the bytes (at most 2 held -
   * need) is less than the bytes themselves.  A step ahead when it fits,
   * else exactly what is needed. */
  ahead = r->held < HTTP_HOLD_FIRST / 2 ? HTTP_HOLD_FIRST : 2 * r->held;
  if (ahead > need && ahead - need > HTTP_HOLD_STEP)
    ahead = need + HTTP_HOLD_STEP;
  if (r->declared >= need && ahead > r->declared)
    ahead = r->declared;
  if (ahead > need && batcher_hold(r->h->b, ahead - r->held) == 0) {
    r->held = ahead;
    return 0;
  }
  if (batcher_hold(r->h->b, need - r->held) != 0)
    return ATTND_EBUSY;
  r->held = need;
  return 0;
}

int http_limits_late(struct http_req *r) {
  uint64_t now, limit;
  if (!r->h->cfg.body_timeout_s)
    return 0;
  now = clock_now_ns();
  limit = (uint64_t)r->h->cfg.body_timeout_s * 1000000000u;
  if (now - r->start_ns > limit)
    return 1;
  http_body_timeout(r, now);
  return 0;
}

int http_limits_cut(const struct http_req *r) {
  uint64_t limit = (uint64_t)r->h->cfg.body_timeout_s * 1000000000u;
  return r->refused == REFUSE_LATE &&
         clock_now_ns() - r->start_ns > 2 * limit;
}

/* ---- inflating ---------------------------------------------------------- */

size_t http_limits_inflate_room(struct http_req *r) {
  size_t limit = r->h->cfg.max_inflight, used = batcher_bytes_in_use(r->h->b);
  size_t left = used < limit ? limit - used : 0;
  return left < r->h->cfg.max_body ? left : r->h->cfg.max_body;
}

/* mem_hold's holder while r's body is inflated and decoded (mem.h). */
static int http_limits_decode_hold(void *arg, size_t n) {
  struct http_req *r = arg;
  if (n > r->h->cfg.max_inflight)
    return MEM_HOLD_OVER;
  if (n > r->h->cfg.max_inflight - r->held)
    return MEM_HOLD_NEVER;
  if (batcher_hold(r->h->b, n) != 0)
    return MEM_HOLD_BUSY;
  r->held += n;
  return 0;
}

void http_limits_decode_begin(struct http_req *r) {
  mem_hold_begin(http_limits_decode_hold, r);
}

void http_limits_decode_end(void) { mem_hold_end(); }

/* ---- flops -------------------------------------------------------------- */

static int http_flops_refusal(struct http_req *r, char *msg, size_t cap) {
  snprintf(msg, cap, "request would cost about %.3g GFLOP, more than the "
           "server's limit of %.3g GFLOP (--max-request-gflop); send "
           "smaller shapes, or split the batch", r->cost_flops / 1e9,
           r->h->cfg.max_request_flop / 1e9);
  return ATTND_ETOOBIG;
}

int http_limits_flops(struct http_req *r, const proto_request *q, char *msg,
                     size_t cap) {
  r->cost_flops = r->job.cost_flops = work_flops(q);
  metrics_record_flops(r->h->m, r->cost_flops);
  if (r->h->cfg.max_request_flop <= 0 ||
      r->cost_flops <= r->h->cfg.max_request_flop)
    return 0;
  return http_flops_refusal(r, msg, cap);
}

/* The JSON part of a binary v2 body is in: weigh the request from its
 * shapes before its tensors arrive.  A refusal drops the body; anything
 * the shapes alone cannot decide is left to the whole body's decode.
 * Packed sequences are such a thing: their flops are their
 * sequences' flops, and the lengths are in cu_seqlens, binary data not yet
 * read, so a packed request is weighed once its body is in. */
void http_limits_early_flops(struct http_req *r) {
  proto_request q;
  char err[PROTO_ERR_MAX];
  size_t hlen = r->body.scan_from;
  if (r->flops_checked || r->refused || r->rt->body != BODY_V2 ||
      hlen == SIZE_MAX || r->body.len < hlen)
    return;
  r->flops_checked = 1;
  /* A compressed body's JSON part is known only once it is inflated. */
  if (r->h->cfg.max_request_flop <= 0 || hlen > HTTP_EARLY_HEADER_MAX ||
      (r->declared && r->body.len + HTTP_EARLY_REST_MIN > r->declared) ||
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                  MHD_HTTP_HEADER_CONTENT_ENCODING))
    return;
  if (proto_v2_decode_shapes(r->body.p, hlen, r->model, &q,
                             r->h->cfg.max_elems, err) == 0 &&
      q.prob.n_seqs == 0) {
    r->cost_flops = work_flops(&q);
    if (r->cost_flops > r->h->cfg.max_request_flop) {
      metrics_record_flops(r->h->m, r->cost_flops);
      http_limits_drop(r, REFUSE_FLOPS);
    }
  }
  proto_request_free(&q);
}

/* ---- refusals ----------------------------------------------------------- */

int http_limits_refusal(struct http_req *r, char *msg, size_t cap) {
  switch (r->refused) {
  case REFUSE_BUDGET:
    snprintf(msg, cap, "request body grew past what is left of the "
             "server's in-flight memory (%zu MiB, --max-inflight-mb) after "
             "%zu bytes; retry later, or send a smaller request",
             r->h->cfg.max_inflight >> 20, r->bytes_in);
    return ATTND_EBUSY;
  case REFUSE_FLOPS:
    return http_flops_refusal(r, msg, cap);
  case REFUSE_LATE:
    snprintf(msg, cap, "request body did not arrive within %d s of its "
             "headers (--body-timeout-s); send it faster, or in smaller "
             "requests", r->h->cfg.body_timeout_s);
    return ATTND_EBODYTIME;
  }
  return 0;
}

/* ---- after the job ------------------------------------------------------ */

void http_limits_job_done(struct http_req *r) {
  r->answer_held = r->job.answer_bytes;
}

void http_limits_answered(struct http_req *r) {
  proto_body_free(&r->body);
  proto_request_free(&r->job.req);
  http_unhold(r);
}

void http_limits_end(struct http_req *r) {
  http_unhold(r);
  batcher_unhold(r->h->b, r->answer_held);
  r->answer_held = 0;
}
