/* http_answer.c - queueing a request's one answer: its headers, its
 * status and what it counts in the metrics (http_impl.h).
 *
 * DESIGN
 *
 * Runs on the MHD thread that owns the request's connection (the threads
 * and a request's states: the DESIGN comment of http.c), so r is that
 * thread's alone.  Of the shared state it reads h->quiesced, an atomic
 * the controlling thread sets, records into the metrics, which any
 * thread may do (metrics.h), and gives the body's hold back to the
 * budget, under the batcher's own lock (a leaf, batcher.h).  No locks of
 * its own.
 */
#include "server/http/http_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "server/clock.h"
#include "server/http/status.h"
#include "proto/mem.h"

const char http_json[] = "application/json";

/* ---- responses --------------------------------------------------------- */

/* Queues resp (len bytes of body) with status.  Adds Content-Type, the
 * name/value pairs of hdrs (NULL-terminated; NULL for none), and
 * Retry-After / WWW-Authenticate / Connection: close where they apply. */
static enum MHD_Result http_queue(struct http_req *r, unsigned int status,
                                  struct MHD_Response *resp, size_t len,
                                  const char *ctype,
                                  const char *const *hdrs) {
  enum MHD_Result ret;
  uint64_t took;

  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  MHD_add_response_header(resp, REQID_HEADER, r->rid);
  if (status_wants_retry_after(status))
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  for (; hdrs && hdrs[0]; hdrs += 2)
    MHD_add_response_header(resp, hdrs[0], hdrs[1]);
  /* RFC 6750 section 3: an error code only when a token was sent. */
  if (status == 401)
    MHD_add_response_header(
        resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
        r->auth == AUTH_INVALID
            ? "Bearer realm=\"attnd\", error=\"invalid_token\""
            : "Bearer realm=\"attnd\"");
  if (r->close || atomic_load(&r->h->quiesced))
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  /* Whatever the answer, the request is done with its regions (nothing
   * of it runs while an answer is queued: a queued job's connection is
   * suspended until the job is back).  They are let go before the client
   * hears, so that it may unregister or register them again as soon as
   * it has its answer, also after a refusal; the request's end, after the
   * answer is written, may come later than the client's next request.
   * So is its body's hold on the in-flight budget, for the same reason
   * (a refusal's body is needed no more); its answer's bytes stay held
   * until MHD has sent them (http_limits.c). */
  http_limits_answered(r);
  shm_http_req_end(&r->shm);
  ret = MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  r->state = REQ_ANSWERED;
  r->status = status;
  r->bytes_out = len;
  /* Counted here rather than on completion so that a client holding its
   * answer can already see it counted in /metrics. */
  took = clock_now_ns() - r->start_ns;
  metrics_record_request(r->h->m, r->route, status, r->bytes_in, len, took);
  if (r->route == METRICS_ROUTE_V2_INFER && r->rt && r->auth == AUTH_OK)
    metrics_record_model(r->h->m, r->model,
                         status == 200 ? METRICS_PHASE_SUCCESS
                                       : METRICS_PHASE_FAIL,
                         took);
  return ret;
}

/* Queues body (len bytes) with status, as http_queue.  own != 0 hands
 * body to MHD, which frees it; own == 0 means body is static. */
enum MHD_Result http_answer(struct http_req *r, unsigned int status,
                            char *body, size_t len, int own,
                            const char *ctype,
                            const char *const *hdrs) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      len, body, own ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    if (own)
      mem_free(body);
    return MHD_NO;
  }
  return http_queue(r, status, resp, len, ctype, hdrs);
}

static void http_free_parts(void *cls) {
  proto_parts_free(cls);
  mem_free(cls);
}

/* A 200 of a response in parts (v2 binary outputs where the core wrote
 * them), which MHD frees with the response.  Joined parts are one buffer,
 * which MHD sends in the same write as the headers; others go as an
 * iovec, after a write of the headers alone. */
enum MHD_Result http_answer_parts(struct http_req *r,
                                  proto_parts *parts,
                                  const char *const *hdrs) {
  struct MHD_IoVec iov[1 + PROTO_OUT_COUNT];
  proto_parts *own = mem_malloc(sizeof *own);
  struct MHD_Response *resp = NULL;
  size_t len = parts->json_len;
  if (own) {
    *own = *parts;
    memset(parts, 0, sizeof *parts);
    iov[0] = (struct MHD_IoVec){own->json, own->json_len};
    for (int i = 0; i < own->n; i++) {
      iov[1 + i] = (struct MHD_IoVec){own->data[i], own->len[i]};
      len += own->len[i];
    }
    resp = own->joined
               ? MHD_create_response_from_buffer_with_free_callback_cls(
                     len, own->json, http_free_parts, own)
               : MHD_create_response_from_iovec(
                     iov, (unsigned int)(1 + own->n), http_free_parts, own);
    if (!resp)
      http_free_parts(own);
  }
  /* out of memory for the response: the client still gets its 503 */
  if (!resp)
    return http_fail(r, ATTND_ENOMEM, NULL, NULL);
  return http_queue(r, 200, resp, len, "application/octet-stream", hdrs);
}

/* Queues {"error": msg} with the HTTP status for err.  Never compressed,
 * whatever Accept-Encoding says, as Triton does: clients read an error
 * before they decompress anything (tritonclient decodes the body of a
 * failed request as UTF-8 straight away), and a short message gains
 * nothing from it. */
enum MHD_Result http_fail(struct http_req *r, int err, const char *msg,
                          const char *allow) {
  static char oom[] = "{\"error\": \"out of memory\"}";
  const char *hdrs[3] = {NULL};
  char *body;
  size_t len;
  snprintf(r->reason, sizeof r->reason, "%s", msg ? msg : attnd_strerror(err));
  if (proto_error_body(r->reason, &body, &len) != 0) {
    snprintf(r->reason, sizeof r->reason, "out of memory");
    return http_answer(r, 503, oom, sizeof oom - 1, 0, http_json, NULL);
  }
  if (allow) {
    hdrs[0] = MHD_HTTP_HEADER_ALLOW;
    hdrs[1] = allow;
  }
  return http_answer(r, status_from_err(err), body, len, 1, http_json, hdrs);
}

/* Queues a 200 (or status) with a malloc'd body from a proto_v2_* call
 * that returned rc. */
enum MHD_Result http_send(struct http_req *r, unsigned int status,
                          int rc, char *body, size_t len) {
  if (rc != 0)
    return http_fail(r, rc, NULL, NULL);
  return http_answer(r, status, body, len, 1, http_json, NULL);
}
