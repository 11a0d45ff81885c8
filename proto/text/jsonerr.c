/* jsonerr.c - what is wrong with a body that is not JSON, for the few
 * mistakes that deserve a message of their own (jsoncheck.c calls it at
 * the byte it stopped at, the cJSON path where cJSON stopped).
 *
 * cJSON says only where it stopped.  Two mistakes are common enough to
 * deserve a message of their own:
 *   - NaN, Infinity and -Infinity, which Python's json.dumps writes for a
 *     float (or a numpy array's tolist()) that is not finite: the message
 *     names the value's place in the request ("query[0][1][2]",
 *     "query.data[5]", "parameters.scale"; for a v2 input, the input by
 *     its name) and says attnd needs finite values;
 *   - NUL bytes, such as a body of them (a zero-filled buffer, or binary
 *     data sent as JSON): cJSON skips every byte up to 0x20 as if it were
 *     a blank, so where it stopped can be far past the first bad byte;
 *     the message points at the first NUL outside a string before it.
 *     (Only NUL: the other control bytes are rare in what clients send,
 *     and tests/unit/test_numparse_decode.c puts a 0x01, which cJSON
 *     skips and attnd's own reader refuses, in front of a body to compare
 *     the two readers' messages.)
 * Anything else keeps "body is not valid JSON (near byte N)".
 *
 * jsoncheck.c also has it word a lone surrogate escape ("\ud800"), which
 * cJSON refuses without a word: the message names the string's place as
 * for NaN (proto__json_surrogate_err).
 *
 * Runs on the error path only: a body that parsed never comes here. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proto/text/text.h"

/* Deeper than any request attnd accepts; a deeper place is not named. */
#define MAX_DEPTH 64

/* One open container, walking the text. */
typedef struct frame {
  char type;            /* '{' or '[' */
  int want_key;         /* object: the next string is a member name */
  size_t start;         /* offset of the '{' or '[' */
  size_t key, key_len;  /* object: the current member's name */
  size_t index;         /* array: the current element */
} frame;

typedef struct walk {
  frame f[MAX_DEPTH];
  int depth;            /* -1: too deep, or not JSON the walk follows */
} walk;

static int is_blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* The end of the string whose opening quote is at i (past its closing
 * quote, or len when it has none); *n the length of what it holds. */
static size_t string_end(const char *t, size_t len, size_t i, size_t *n) {
  size_t j = i + 1;
  while (j < len && t[j] != '"')
    j += t[j] == '\\' ? 2 : 1;
  if (j > len)
    j = len;
  *n = j - i - 1;
  return j < len ? j + 1 : len;
}

/* Follows the containers of t[0..to): w holds those still open at to. */
static void follow(const char *t, size_t to, walk *w) {
  w->depth = 0;
  for (size_t i = 0; i < to && w->depth >= 0;) {
    char ch = t[i];
    frame *top = w->depth ? &w->f[w->depth - 1] : NULL;
    if (ch == '"') {
      size_t n, e = string_end(t, to, i, &n);
      if (top && top->type == '{' && top->want_key) {
        top->key = i + 1;
        top->key_len = n;
        top->want_key = 0;
      }
      i = e;
      continue;
    }
    if (ch == '{' || ch == '[') {
      if (w->depth == MAX_DEPTH) {
        w->depth = -1;
        return;
      }
      w->f[w->depth++] = (frame){.type = ch, .want_key = ch == '{',
                                 .start = i};
    } else if ((ch == '}' || ch == ']') && w->depth) {
      w->depth--;
    } else if (ch == ',' && top) {
      top->index++;
      top->want_key = top->type == '{';
    }
    i++;
  }
}

/* The n bytes at p, a name from the text, as a sanitised C string (cut
 * with "..." past 40 bytes, as proto__quote_name does). */
static void name_of(const char *p, size_t n, char *s, size_t cap) {
  char raw[48];
  if (n > sizeof raw - 1)
    n = sizeof raw - 1;
  memcpy(raw, p, n);
  raw[n] = '\0';
  proto__quote_name(raw, s, cap);
}

/* Appends frames [from, depth) of w as ".name" and "[i]" to s. */
static void path_from(const char *t, const walk *w, int from, char *s,
                      size_t cap) {
  size_t o = strlen(s);
  for (int d = from; d < w->depth && o < cap; d++) {
    const frame *f = &w->f[d];
    if (f->type == '[') {
      o += (size_t)snprintf(s + o, cap - o, "[%zu]", f->index);
    } else {
      char k[48];
      name_of(t + f->key, f->key_len, k, sizeof k);
      o += (size_t)snprintf(s + o, cap - o, "%s%s", o ? "." : "", k);
    }
  }
}

/* The value of member "name" of the object whose '{' is at start, when
 * it is a string, into s; "" otherwise.  Returns the offset of that
 * string's '"', or SIZE_MAX. */
static size_t input_name(const char *t, size_t len, size_t start, char *s,
                         size_t cap) {
  int depth = 0, want_key = 1, name_at = 0;
  s[0] = '\0';
  for (size_t i = start; i < len;) {
    char ch = t[i];
    if (ch == '"') {
      size_t n, e = string_end(t, len, i, &n);
      if (depth == 1 && want_key) {
        want_key = 0;
        name_at = n == 4 && !memcmp(t + i + 1, "name", 4);
      } else if (depth == 1 && name_at) {
        name_of(t + i + 1, n, s, cap);
        return i;
      }
      i = e;
      continue;
    }
    if (ch == '{' || ch == '[') {
      depth++;
    } else if (ch == '}' || ch == ']') {
      if (--depth == 0)
        return SIZE_MAX;
    } else if (ch == ',' && depth == 1) {
      want_key = 1;
      name_at = 0;
    } else if (!is_blank(ch) && ch != ':' && depth == 1) {
      name_at = 0; /* "name" holds something other than a string */
    }
    i++;
  }
  return SIZE_MAX;
}

/* The length of a NaN or infinity token at p (sign, then the word), or
 * 0 when there is none. */
size_t proto__json_non_finite_len(const char *p, const char *end) {
  static const char *const words[] = {"nan", "infinity", "inf"};
  const char *q = p + (p < end && (*p == '-' || *p == '+'));
  size_t n = 0;
  while (q + n < end && ((q[n] | 0x20) >= 'a' && (q[n] | 0x20) <= 'z'))
    n++;
  for (size_t i = 0; i < 3; i++)
    if (strlen(words[i]) == n && !strncasecmp(q, words[i], n))
      return (size_t)(q - p) + n;
  return 0;
}

/* The first NUL byte outside strings in t[0..to]; SIZE_MAX when there is
 * none. */
static size_t first_nul(const char *t, size_t len, size_t to) {
  for (size_t i = 0; i <= to && i < len;) {
    unsigned char ch = (unsigned char)t[i];
    if (ch == '"') {
      size_t n;
      i = string_end(t, len, i, &n);
      continue;
    }
    if (ch == 0)
      return i;
    i++;
  }
  return SIZE_MAX;
}

/* The place in the request of the value at offset at, into path
 * ("query[0][1][2]", "query.data[5]", "parameters.scale", "" for the
 * body itself); -1 when it has none: nested too deep to name, or a
 * member name. */
static int place_of(const char *text, size_t len, size_t at, int codec,
                    char *path, size_t cap) {
  walk w;
  path[0] = '\0';
  follow(text, at, &w);
  if (w.depth < 0 ||
      (w.depth && w.f[w.depth - 1].type == '{' && w.f[w.depth - 1].want_key))
    return -1;
  if (codec == PROTO_CODEC_V2 && w.depth >= 3 && w.f[0].type == '{' &&
      w.f[0].key_len == 6 && !memcmp(text + w.f[0].key, "inputs", 6) &&
      w.f[1].type == '[' && w.f[2].type == '{' &&
      input_name(text, len, w.f[2].start, path, cap) == at)
    path[0] = '\0'; /* the input's name itself: "inputs[0].name" */
  if (path[0])
    path_from(text, &w, 2, path, cap); /* "query.data[5]" */
  else if (w.depth && w.f[0].type == '[')
    path_from(text, &w, 0, strcpy(path, "body"), cap);
  else
    path_from(text, &w, 0, path, cap);
  return 0;
}

int proto__json_syntax_err(const char *text, size_t len, size_t at,
                           int codec, const char *where,
                           char err[PROTO_ERR_MAX]) {
  size_t bad = first_nul(text, len, at), n;
  char path[PROTO_ERR_MAX / 2];
  if (bad != SIZE_MAX) {
    snprintf(err, PROTO_ERR_MAX, "body is not valid JSON: byte %zu%s is a "
             "NUL (0x00); JSON allows only spaces, tabs and line breaks "
             "between tokens", bad, where);
    return ATTND_EINVAL;
  }
  if (at >= len || !(n = proto__json_non_finite_len(text + at, text + len)))
    goto generic;
  if (place_of(text, len, at, codec, path, sizeof path))
    goto unplaced; /* too deep to name, or where a member name belongs */
  snprintf(err, PROTO_ERR_MAX, "%s: %.*s is not a JSON number; attnd needs "
           "finite values", path[0] ? path : "body", (int)n, text + at);
  return ATTND_EINVAL;
unplaced:
  snprintf(err, PROTO_ERR_MAX, "body is not valid JSON at byte %zu%s: %.*s "
           "is not a JSON number; attnd needs finite values", at, where,
           (int)n, text + at);
  return ATTND_EINVAL;
generic:
  snprintf(err, PROTO_ERR_MAX, "body is not valid JSON (near byte %zu%s)",
           at, where);
  return ATTND_EINVAL;
}

int proto__json_surrogate_err(const char *text, size_t len, size_t str,
                              size_t at, int codec, const char *where,
                              char err[PROTO_ERR_MAX]) {
  static const char why[] = "is a lone UTF-16 surrogate (a \\uD800-\\uDBFF "
                            "escape must be followed by a \\uDC00-\\uDFFF "
                            "one)";
  char path[PROTO_ERR_MAX / 2];
  if (place_of(text, len, str, codec, path, sizeof path) || !path[0])
    snprintf(err, PROTO_ERR_MAX, "body is not valid JSON: %.6s at byte "
             "%zu%s %s", text + at, at, where, why);
  else
    snprintf(err, PROTO_ERR_MAX, "%s: %.6s at byte %zu%s %s", path,
             text + at, at, where, why);
  return ATTND_EINVAL;
}
