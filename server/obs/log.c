/* log.c - stderr logger (see log.h).
 *
 * DESIGN: log_fmt and log_access_on are written once by log_init() before
 * any thread starts, then only read.  Each line is built in a buffer on
 * the calling thread's stack and written with one write(2).  The only
 * other state is log_put_time's per-thread cache of the current second's
 * text, so formatting takes no lock.  Access lines are formatted by hand
 * rather than with snprintf: they are written for every request.
 */
#include "server/obs/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Written once by log_init() before any thread starts, then only read. */
static enum log_format log_fmt = LOG_FORMAT_TEXT;
static int log_access_on = 1;

void log_init(enum log_format format, int access) {
  log_fmt = format;
  log_access_on = access;
}

int log_access_enabled(void) { return log_access_on; }

/* Writes the whole line with one write(2); a short write is retried so
 * that a line is never cut, an error drops it. */
static void log_write(const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, buf, len);
    if (n <= 0)
      return;
    buf += n;
    len -= (size_t)n;
  }
}

/* ---- a bounded line buffer ------------------------------------------- */

/* Appends never write past cap; what does not fit is dropped. */
struct log_buf {
  char *p;
  size_t len, cap;
};

static void log_put(struct log_buf *b, const char *s, size_t n) {
  if (n > b->cap - b->len)
    n = b->cap - b->len;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void log_puts(struct log_buf *b, const char *s) {
  log_put(b, s, strlen(s));
}

static void log_putc(struct log_buf *b, char c) {
  if (b->len < b->cap)
    b->p[b->len++] = c;
}

static void log_put_u64(struct log_buf *b, uint64_t v) {
  char d[20];
  int n = 0;
  do {
    d[sizeof d - 1 - n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  log_put(b, d + sizeof d - n, (size_t)n);
}

/* Nanoseconds as milliseconds with three decimals, rounded. */
static void log_put_ms(struct log_buf *b, uint64_t ns) {
  uint64_t us = (ns + 500) / 1000;
  unsigned f = (unsigned)(us % 1000);
  char frac[4] = {'.', (char)('0' + f / 100), (char)('0' + f / 10 % 10),
                  (char)('0' + f % 10)};
  log_put_u64(b, us / 1000);
  log_put(b, frac, 4);
}

/* RFC 3339 in UTC with milliseconds: 2026-12-02T21:49:57.123Z.  The text
 * up to the seconds changes once a second; each thread keeps its own. */
static void log_put_time(struct log_buf *b, const struct timespec *now) {
  static _Thread_local time_t cached_sec;
  static _Thread_local int cached_ok;
  static _Thread_local char cached[24];
  unsigned ms = (unsigned)(now->tv_nsec / 1000000);
  char tail[5] = {'.', (char)('0' + ms / 100), (char)('0' + ms / 10 % 10),
                  (char)('0' + ms % 10), 'Z'};
  if (!cached_ok || cached_sec != now->tv_sec) {
    struct tm tm;
    cached_ok = gmtime_r(&now->tv_sec, &tm) &&
                strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!cached_ok)
      strcpy(cached, "0000-00-00T00:00:00");
    cached_sec = now->tv_sec;
  }
  log_puts(b, cached);
  log_put(b, tail, 5);
}

/* ---- escaping -------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence at s (1-4), or 0 when s
 * does not start one (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF).  s is NUL-terminated, so a cut sequence is caught. */
static size_t log_utf8_len(const unsigned char *s) {
  unsigned char c = s[0];
  size_t n, i;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
      (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
    return 0;
  for (i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  return n;
}

static const char log_hex[] = "0123456789abcdef";

/* Appends s as JSON string content (no quotes), at most max bytes of it:
 * '"', '\\' and control characters escaped, UTF-8 kept, any other byte
 * written as \ufffd.  A cut field ends in "...". */
static void log_put_json(struct log_buf *b, const char *s, size_t max) {
  const unsigned char *p = (const unsigned char *)s;
  size_t used = 0;
  while (*p) {
    char esc[6];
    const char *out = esc;
    size_t n, adv = 1;
    if (*p == '"' || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      n = 2;
    } else if (*p < 0x20 || *p == 0x7f) {
      memcpy(esc, "\\u00", 4);
      esc[4] = log_hex[*p >> 4];
      esc[5] = log_hex[*p & 15];
      n = 6;
    } else if ((adv = log_utf8_len(p)) != 0) {
      out = (const char *)p;
      n = adv;
    } else {
      out = "\\ufffd";
      n = 6;
      adv = 1;
    }
    if (used + n > max - 3) {
      log_put(b, "...", 3);
      return;
    }
    log_put(b, out, n);
    used += n;
    p += adv;
  }
}

/* Appends s for a text line, at most max bytes of it: visible ASCII as
 * it is (and spaces when quoted), every other byte, '"' and '\\' as
 * \xHH.  A cut field ends in "...". */
static void log_put_text(struct log_buf *b, const char *s, size_t max,
                         int quoted) {
  const unsigned char *p = (const unsigned char *)s;
  size_t used = 0;
  for (; *p; p++) {
    int plain = *p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
    size_t n = plain || (quoted && *p == ' ') ? 1 : 4;
    if (used + n > max - 3) {
      log_put(b, "...", 3);
      return;
    }
    if (n == 1) {
      log_putc(b, (char)*p);
    } else {
      char esc[4] = {'\\', 'x', log_hex[*p >> 4], log_hex[*p & 15]};
      log_put(b, esc, 4);
    }
    used += n;
  }
}

/* A string field's value in fmt: JSON-quoted, or text as above. */
static void log_put_field(struct log_buf *b, enum log_format fmt,
                          const char *s, size_t max) {
  if (fmt == LOG_FORMAT_JSON) {
    log_putc(b, '"');
    log_put_json(b, s ? s : "-", max);
    log_putc(b, '"');
  } else {
    log_put_text(b, s && *s ? s : "-", max, 0);
  }
}

/* ---- the client's address -------------------------------------------- */

/* The numeric address (IPv4-mapped IPv6 as plain IPv4) into host and the
 * port; 0, or -1 for an address that is neither IPv4 nor IPv6. */
static int log_addr(const struct sockaddr *sa, char host[INET6_ADDRSTRLEN],
                    unsigned *port) {
  if (sa && sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    *port = ntohs(in->sin_port);
    return inet_ntop(AF_INET, &in->sin_addr, host, INET6_ADDRSTRLEN) ? 0
                                                                      : -1;
  }
  if (sa && sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    *port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
      return inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], host,
                       INET6_ADDRSTRLEN) ? 0 : -1;
    return inet_ntop(AF_INET6, &in6->sin6_addr, host, INET6_ADDRSTRLEN)
               ? 1 : -1;
  }
  return -1;
}

/* ---- lines ----------------------------------------------------------- */

static void log_access_json(struct log_buf *b, const struct log_access *a,
                            const struct timespec *now) {
  char host[INET6_ADDRSTRLEN];
  unsigned port = 0;
  log_puts(b, "{\"time\":\"");
  log_put_time(b, now);
  log_putc(b, '"');
  if (log_addr(a->client, host, &port) >= 0) {
    log_puts(b, ",\"remote_addr\":\"");
    log_puts(b, host);
    log_puts(b, "\",\"remote_port\":");
    log_put_u64(b, port);
  }
  log_puts(b, ",\"request_id\":");
  log_put_field(b, LOG_FORMAT_JSON, a->request_id, LOG_SHORT_OUT);
  log_puts(b, ",\"method\":");
  log_put_field(b, LOG_FORMAT_JSON, a->method, LOG_SHORT_OUT);
  log_puts(b, ",\"path\":");
  log_put_field(b, LOG_FORMAT_JSON, a->path, LOG_PATH_OUT);
  log_puts(b, ",\"status\":");
  log_put_u64(b, a->status);
  log_puts(b, ",\"bytes_in\":");
  log_put_u64(b, a->bytes_in);
  log_puts(b, ",\"bytes_out\":");
  log_put_u64(b, a->bytes_out);
  log_puts(b, ",\"ms\":");
  log_put_ms(b, a->total_ns);
  log_puts(b, ",\"queue_ms\":");
  log_put_ms(b, a->queue_ns);
  log_puts(b, ",\"compute_ms\":");
  log_put_ms(b, a->compute_ns);
  log_puts(b, ",\"batch\":");
  log_put_u64(b, a->batch_size > 0 ? (uint64_t)a->batch_size : 0);
  if (a->traceparent) {
    log_puts(b, ",\"traceparent\":");
    log_put_field(b, LOG_FORMAT_JSON, a->traceparent, LOG_TRACEPARENT_OUT);
  }
  if (a->reason) {
    log_puts(b, ",\"reason\":");
    log_put_field(b, LOG_FORMAT_JSON, a->reason, LOG_REASON_OUT);
  }
  log_putc(b, '}');
}

static void log_access_text(struct log_buf *b, const struct log_access *a,
                            const struct timespec *now) {
  char host[INET6_ADDRSTRLEN];
  unsigned port = 0;
  int v6;
  log_puts(b, "attnd: ");
  log_put_time(b, now);
  log_putc(b, ' ');
  if ((v6 = log_addr(a->client, host, &port)) >= 0) {
    if (v6)
      log_putc(b, '[');
    log_puts(b, host);
    log_puts(b, v6 ? "]:" : ":");
    log_put_u64(b, port);
  } else {
    log_putc(b, '-');
  }
  log_putc(b, ' ');
  log_put_field(b, LOG_FORMAT_TEXT, a->method, LOG_SHORT_OUT);
  log_putc(b, ' ');
  log_put_field(b, LOG_FORMAT_TEXT, a->path, LOG_PATH_OUT);
  log_putc(b, ' ');
  log_put_u64(b, a->status);
  log_puts(b, " in=");
  log_put_u64(b, a->bytes_in);
  log_puts(b, " out=");
  log_put_u64(b, a->bytes_out);
  log_puts(b, " ms=");
  log_put_ms(b, a->total_ns);
  log_puts(b, " queue_ms=");
  log_put_ms(b, a->queue_ns);
  log_puts(b, " compute_ms=");
  log_put_ms(b, a->compute_ns);
  log_puts(b, " batch=");
  log_put_u64(b, a->batch_size > 0 ? (uint64_t)a->batch_size : 0);
  log_puts(b, " id=");
  log_put_field(b, LOG_FORMAT_TEXT, a->request_id, LOG_SHORT_OUT);
  if (a->traceparent) {
    log_puts(b, " traceparent=");
    log_put_field(b, LOG_FORMAT_TEXT, a->traceparent, LOG_TRACEPARENT_OUT);
  }
  if (a->reason) {
    log_puts(b, " reason=\"");
    log_put_text(b, a->reason, LOG_REASON_OUT, 1);
    log_putc(b, '"');
  }
}

size_t log_format_access(const struct log_access *a, enum log_format fmt,
                         const struct timespec *now, char *buf, size_t cap) {
  struct log_buf b = {buf, 0, cap ? cap - 1 : 0};
  if (cap == 0)
    return 0;
  if (fmt == LOG_FORMAT_JSON)
    log_access_json(&b, a, now);
  else
    log_access_text(&b, a, now);
  buf[b.len++] = '\n';
  return b.len;
}

void log_access(const struct log_access *a) {
  char line[LOG_LINE_MAX];
  struct timespec now;
  if (!log_access_on)
    return;
  clock_gettime(CLOCK_REALTIME, &now);
  log_write(line, log_format_access(a, log_fmt, &now, line, sizeof line));
}

static void log_vmsg(const char *level, const char *fmt, va_list ap) {
  char msg[LOG_LINE_MAX / 2], line[LOG_LINE_MAX];
  struct log_buf b = {line, 0, sizeof line - 1};
  struct timespec now;
  size_t n;

  vsnprintf(msg, sizeof msg, fmt, ap);
  n = strlen(msg);
  while (n > 0 && msg[n - 1] == '\n')  /* MHD messages end in a newline */
    msg[--n] = '\0';
  if (log_fmt == LOG_FORMAT_JSON) {
    clock_gettime(CLOCK_REALTIME, &now);
    log_puts(&b, "{\"time\":\"");
    log_put_time(&b, &now);
    log_puts(&b, "\",\"level\":\"");
    log_puts(&b, level);
    log_puts(&b, "\",\"msg\":\"");
    log_put_json(&b, msg, sizeof line - 64);
    log_puts(&b, "\"}");
  } else {
    log_puts(&b, "attnd: ");
    if (level[0] == 'e')
      log_puts(&b, "error: ");
    else if (level[0] == 'w')
      log_puts(&b, "warning: ");
    log_puts(&b, msg);
  }
  line[b.len++] = '\n';
  log_write(line, b.len);
}

void log_info(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_vmsg("info", fmt, ap);
  va_end(ap);
}

void log_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_vmsg("error", fmt, ap);
  va_end(ap);
}

void log_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_vmsg("warning", fmt, ap);
  va_end(ap);
}

void log_verror(const char *fmt, va_list ap) { log_vmsg("error", fmt, ap); }
