/* log.h - attnd's stderr logger: messages and one access line per request.
 *
 * Two formats: text ("attnd: <message>") and json (one JSON object per
 * line).  Every line is formatted into a local buffer and written with one
 * write(2), so lines from different threads never interleave.  log_init()
 * must run before any thread starts; everything else is safe from any
 * thread.  Logging never fails the caller: a line that cannot be written
 * is dropped.
 *
 * An access line (log_format_access) carries, in both formats: the time
 * it was written (RFC 3339, UTC, milliseconds: 2026-12-02T21:49:57.123Z),
 * the client's address and port, the request id (reqid.h), method, path,
 * status, body sizes, times, batch size, and when present the client's
 * W3C traceparent header and, for a 4xx or 5xx, the error message sent.
 * Text:
 *   attnd: TIME ADDR:PORT METHOD PATH STATUS in=N out=N ms=F queue_ms=F
 *          compute_ms=F batch=N id=ID [traceparent=TP] [reason="MSG"]
 * (one line; an IPv6 address is written [ADDR]:PORT).  Every byte of a
 * client-supplied field outside visible ASCII, and '"' and '\\', is
 * written as \xHH (a space too, outside the quoted reason), so a field
 * never holds a space and a line never breaks.  JSON:
 *   {"time":..,"remote_addr":..,"remote_port":N,"request_id":..,
 *    "method":..,"path":..,"status":N,"bytes_in":N,"bytes_out":N,"ms":F,
 *    "queue_ms":F,"compute_ms":F,"batch":N[,"traceparent":..][,"reason":..]}
 * with strings escaped per RFC 8259 and bytes that are not UTF-8 written
 * as \ufffd.  A field longer than its bound (LOG_*_OUT) is cut and ends
 * in "...".
 */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <time.h>

enum log_format {
  LOG_FORMAT_TEXT = 0,
  LOG_FORMAT_JSON = 1
};

/* The most bytes a field takes in a line, escaped; longer ones are cut. */
#define LOG_PATH_OUT 1024
#define LOG_REASON_OUT 1024
#define LOG_TRACEPARENT_OUT 256
#define LOG_SHORT_OUT 160  /* method, request id */
/* Room for the longest access line, every field at its bound. */
#define LOG_LINE_MAX 4096

struct sockaddr;

/* What one finished request looks like in the access log.  Times are in
 * nanoseconds; 0 means the request never reached that stage.  Strings
 * may be NULL (written as "-" or, the optional ones, left out). */
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
  const struct sockaddr *client;  /* AF_INET or AF_INET6 peer, or NULL */
  const char *request_id;   /* what X-Request-ID answered (reqid.h) */
  const char *traceparent;  /* the client's traceparent header, or NULL */
  const char *reason;       /* a 4xx/5xx's error message, or NULL */
};

/* Selects the output format and whether log_access writes anything
 * (access != 0).  Call once, before threads exist. */
void log_init(enum log_format format, int access);

/* 1 when log_access writes lines: callers skip gathering its fields
 * otherwise. */
int log_access_enabled(void);

/* A printf-style informational message. */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A printf-style error message. */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A message about something degraded but working ("attnd: warning: ...";
 * level "warning" in JSON). */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A message already formatted by someone else's va_list (the MHD logger). */
void log_verror(const char *fmt, va_list ap);

/* One access-log line, stamped with the current time. */
void log_access(const struct log_access *a);

/* Formats a's line, stamped with now (CLOCK_REALTIME), in fmt into buf,
 * ending in '\n' (not NUL-terminated).  Returns its length, at most cap;
 * cap >= LOG_LINE_MAX never cuts a line short. */
size_t log_format_access(const struct log_access *a, enum log_format fmt,
                         const struct timespec *now, char *buf, size_t cap);

#endif /* ATTND_LOG_H */
