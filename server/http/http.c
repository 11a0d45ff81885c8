/* http.c - one request's life on its lane: its first call, its states
 * from headers to answer, the framing check before its body, and its
 * access log line at completion.  The rest of the front end is listed in
 * http_impl.h, one job a file.
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

#include <fcntl.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/conn/acceptor.h"
#include "server/conn/linger.h"
#include "server/obs/log.h"
#include "server/obs/reqid.h"
#include "server/shm/shm_http.h"
#include "proto/mem.h"

/* ---- a request's calls -------------------------------------------------- */

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

/* 1 when the request announces a body. */
static int http_has_body(struct MHD_Connection *c) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH) ||
         MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

/* The longest client text a framing message quotes, in bytes. */
#define HTTP_QUOTE_MAX 40

/* What http_framing_error gathers from the headers. */
struct http_framing {
  const char *length;       /* the first Content-Length */
  int lengths_differ;
  int te_lines;             /* Transfer-Encoding header lines */
  int te_exact;             /* the first of them is just "chunked" */
  int codings, chunked;     /* transfer codings listed; how many chunked */
  int last_chunked;         /* the last one listed is chunked */
  char other[HTTP_QUOTE_MAX + 4];  /* the first other coding's name */
  char te[HTTP_QUOTE_MAX + 4];     /* every line's value, ", "-joined */
  size_t te_len;
};

/* Appends n bytes of client text at s to dst (cap HTTP_QUOTE_MAX + 4,
 * *len bytes so far): printable ASCII only, others as '?', and "..."
 * once past HTTP_QUOTE_MAX. */
static void http_quote_add(char *dst, size_t *len, const char *s,
                           size_t n) {
  for (size_t i = 0; i < n && *len <= HTTP_QUOTE_MAX; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (*len == HTTP_QUOTE_MAX) {
      memcpy(dst + *len, "...", 3);
      *len += 3;
      break;
    }
    dst[(*len)++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
  }
  dst[*len] = '\0';
}

/* Counts the transfer codings of one Transfer-Encoding line (RFC 9110
 * section 5.6.1: a comma-separated list, blanks around elements, empty
 * elements ignored; a coding's name is what comes before its ';'). */
static void http_framing_codings(struct http_framing *f, const char *v) {
  while (*v) {
    size_t n = strcspn(v, ","), name;
    const char *e = v;
    while (e < v + n && (*e == ' ' || *e == '\t'))
      e++;
    name = strcspn(e, ";,");
    while (name && (e[name - 1] == ' ' || e[name - 1] == '\t'))
      name--;
    if (e < v + n) {  /* not an empty element */
      int ch = name == 7 && !strncasecmp(e, "chunked", 7);
      size_t olen = 0;
      f->codings++;
      f->chunked += ch;
      f->last_chunked = ch;
      if (!ch && !f->other[0])
        http_quote_add(f->other, &olen, e, name);
    }
    v += n + (v[n] == ',');
  }
}

static enum MHD_Result http_framing_header(void *cls, enum MHD_ValueKind kind,
                                           const char *key,
                                           const char *value) {
  struct http_framing *f = cls;
  (void)kind;
  if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
    value = value ? value : "";
    if (!f->te_lines++)
      f->te_exact = !strcasecmp(value, "chunked");
    else
      http_quote_add(f->te, &f->te_len, ", ", 2);
    http_quote_add(f->te, &f->te_len, value, strlen(value));
    http_framing_codings(f, value);
  } else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) && value) {
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
 * request (request smuggling).
 * Its transfer codings, every Transfer-Encoding line's list in order
 * (RFC 9110 section 5.3), must be chunked alone, the one libmicrohttpd
 * decodes.  It frames by the first line's value only, and one that is
 * not just "chunked" (0.9.75) as a body that lasts until the connection
 * closes: so a list that does not end in chunked has no length (RFC 9112
 * section 6.3: 400), and codings before chunked are ones attnd does not
 * decode (section 6.1: 501).  Returns 0, or the error (ATTND_EINVAL for
 * 400, ATTND_EDISABLED for 501) with the reason in msg. */
static int http_framing_error(struct MHD_Connection *c, char *msg,
                              size_t cap) {
  struct http_framing f;
  memset(&f, 0, sizeof f);
  MHD_get_connection_values(c, MHD_HEADER_KIND, http_framing_header, &f);
  if (f.te_lines && f.length)
    snprintf(msg, cap, "request has both Transfer-Encoding and "
             "Content-Length; send one of them");
  else if (f.lengths_differ)
    snprintf(msg, cap, "request has Content-Length headers that "
             "disagree; send one");
  else if (!f.te_lines || (f.te_exact && f.codings == 1 && f.chunked))
    return 0;
  else if (!f.last_chunked)
    snprintf(msg, cap, "Transfer-Encoding '%s' does not end in chunked, so "
             "the body has no length; send 'Transfer-Encoding: chunked'",
             f.te);
  else if (f.chunked > 1)
    snprintf(msg, cap, "Transfer-Encoding '%s' has chunked more than once; "
             "send 'Transfer-Encoding: chunked'", f.te);
  else if (f.codings > 1) {
    snprintf(msg, cap, "Transfer-Encoding '%s' is not supported: send the "
             "body chunked, with Content-Encoding for compression", f.other);
    return ATTND_EDISABLED;
  } else
    snprintf(msg, cap, "Transfer-Encoding '%s' is not plain chunked; send "
             "'Transfer-Encoding: chunked'", f.te);
  return ATTND_EINVAL;
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
  char msg[256];
  int rc;

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
  if ((rc = http_framing_error(c, msg, sizeof msg)) != 0) {
    r->close = 1;
    return http_linger_if_early(r, http_fail(r, rc, msg, NULL));
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

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c,
                                const char *url, const char *method,
                                const char *version, const char *upload_data,
                                size_t *upload_data_size, void **con_cls) {
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

#ifdef ATTND_TEST_HOOKS
/* build/attnd-test only: ATTND_TEST_END_DELAY_MS holds the end of each
 * request (after its answer is written) that many milliseconds, so that
 * a test's next request surely arrives before the last one has ended. */
static void http_end_delay(void) {
  const char *e = getenv("ATTND_TEST_END_DELAY_MS");
  long ms = e ? strtol(e, NULL, 10) : 0;
  if (ms > 0 && ms < 60000)
    nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
}
#else
static void http_end_delay(void) {}
#endif

void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                       enum MHD_RequestTerminationCode toe) {
  struct http *h = cls;
  struct http_req *r = *con_cls;
  if (!r || *con_cls == &http_oom_ctx) {
    *con_cls = NULL;
    return;
  }
  http_end_delay();
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
