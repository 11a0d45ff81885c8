/* json_v1.c - POST /v1/attention body -> validated proto_request.
 *
 * The decode runs in phases so that nothing is allocated before the whole
 * request is known to fit:
 *   1. the body: not empty, within the element budget (a cheap comma count
 *      bounds the size of the cJSON tree before cJSON builds it), JSON, one
 *      object, nothing after it;
 *   2. fields: every top-level name known and seen once;
 *   3. shapes of every tensor and how they relate (no element is read);
 *   4. the element budget over inputs and outputs (ATTND_ETOOBIG);
 *   5. scalar options that depend on the shapes (scale, window);
 *   6. allocation and conversion of every element, then the attn_problem.
 * Every message starts with the field it is about. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto_impl.h"

#define ERR(...) (snprintf(c->err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

/* Commas outside tensors in a valid body: top-level members, shape arrays,
 * dropout and window.  Far fewer than this. */
#define COMMA_SLACK 1024

enum field {
  F_QUERY, F_KEY, F_VALUE, F_VALID_LENS, F_MASK, F_BIAS, F_CAUSAL, F_SCALE,
  F_RETURN_WEIGHTS, F_ID, F_SCORING, F_W_Q, F_W_K, F_W_V, F_DROPOUT,
  F_WINDOW, F_COUNT
};

static const char *const field_names[F_COUNT] = {
  "query", "key", "value", "valid_lens", "mask", "bias", "causal", "scale",
  "return_weights", "id", "scoring", "w_q", "w_k", "w_v", "dropout",
  "window"
};

typedef struct v1_ctx {
  const cJSON *f[F_COUNT];  /* NULL when absent or JSON null */
  int seen_null[F_COUNT];   /* present but null */
  proto__tensor q, k, v, vl, mask, bias, wq, wk, wv;
  proto_request *req;
  attn_problem *p;
  size_t max_elems;
  char *err;
} v1_ctx;

/* ---- phase 1: the body ------------------------------------------------- */

static int is_ws(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* Commas outside strings: every tensor element but the first of its tensor
 * is preceded by one, so a body with more commas than the budget allows
 * cannot be a valid request. */
static size_t count_commas(const char *s, size_t n) {
  size_t commas = 0;
  for (size_t i = 0; i < n; i++) {
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

static int parse_body(v1_ctx *c, const char *body, size_t len, cJSON **root) {
  size_t i = 0;
  while (i < len && is_ws(body[i]))
    i++;
  if (i == len)
    return ERR("empty body: expected a JSON object with query, key and "
               "value");
  if (c->max_elems && count_commas(body, len) > c->max_elems + COMMA_SLACK) {
    snprintf(c->err, PROTO_ERR_MAX, "request has more than %zu tensor "
             "elements, the server's limit", c->max_elems);
    return ATTND_ETOOBIG;
  }
  const char *end = NULL;
  *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (!*root) {
    size_t at = end && end >= body && end <= body + len
                    ? (size_t)(end - body) : 0;
    return ERR("body is not valid JSON (near byte %zu)", at);
  }
  for (size_t j = (size_t)(end - body); j < len; j++)
    if (!is_ws(body[j]))
      return ERR("body has unexpected data after the JSON object at byte "
                 "%zu", j);
  if (!cJSON_IsObject(*root)) {
    char what[48];
    proto__describe(*root, what, sizeof what);
    return ERR("body must be a JSON object, got %s", what);
  }
  return 0;
}

/* ---- phase 2: fields --------------------------------------------------- */

static int collect_fields(v1_ctx *c, const cJSON *root) {
  for (const cJSON *m = root->child; m; m = m->next) {
    char name[48];
    int i = 0;
    while (i < F_COUNT && strcmp(m->string, field_names[i]))
      i++;
    proto__quote_name(m->string, name, sizeof name);
    if (i == F_COUNT)
      return ERR("unknown field '%s'", name);
    if (c->f[i] || c->seen_null[i])
      return ERR("duplicate field '%s'", name);
    if (cJSON_IsNull(m))
      c->seen_null[i] = 1;
    else
      c->f[i] = m;
  }
  return 0;
}

/* ---- phase 3: shapes --------------------------------------------------- */

static int tensor_shape(v1_ctx *c, int fld, proto__tensor *t) {
  return proto__tensor_shape(c->f[fld], field_names[fld], t, c->err);
}

static int required(v1_ctx *c, int fld) {
  if (c->f[fld])
    return 0;
  return ERR("%s: required field is %s", field_names[fld],
             c->seen_null[fld] ? "null" : "missing");
}

/* (B, [H,] L, W) of a rank-3 or rank-4 tensor. */
static void bhlw(const proto__tensor *t, int *b, int *h, int *l, int *w) {
  *b = t->shape[0];
  *h = t->rank == 4 ? t->shape[1] : 1;
  *l = t->shape[t->rank - 2];
  *w = t->shape[t->rank - 1];
}

static int qkv_shapes(v1_ctx *c) {
  int rc;
  for (int f = F_QUERY; f <= F_VALUE; f++)
    if ((rc = required(c, f)))
      return rc;
  if ((rc = tensor_shape(c, F_QUERY, &c->q)))
    return rc;
  if (c->q.rank != 3 && c->q.rank != 4)
    return ERR("query: expected rank 3 or 4, got %d (shape (B, Lq, D) or "
               "(B, H, Lq, D))", c->q.rank);
  if ((rc = tensor_shape(c, F_KEY, &c->k)) ||
      (rc = tensor_shape(c, F_VALUE, &c->v)))
    return rc;
  if (c->k.rank != c->q.rank)
    return ERR("key: expected rank %d like query, got %d", c->q.rank,
               c->k.rank);
  if (c->v.rank != c->q.rank)
    return ERR("value: expected rank %d like query, got %d", c->q.rank,
               c->v.rank);
  return 0;
}

static int qkv_relations(v1_ctx *c) {
  attn_problem *p = c->p;
  int kb, vb, vh, vl;
  bhlw(&c->q, &p->B, &p->H, &p->Lq, &p->D);
  bhlw(&c->k, &kb, &p->Hkv, &p->Lk, &p->Dk);
  bhlw(&c->v, &vb, &vh, &vl, &p->Dv);
  if (kb != p->B)
    return ERR("key: batch %d does not match query batch %d", kb, p->B);
  if (vb != p->B)
    return ERR("value: batch %d does not match query batch %d", vb, p->B);
  if (vh != p->Hkv)
    return ERR("value: %d heads do not match key heads %d", vh, p->Hkv);
  if (vl != p->Lk)
    return ERR("value: length %d does not match key length %d", vl, p->Lk);
  if (p->H % p->Hkv)
    return ERR("key: %d heads do not divide query heads %d (H must be a "
               "multiple of Hkv)", p->Hkv, p->H);
  if (p->scoring == ATTN_SCORING_DOT && p->Dk != p->D)
    return ERR("key: width %d does not match query width %d", p->Dk, p->D);
  return 0;
}

static int valid_lens_shape(v1_ctx *c) {
  if (!c->f[F_VALID_LENS])
    return 0;
  int rc = tensor_shape(c, F_VALID_LENS, &c->vl);
  if (rc)
    return rc;
  const proto__tensor *t = &c->vl;
  if (t->rank == 1 && t->shape[0] == c->p->B)
    return 0;
  if (t->rank == 2 && t->shape[0] == c->p->B && t->shape[1] == c->p->Lq) {
    c->p->valid_lens_per_query = 1;
    return 0;
  }
  char got[64] = "rank > 4";
  if (t->rank <= PROTO__MAX_RANK)
    proto__shape_str(t->shape, t->rank, got, sizeof got);
  return ERR("valid_lens: shape %s is neither (B,) = [%d] nor (B, Lq) = "
             "[%d,%d]", got, c->p->B, c->p->B, c->p->Lq);
}

/* The (B, [H,] Lq, Lk) shape masks and biases broadcast to. */
static int score_shape(const v1_ctx *c, int *dims) {
  int r = 0;
  dims[r++] = c->p->B;
  if (c->q.rank == 4)
    dims[r++] = c->p->H;
  dims[r++] = c->p->Lq;
  dims[r++] = c->p->Lk;
  return r;
}

/* Turns a trailing-axis broadcast of t to the score shape into element
 * strides over (b, h, i, j): a missing or size-1 axis gets stride 0. */
static int broadcast(v1_ctx *c, int fld, const proto__tensor *t,
                     int64_t stride[4]) {
  int dims[4], r = score_shape(c, dims);
  static const int axis3[3] = {0, 2, 3}, axis4[4] = {0, 1, 2, 3};
  const int *axis = r == 4 ? axis4 : axis3;
  char want[64], got[64] = "of rank > 4";
  proto__shape_str(dims, r, want, sizeof want);
  if (t->rank <= PROTO__MAX_RANK)
    proto__shape_str(t->shape, t->rank, got, sizeof got);
  if (t->rank > r)
    return ERR("%s: shape %s does not broadcast to %s (rank %d > %d)",
               field_names[fld], got, want, t->rank, r);
  int64_t cs = 1; /* contiguous stride of the tensor axis being mapped */
  stride[0] = stride[1] = stride[2] = stride[3] = 0;
  for (int ta = r - 1; ta >= 0; ta--) {
    int ma = ta - (r - t->rank);
    if (ma < 0)
      break;
    int d = t->shape[ma];
    if (d != dims[ta] && d != 1)
      return ERR("%s: shape %s does not broadcast to %s (axis %d: %d vs %d)",
                 field_names[fld], got, want, ta, d, dims[ta]);
    stride[axis[ta]] = d == 1 ? 0 : cs;
    cs *= d;
  }
  return 0;
}

static int mask_bias_shapes(v1_ctx *c) {
  int rc;
  if (c->f[F_MASK]) {
    if ((rc = tensor_shape(c, F_MASK, &c->mask)) ||
        (rc = broadcast(c, F_MASK, &c->mask, c->p->mask_stride)))
      return rc;
  }
  if (c->f[F_BIAS]) {
    if ((rc = tensor_shape(c, F_BIAS, &c->bias)) ||
        (rc = broadcast(c, F_BIAS, &c->bias, c->p->bias_stride)))
      return rc;
  }
  return 0;
}

static int additive_shapes(v1_ctx *c) {
  static const int flds[3] = {F_W_Q, F_W_K, F_W_V};
  proto__tensor *ts[3] = {&c->wq, &c->wk, &c->wv};
  attn_problem *p = c->p;
  int rc;
  for (int i = 0; i < 3; i++) {
    if (!c->f[flds[i]])
      return ERR("%s: required with scoring \"additive\"",
                 field_names[flds[i]]);
    if ((rc = tensor_shape(c, flds[i], ts[i])))
      return rc;
    if (ts[i]->rank != (i < 2 ? 2 : 1))
      return ERR("%s: expected rank %d, got %d", field_names[flds[i]],
                 i < 2 ? 2 : 1, ts[i]->rank);
  }
  p->Hd = c->wq.shape[0];
  if (c->wq.shape[1] != p->D)
    return ERR("w_q: width %d does not match query width %d",
               c->wq.shape[1], p->D);
  if (c->wk.shape[0] != p->Hd)
    return ERR("w_k: %d rows do not match w_q's %d", c->wk.shape[0], p->Hd);
  if (c->wk.shape[1] != p->Dk)
    return ERR("w_k: width %d does not match key width %d", c->wk.shape[1],
               p->Dk);
  if (c->wv.shape[0] != p->Hd)
    return ERR("w_v: length %d does not match w_q's %d rows", c->wv.shape[0],
               p->Hd);
  return 0;
}

static int weight_shapes(v1_ctx *c) {
  if (c->p->scoring == ATTN_SCORING_ADDITIVE)
    return additive_shapes(c);
  for (int f = F_W_Q; f <= F_W_V; f++)
    if (c->f[f])
      return ERR("%s: only valid with scoring \"additive\"", field_names[f]);
  return 0;
}

/* ---- phase 4: the element budget ------------------------------------------ */

static int add_elems(size_t *total, size_t n) {
  return __builtin_add_overflow(*total, n, total) ? -1 : 0;
}

static int budget(v1_ctx *c) {
  const proto__tensor *ts[] = {&c->q, &c->k, &c->v, &c->vl, &c->mask,
                               &c->bias, &c->wq, &c->wk, &c->wv};
  const attn_problem *p = c->p;
  size_t total = 0, rows, out, w = 0;
  int bad = 0;
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
    bad |= add_elems(&total, ts[i]->n);
  bad |= __builtin_mul_overflow((size_t)p->B * (size_t)p->H, (size_t)p->Lq,
                                &rows);
  bad |= __builtin_mul_overflow(rows, (size_t)p->Dv, &out);
  if (c->req->return_weights)
    bad |= __builtin_mul_overflow(rows, (size_t)p->Lk, &w);
  bad |= add_elems(&total, out) | add_elems(&total, w);
  bad |= out > SIZE_MAX / 8 || w > SIZE_MAX / 8;
  if (bad || (c->max_elems && total > c->max_elems)) {
    if (bad)
      snprintf(c->err, PROTO_ERR_MAX, "request is too large: its tensor "
               "element count overflows");
    else
      snprintf(c->err, PROTO_ERR_MAX, "request needs %zu tensor elements "
               "(inputs and outputs), more than the server's limit of %zu",
               total, c->max_elems);
    return ATTND_ETOOBIG;
  }
  c->req->out_bytes = (out + w) * sizeof(float);
  return 0;
}

/* ---- options ------------------------------------------------------------- */

/* An option given a value outside its closed set. */
static int bad_choice(v1_ctx *c, const cJSON *j, const char *fld,
                      const char *allowed) {
  char what[48];
  if (cJSON_IsString(j)) {
    char name[44];
    proto__quote_name(j->valuestring, name, sizeof name);
    snprintf(what, sizeof what, "\"%s\"", name);
  } else {
    proto__describe(j, what, sizeof what);
  }
  return ERR("%s: unknown value %s (allowed: %s)", fld, what, allowed);
}

static int opt_scoring(v1_ctx *c) {
  const cJSON *j = c->f[F_SCORING];
  if (!j)
    return 0;
  if (cJSON_IsString(j) && !strcmp(j->valuestring, "dot"))
    c->p->scoring = ATTN_SCORING_DOT;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "additive"))
    c->p->scoring = ATTN_SCORING_ADDITIVE;
  else
    return bad_choice(c, j, "scoring", "\"dot\", \"additive\"");
  return 0;
}

static int opt_causal(v1_ctx *c) {
  const cJSON *j = c->f[F_CAUSAL];
  if (!j || cJSON_IsFalse(j))
    c->p->causal = ATTN_CAUSAL_NONE;
  else if (cJSON_IsTrue(j))
    c->p->causal = ATTN_CAUSAL_UPPER_LEFT;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "upper_left"))
    c->p->causal = ATTN_CAUSAL_UPPER_LEFT;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "lower_right"))
    c->p->causal = ATTN_CAUSAL_LOWER_RIGHT;
  else
    return bad_choice(c, j, "causal",
                      "false, true, \"upper_left\", \"lower_right\"");
  return 0;
}

static int opt_return_weights(v1_ctx *c) {
  const cJSON *j = c->f[F_RETURN_WEIGHTS];
  c->req->return_weights = 1;
  if (!j)
    return 0;
  if (!cJSON_IsBool(j)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("return_weights: expected true or false, got %s", what);
  }
  c->req->return_weights = cJSON_IsTrue(j);
  return 0;
}

static int opt_id(v1_ctx *c) {
  const cJSON *j = c->f[F_ID];
  proto__buf b = {0};
  char num[40];
  if (!j)
    return 0;
  if (cJSON_IsString(j)) {
    proto__buf_put_json_string(&b, j->valuestring);
  } else if (cJSON_IsNumber(j) && isfinite(j->valuedouble)) {
    int n = proto__fmt_f64(num, sizeof num, j->valuedouble);
    proto__buf_put(&b, num, (size_t)n);
  } else {
    proto__describe(j, num, sizeof num);
    return ERR("id: expected a string or a finite number, got %s", num);
  }
  char *id = b.oom ? NULL : proto__own(c->req, b.len + 1);
  if (id)
    memcpy(id, b.p, b.len + 1);
  proto__buf_free(&b);
  c->req->id_json = id;
  return id ? 0 : ATTND_ENOMEM;
}

/* An integer in [0, 2^53], the range a double holds exactly. */
static int get_count(const cJSON *j, double *out) {
  if (!cJSON_IsNumber(j))
    return -1;
  double x = j->valuedouble;
  if (x != floor(x) || x < 0 || x > 9007199254740992.0)
    return -1;
  *out = x;
  return 0;
}

static int dropout_fields(v1_ctx *c, const cJSON **pj, const cJSON **sj) {
  for (const cJSON *m = c->f[F_DROPOUT]->child; m; m = m->next) {
    char name[48];
    const cJSON **slot = !strcmp(m->string, "p")      ? pj
                         : !strcmp(m->string, "seed") ? sj
                                                      : NULL;
    proto__quote_name(m->string, name, sizeof name);
    if (!slot)
      return ERR("dropout: unknown field '%s' (allowed: \"p\", \"seed\")",
                 name);
    if (*slot)
      return ERR("dropout: duplicate field '%s'", name);
    *slot = m;
  }
  return 0;
}

static int opt_dropout(v1_ctx *c) {
  const cJSON *j = c->f[F_DROPOUT], *pj = NULL, *sj = NULL;
  double seed = 0;
  int rc;
  if (!j)
    return 0;
  if (!cJSON_IsObject(j))
    return ERR("dropout: expected {\"p\": number, \"seed\": integer}");
  if ((rc = dropout_fields(c, &pj, &sj)))
    return rc;
  if (!pj)
    return ERR("dropout: \"p\" is required");
  if (!cJSON_IsNumber(pj) || !(pj->valuedouble >= 0) ||
      !((float)pj->valuedouble < 1.0f))
    return ERR("dropout.p: must be a number in [0, 1)");
  if (sj && !cJSON_IsNull(sj) && get_count(sj, &seed))
    return ERR("dropout.seed: must be an integer in [0, 2^53]");
  c->p->dropout_p = (float)pj->valuedouble;
  c->p->seed = (uint64_t)seed;
  return 0;
}

/* ---- phase 5: options that depend on the shapes ---------------------------- */

static int opt_scale(v1_ctx *c) {
  const cJSON *j = c->f[F_SCALE];
  c->p->scale = (float)(1.0 / sqrt((double)c->p->D));
  if (!j)
    return 0;
  if (c->p->scoring == ATTN_SCORING_ADDITIVE)
    return ERR("scale: only valid with scoring \"dot\" (additive scores "
               "are not scaled)");
  if (!cJSON_IsNumber(j)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("scale: expected a number, got %s", what);
  }
  double x = j->valuedouble;
  if (!(fabs(x) <= FLT_MAX))
    return ERR("scale: %g is out of float32 range", x);
  if ((float)x == 0.0f)
    return ERR("scale: must be non-zero%s", x != 0 ? " (underflows float32)"
                                                  : "");
  c->p->scale = (float)x;
  return 0;
}

/* One side of the window: null is unbounded (-1); a side wider than the
 * problem is the same window as an unbounded one but clamped, so that the
 * core's i - left and i + right cannot overflow. */
static int window_side(v1_ctx *c, const cJSON *j, int which, int limit,
                       int *out) {
  double x;
  if (cJSON_IsNull(j)) {
    *out = -1;
    return 0;
  }
  if (get_count(j, &x))
    return ERR("window[%d]: expected a non-negative integer or null",
               which);
  *out = x > limit ? limit : (int)x;
  return 0;
}

static int opt_window(v1_ctx *c) {
  const cJSON *j = c->f[F_WINDOW];
  int rc;
  if (!j)
    return 0;
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2)
    return ERR("window: expected [left, right] (integers or null)");
  if ((rc = window_side(c, j->child, 0, c->p->Lq, &c->p->window_left)) ||
      (rc = window_side(c, j->child->next, 1, c->p->Lk,
                        &c->p->window_right)))
    return rc;
  c->p->has_window = 1;
  return 0;
}

/* ---- phase 6: elements ---------------------------------------------------- */

static int fill(v1_ctx *c, const proto__tensor *t, int kind, const void **dst) {
  static const size_t size[3] = {sizeof(float), sizeof(int32_t),
                                 sizeof(uint8_t)};
  if (!t->json)
    return 0;
  void *buf = proto__own(c->req, t->n * size[kind]);
  if (!buf)
    return ATTND_ENOMEM;
  c->req->in_bytes += t->n * size[kind];
  *dst = buf;
  return proto__tensor_fill(t, kind, c->p->Lk, "key length", buf, c->err);
}

static int fill_all(v1_ctx *c) {
  attn_problem *p = c->p;
  const void *vl = NULL, *mask = NULL;
  int rc;
  if ((rc = fill(c, &c->q, PROTO__KIND_F32, (const void **)&p->q)) ||
      (rc = fill(c, &c->k, PROTO__KIND_F32, (const void **)&p->k)) ||
      (rc = fill(c, &c->v, PROTO__KIND_F32, (const void **)&p->v)) ||
      (rc = fill(c, &c->vl, PROTO__KIND_LEN, &vl)) ||
      (rc = fill(c, &c->mask, PROTO__KIND_BOOL, &mask)) ||
      (rc = fill(c, &c->bias, PROTO__KIND_F32, (const void **)&p->bias)) ||
      (rc = fill(c, &c->wq, PROTO__KIND_F32, (const void **)&p->w_q)) ||
      (rc = fill(c, &c->wk, PROTO__KIND_F32, (const void **)&p->w_k)) ||
      (rc = fill(c, &c->wv, PROTO__KIND_F32, (const void **)&p->w_v)))
    return rc;
  p->valid_lens = vl;
  p->mask = mask;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  c->req->out = proto__own(c->req, rows * p->Dv * sizeof(float));
  if (!c->req->out)
    return ATTND_ENOMEM;
  if (c->req->return_weights) {
    c->req->weights = proto__own(c->req, rows * p->Lk * sizeof(float));
    if (!c->req->weights)
      return ATTND_ENOMEM;
  }
  return 0;
}

/* ---- the decoder ------------------------------------------------------------ */

static int decode_root(v1_ctx *c, const cJSON *root) {
  int rc;
  if ((rc = collect_fields(c, root)) || (rc = opt_scoring(c)) ||
      (rc = opt_causal(c)) || (rc = opt_return_weights(c)) ||
      (rc = opt_dropout(c)) || (rc = qkv_shapes(c)) ||
      (rc = qkv_relations(c)) || (rc = valid_lens_shape(c)) ||
      (rc = mask_bias_shapes(c)) || (rc = weight_shapes(c)) ||
      (rc = budget(c)) || (rc = opt_scale(c)) || (rc = opt_window(c)) ||
      (rc = opt_id(c)) || (rc = fill_all(c)))
    return rc;
  c->req->qrank = c->q.rank;
  c->req->flat = c->q.flat;
  return 0;
}

int proto_v1_decode(const char *body, size_t len, proto_request *req,
                    size_t max_elems, char err[PROTO_ERR_MAX]) {
  v1_ctx c = {.req = req, .p = &req->prob, .max_elems = max_elems,
              .err = err};
  cJSON *root = NULL;
  memset(req, 0, sizeof *req);
  attn_problem_init(&req->prob);
  err[0] = '\0';
  int rc = parse_body(&c, body, len, &root);
  if (!rc)
    rc = decode_root(&c, root);
  cJSON_Delete(root);
  if (rc) {
    if (rc == ATTND_ENOMEM && !err[0])
      snprintf(err, PROTO_ERR_MAX, "out of memory decoding the request");
    proto_request_free(req);
  }
  return rc;
}
