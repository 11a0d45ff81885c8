/* status.c - attnd error code -> HTTP status (see status.h). */
#include "server/http/status.h"

#include "core/attnd_err.h"

unsigned int status_from_err(int err) {
  switch (err) {
  case ATTND_OK:        return 200;
  case ATTND_EINVAL:    return 400;
  case ATTND_EUNAUTH:   return 401;
  case ATTND_ENOTFOUND: return 404;
  case ATTND_EMETHOD:   return 405;
  case ATTND_ETOOBIG:   return 413;
  /* A feature the operator left off (client shared memory without
   * --allow-client-shm) or that attnd lacks (a transfer coding other than
   * chunked): the status Triton gives such a request, RFC 9110's 501
   * Not Implemented. */
  case ATTND_EDISABLED:  return 501;
  case ATTND_EINTERNAL: return 500;
  /* Out of memory is reported as overload: the client may retry once the
   * queued work that holds the memory has drained. */
  case ATTND_ENOMEM:    return 503;
  case ATTND_EBUSY:     return 503;
  case ATTND_EDRAINING: return 503;
  case ATTND_ENOTREADY: return 503;
  case ATTND_ETIMEDOUT: return 504;
  /* The body's own deadline (--body-timeout-s): RFC 9110's 408. */
  case ATTND_EBODYTIME: return 408;
  /* The client left before its answer: nginx's 499, for the access log
   * and the metrics (nobody reads an answer). */
  case ATTND_ECANCELED: return 499;
  default:              return 500;
  }
}

int status_wants_retry_after(unsigned int http_status) {
  return http_status == 503;
}
