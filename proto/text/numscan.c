/* numscan.c - keep the tensor numbers of a JSON body away from cJSON.
 *
 * cJSON builds one node per number, which is most of a large request's
 * decode (see docs/decisions.md).  Here a single pass over the body finds
 * the arrays that hold tensor elements and writes a copy of the body in
 * which each innermost such array ("leaf": no array, object or string
 * inside) is empty.  cJSON parses that copy: the envelope, the shapes and
 * options, and every nested array above the leaves, so duplicate and
 * unknown fields are found exactly as before.  Each leaf's node is then
 * tagged with the byte range of its elements in the original body and
 * their count, and tensor.c converts those bytes straight into the
 * tensor's buffer (fpread.cc), checking each token against the JSON
 * grammar.
 *
 * The tensor arrays are, for /v1, the value of a top-level query, key,
 * value, valid_lens, mask, bias, w_q, w_k or w_v member (nested arrays) or
 * the "data" member of such a member's object (flat form); for v2, the
 * "data" member of each object in the top-level "inputs" array.  The scan
 * and the tagging walk over cJSON's tree apply the same rules; they must
 * agree on every tensor array, in order, or the tree is not used.
 *
 * The body has passed jsoncheck.c's check (lazily: its lists of numbers
 * only scanned for their end) before it comes here; the copy is checked
 * fully, and it and cJSON's tree of it are held in the budget
 * (proto__hold) before they are allocated.  This path only ever decides
 * a request it can decode: a leaf that is not a list of JSON numbers (or
 * true/false for a mask), or any other error, has the body checked fully
 * and, when it is valid JSON, sends the decoder back to cJSON on the
 * original body, which gives today's answer and message (when the
 * budget holds that tree; proto__json_retry).
 *
 * A tagged leaf node: cJSON_Array | cJSON_IsReference (so cJSON_Delete
 * frees neither child nor valuestring), valuestring = first byte after
 * the '[' in the original body, valuedouble = bytes up to the ']',
 * valueint = elements (commas + 1).  PROTO__LEAF_READ is set in type once
 * its elements have been converted. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h> /* AVX2 and AVX-512BW, in the functions that ask */
#endif

#include "proto/mem.h"
#include "proto/text/text.h"

/* The body was checked (jsoncheck.c): it nests no deeper than this. */
#define MAX_DEPTH PROTO_JSON_MAX_DEPTH

/* Where a container sits. */
enum ctx {
  C_NONE,    /* not under a tensor */
  C_ROOT,    /* the top-level object */
  C_TOBJ,    /* v1: {"shape", "data"} of a tensor member */
  C_INPUTS,  /* v2: the "inputs" array */
  C_INOBJ,   /* v2: one input object */
  C_TENSOR   /* an array of tensor elements, at any depth */
};

/* What the current member's key makes of its value. */
enum key { K_NONE, K_TENSOR, K_DATA, K_INPUTS };

/* One array in a tensor context, in document order. */
typedef struct arr_rec {
  size_t off, len;  /* leaf: elements' bytes in the body */
  size_t n;         /* leaf: elements; 0: not a leaf */
} arr_rec;

typedef struct scan {
  const char *body;
  size_t len;
  int codec;
  char *out;        /* the copy for cJSON */
  size_t olen, ocap;
  arr_rec *arrs;
  size_t narr, cap;
  char *err;        /* a refused hold's message */
  int hold_rc;      /* a refused hold (proto__hold), or 0 */
} scan;

static const char *const v1_tensors[] = {
  "query", "key", "value", "valid_lens", "mask", "bias", "w_q", "w_k",
  "w_v"};

static int v1_tensor_name(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof v1_tensors / sizeof *v1_tensors; i++)
    if (strlen(v1_tensors[i]) == n && !memcmp(v1_tensors[i], s, n))
      return 1;
  return 0;
}

static int is_name(const char *s, size_t n, const char *name) {
  return strlen(name) == n && !memcmp(name, s, n);
}

/* The key's meaning inside a container of context ctx. */
static int key_class(const scan *s, int ctx, const char *k, size_t n) {
  if (ctx == C_ROOT && s->codec == PROTO_CODEC_V1)
    return v1_tensor_name(k, n) ? K_TENSOR : K_NONE;
  if (ctx == C_ROOT)
    return is_name(k, n, "inputs") ? K_INPUTS : K_NONE;
  if (ctx == C_TOBJ || ctx == C_INOBJ)
    return is_name(k, n, "data") ? K_DATA : K_NONE;
  return K_NONE;
}

static int push_rec(scan *s, size_t off, size_t len, size_t n) {
  if (s->narr == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 256;
    if ((s->hold_rc = proto__hold((cap - s->cap) * sizeof *s->arrs,
                                  "the list of the body's arrays", s->err)))
      return -1;
    arr_rec *a = mem_realloc(s->arrs, cap * sizeof *a);
    if (!a)
      return -1;
    s->arrs = a;
    s->cap = cap;
  }
  s->arrs[s->narr++] = (arr_rec){off, len, n};
  return 0;
}

/* Bytes that end a leaf's lookahead: anything that opens or closes a
 * container or a string. */
static int is_stop(unsigned char ch) {
  return ch == '[' || ch == ']' || ch == '{' || ch == '}' || ch == '"';
}

/* Set bits of a 16-bit mask (no popcnt instruction in baseline x86-64). */
static unsigned bits16(unsigned x) {
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0f0fu;
  return (x + (x >> 8)) & 0x1fu;
}

#if defined(__GNUC__) && defined(__x86_64__)
#define SCAN_WIDE 1
/* A block's stop and comma bits (bit i for byte i): when a stop byte is
 * in it, the commas before the first one counted into *n, *j moved onto
 * it, and 1; else all its commas counted and 0. */
static inline int block_stop(uint64_t st, uint64_t cm, size_t *j, size_t *n) {
  if (st) {
    unsigned k = (unsigned)__builtin_ctzll(st);
    *n += (size_t)__builtin_popcountll(cm & ((1ull << k) - 1));
    *j += k;
    return 1;
  }
  *n += (size_t)__builtin_popcountll(cm);
  return 0;
}

/* find_stop 64 bytes a step (AVX-512BW): the index of the first stop byte
 * in b[j, len), or where fewer than 64 bytes are left; commas before it
 * added to *commas.  '[' and '{', ']' and '}' differ only in bit 5, so
 * three compares find the five stop bytes.  Not inlined: its caller goes
 * on in SSE code, which would run slowly with the AVX-512 registers'
 * upper halves in use (the return clears them). */
__attribute__((target("avx512f,avx512bw,popcnt"), noinline))
static size_t find_stop_avx512(const unsigned char *b, size_t j, size_t len,
                               size_t *commas) {
  const __m512i bit5 = _mm512_set1_epi8(0x20), open = _mm512_set1_epi8('{');
  const __m512i close = _mm512_set1_epi8('}'), qu = _mm512_set1_epi8('"');
  const __m512i cm = _mm512_set1_epi8(',');
  size_t n = 0;
  for (; j + 64 <= len; j += 64) {
    __m512i v = _mm512_loadu_si512((const void *)(b + j));
    __m512i v5 = _mm512_or_si512(v, bit5);
    uint64_t st = _mm512_cmpeq_epi8_mask(v5, open) |
                  _mm512_cmpeq_epi8_mask(v5, close) |
                  _mm512_cmpeq_epi8_mask(v, qu);
    if (block_stop(st, _mm512_cmpeq_epi8_mask(v, cm), &j, &n))
      break;
  }
  *commas += n;
  return j;
}

/* The same 32 bytes a step, for CPUs with AVX2 but not AVX-512BW. */
__attribute__((target("avx2,popcnt"), noinline))
static size_t find_stop_avx2(const unsigned char *b, size_t j, size_t len,
                             size_t *commas) {
  const __m256i bit5 = _mm256_set1_epi8(0x20), open = _mm256_set1_epi8('{');
  const __m256i close = _mm256_set1_epi8('}'), qu = _mm256_set1_epi8('"');
  const __m256i cm = _mm256_set1_epi8(',');
  size_t n = 0;
  for (; j + 32 <= len; j += 32) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(b + j));
    __m256i v5 = _mm256_or_si256(v, bit5);
    __m256i st = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpeq_epi8(v5, open),
                        _mm256_cmpeq_epi8(v5, close)),
        _mm256_cmpeq_epi8(v, qu));
    if (block_stop((uint32_t)_mm256_movemask_epi8(st),
                   (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, cm)),
                   &j, &n))
      break;
  }
  *commas += n;
  return j;
}

#endif

int proto__vector_bytes(void) {
#if defined(__GNUC__) && defined(__x86_64__)
  /* every CPU with AVX-512BW also has DQ, VL and CD, which the list
   * reader's tokens8 uses; checked all the same */
  if (__builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512cd"))
    return 64;
  return __builtin_cpu_supports("avx2") ? 32 : 16;
#else
  return 0;
#endif
}

/* Index of the first stop byte in b[j, len) (len when none), and the
 * commas before it added to *commas.  SSE2 (every x86-64) takes 16 bytes
 * a step, AVX2 32 and AVX-512BW 64 where the CPU has them; leaves are
 * most of a large body. */
size_t proto__find_stop(const unsigned char *b, size_t j, size_t len,
                        size_t *commas) {
#ifdef SCAN_WIDE
  /* either stops at the stop byte, or leaves the last bytes to the loops
   * below (which then find a stop at once and count nothing twice) */
  if (len - j >= 128) {
    int w = proto__vector_bytes();
    if (w == 64)
      j = find_stop_avx512(b, j, len, commas);
    else if (w == 32)
      j = find_stop_avx2(b, j, len, commas);
  }
#endif
#ifdef __SSE2__
  const __m128i lb = _mm_set1_epi8('['), rb = _mm_set1_epi8(']');
  const __m128i lc = _mm_set1_epi8('{'), rc = _mm_set1_epi8('}');
  const __m128i qu = _mm_set1_epi8('"'), cm = _mm_set1_epi8(',');
  for (; j + 16 <= len; j += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(b + j));
    __m128i st = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(v, lb), _mm_cmpeq_epi8(v, rb)),
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, lc),
                                  _mm_cmpeq_epi8(v, rc)),
                     _mm_cmpeq_epi8(v, qu)));
    unsigned sm = (unsigned)_mm_movemask_epi8(st);
    unsigned cmask = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cm));
    if (sm) {
      unsigned k = (unsigned)__builtin_ctz(sm);
      *commas += bits16(cmask & ((1u << k) - 1));
      return j + k;
    }
    *commas += bits16(cmask);
  }
#endif
  for (; j < len && !is_stop(b[j]); j++)
    *commas += b[j] == ',';
  return j;
}

/* At s->body[i] == '[' in a tensor context: if the array holds only
 * scalars, records it as a leaf and returns the index of its ']';
 * otherwise records it as an inner array and returns 0. */
static size_t leaf_at(scan *s, size_t i, int *err) {
  const unsigned char *b = (const unsigned char *)s->body;
  size_t commas = 0, j = proto__find_stop(b, i + 1, s->len, &commas);
  int empty = !commas;
  for (size_t k = i + 1; empty && k < j; k++)
    empty = b[k] <= ' ';
  if (j == s->len || b[j] != ']' || empty || commas >= (size_t)INT32_MAX) {
    *err = push_rec(s, 0, 0, 0);
    return 0;
  }
  *err = push_rec(s, i + 1, j - i - 1, commas + 1);
  return j;
}

/* Room for n more bytes in the copy, and its NUL: the copy grows as it
 * is written (a body of large leaves has a small copy), each step held in
 * the budget first.  0, or -1 (s->hold_rc set, or out of memory). */
static int room(scan *s, size_t n) {
  size_t need = s->olen + n + 1, cap = s->ocap ? s->ocap : 4096;
  if (need <= s->ocap)
    return 0;
  while (cap < need && cap <= s->len / 2)
    cap *= 2;
  /* past half the body: room for all of it at once (with the byte emit
   * asks for after its bytes, and the NUL), or what is needed */
  if (cap < need)
    cap = need > s->len + 2 ? need : s->len + 2;
  if ((s->hold_rc = proto__hold(cap - s->ocap, "a copy of the body",
                                s->err)))
    return -1;
  char *o = mem_realloc(s->out, cap);
  if (!o)
    return -1;
  s->out = o;
  s->ocap = cap;
  return 0;
}

/* Appends body[from, to) to the copy.  0 or -1 (room). */
static int emit(scan *s, size_t from, size_t to) {
  if (room(s, to - from + 1))
    return -1;
  memcpy(s->out + s->olen, s->body + from, to - from);
  s->olen += to - from;
  return 0;
}

static int num_char(char ch) {
  return (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' ||
         ch == 'e' || ch == 'E';
}

/* 1 when [p, q) is -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int json_number(const char *p, const char *q) {
  const char *d;
  if (p < q && *p == '-')
    p++;
  if (p == q || *p < '0' || *p > '9')
    return 0;
  if (*p++ == '0' && p < q && *p >= '0' && *p <= '9')
    return 0; /* a leading zero */
  while (p < q && *p >= '0' && *p <= '9')
    p++;
  if (p < q && *p == '.') {
    for (d = ++p; p < q && *p >= '0' && *p <= '9'; p++) {
    }
    if (p == d)
      return 0; /* no digit after the '.' */
  }
  if (p < q && (*p == 'e' || *p == 'E')) {
    if (++p < q && (*p == '+' || *p == '-'))
      p++;
    for (d = p; p < q && *p >= '0' && *p <= '9'; p++) {
    }
    if (p == d)
      return 0;
  }
  return p == q;
}

/* Writes the copy.  Returns 0, or -1 when the body is not one the scan
 * understands (cJSON then parses the original). */
static int scan_body(scan *s) {
  unsigned char type[MAX_DEPTH], ctx[MAX_DEPTH], key[MAX_DEPTH];
  int depth = 0, err = 0;
  size_t i = 0, done = 0, kstart = 0, klen = 0;
  while (i < s->len && proto__json_blank(s->body[i]))
    i++;
  if (i == s->len || s->body[i] != '{')
    return -1;
  for (; i < s->len; i++) {
    char ch = s->body[i];
    if (ch == '"') {
      size_t j = i + 1;
      while (j < s->len && s->body[j] != '"')
        j += s->body[j] == '\\' ? 2 : 1;
      if (j >= s->len)
        return -1;
      kstart = i + 1;
      klen = j - i - 1;
      i = j;
    } else if (ch == ':') {
      if (!depth || type[depth - 1] != '{')
        return -1;
      key[depth - 1] = (unsigned char)key_class(s, ctx[depth - 1],
                                                s->body + kstart, klen);
    } else if (ch == ',') {
      if (depth && type[depth - 1] == '{')
        key[depth - 1] = K_NONE;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      /* a number outside the leaves: cJSON would take "01" or "1." too,
       * so the cJSON path decides it (and refuses it by name) */
      size_t j = i;
      while (j < s->len && num_char(s->body[j]))
        j++;
      if (!json_number(s->body + i, s->body + j))
        return -1;
      i = j - 1;
    } else if (ch == '{' || ch == '[') {
      int up = depth ? ctx[depth - 1] : C_NONE;
      int k = depth && type[depth - 1] == '{' ? key[depth - 1] : K_NONE;
      int c = C_NONE;
      if (ch == '{')
        c = !depth                ? C_ROOT
            : k == K_TENSOR       ? C_TOBJ
            : up == C_INPUTS      ? C_INOBJ : C_NONE;
      else
        c = k == K_TENSOR || k == K_DATA || up == C_TENSOR ? C_TENSOR
            : k == K_INPUTS                                 ? C_INPUTS
                                                            : C_NONE;
      if (c == C_TENSOR) {
        size_t j = leaf_at(s, i, &err);
        if (err)
          return -1;
        if (j) { /* a leaf: the copy gets "[]" */
          if (emit(s, done, i + 1))
            return -1;
          s->out[s->olen++] = ']'; /* emit left room for it */
          done = j + 1;
          i = j;
          continue;
        }
      }
      if (depth == MAX_DEPTH)
        return -1;
      type[depth] = (unsigned char)ch;
      ctx[depth] = (unsigned char)c;
      key[depth++] = K_NONE;
    } else if (ch == '}' || ch == ']') {
      if (!depth || type[depth - 1] != (ch == '}' ? '{' : '['))
        return -1;
      if (--depth == 0)
        break; /* cJSON judges whatever follows the object */
    }
  }
  if (emit(s, done, s->len))
    return -1;
  s->out[s->olen] = '\0';
  return 0;
}

/* ---- tagging cJSON's tree ------------------------------------------------ */

/* Tags (mode 0) or checks (mode 1: every leaf read) the arrays under a
 * tensor array a, in document order, against the scan's records. */
static int walk_tensor(cJSON *a, const scan *s, size_t *k, int mode) {
  if (mode == 1) {
    if (proto__is_leaf(a))
      return a->type & PROTO__LEAF_READ ? 0 : -1;
  } else {
    if (*k >= s->narr)
      return -1;
    const arr_rec *r = &s->arrs[(*k)++];
    if (r->n) {
      if (a->child)
        return -1;
      a->type |= cJSON_IsReference;
      a->valuestring = (char *)(uintptr_t)(s->body + r->off);
      a->valuedouble = (double)r->len;
      a->valueint = (int)r->n;
      return 0;
    }
  }
  for (cJSON *c = a->child; c; c = c->next)
    if (cJSON_IsArray(c) && walk_tensor(c, s, k, mode))
      return -1;
  return 0;
}

/* The "data" arrays of an object (v1 tensor object, v2 input). */
static int walk_data(cJSON *o, const scan *s, size_t *k, int mode) {
  for (cJSON *m = o->child; m; m = m->next)
    if (!strcmp(m->string, "data") && cJSON_IsArray(m) &&
        walk_tensor(m, s, k, mode))
      return -1;
  return 0;
}

static int walk_root(cJSON *root, int codec, const scan *s, int mode) {
  size_t k = 0;
  for (cJSON *m = root->child; m; m = m->next) {
    const char *n = m->string;
    int rc = 0;
    if (codec == PROTO_CODEC_V1 && v1_tensor_name(n, strlen(n))) {
      if (cJSON_IsArray(m))
        rc = walk_tensor(m, s, &k, mode);
      else if (cJSON_IsObject(m))
        rc = walk_data(m, s, &k, mode);
    } else if (codec == PROTO_CODEC_V2 && !strcmp(n, "inputs") &&
               cJSON_IsArray(m)) {
      for (cJSON *in = m->child; in && !rc; in = in->next)
        if (cJSON_IsObject(in))
          rc = walk_data(in, s, &k, mode);
    }
    if (rc)
      return -1;
  }
  return mode == 0 && k != s->narr ? -1 : 0;
}

#ifdef ATTND_TEST_HOOKS
static _Thread_local int cjson_path_only;

void proto__test_cjson_path(int on) { cjson_path_only = on; }
#endif

int proto__json_parse_leaves(const char *body, size_t len, int codec,
                              cJSON **rootp, char err[PROTO_ERR_MAX]) {
  scan s = {.body = body, .len = len, .codec = codec, .err = err};
  proto__json_stats st;
  cJSON *root = NULL;
  const char *end = NULL;
  unsigned long failed = mem_thread_failures();
  int rc = ATTND_EINVAL;
  char skip[PROTO_ERR_MAX];
#ifdef ATTND_TEST_HOOKS
  if (cjson_path_only) {
    *rootp = NULL;
    return ATTND_EINVAL;
  }
#endif
  if (scan_body(&s))
    goto out;
  /* the copy's tree: the envelope, and whatever tensor array is not a
   * list of numbers; held before cJSON builds it */
  if (proto__json_check(s.out, s.olen, codec, "", 0, &st, skip) ||
      (rc = proto__hold(proto__json_tree_bytes(&st),
                        "the cJSON tree of the body", err)))
    goto out;
  rc = ATTND_EINVAL;
  root = cJSON_ParseWithLengthOpts(s.out, s.olen, &end, 0);
  if (!root)
    goto out;
  for (const char *e = end; e < s.out + s.olen; e++)
    if (!proto__json_blank(*e))
      goto fail;
  if (!cJSON_IsObject(root) || walk_root(root, codec, &s, 0))
    goto fail;
  proto__json_mark_ties(root, s.out, end, 0);
  rc = 0;
  goto out;
fail:
  cJSON_Delete(root);
  root = NULL;
out:
  mem_free(s.out);
  mem_free(s.arrs);
  *rootp = root;
  if (s.hold_rc)
    rc = s.hold_rc;
  /* cJSON says NULL for bad JSON and for a failed allocation alike */
  if (rc && mem_thread_failures() != failed)
    rc = ATTND_ENOMEM;
  return rc;
}

int proto__json_leaves_read(cJSON *root, int codec) {
  scan s = {.codec = codec};
  return walk_root(root, codec, &s, 1) == 0;
}

/* ---- ties at the top of a range (text.h) -------------------------------
 *
 * The doubles halfway from the largest finite float32, FP16 and BF16 to
 * the next power of two, each exact in a double. */
static const struct tie {
  double x;
  const char *type, *text, *max; /* for messages */
} ties[] = {
  {340282356779733661637539395458142568448.0,  /* 2^128 - 2^103 */
   "float32", "3.40282356779733661637539395458142568448e38",
   "3.4028235e38"},
  {65520.0, "FP16", "65520", "65504"}, /* 2^16 - 2^4 */
  {339617752923046005526922703901628039168.0,  /* 2^128 - 2^119 - 2^120 */
   "BF16", "3.39617752923046005526922703901628039168e38", "3.3895314e38"},
};

int proto__range_err(char err[PROTO_ERR_MAX], const char *what,
                     const cJSON *j, double x, const char *type) {
  char num[72];
  const struct tie *t = ties;
  while (strcmp(t->type, type) && t + 1 < ties + sizeof ties / sizeof *ties)
    t++;
  /* the shortest %g that reads back, with all of an integer part below
   * 10^16 ("65520", not "6.552e+04") */
  int p = fabs(x) >= 1 && fabs(x) < 1e16 ? 1 + (int)log10(fabs(x)) : 1;
  for (; p < 17; p++) {
    snprintf(num, sizeof num, "%.*g", p, x);
    if (strtod(num, NULL) == x)
      break;
  }
  snprintf(num, sizeof num, "%.*g", p, x);
  if (j && proto__num_token(j)) /* as the client wrote it */
    proto__num_text(j, num, sizeof num);
  if (fabs(x) == t->x) /* the text may have been a little under it */
    snprintf(err, PROTO_ERR_MAX, "%s: %s is out of %s range (decimals "
             "from %s on round to infinity; the largest is %s)", what, num,
             type, t->text, t->max);
  else
    snprintf(err, PROTO_ERR_MAX, "%s: %s is out of %s range (the largest "
             "is %s)", what, num, type, t->max);
  return ATTND_EINVAL;
}

static const struct tie *tie_of(double x) {
  x = fabs(x);
  for (size_t i = 0; i < sizeof ties / sizeof *ties; i++)
    if (x == ties[i].x)
      return &ties[i];
  return NULL;
}

/* 1 when rounding x to float32 may differ from rounding its decimal: x
 * on or next to a float midpoint (its low 29 mantissa bits, which float
 * drops, at 2^28 +- 1), or in the subnormal floats' range, where the
 * midpoints sit elsewhere in the double.  A double exactly on a float
 * (every integer a shape holds) never is. */
static int near_f32_midpoint(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  uint32_t low = (uint32_t)(bits & 0x1fffffffu);
  double a = fabs(x);
  return (a != 0 && a < FLT_MIN) || low - (0x10000000u - 1u) <= 2u;
}

/* 1 when x is a whole number of magnitude at most 2^53: its decimal may
 * be another number (PROTO__NUM_EXACT_INT). */
static int small_int(double x) {
  return x == floor(x) && fabs(x) <= 9007199254740992.0;
}

/* 1 when x is on an FP16 or a BF16 midpoint (PROTO__NUM_MID_*). */
static int half_mid(double x) {
  return proto__half_midpoint(x, 0) || proto__half_midpoint(x, 1);
}

static int any_tie(const cJSON *j) {
  for (; j; j = j->next)
    if ((cJSON_IsNumber(j) && (tie_of(j->valuedouble) ||
                               near_f32_midpoint(j->valuedouble) ||
                               half_mid(j->valuedouble) ||
                               small_int(j->valuedouble))) ||
        (j->child && any_tie(j->child)))
      return 1;
  return 0;
}

int proto__json_whole(const cJSON *j) {
  return cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) &&
         ((j->type & PROTO__NUM_EXACT_INT) ||
          fabs(j->valuedouble) > 9007199254740992.0);
}

int proto__json_count(const cJSON *j, double *out) {
  if (!proto__json_whole(j) || j->valuedouble < 0 ||
      j->valuedouble > 9007199254740992.0)
    return -1;
  *out = j->valuedouble;
  return 0;
}

/* The value of a cJSON number as its decimal rounds to float32: its
 * double, or the double below it when PROTO__NUM_BELOW_TIE is set. */
static double json_num(const cJSON *j) {
  double x = j->valuedouble;
  return j->type & PROTO__NUM_BELOW_TIE ? nextafter(x, 0.0) : x;
}

double proto__json_half(const cJSON *j) {
  double x = j->valuedouble;
  if (j->type & PROTO__NUM_MID_BELOW)
    return nextafter(x, 0.0);
  if (j->type & PROTO__NUM_MID_ABOVE)
    return nextafter(x, copysign(INFINITY, x));
  return x;
}

int proto__json_f32(const cJSON *j, float *out) {
  int rc = proto__f64_to_f32(json_num(j), out);
  /* the float next to the double's, which the decimal rounds to: finite,
   * as the decimal was read as a finite float32 */
  if (rc == 0 && (j->type & PROTO__NUM_F32_UP))
    *out = nextafterf(*out, INFINITY);
  else if (rc == 0 && (j->type & PROTO__NUM_F32_DOWN))
    *out = nextafterf(*out, -INFINITY);
  return rc;
}

/* Sets PROTO__NUM_F32_UP or _DOWN on j when its decimal [t, q) rounds to
 * another float32 than its double does. */
static void mark_f32(cJSON *j, const char *t, const char *q) {
  float want, got;
  if (!near_f32_midpoint(j->valuedouble) ||
      proto__num_f32(t, q, &want) != q || proto__json_f32(j, &got) != 0 ||
      want == got)
    return;
  j->type |= want > got ? PROTO__NUM_F32_UP : PROTO__NUM_F32_DOWN;
}

/* The next number token in [p, end), strings skipped: its first byte and,
 * in *q, its end; NULL when there is none.  In text cJSON parsed, numbers
 * are the runs of number bytes that start with '-' or a digit outside
 * strings (true, false and null hold none), one per number node in
 * document order. */
static const char *next_number(const char *p, const char *end,
                               const char **q) {
  while (p < end) {
    if (*p == '"') {
      for (p++; p < end && *p != '"'; p++)
        if (*p == '\\')
          p++;
      p++;
    } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
      const char *e = p;
      while (e < end && num_char(*e))
        e++;
      *q = e;
      return p;
    } else {
      p++;
    }
  }
  return NULL;
}

/* Sets PROTO__NUM_BELOW_TIE and PROTO__NUM_MID_BELOW/ABOVE on j, whose
 * decimal is [t, q), when its double is a top tie or a half midpoint:
 * one exact comparison serves both. */
static void mark_mid(cJSON *j, const char *t, const char *q) {
  double x = j->valuedouble;
  int tie = tie_of(x) != NULL, mid = half_mid(x);
  if (!tie && !mid)
    return;
  int c = proto__num_cmp(t, q, x);
  if (tie && c < 0)
    j->type |= PROTO__NUM_BELOW_TIE;
  if (mid && c)
    j->type |= c < 0 ? PROTO__NUM_MID_BELOW : PROTO__NUM_MID_ABOVE;
}

/* Walks j and its siblings in document order, the number tokens of the
 * text from p alongside; returns where the text was left (NULL when it
 * ran out, which text cJSON parsed does not).  keep: each number node
 * points at its token (proto__num_token). */
static const char *mark_ties(cJSON *j, const char *p, const char *end,
                             int keep) {
  for (; j && p; j = j->next) {
    if (cJSON_IsNumber(j)) {
      const char *q, *t = next_number(p, end, &q);
      if (!t)
        return NULL;
      mark_mid(j, t, q);
      mark_f32(j, t, q);
      if (small_int(j->valuedouble) && !proto__num_cmp(t, q, j->valuedouble))
        j->type |= PROTO__NUM_EXACT_INT;
      if (keep) {
        j->type |= cJSON_IsReference;
        j->valuestring = (char *)(uintptr_t)t;
      }
      p = q;
    } else if (j->child) {
      p = mark_ties(j->child, p, end, keep);
    }
  }
  return p;
}

int proto__json_refuse_bad_number(const char *text, const char *end,
                                  const char *where, char err[PROTO_ERR_MAX]) {
  const char *q;
  for (const char *p = text; (p = next_number(p, end, &q)) != NULL; p = q)
    if (!json_number(p, q)) {
      size_t n = (size_t)(q - p);
      snprintf(err, PROTO_ERR_MAX, "body is not valid JSON (near byte %zu%s): "
               "%.*s is not a JSON number", (size_t)(p - text), where,
               (int)(n < 24 ? n : 24), p);
      return ATTND_EINVAL;
    }
  return 0;
}

void proto__json_mark_ties(cJSON *root, const char *text, const char *end,
                           int keep) {
  if (root && (keep || any_tie(root)))
    mark_ties(root, text, end, keep);
}

size_t proto__num_text(const cJSON *j, char *s, size_t cap) {
  const char *t = proto__num_token(j);
  size_t n = 0;
  if (!t)
    return (size_t)proto__fmt_f64(s, cap, j->valuedouble);
  while (num_char(t[n]) && n + 4 < cap)
    n++;
  memcpy(s, t, n);
  if (num_char(t[n])) /* cut: longer than the message has room for */
    memcpy(s + n, "...", 3), n += 3;
  s[n] = '\0';
  return n;
}
