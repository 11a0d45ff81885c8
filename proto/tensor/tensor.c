/* tensor.c - one JSON tensor field to a typed, contiguous buffer.
 *
 * A tensor arrives either as nested arrays ([[1, 2], [3, 4]]) or flat
 * ({"shape": [2, 2], "data": [1, 2, 3, 4]}).  Both forms give the same
 * messages: an element is named by its multi-index, "query: expected a
 * number at [0][1][2], got true", whichever form it came in. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "proto/tensor/tensor.h"

#define ERR(...) (snprintf(err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

void proto__describe(const cJSON *v, char *s, size_t cap) {
  if (cJSON_IsTrue(v))
    snprintf(s, cap, "true");
  else if (cJSON_IsFalse(v))
    snprintf(s, cap, "false");
  else if (cJSON_IsNull(v))
    snprintf(s, cap, "null");
  else if (cJSON_IsString(v))
    snprintf(s, cap, "a string");
  else if (cJSON_IsArray(v))
    snprintf(s, cap, "an array");
  else if (cJSON_IsObject(v))
    snprintf(s, cap, "an object");
  else if (cJSON_IsNumber(v) && cap >= 8)
    proto__num_text(v, s, cap);
  else
    snprintf(s, cap, "an unknown value");
}

void proto__shape_str(const int *shape, int rank, char *s, size_t cap) {
  size_t n = (size_t)snprintf(s, cap, "[");
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(s + n, cap - n, i ? ",%d" : "%d", shape[i]);
  if (n < cap)
    snprintf(s + n, cap - n, "]");
}

/* Set bits of a 16-bit mask (no popcnt instruction in baseline x86-64). */
static unsigned bits16(unsigned x) {
  x = x - ((x >> 1) & 0x5555u);
  x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
  x = (x + (x >> 4)) & 0x0f0fu;
  return (x + (x >> 8)) & 0x1fu;
}

/* Commas outside tensors in a valid body or v2 JSON part: top-level
 * members, shapes, parameters, dropout and window.  Far fewer than this. */
#define COMMA_SLACK 1024

int proto__over_element_budget(const char *s, size_t n, size_t max_elems,
                                char err[PROTO_ERR_MAX]) {
  /* a body has fewer commas than bytes: only a long one can be over */
  if (!max_elems || n <= max_elems + COMMA_SLACK ||
      proto__count_commas(s, n) <= max_elems + COMMA_SLACK)
    return 0;
  snprintf(err, PROTO_ERR_MAX, "request has more than %zu tensor elements, "
           "the server's limit (--max-inflight-mb, %zu MiB, at 4 bytes an "
           "element); send smaller tensors, or split the batch", max_elems,
           (max_elems * sizeof(float)) >> 20);
  return ATTND_ETOOBIG;
}

/* Runs on every JSON body the server decodes, before anything else, so it
 * takes 16 bytes a step (SSE2, every x86-64) up to each string. */
size_t proto__count_commas(const char *s, size_t n) {
  size_t commas = 0, i = 0;
#ifdef __SSE2__
  const __m128i cm = _mm_set1_epi8(','), qu = _mm_set1_epi8('"');
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    unsigned q = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, qu));
    unsigned c = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cm));
    if (!q) {
      commas += bits16(c);
      i += 16;
      continue;
    }
    unsigned k = (unsigned)__builtin_ctz(q);
    commas += bits16(c & ((1u << k) - 1));
    for (i += k + 1; i < n && s[i] != '"'; i++) /* the string */
      if (s[i] == '\\')
        i++;
    i++; /* past the closing quote */
  }
#endif
  for (; i < n; i++) {
    if (s[i] == ',') {
      commas++;
    } else if (s[i] == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
          i++;
    }
  }
  return commas;
}

static void index_str(const int *idx, int rank, char *s, size_t cap) {
  size_t n = 0;
  s[0] = '\0';
  for (int i = 0; i < rank && n < cap; i++)
    n += (size_t)snprintf(s + n, cap - n, "[%d]", idx[i]);
}

/* Multiplies the shape out; returns 0 or -1 when the count overflows. */
static int shape_count(const proto__tensor *t, size_t *n) {
  size_t c = 1;
  for (int i = 0; i < t->rank; i++)
    if (__builtin_mul_overflow(c, (size_t)t->shape[i], &c))
      return -1;
  *n = c;
  return 0;
}

/* Elements of an array: a leaf's count (numscan.c), else its children. */
static size_t arr_len(const cJSON *a) {
  if (proto__is_leaf(a))
    return (size_t)a->valueint;
  size_t len = 0;
  for (const cJSON *c = a->child; c; c = c->next)
    len++;
  return len;
}

static int nested_shape(const cJSON *j, proto__tensor *t, char *err) {
  const cJSON *node = j;
  int d = 0;
  while (cJSON_IsArray(node)) {
    size_t len = arr_len(node);
    if (len == 0)
      return ERR("%s: axis %d is empty", t->name, d);
    if (len > INT_MAX)
      return ERR("%s: axis %d is too long", t->name, d);
    if (d < PROTO__MAX_RANK)
      t->shape[d] = (int)len;
    node = node->child;
    d++;
  }
  t->rank = d;
  t->data = j;
  if (d > PROTO__MAX_RANK)
    return 0; /* the caller names the rank it wanted */
  if (shape_count(t, &t->n))
    return ERR("%s: too many elements", t->name);
  return 0;
}

/* Reads the "shape" array of the flat form. */
static int flat_dims(const cJSON *shape, proto__tensor *t, char *err) {
  t->rank = 0;
  char what[48];
  if (!cJSON_IsArray(shape)) {
    proto__describe(shape, what, sizeof what);
    return ERR("%s: \"shape\" must be an array of integers, got %s", t->name,
               what);
  }
  int d = 0;
  for (const cJSON *c = shape->child; c; c = c->next, d++) {
    if (!proto__json_whole(c)) { /* as written: not 2.00000000000000001 */
      proto__describe(c, what, sizeof what);
      return ERR("%s: shape[%d] must be an integer, got %s", t->name, d,
                 what);
    }
    double v = c->valuedouble;
    if (v == 0)
      return ERR("%s: axis %d is empty", t->name, d);
    if (v < 0 || v > INT_MAX) {
      /* the number as the client wrote it: only for the message */
      proto__describe(c, what, sizeof what);
      if (v < 0)
        return ERR("%s: shape[%d]=%s is negative", t->name, d, what);
      return ERR("%s: shape[%d]=%s is too large (the largest is %d)",
                 t->name, d, what, INT_MAX);
    }
    if (d < PROTO__MAX_RANK)
      t->shape[d] = (int)v;
  }
  t->rank = d;
  return 0;
}

static int flat_shape(const cJSON *j, proto__tensor *t, char *err) {
  static const char *const names[2] = {"shape", "data"};
  const cJSON *shape = NULL, *data = NULL;
  char name[48], hint[PROTO__HINT_MAX];
  for (const cJSON *c = j->child; c; c = c->next) {
    const cJSON **slot = !strcmp(c->string, "shape")  ? &shape
                         : !strcmp(c->string, "data") ? &data
                                                      : NULL;
    proto__quote_name(c->string, name, sizeof name);
    if (!slot) {
      proto__hint(hint, sizeof hint, c->string, names, 2,
                  "a tensor object has", names, 2);
      return ERR("%s: unknown field '%s' (%s)", t->name, name, hint);
    }
    if (*slot)
      return ERR("%s: duplicate field '%s'", t->name, name);
    *slot = c;
  }
  if (!shape || !data)
    return ERR("%s: tensor object needs both \"shape\" and \"data\"",
               t->name);
  int rc = flat_dims(shape, t, err);
  if (rc)
    return rc;
  t->flat = 1;
  t->data = data;
  if (t->rank > PROTO__MAX_RANK)
    return 0;
  if (!cJSON_IsArray(data)) {
    proto__describe(data, name, sizeof name);
    return ERR("%s: \"data\" must be an array of numbers, got %s", t->name,
               name);
  }
  if (shape_count(t, &t->n))
    return ERR("%s: too many elements", t->name);
  size_t len = arr_len(data);
  if (len != t->n) {
    proto__shape_str(t->shape, t->rank, name, sizeof name);
    return ERR("%s: \"data\" has %zu elements, shape %s needs %zu", t->name,
               len, name, t->n);
  }
  return 0;
}

int proto__tensor_dims(const cJSON *shape, proto__tensor *t,
                       char err[PROTO_ERR_MAX]) {
  int rc = flat_dims(shape, t, err);
  if (rc || t->rank > PROTO__MAX_RANK)
    return rc;
  if (shape_count(t, &t->n))
    return ERR("%s: too many elements", t->name);
  return 0;
}

int proto__tensor_shape(const cJSON *j, const char *name, proto__tensor *t,
                        char err[PROTO_ERR_MAX]) {
  memset(t, 0, sizeof *t);
  t->name = name;
  t->json = j;
  if (cJSON_IsArray(j))
    return nested_shape(j, t, err);
  if (cJSON_IsObject(j))
    return flat_shape(j, t, err);
  char what[48];
  proto__describe(j, what, sizeof what);
  return ERR("%s: expected a tensor (nested arrays or {\"shape\": [..], "
             "\"data\": [..]}), got %s", name, what);
}

/* ---- element conversion ------------------------------------------------ */

typedef struct fill_ctx {
  const proto__tensor *t;
  int kind;
  long long hi;
  const char *what;
  void *dst;
  size_t pos;
  int idx[PROTO__MAX_RANK];
  char *err;
} fill_ctx;

static int put_f32(fill_ctx *f, const cJSON *e) {
  char *err = f->err, at[64], what[48];
  if (!cJSON_IsNumber(e)) {
    index_str(f->idx, f->t->rank, at, sizeof at);
    proto__describe(e, what, sizeof what);
    return ERR("%s: expected a number at %s, got %s", f->t->name, at, what);
  }
  if (proto__json_f32(e, (float *)f->dst + f->pos)) {
    char where[PROTO_ERR_MAX / 2];
    index_str(f->idx, f->t->rank, at, sizeof at);
    snprintf(where, sizeof where, "%s%s", f->t->name, at);
    return proto__range_err(err, where, e, e->valuedouble, "float32");
  }
  f->pos++;
  return 0;
}

int proto__json_scale(const cJSON *j, const char *what, float *out,
                      char err[PROTO_ERR_MAX]) {
  float f;
  if (proto__json_f32(j, &f))
    return proto__range_err(err, what, j, j->valuedouble, "float32");
  if (f == 0.0f)
    return ERR("%s: must be non-zero%s", what,
               j->valuedouble != 0 ? " (underflows float32)" : "");
  *out = f;
  return 0;
}

/* FP16 or BF16 given as a JSON number: the decimal rounded once onto the
 * type's grid (its double, moved toward the decimal when on a midpoint:
 * proto__json_half), then the exact widening, so that the core sees what
 * the binary form of the same tensor would give.  A refusal's message
 * takes the number's own double, not the moved one: the top midpoint
 * itself for a decimal just past it. */
static int put_half(fill_ctx *f, const cJSON *e) {
  char *err = f->err, at[64], what[48];
  int bf = f->kind == PROTO__KIND_BF16;
  uint16_t h;
  if (!cJSON_IsNumber(e)) {
    index_str(f->idx, f->t->rank, at, sizeof at);
    proto__describe(e, what, sizeof what);
    return ERR("%s: expected a number at %s, got %s", f->t->name, at, what);
  }
  double x = proto__json_half(e);
  if (bf ? proto__f64_to_bf16(x, &h) : proto__f64_to_f16(x, &h)) {
    char where[PROTO_ERR_MAX / 2];
    index_str(f->idx, f->t->rank, at, sizeof at);
    snprintf(where, sizeof where, "%s%s", f->t->name, at);
    return proto__range_err(err, where, e, e->valuedouble,
                            bf ? "BF16" : "FP16");
  }
  float *dst = (float *)f->dst + f->pos++;
  if (bf)
    proto__bf16_to_f32(h, dst);
  else
    proto__f16_to_f32(h, dst);
  return 0;
}

/* A length is whole as the client wrote it (proto__json_whole), not only
 * in its double: 1.00000000000000001 is not 1. */
static int put_len(fill_ctx *f, const cJSON *e) {
  char *err = f->err, at[64], what[48];
  int whole = proto__json_whole(e);
  double x = whole ? e->valuedouble : 0;
  if (whole && x >= 0 && x <= (double)f->hi) {
    ((int32_t *)f->dst)[f->pos++] = (int32_t)x;
    return 0;
  }
  /* the index and the number as the client wrote it: only for the message */
  index_str(f->idx, f->t->rank, at, sizeof at);
  proto__describe(e, what, sizeof what);
  if (!whole)
    return ERR("%s: expected an integer at %s, got %s", f->t->name, at, what);
  if (x < 0)
    return ERR("%s%s=%s is negative", f->t->name, at, what);
  return ERR("%s%s=%s exceeds %s %lld", f->t->name, at, what, f->what,
             f->hi);
}

static int put_bool(fill_ctx *f, const cJSON *e) {
  uint8_t v;
  /* 0 and 1 as written: 1.00000000000000001 is neither */
  int whole = proto__json_whole(e);
  if (cJSON_IsTrue(e) || (whole && e->valuedouble == 1)) {
    v = 1;
  } else if (cJSON_IsFalse(e) || (whole && e->valuedouble == 0)) {
    v = 0;
  } else {
    char *err = f->err, at[64], what[48];
    index_str(f->idx, f->t->rank, at, sizeof at);
    proto__describe(e, what, sizeof what);
    return ERR("%s: expected true, false, 0 or 1 at %s, got %s", f->t->name,
               at, what);
  }
  ((uint8_t *)f->dst)[f->pos++] = v;
  return 0;
}

static int put_elem(fill_ctx *f, const cJSON *e) {
  switch (f->kind) {
  case PROTO__KIND_F32: return put_f32(f, e);
  case PROTO__KIND_LEN: return put_len(f, e);
  case PROTO__KIND_F16:
  case PROTO__KIND_BF16: return put_half(f, e);
  default: return put_bool(f, e);
  }
}

/* ---- leaves: elements still as text (numscan.c) ------------------------
 *
 * The decoder falls back to the cJSON path on any error here, and that
 * path words the message; these only say which leaf was refused. */

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
    p++;
  return p;
}

/* One element of a leaf into dst[pos], by kind, with the cJSON path's
 * checks on the double it would have read.  Returns the end of the token,
 * or NULL when the element is not accepted. */
static const char *leaf_elem(fill_ctx *f, const char *p, const char *end) {
  double x;
  uint16_t h;
  if (f->kind == PROTO__KIND_BOOL && end - p >= 4 && !memcmp(p, "true", 4)) {
    ((uint8_t *)f->dst)[f->pos++] = 1;
    return p + 4;
  }
  if (f->kind == PROTO__KIND_BOOL && end - p >= 5 &&
      !memcmp(p, "false", 5)) {
    ((uint8_t *)f->dst)[f->pos++] = 0;
    return p + 5;
  }
  if (f->kind == PROTO__KIND_F32)
    return proto__num_f32(p, end, (float *)f->dst + f->pos++);
  const char *q = proto__num_f64(p, end, &x);
  if (!q)
    return NULL;
  switch (f->kind) {
  case PROTO__KIND_LEN: /* whole in the decimal too, as put_len */
    if (x != floor(x) || x < 0 || x > (double)f->hi ||
        proto__num_cmp(p, q, x) != 0)
      return NULL;
    ((int32_t *)f->dst)[f->pos++] = (int32_t)x;
    return q;
  case PROTO__KIND_BOOL:
    /* 0 and 1 as written, as put_bool */
    if ((x != 0 && x != 1) || proto__num_cmp(p, q, x) != 0)
      return NULL;
    ((uint8_t *)f->dst)[f->pos++] = x == 1;
    return q;
  case PROTO__KIND_BF16:
    if (proto__half_midpoint(x, 1)) /* the decimal decides the tie */
      x = proto__num_toward(p, q, x);
    if (proto__f64_to_bf16(x, &h))
      return NULL;
    proto__bf16_to_f32(h, (float *)f->dst + f->pos++);
    return q;
  default:
    if (proto__half_midpoint(x, 0))
      x = proto__num_toward(p, q, x);
    if (proto__f64_to_f16(x, &h))
      return NULL;
    proto__f16_to_f32(h, (float *)f->dst + f->pos++);
    return q;
  }
}

/* Converts all of leaf a at f->pos and marks it read. */
static int fill_leaf(fill_ctx *f, const cJSON *a) {
  const char *p = a->valuestring, *end = p + (size_t)a->valuedouble;
  size_t n = (size_t)a->valueint;
  char *err = f->err;
  if (f->kind == PROTO__KIND_F32) {
    if (proto__num_list_f32(p, end, (float *)f->dst + f->pos, n))
      goto bad;
    f->pos += n;
  } else {
    for (size_t i = 0; i < n; i++) {
      p = skip_ws(p, end);
      if (!(p = leaf_elem(f, p, end)))
        goto bad;
      p = skip_ws(p, end);
      if (i + 1 < n && (p == end || *p++ != ','))
        goto bad;
    }
    if (p != end)
      goto bad;
  }
  ((cJSON *)a)->type |= PROTO__LEAF_READ;
  return 0;
bad:
  return ERR("%s: an array holds something other than %s", f->t->name,
             f->kind == PROTO__KIND_BOOL ? "true, false, 0 or 1"
                                         : "JSON numbers in range");
}

/* An array at depth d (path f->idx[0..d)) whose length or type is wrong. */
static int ragged(fill_ctx *f, int d, const cJSON *got) {
  char *err = f->err, at[64], what[48];
  index_str(f->idx, d, at, sizeof at);
  if (!cJSON_IsArray(got)) {
    proto__describe(got, what, sizeof what);
    return ERR("%s: ragged array at %s (expected an array of %d, got %s)",
               f->t->name, at, f->t->shape[d], what);
  }
  return ERR("%s: ragged array at %s (length %zu, expected %d)", f->t->name,
             at, arr_len(got), f->t->shape[d]);
}

static int fill_nested(fill_ctx *f, const cJSON *arr, int d) {
  if (!cJSON_IsArray(arr))
    return ragged(f, d, arr);
  int i = 0, last = d == f->t->rank - 1;
  if (proto__is_leaf(arr)) {
    if (!last || arr_len(arr) != (size_t)f->t->shape[d])
      return ragged(f, d, arr);
    return fill_leaf(f, arr);
  }
  for (const cJSON *c = arr->child; c; c = c->next, i++) {
    if (i >= f->t->shape[d])
      return ragged(f, d, arr);
    f->idx[d] = i;
    int rc = last ? put_elem(f, c) : fill_nested(f, c, d + 1);
    if (rc)
      return rc;
  }
  if (i != f->t->shape[d])
    return ragged(f, d, arr);
  return 0;
}

static int fill_flat(fill_ctx *f) {
  int r = f->t->rank;
  memset(f->idx, 0, sizeof f->idx);
  if (proto__is_leaf(f->t->data))
    return fill_leaf(f, f->t->data);
  for (const cJSON *c = f->t->data->child; c; c = c->next) {
    int rc = put_elem(f, c);
    if (rc)
      return rc;
    for (int d = r - 1; d >= 0; d--) { /* odometer over the multi-index */
      if (++f->idx[d] < f->t->shape[d])
        break;
      f->idx[d] = 0;
    }
  }
  return 0;
}

/* Advances the multi-index of the element just written (row-major). */
static void odometer(fill_ctx *f) {
  for (int d = f->t->rank - 1; d >= 0; d--) {
    if (++f->idx[d] < f->t->shape[d])
      break;
    f->idx[d] = 0;
  }
}

/* PROTO__FORM_ANY: leaves depth first; proto__count_any has already
 * checked the count and that every array is non-empty. */
static int fill_any(fill_ctx *f, const cJSON *arr) {
  if (proto__is_leaf(arr))
    return fill_leaf(f, arr);
  for (const cJSON *c = arr->child; c; c = c->next) {
    int rc = cJSON_IsArray(c) ? fill_any(f, c) : put_elem(f, c);
    if (rc)
      return rc;
    if (!cJSON_IsArray(c))
      odometer(f);
  }
  return 0;
}

/* Deeper than any tensor a client means to send; bounds the recursion. */
#define MAX_NEST 32

static int count_any(const cJSON *a, int depth, const char *name, size_t *n,
                     char *err) {
  if (depth > MAX_NEST)
    return ERR("%s: \"data\" is nested deeper than %d", name, MAX_NEST);
  if (proto__is_leaf(a)) {
    *n += (size_t)a->valueint;
    return 0;
  }
  if (!a->child)
    return ERR("%s: \"data\" holds an empty array", name);
  for (const cJSON *c = a->child; c; c = c->next) {
    if (cJSON_IsArray(c)) {
      int rc = count_any(c, depth + 1, name, n, err);
      if (rc)
        return rc;
    } else {
      ++*n;
    }
  }
  return 0;
}

int proto__count_any(const cJSON *data, const char *name, size_t *n,
                     char err[PROTO_ERR_MAX]) {
  *n = 0;
  return count_any(data, 0, name, n, err);
}

int proto__tensor_fill(const proto__tensor *t, int kind, long long hi,
                       const char *what, void *dst, char err[PROTO_ERR_MAX]) {
  fill_ctx f = {.t = t, .kind = kind, .hi = hi, .what = what, .dst = dst,
                .err = err};
  if (t->flat == PROTO__FORM_ANY)
    return fill_any(&f, t->data);
  return t->flat ? fill_flat(&f) : fill_nested(&f, t->data, 0);
}
