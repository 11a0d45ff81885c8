/* log.c - stderr logger (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

/* Written once by log_init() before any thread starts, then only read. */
static enum log_format log_fmt = LOG_FORMAT_TEXT;
static int log_access_on = 1;

void log_init(enum log_format format, int access) {
  log_fmt = format;
  log_access_on = access;
}

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

/* Appends s to dst[*pos..cap) as JSON string content (no quotes). */
static void log_json_escape(char *dst, size_t cap, size_t *pos,
                            const char *s) {
  for (; *s && *pos + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      dst[(*pos)++] = '\\';
      dst[(*pos)++] = (char)c;
    } else if (c < 0x20) {
      *pos += (size_t)snprintf(dst + *pos, cap - *pos, "\\u%04x", c);
    } else {
      dst[(*pos)++] = (char)c;
    }
  }
  dst[*pos] = '\0';
}

static void log_vmsg(const char *level, const char *fmt, va_list ap) {
  char msg[LOG_LINE_MAX / 2], line[LOG_LINE_MAX];
  size_t pos = 0, n;

  vsnprintf(msg, sizeof msg, fmt, ap);
  n = strlen(msg);
  while (n > 0 && msg[n - 1] == '\n')  /* MHD messages end in a newline */
    msg[--n] = '\0';
  if (log_fmt == LOG_FORMAT_JSON) {
    pos = (size_t)snprintf(line, sizeof line, "{\"level\":\"%s\",\"msg\":\"",
                           level);
    log_json_escape(line, sizeof line - 3, &pos, msg);
    memcpy(line + pos, "\"}\n", 3);
    pos += 3;
  } else {
    int w = snprintf(line, sizeof line, "attnd: %s%s\n",
                     level[0] == 'e' ? "error: " : "", msg);
    pos = w < 0 ? 0 : (size_t)w >= sizeof line ? sizeof line - 1 : (size_t)w;
  }
  log_write(line, pos);
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

void log_verror(const char *fmt, va_list ap) { log_vmsg("error", fmt, ap); }

void log_access(const struct log_access *a) {
  char line[LOG_LINE_MAX], path[512];
  size_t pos = 0;
  int w;

  if (!log_access_on)
    return;
  path[0] = '\0';
  log_json_escape(path, sizeof path, &pos, a->path ? a->path : "");
  if (log_fmt == LOG_FORMAT_JSON)
    w = snprintf(line, sizeof line,
                 "{\"method\":\"%s\",\"path\":\"%s\",\"status\":%u,"
                 "\"bytes_in\":%zu,\"bytes_out\":%zu,\"ms\":%.3f,"
                 "\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"batch\":%d}\n",
                 a->method ? a->method : "-", path, a->status, a->bytes_in,
                 a->bytes_out, a->total_ns / 1e6, a->queue_ns / 1e6,
                 a->compute_ns / 1e6, a->batch_size);
  else
    w = snprintf(line, sizeof line,
                 "attnd: %s %s %u in=%zu out=%zu ms=%.3f queue_ms=%.3f "
                 "compute_ms=%.3f batch=%d\n",
                 a->method ? a->method : "-", path, a->status, a->bytes_in,
                 a->bytes_out, a->total_ns / 1e6, a->queue_ns / 1e6,
                 a->compute_ns / 1e6, a->batch_size);
  if (w > 0)
    log_write(line, (size_t)w < sizeof line ? (size_t)w : sizeof line - 1);
}
