/* log.h - attnd's stderr logger: messages and one access line per request.
 *
 * Two formats: text ("attnd: <message>") and json (one JSON object per
 * line).  Every line is formatted into a local buffer and written with one
 * write(2), so lines from different threads never interleave.  log_init()
 * must run before any thread starts; everything else is safe from any
 * thread.  Logging never fails the caller: a line that cannot be written
 * is dropped.
 */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>

enum log_format {
  LOG_FORMAT_TEXT = 0,
  LOG_FORMAT_JSON = 1
};

/* What one finished request looks like in the access log.  Times are in
 * nanoseconds; 0 means the request never reached that stage. */
struct log_access {
  const char *method;       /* e.g. "POST" */
  const char *path;         /* the request path as received */
  unsigned int status;      /* HTTP status sent (0: none, client gone) */
  size_t bytes_in;          /* request body bytes received */
  size_t bytes_out;         /* response body bytes queued */
  uint64_t total_ns;        /* first handler call -> completion */
  uint64_t queue_ns;        /* enqueued -> a worker picked it up */
  uint64_t compute_ns;      /* worker start -> response encoded */
  int batch_size;           /* requests in its batch, 0 if not batched */
};

/* Selects the output format and whether log_access writes anything
 * (access != 0).  Call once, before threads exist. */
void log_init(enum log_format format, int access);

/* A printf-style informational message. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A printf-style error message. */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A message already formatted by someone else's va_list (the MHD logger). */
void log_verror(const char *fmt, va_list ap);

/* One access-log line. */
void log_access(const struct log_access *a);

#endif /* ATTND_LOG_H */
