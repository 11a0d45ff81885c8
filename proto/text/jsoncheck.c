/* jsoncheck.c - the syntax of a JSON body, checked in one pass.
 *
 * Every JSON body the decoders read goes through here first, before any
 * tree is built: one pass over the bytes with a stack of one byte a
 * level (PROTO_JSON_MAX_DEPTH), no allocation.  It checks RFC 8259's
 * grammar (numbers, strings and their escapes, literals, blanks) and
 * stops at the first byte that breaks it, saying where and what it
 * expected: "body is not valid JSON at byte 60000123: expected a value,
 * got '}'".  Two rules beyond the grammar: no string holds the escape
 * \u0000, since cJSON's strings end at a NUL, and a name, datatype, id
 * or key cut short there would pass for another; and a \u escape of a
 * UTF-16 surrogate comes in a high-low pair, as RFC 8259 writes a
 * character past U+FFFF (cJSON refuses a lone one without saying why).
 * NaN and infinity tokens, NUL bytes and lone surrogates get the messages
 * of jsonerr.c (the place in the request, the NUL's offset).
 *
 * The decoders run it lazily: the inside of an array holding no container
 * or string (a list of numbers, most of a large body) is scanned 16-64
 * bytes a step for its end, and checked token by token only when the
 * decode fails (numscan's reader checks those tokens as it converts
 * them; text.h says how the two together cover every byte).
 *
 * It also counts what a cJSON tree of the text would hold (values,
 * strings and their bytes), so that the decoder can hold that memory in
 * the in-flight budget before cJSON allocates it (proto__json_tree_bytes,
 * proto__hold). */
#include <stdio.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/text/text.h"

typedef struct jc {
  const char *t;
  size_t len;
  int codec;
  const char *where;
  char *err;
  int lazy;
  size_t strict_to; /* lazy: no skipping before this offset */
} jc;

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static size_t skip_ws(const jc *c, size_t i) {
  while (i < c->len && proto__json_blank(c->t[i]))
    i++;
  return i;
}

/* The byte at i for a message: 'x', "byte 0x01", or the end. */
static void got_at(const jc *c, size_t i, char *s, size_t cap) {
  unsigned char ch = i < c->len ? (unsigned char)c->t[i] : 0;
  if (i >= c->len)
    snprintf(s, cap, "the end of the body");
  else if (ch > 0x20 && ch < 0x7f)
    snprintf(s, cap, "'%c'", ch);
  else
    snprintf(s, cap, "byte 0x%02x", ch);
}

/* The error at byte i: a NUL byte, and a NaN or infinity token where a
 * value belongs, get jsonerr.c's messages; anything else "expected
 * <want>, got <byte>". */
static int fail(const jc *c, size_t i, const char *want) {
  char got[32];
  if (i < c->len &&
      (c->t[i] == '\0' ||
       (!strcmp(want, "a value") &&
        proto__json_non_finite_len(c->t + i, c->t + c->len))))
    return proto__json_syntax_err(c->t, c->len, i, c->codec, c->where,
                                  c->err);
  got_at(c, i, got, sizeof got);
  snprintf(c->err, PROTO_ERR_MAX, "body is not valid JSON at byte %zu%s: "
           "expected %s, got %s", i, c->where, want, got);
  return ATTND_EINVAL;
}

static int num_char(char ch) {
  return is_digit(ch) || ch == '-' || ch == '+' || ch == '.' || ch == 'e' ||
         ch == 'E';
}

/* The number at i, which starts with '-' or a digit: its end, or 0 with
 * the message "01 is not a JSON number". */
static size_t number(const jc *c, size_t i) {
  const char *t = c->t;
  size_t s = i, n = c->len, d;
  if (t[i] == '-')
    i++;
  if (i < n && t[i] == '0')
    i++;
  else if (i < n && is_digit(t[i]))
    while (i < n && is_digit(t[i]))
      i++;
  else
    goto bad;
  if (i < n && t[i] == '.') {
    for (d = ++i; i < n && is_digit(t[i]); i++) {
    }
    if (i == d)
      goto bad;
  }
  if (i < n && (t[i] == 'e' || t[i] == 'E')) {
    if (++i < n && (t[i] == '+' || t[i] == '-'))
      i++;
    for (d = i; i < n && is_digit(t[i]); i++) {
    }
    if (i == d)
      goto bad;
  }
  if (i == n || !num_char(t[i]))
    return i;
bad:
  if (proto__json_non_finite_len(t + s, t + n)) {
    fail(c, s, "a value"); /* "-Infinity": the place, not the grammar */
    return 0;
  }
  for (i = s; i < n && num_char(t[i]) && i - s < 24; i++) {
  }
  snprintf(c->err, PROTO_ERR_MAX, "body is not valid JSON at byte %zu%s: "
           "%.*s is not a JSON number", s, c->where, (int)(i - s), t + s);
  return 0;
}

static int is_hex(char ch) {
  return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
}

/* The value of the four hex digits at p (is_hex checked). */
static unsigned hex4(const char *p) {
  unsigned v = 0;
  for (int k = 0; k < 4; k++)
    v = v * 16 + (unsigned)(is_digit(p[k]) ? p[k] - '0'
                            : (p[k] | 0x20) - 'a' + 10);
  return v;
}

/* 1 when the six bytes at t[i..n) are a \u escape of a low surrogate
 * (\uDC00-\uDFFF). */
static int low_surrogate_at(const char *t, size_t i, size_t n) {
  unsigned v;
  if (n - i < 6 || t[i] != '\\' || t[i + 1] != 'u')
    return 0;
  for (int k = 2; k < 6; k++)
    if (!is_hex(t[i + k]))
      return 0;
  v = hex4(t + i + 2);
  return v >= 0xDC00 && v <= 0xDFFF;
}

/* The string whose '"' is at i: the index after its closing quote, or 0
 * with the message; its length (escapes unresolved) added to *bytes. */
static size_t string(const jc *c, size_t i, size_t *bytes) {
  const char *t = c->t;
  size_t s = ++i, n = c->len;
  for (;;) {
    while (i < n && t[i] != '"' && t[i] != '\\' &&
           (unsigned char)t[i] >= 0x20)
      i++;
    if (i == n) {
      snprintf(c->err, PROTO_ERR_MAX, "body is not valid JSON at byte "
               "%zu%s: the string that starts there has no closing '\"'",
               s - 1, c->where);
      return 0;
    }
    if (t[i] == '"')
      break;
    if (t[i] != '\\') {
      snprintf(c->err, PROTO_ERR_MAX, "body is not valid JSON at byte "
               "%zu%s: control byte 0x%02x in a string (write it as an "
               "escape, \\u%04x)", i, c->where, (unsigned char)t[i],
               (unsigned char)t[i]);
      return 0;
    }
    if (i + 1 < n && strchr("\"\\/bfnrt", t[i + 1]) && t[i + 1]) {
      i += 2;
    } else if (i + 5 < n && t[i + 1] == 'u' && is_hex(t[i + 2]) &&
               is_hex(t[i + 3]) && is_hex(t[i + 4]) && is_hex(t[i + 5])) {
      unsigned u = hex4(t + i + 2);
      if (!u) {
        /* names and ids are C strings after cJSON: one would end here */
        snprintf(c->err, PROTO_ERR_MAX, "body at byte %zu%s: \\u0000 in a "
                 "string; attnd takes no NUL character in a JSON string",
                 i, c->where);
        return 0;
      }
      /* a surrogate pair is one character; half of one is none, and
       * cJSON stops there with no word of why */
      if (u >= 0xD800 && u <= 0xDBFF && low_surrogate_at(t, i + 6, n)) {
        i += 12;
        continue;
      }
      if (u >= 0xD800 && u <= 0xDFFF) {
        proto__json_surrogate_err(t, n, s - 1, i, c->codec, c->where,
                                  c->err);
        return 0;
      }
      i += 6;
    } else {
      snprintf(c->err, PROTO_ERR_MAX, "body is not valid JSON at byte "
               "%zu%s: not a JSON escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t "
               "or \\u and four hex digits)", i, c->where);
      return 0;
    }
  }
  *bytes += i - s;
  return i + 1;
}

/* true, false or null at i: the index after it, or 0 with the message. */
static size_t literal(const jc *c, size_t i) {
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(words[k]);
    if (c->t[i] != words[k][0])
      continue;
    if (c->len - i >= n && !memcmp(c->t + i, words[k], n))
      return i + n;
    fail(c, i, words[k]);
    return 0;
  }
  fail(c, i, "a value");
  return 0;
}

/* lazy: at i, where a value of an array starts, the index of the ']'
 * that closes an array holding no container or string from here, its
 * values counted into st; 0 when there is none (the next stop byte is
 * another, and the array is then read token by token up to it). */
static size_t skip_list(jc *c, size_t i, proto__json_stats *st) {
  size_t commas = 0, j;
  if (!c->lazy || i < c->strict_to)
    return 0;
  j = proto__find_stop((const unsigned char *)c->t, i, c->len, &commas);
  if (j == c->len || c->t[j] != ']') {
    c->strict_to = j;
    return 0;
  }
  st->values += commas + 1;
  return j;
}

static int check(const char *t, size_t len, int codec, const char *where,
                 int lazy, proto__json_stats *st, char err[PROTO_ERR_MAX]) {
  jc c = {.t = t, .len = len, .codec = codec, .where = where, .err = err,
          .lazy = lazy};
  char stack[PROTO_JSON_MAX_DEPTH];
  int depth = 0;
  size_t i = skip_ws(&c, 0), next;
  *st = (proto__json_stats){.text = t, .len = len, .where = where,
                            .codec = codec, .lazy = lazy};
  st->first = i < len ? t[i] : 0;
value:
  if (i >= len)
    return fail(&c, i, "a value");
  if (depth && stack[depth - 1] == '[' && (next = skip_list(&c, i, st))) {
    i = next;
    goto after;
  }
  st->values++;
  switch (t[i]) {
  case '{':
  case '[':
    if (depth == PROTO_JSON_MAX_DEPTH) {
      snprintf(err, PROTO_ERR_MAX, "body is nested %d levels deep at "
               "byte %zu%s; the limit is %d levels", PROTO_JSON_MAX_DEPTH + 1,
               i, where, PROTO_JSON_MAX_DEPTH);
      return ATTND_EINVAL;
    }
    stack[depth++] = t[i];
    i = skip_ws(&c, i + 1);
    if (i < len && t[i] == (stack[depth - 1] == '{' ? '}' : ']')) {
      depth--;
      i++;
      goto after;
    }
    if (stack[depth - 1] == '{')
      goto key;
    goto value;
  case '"':
    st->strings++;
    if (!(next = string(&c, i, &st->string_bytes)))
      return ATTND_EINVAL;
    break;
  case 't':
  case 'f':
  case 'n':
    if (!(next = literal(&c, i)))
      return ATTND_EINVAL;
    break;
  default:
    if (t[i] != '-' && !is_digit(t[i]))
      return fail(&c, i, "a value");
    if (!(next = number(&c, i)))
      return ATTND_EINVAL;
  }
  i = next;
after:
  if (!depth) {
    st->end = i;
    return 0;
  }
  i = skip_ws(&c, i);
  if (i < len && t[i] == ',') {
    i = skip_ws(&c, i + 1);
    if (stack[depth - 1] == '[')
      goto value;
    goto key;
  }
  if (i < len && t[i] == (stack[depth - 1] == '{' ? '}' : ']')) {
    depth--;
    i++;
    goto after;
  }
  return fail(&c, i, stack[depth - 1] == '{' ? "',' or '}'" : "',' or ']'");
key:
  if (i >= len || t[i] != '"')
    return fail(&c, i, "a member name (a string in double quotes)");
  st->strings++;
  if (!(next = string(&c, i, &st->string_bytes)))
    return ATTND_EINVAL;
  i = skip_ws(&c, next);
  if (i >= len || t[i] != ':')
    return fail(&c, i, "':' after the member name");
  i = skip_ws(&c, i + 1);
  goto value;
}

/* A lazy check that fails checks again token by token, so that the
 * message is always of the first error in the text. */
int proto__json_check(const char *t, size_t len, int codec, const char *where,
                      int lazy, proto__json_stats *st,
                      char err[PROTO_ERR_MAX]) {
  int rc = check(t, len, codec, where, lazy, st, err);
  if (rc && lazy)
    rc = check(t, len, codec, where, 0, st, err);
  return rc;
}

/* What malloc takes for a block of n bytes, its header included. */
static size_t block_bytes(size_t n) { return (n + 8 + 15) & ~(size_t)15; }

size_t proto__json_tree_bytes(const proto__json_stats *st) {
  return st->values * block_bytes(sizeof(cJSON)) +
         st->strings * block_bytes(1) + st->string_bytes;
}

int proto__hold(size_t n, const char *what, char err[PROTO_ERR_MAX]) {
  int why = mem_hold(n);
  return why ? proto__hold_refused(why, n, what, err) : 0;
}

int proto__hold_refused(int why, size_t n, const char *what,
                        char err[PROTO_ERR_MAX]) {
  if (why != MEM_HOLD_BUSY) {
    snprintf(err, PROTO_ERR_MAX, "decoding the request needs %zu MiB more "
             "for %s, more than the server's in-flight memory holds "
             "(--max-inflight-mb) with its body; send a smaller request",
             (n >> 20) + 1, what);
    return ATTND_ETOOBIG;
  }
  snprintf(err, PROTO_ERR_MAX, "decoding the request needs %zu MiB more for "
           "%s, which does not fit in the server's in-flight memory now "
           "(--max-inflight-mb); retry later", (n >> 20) + 1, what);
  return ATTND_EBUSY;
}

int proto__json_strict(proto__json_stats *st, char err[PROTO_ERR_MAX]) {
  proto__json_stats full;
  char why[PROTO_ERR_MAX];
  if (!st->lazy)
    return 0;
  if (proto__json_check(st->text, st->len, st->codec, st->where, 0, &full,
                        why)) {
    memcpy(err, why, PROTO_ERR_MAX);
    return ATTND_EINVAL;
  }
  full.valid = st->valid;
  *st = full;
  return 0;
}

int proto__json_want_object(proto__json_stats *st, char err[PROTO_ERR_MAX]) {
  if (st->first == '{') {
    st->valid = 1;
    return 0;
  }
  if (proto__json_strict(st, err))
    return ATTND_EINVAL;
  snprintf(err, PROTO_ERR_MAX, "body must be a JSON object, got %s",
           st->first == '[' ? "an array" : st->first == '"' ? "a string"
           : "a number, true, false or null");
  return ATTND_EINVAL;
}

int proto__json_retry(int *rc, proto__json_stats *st,
                      char err[PROTO_ERR_MAX]) {
  if (!*rc || !st->valid || *rc == ATTND_ENOMEM)
    return 0;
  if (proto__json_strict(st, err)) {
    *rc = ATTND_EINVAL;
    return 0;
  }
  return *rc != ATTND_EBUSY && *rc != ATTND_ETOOBIG;
}

int proto__json_retried(int rc, const char first[PROTO_ERR_MAX], int rc2,
                        char err[PROTO_ERR_MAX]) {
  if ((rc2 != ATTND_EBUSY && rc2 != ATTND_ETOOBIG) || !first[0])
    return rc2;
  memcpy(err, first, PROTO_ERR_MAX);
  return rc;
}

/* ---- one member of a checked object -------------------------------------- */

/* The index after the string whose '"' is at i. */
static size_t past_string(const char *t, size_t i, size_t n) {
  for (i++; i < n && t[i] != '"'; i++)
    if (t[i] == '\\')
      i++;
  return i + 1;
}

/* The index after the value at i. */
static size_t past_value(const char *t, size_t i, size_t n) {
  size_t depth = 0;
  if (t[i] == '"')
    return past_string(t, i, n);
  if (t[i] != '{' && t[i] != '[') {
    while (i < n && !strchr(",}] \t\r\n", t[i]) && t[i])
      i++;
    return i;
  }
  for (; i < n; i++) {
    if (t[i] == '"')
      i = past_string(t, i, n) - 1;
    else if (t[i] == '{' || t[i] == '[')
      depth++;
    else if ((t[i] == '}' || t[i] == ']') && --depth == 0)
      return i + 1;
  }
  return n;
}

/* 1 when the member name whose '"' is at i reads name (ASCII), its
 * escapes resolved. */
static int name_is(const char *t, size_t i, size_t n, const char *name) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  for (i++; i < n && t[i] != '"'; name++) {
    unsigned ch = (unsigned char)t[i++];
    if (ch == '\\' && t[i] == 'u') {
      ch = hex4(t + i + 1);
      i += 5;
    } else if (ch == '\\') {
      ch = (unsigned char)to[strchr(from, t[i++]) - from];
    }
    if (!*name || ch != (unsigned char)*name)
      return 0;
  }
  return !*name;
}

const char *proto__json_member(const char *t, size_t n, const char *name,
                               size_t *len) {
  jc c = {.t = t, .len = n};
  size_t i = skip_ws(&c, 0) + 1; /* past the '{' */
  for (;;) {
    i = skip_ws(&c, i);
    if (i >= n || t[i] != '"')
      return NULL; /* '}' */
    size_t key = i;
    i = skip_ws(&c, skip_ws(&c, past_string(t, i, n)) + 1); /* ':' */
    size_t v = i;
    if (v >= n)
      return NULL;
    i = past_value(t, i, n);
    if (name_is(t, key, n, name)) {
      *len = i - v;
      return t + v;
    }
    i = skip_ws(&c, i);
    if (i >= n || t[i] != ',')
      return NULL;
    i++;
  }
}
