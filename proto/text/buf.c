/* buf.c - growable text buffer, JSON string escaping and float printing for
 * the encoders.  The response text is written straight into the buffer
 * rather than through a cJSON tree, which would allocate a node per number
 * and print doubles (17 digits) instead of float32s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/text/text.h"

int proto__buf_reserve(proto__buf *b, size_t extra) {
  if (b->oom)
    return ATTND_ENOMEM;
  if (extra < b->cap - b->len && b->cap > 0)
    return 0;
  size_t need = b->len + extra + 1;
  if (need < extra) /* overflow */
    goto err;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2)
      goto err;
    cap *= 2;
  }
  char *p = mem_realloc(b->p, cap);
  if (!p)
    goto err;
  b->p = p;
  b->cap = cap;
  b->p[b->len] = '\0';
  return 0;
err:
  b->oom = 1;
  return ATTND_ENOMEM;
}

void proto__buf_put(proto__buf *b, const char *s, size_t n) {
  if (proto__buf_reserve(b, n))
    return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void proto__buf_puts(proto__buf *b, const char *s) {
  proto__buf_put(b, s, strlen(s));
}

void proto__buf_putc(proto__buf *b, char c) {
  proto__buf_put(b, &c, 1);
}

/* Digits written back to front: every response carries a few shapes, and
 * snprintf's format machinery cost more than the rest of their encoding. */
void proto__buf_put_i64(proto__buf *b, long long v) {
  char s[24], *o = s + sizeof s;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v
                               : (unsigned long long)v;
  do
    *--o = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0)
    *--o = '-';
  proto__buf_put(b, o, (size_t)(s + sizeof s - o));
}

void proto__buf_free(proto__buf *b) {
  mem_free(b->p);
  memset(b, 0, sizeof *b);
}

/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 when the
 * bytes there are not one (overlong forms, surrogates and code points past
 * U+10FFFF included). */
static size_t utf8_seq_len(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return (s[1] & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80)
      return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80)
      return 0;
    return 4;
  }
  return 0;
}

int proto__check_id(const char *s, char err[PROTO_ERR_MAX]) {
  size_t n = strlen(s), i = 0;
  if (n > PROTO_ID_MAX) {
    snprintf(err, PROTO_ERR_MAX, "id: %zu bytes long; the limit is %d "
             "bytes", n, PROTO_ID_MAX);
    return ATTND_EINVAL;
  }
  while (i < n) {
    size_t k = utf8_seq_len((const unsigned char *)s + i);
    if (!k) {
      snprintf(err, PROTO_ERR_MAX, "id: byte %zu (0x%02x) is not valid "
               "UTF-8; the id must be UTF-8 text", i,
               (unsigned)(unsigned char)s[i]);
      return ATTND_EINVAL;
    }
    i += k;
  }
  return 0;
}

void proto__buf_put_json_string(proto__buf *b, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  proto__buf_putc(b, '"');
  while (*s) {
    const unsigned char *run = s;
    while (*s >= 0x20 && *s < 0x80 && *s != '"' && *s != '\\')
      s++;
    proto__buf_put(b, (const char *)run, (size_t)(s - run));
    if (!*s)
      break;
    if (*s == '"' || *s == '\\') {
      char esc[2] = {'\\', (char)*s};
      proto__buf_put(b, esc, 2);
      s++;
    } else if (*s == '\n' || *s == '\t' || *s == '\r') {
      char esc[2] = {'\\', *s == '\n' ? 'n' : *s == '\t' ? 't' : 'r'};
      proto__buf_put(b, esc, 2);
      s++;
    } else if (*s < 0x20) {
      char esc[8];
      int n = snprintf(esc, sizeof esc, "\\u%04x", *s);
      proto__buf_put(b, esc, (size_t)n);
      s++;
    } else {
      /* the NUL terminator stops utf8_seq_len from reading past the end:
       * a NUL is never a continuation byte */
      size_t n = utf8_seq_len(s);
      if (n) {
        proto__buf_put(b, (const char *)s, n);
        s += n;
      } else {
        proto__buf_puts(b, "\\ufffd");
        s++;
      }
    }
  }
  proto__buf_putc(b, '"');
}

/* Significant digits in a %g mantissa (leading zeros do not count). */
static int sig_digits(const char *s) {
  int n = 0, started = 0;
  for (; *s && *s != 'e'; s++) {
    if (*s >= '1' && *s <= '9')
      started = 1;
    if (started && *s >= '0' && *s <= '9')
      n++;
  }
  return n;
}

/* The snprintf path: 9 significant digits always read back as the same
 * float; try fewer while they still do.  %g drops trailing zeros, so a
 * result with k < p digits means no precision between k and p can be
 * shorter.  Correct but slow (about 1.4 us a float), so it only backs up
 * the Dragonbox printer below, should that ever fail. */
static int fmt_f32_slow(char *s, float x) {
  int n = snprintf(s, PROTO__F32_MAX, "%.9g", (double)x);
  int p = sig_digits(s);
  for (p = p < 9 ? p - 1 : 8; p >= 1; p--) {
    char t[PROTO__F32_MAX];
    int m = snprintf(t, sizeof t, "%.*g", p, (double)x);
    if (strtof(t, NULL) != x)
      break;
    memcpy(s, t, (size_t)m + 1);
    n = m;
    int k = sig_digits(t);
    if (k < p)
      p = k;
  }
  return n;
}

int proto__fmt_f32(char *s, float x) {
  int n;
  if (x == 0.0f) {
    s[0] = '0';
    s[1] = '\0';
    return 1;
  }
  if (!isfinite(x)) {
    memcpy(s, "null", 5);
    return 4;
  }
  /* Dragonbox's shortest digits (fpprint.cc): plain notation for
   * exponents -5..8 (0.00001, 123456790), d.ddde-X beyond (1e-6, 1e9) */
  if ((n = proto__num_fmt_f32(s, x)) > 0)
    return n;
  return fmt_f32_slow(s, x);
}

int proto__fmt_f64(char *s, size_t cap, double x) {
  int n = 0;
  for (int p = 1; p <= 17; p++) {
    n = snprintf(s, cap, "%.*g", p, x);
    if (strtod(s, NULL) == x)
      break;
  }
  return n;
}

void proto__buf_put_f32(proto__buf *b, float x) {
  if (proto__buf_reserve(b, PROTO__F32_MAX))
    return;
  b->len += (size_t)proto__fmt_f32(b->p + b->len, x);
}
