/* compress.c - HTTP content coding of bodies (zlib).
 *
 * Requests: gzip and deflate bodies are inflated as a stream into a buffer
 * that grows geometrically but never past the caller's cap, so a few
 * kilobytes that would inflate to gigabytes cost at most the cap before
 * they are refused (ATTND_ETOOBIG -> 413).  A gzip body may hold several
 * members (RFC 1952), inflated one after another into the same buffer
 * under the same cap; bytes after the last that do not start a member
 * are refused.  "deflate" is meant to be the zlib format (RFC 9110) but
 * some clients send raw deflate; a stream whose first bytes are not a
 * zlib header is read as raw deflate.
 *
 * Responses: gzip or deflate (zlib format) at level 1, which on float text
 * keeps most of the ratio for a fraction of the time of the default. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "proto/mem.h"
#include "proto/text/text.h"

#define ERR(...) (snprintf(err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

/* zlib windowBits for each coding. */
#define WB_GZIP (15 + 16)
#define WB_ZLIB 15
#define WB_RAW (-15)

/* Grows *buf toward need (never past cap + 1, so that a stream one byte
 * over the cap is seen as over), holding the growth in the budget first
 * (mem_hold).  0, ATTND_EBUSY (the budget cannot hold it) or
 * ATTND_ENOMEM. */
static int grow(char **buf, size_t *size, size_t cap) {
  size_t n = *size ? *size * 2 : 64 * 1024;
  if (n > cap + 1)
    n = cap + 1;
  if (mem_hold(n - *size))
    return ATTND_EBUSY;
  char *p = mem_realloc(*buf, n);
  if (!p)
    return ATTND_ENOMEM;
  *buf = p;
  *size = n;
  return 0;
}

/* Input handed to zlib per call (its counters are 32-bit). */
#define CHUNK (1u << 30)

/* One inflate step's result as an attnd code; 1 to go on. */
static int step_result(int zr, const z_stream *z, size_t left, int wb,
                       char *err) {
  if (zr == Z_STREAM_END)
    return 0;
  if (zr == Z_OK || (zr == Z_BUF_ERROR && (z->avail_in || left)))
    return 1;
  if (zr == Z_BUF_ERROR && z->avail_out)
    return ERR("body: the compressed stream is truncated");
  if (zr == Z_BUF_ERROR)
    return 1; /* output full: the caller grows it */
  if (zr == Z_MEM_ERROR)
    return ATTND_ENOMEM;
  return ERR("body: corrupt %s stream (%s)", wb == WB_GZIP ? "gzip"
             : "deflate", z->msg ? z->msg : "bad data");
}

/* After a stream ended with rest bytes of input left at p: 1 when they
 * start another gzip member (RFC 1952 allows several; each inflates
 * after the last), so that inflate is to go on from a reset. */
static int next_member(int wb, const char *p, size_t rest) {
  return wb == WB_GZIP && rest >= 2 && (unsigned char)p[0] == 0x1f &&
         (unsigned char)p[1] == 0x8b;
}

/* Inflates the whole input with windowBits wb into *out (capped): one
 * stream, or for gzip one member after another. */
static int inflate_all(int wb, const char *in, size_t len, size_t cap,
                       char **out, size_t *out_len, char *err) {
  z_stream z;
  char *buf = NULL;
  size_t size = 0, left = len, done = 0; /* done: earlier members' output */
  int rc = 1;
  memset(&z, 0, sizeof z);
  z.zalloc = mem_zalloc;
  z.zfree = mem_zfree;
  if (inflateInit2(&z, wb) != Z_OK)
    return ATTND_ENOMEM;
  z.next_in = (Bytef *)in;
  while (rc == 1) {
    if (z.avail_in == 0 && left) {
      z.avail_in = left > CHUNK ? CHUNK : (uInt)left;
      left -= z.avail_in;
    }
    if (done + z.total_out == size) {
      if (size > cap) {
        rc = ATTND_ETOOBIG;
        break;
      }
      if ((rc = grow(&buf, &size, cap)))
        break;
      rc = 1;
    }
    z.next_out = (Bytef *)buf + done + z.total_out;
    z.avail_out = (uInt)(size - done - z.total_out);
    rc = step_result(inflate(&z, Z_NO_FLUSH), &z, left, wb, err);
    if (rc == 0 && next_member(wb, (const char *)z.next_in,
                               len - (size_t)((const char *)z.next_in - in))) {
      done += z.total_out;
      rc = inflateReset(&z) == Z_OK ? 1 : ATTND_ENOMEM;
    }
  }
  done += z.total_out;
  if (!rc && done > cap)
    rc = ATTND_ETOOBIG;
  if (!rc && z.avail_in + left)
    rc = ERR("body: %zu bytes after the end of the compressed stream",
             (size_t)z.avail_in + left);
  *out_len = done;
  inflateEnd(&z);
  if (rc) {
    mem_free(buf);
    return rc;
  }
  *out = buf ? buf : mem_malloc(1);
  return *out ? 0 : ATTND_ENOMEM;
}

/* A zlib stream starts with CMF/FLG: method 8 and a header checksum. */
static int looks_zlib(const char *in, size_t len) {
  if (len < 2)
    return 0;
  unsigned char a = (unsigned char)in[0], b = (unsigned char)in[1];
  return (a & 0x0f) == 8 && (a >> 4) <= 7 && ((a << 8) | b) % 31 == 0;
}

int proto_inflate(const char *coding, const char *in, size_t len,
                  size_t max_out, char **out, size_t *out_len,
                  char err[PROTO_ERR_MAX]) {
  char name[48];
  int rc;
  *out = NULL;
  *out_len = len;
  if (!coding || !*coding || !strcasecmp(coding, "identity"))
    return 0;
  if (!strcasecmp(coding, "gzip") || !strcasecmp(coding, "x-gzip"))
    rc = inflate_all(WB_GZIP, in, len, max_out, out, out_len, err);
  else if (!strcasecmp(coding, "deflate"))
    rc = inflate_all(looks_zlib(in, len) ? WB_ZLIB : WB_RAW, in, len,
                     max_out, out, out_len, err);
  else {
    proto__quote_name(coding, name, sizeof name);
    return ERR("Content-Encoding: '%s' is not supported (gzip, deflate or "
               "identity)", name);
  }
  if (rc == ATTND_ETOOBIG)
    snprintf(err, PROTO_ERR_MAX, "request body inflates past the limit of "
             "%zu bytes", max_out);
  return rc;
}

/* ---- responses ---------------------------------------------------------- */

/* The q-value of one Accept-Encoding element ("gzip;q=0.5"): 1 when none,
 * -1 when it names another coding. */
static double coding_q(const char *s, size_t n, const char *coding) {
  size_t cl = strlen(coding);
  while (n && (*s == ' ' || *s == '\t'))
    s++, n--;
  if (n < cl || strncasecmp(s, coding, cl) ||
      (n > cl && s[cl] != ';' && s[cl] != ' ' && s[cl] != '\t'))
    return -1;
  const char *q = memchr(s, ';', n);
  if (!q)
    return 1;
  for (q++; q < s + n && (*q == ' ' || *q == '\t'); q++)
    ;
  if (q + 2 > s + n || tolower((unsigned char)q[0]) != 'q' || q[1] != '=')
    return 1;
  return strtod(q + 2, NULL);
}

/* The q-value the header gives coding (or "*"), 0 when absent. */
static double accept_q(const char *h, const char *coding) {
  double best = -1, star = -1;
  while (*h) {
    size_t n = strcspn(h, ",");
    double q = coding_q(h, n, coding), qs = coding_q(h, n, "*");
    if (q >= 0)
      best = q;
    if (qs >= 0)
      star = qs;
    h += n + (h[n] == ',');
  }
  return best >= 0 ? best : star >= 0 ? star : 0;
}

const char *proto_accept_coding(const char *h) {
  if (!h)
    return NULL;
  double g = accept_q(h, "gzip"), d = accept_q(h, "deflate");
  if (g <= 0 && d <= 0)
    return NULL;
  return g >= d ? "gzip" : "deflate";
}

int proto_deflate(const char *coding, const char *in, size_t len,
                  char **out, size_t *out_len) {
  z_stream z;
  int wb = !strcmp(coding, "gzip") ? WB_GZIP
           : !strcmp(coding, "deflate") ? WB_ZLIB : 0;
  if (!wb || len > CHUNK)
    return ATTND_EINVAL;
  memset(&z, 0, sizeof z);
  z.zalloc = mem_zalloc;
  z.zfree = mem_zfree;
  if (deflateInit2(&z, 1, Z_DEFLATED, wb, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return ATTND_ENOMEM;
  size_t cap = deflateBound(&z, (uLong)len) + 32;
  char *buf = mem_malloc(cap);
  if (!buf) {
    deflateEnd(&z);
    return ATTND_ENOMEM;
  }
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  z.next_out = (Bytef *)buf;
  z.avail_out = (uInt)cap;
  int zr = deflate(&z, Z_FINISH);
  *out_len = z.total_out;
  deflateEnd(&z);
  if (zr != Z_STREAM_END) {
    mem_free(buf);
    return ATTND_ENOMEM;
  }
  *out = buf;
  return 0;
}
