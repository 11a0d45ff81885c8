/* json_v1.c - POST /v1/attention body -> validated proto_request.
 *
 * The decode runs in phases so that nothing is allocated before the whole
 * request is known to fit:
 *   1. the body: not empty, within the element budget (a cheap comma count),
 *      JSON (jsoncheck.c, one pass, before any tree), one object, nothing
 *      after it; cJSON's tree held in the budget before it is built;
 *   2. fields: every top-level name known and seen once;
 *   3. shapes of every tensor and how they relate (no element is read;
 *      the relations are check.c's, shared with the v2 codec);
 *   4. the element budget over inputs and outputs (ATTND_ETOOBIG);
 *   5. scalar options that depend on the shapes (scale, window);
 *   6. allocation and conversion of every element, then the attn_problem.
 * Every message starts with the field it is about. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/tensor/tensor.h"

#define ERR(...) (snprintf(c->err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

enum field {
  F_QUERY, F_KEY, F_VALUE, F_VALID_LENS, F_MASK, F_BIAS, F_CAUSAL, F_SCALE,
  F_RETURN_WEIGHTS, F_ID, F_SCORING, F_W_Q, F_W_K, F_W_V, F_DROPOUT,
  F_WINDOW, F_DIAGNOSTICS, F_SINKS, F_SOFTCAP, F_ALIBI_SLOPES,
  F_CU_SEQLENS_Q, F_CU_SEQLENS_K, F_RETURN_LSE, F_WINDOW_ALIGN, F_PRECISION,
  F_COUNT
};

static const char *const field_names[F_COUNT] = {
  "query", "key", "value", "valid_lens", "mask", "bias", "causal", "scale",
  "return_weights", "id", "scoring", "w_q", "w_k", "w_v", "dropout",
  "window", "diagnostics", "sinks", "softcap", "alibi_slopes",
  "cu_seqlens_q", "cu_seqlens_k", "return_lse", "window_align", "precision"
};

typedef struct v1_ctx {
  const cJSON *f[F_COUNT];  /* NULL when absent or JSON null */
  int seen_null[F_COUNT];   /* present but null */
  proto__check ck;          /* the tensors; ck.t[i].json NULL when absent */
  proto_request *req;
  attn_problem *p;
  size_t max_elems;
  proto__json_stats *st;    /* the body's syntax, once checked */
  const char *body;         /* the body, for a number's text */
  size_t len;
  char *err;
} v1_ctx;

/* ---- phase 1: the body ------------------------------------------------- */

/* leaves: check the syntax (jsoncheck.c), then parse with numscan
 * (tensor arrays as leaves); 0: cJSON on the whole body, which passed the
 * check, with its tree held in the budget first. */
static int parse_body(v1_ctx *c, const char *body, size_t len, int leaves,
                      cJSON **root) {
  int rc;
  size_t i = 0;
  while (i < len && proto__json_blank(body[i]))
    i++;
  if (i == len)
    return ERR("empty body: expected a JSON object with query, key and "
               "value");
  if ((rc = proto__over_element_budget(body, len, c->max_elems, c->err)))
    return rc;
  if (leaves) {
    if ((rc = proto__json_check(body, len, PROTO_CODEC_V1, "", 1, c->st,
                                c->err)))
      return rc;
    for (size_t j = c->st->end; j < len; j++)
      if (!proto__json_blank(body[j]))
        return proto__json_strict(c->st, c->err) ? ATTND_EINVAL
               : ERR("body has unexpected data after the JSON object at "
                     "byte %zu", j);
    if ((rc = proto__json_want_object(c->st, c->err)))
      return rc;
    return proto__json_parse_leaves(body, len, PROTO_CODEC_V1, root,
                                    c->err);
  }
  if ((rc = proto__hold(proto__json_tree_bytes(c->st),
                        "the cJSON tree of the body", c->err)))
    return rc;
  const char *end = NULL;
  unsigned long failed = mem_thread_failures();
  *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  /* cJSON returns NULL for bad JSON and for a failed allocation alike */
  if (!*root && mem_thread_failures() != failed)
    return ATTND_ENOMEM;
  if (!*root) {
    size_t at = end && end >= body && end <= body + len
                    ? (size_t)(end - body) : 0;
    return proto__json_syntax_err(body, len, at, PROTO_CODEC_V1, "",
                                  c->err);
  }
  if (proto__json_refuse_bad_number(body, end, "", c->err))
    return ATTND_EINVAL;
  /* what follows the value, and the value's type: checked before */
  proto__json_mark_ties(*root, body, end, 1);
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
    if (i == F_COUNT) {
      char hint[PROTO__HINT_MAX];
      proto__hint(hint, sizeof hint, m->string, field_names, F_COUNT,
                  "fields", field_names, F_COUNT);
      return ERR("unknown field '%s' (%s)", name, hint);
    }
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

static int qkv_shapes(v1_ctx *c) {
  int rc;
  for (int f = F_QUERY; f <= F_VALUE; f++)
    if ((rc = required(c, f)))
      return rc;
  if ((rc = tensor_shape(c, F_QUERY, &c->ck.t[PROTO__IN_QUERY])))
    return rc;
  int qr = c->ck.t[PROTO__IN_QUERY].rank;
  if (qr != 3 && qr != 4)
    return proto__check_qkv(&c->ck); /* names the rank it wants */
  if ((rc = tensor_shape(c, F_KEY, &c->ck.t[PROTO__IN_KEY])) ||
      (rc = tensor_shape(c, F_VALUE, &c->ck.t[PROTO__IN_VALUE])))
    return rc;
  return proto__check_qkv(&c->ck);
}

static int valid_lens_shape(v1_ctx *c) {
  int rc;
  if (c->f[F_VALID_LENS] &&
      (rc = tensor_shape(c, F_VALID_LENS, &c->ck.t[PROTO__IN_VALID_LENS])))
    return rc;
  return proto__check_valid_lens(&c->ck);
}

static int mask_bias_shapes(v1_ctx *c) {
  int rc;
  if (c->f[F_MASK] &&
      (rc = tensor_shape(c, F_MASK, &c->ck.t[PROTO__IN_MASK])))
    return rc;
  if (c->f[F_BIAS] &&
      (rc = tensor_shape(c, F_BIAS, &c->ck.t[PROTO__IN_BIAS])))
    return rc;
  return proto__check_mask_bias(&c->ck);
}

/* sinks, alibi_slopes, cu_seqlens_q and cu_seqlens_k, each optional. */
static int variant_shapes(v1_ctx *c) {
  static const int flds[4] = {F_SINKS, F_ALIBI_SLOPES, F_CU_SEQLENS_Q,
                              F_CU_SEQLENS_K};
  static const int ins[4] = {PROTO__IN_SINKS, PROTO__IN_ALIBI_SLOPES,
                             PROTO__IN_CU_SEQLENS_Q, PROTO__IN_CU_SEQLENS_K};
  int rc;
  for (int i = 0; i < 4; i++)
    if (c->f[flds[i]] &&
        (rc = tensor_shape(c, flds[i], &c->ck.t[ins[i]])))
      return rc;
  return proto__check_variants(&c->ck);
}

static int additive_shapes(v1_ctx *c) {
  static const int flds[3] = {F_W_Q, F_W_K, F_W_V};
  int rc;
  for (int i = 0; i < 3; i++) {
    if (!c->f[flds[i]])
      return ERR("%s: required with scoring \"additive\"",
                 field_names[flds[i]]);
    if ((rc = tensor_shape(c, flds[i], &c->ck.t[PROTO__IN_W_Q + i])))
      return rc;
    if (c->ck.t[PROTO__IN_W_Q + i].rank != (i < 2 ? 2 : 1))
      break; /* proto__check_additive names the rank it wants */
  }
  return proto__check_additive(&c->ck);
}

static int weight_shapes(v1_ctx *c) {
  if (c->p->scoring == ATTN_SCORING_ADDITIVE)
    return additive_shapes(c);
  for (int f = F_W_Q; f <= F_W_V; f++)
    if (c->f[f])
      return ERR("%s: only valid with scoring \"additive\"", field_names[f]);
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

/* "window_align": where the window is anchored, named as causal's
 * alignments are. */
static int opt_window_align(v1_ctx *c) {
  const cJSON *j = c->f[F_WINDOW_ALIGN];
  if (!j)
    return 0;
  if (cJSON_IsString(j) && !strcmp(j->valuestring, "upper_left"))
    c->p->window_align = ATTN_WINDOW_UPPER_LEFT;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "lower_right"))
    c->p->window_align = ATTN_WINDOW_LOWER_RIGHT;
  else
    return bad_choice(c, j, "window_align",
                      "\"upper_left\", \"lower_right\"");
  return 0;
}

/* "return_lse": true adds the rows' log-sum-exp to the answer. */
static int opt_return_lse(v1_ctx *c) {
  const cJSON *j = c->f[F_RETURN_LSE];
  if (!j)
    return 0;
  if (!cJSON_IsBool(j)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("return_lse: expected true or false, got %s", what);
  }
  c->req->return_lse = cJSON_IsTrue(j);
  return 0;
}

/* "softcap": a finite number that float32 holds as a normal number (a
 * subnormal cap would turn s / softcap into infinity, and a zero score
 * into NaN). */
static int opt_softcap(v1_ctx *c) {
  const cJSON *j = c->f[F_SOFTCAP];
  float x;
  if (!j)
    return 0;
  if (!cJSON_IsNumber(j)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("softcap: expected a number > 0, got %s", what);
  }
  if (proto__json_f32(j, &x) || !(x >= FLT_MIN)) {
    char num[40];
    proto__num_text(j, num, sizeof num);
    return ERR("softcap: %s is not a finite number > 0 that float32 holds "
               "as a normal number (1.17549435e-38 to 3.40282347e+38)", num);
  }
  c->p->softcap = x;
  return 0;
}

/* "precision": "fp32" (the default) or "bf16" (dot scoring only). */
static int opt_precision(v1_ctx *c) {
  const cJSON *j = c->f[F_PRECISION];
  if (!j)
    return 0;
  if (cJSON_IsString(j) && !strcmp(j->valuestring, "fp32"))
    return 0;
  if (!cJSON_IsString(j) || strcmp(j->valuestring, "bf16"))
    return bad_choice(c, j, "precision", "\"fp32\", \"bf16\"");
  if (c->p->scoring == ATTN_SCORING_ADDITIVE)
    return ERR("precision: \"bf16\" is for dot-product scoring; scoring "
               "\"additive\" runs in float32 only (leave precision out or "
               "send \"fp32\")");
  c->p->precision = ATTN_PRECISION_BF16;
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

/* "diagnostics": true asks for the per-row figures; they need the weights,
 * which are then computed whether or not they are returned. */
static int opt_diagnostics(v1_ctx *c) {
  const cJSON *j = c->f[F_DIAGNOSTICS];
  if (!j)
    return 0;
  if (!cJSON_IsBool(j)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("diagnostics: expected true or false, got %s", what);
  }
  c->req->diagnostics = cJSON_IsTrue(j);
  return 0;
}

/* A number id as the client wrote it (its double may not hold it:
 * 9007199254740993), at most PROTO_ID_MAX bytes. */
static int id_number(v1_ctx *c, proto__buf *b) {
  size_t n = 0;
  const char *t = proto__json_member(c->body, c->len, "id", &n);
  if (!t || !n)
    return ERR("id: the number's text was not found in the body");
  if (n > PROTO_ID_MAX)
    return ERR("id: a number of %zu characters; the limit is %d", n,
               PROTO_ID_MAX);
  proto__buf_put(b, t, n);
  return 0;
}

static int opt_id(v1_ctx *c) {
  const cJSON *j = c->f[F_ID];
  proto__buf b = {0};
  char num[40];
  if (!j)
    return 0;
  if (cJSON_IsString(j)) {
    if (proto__check_id(j->valuestring, c->err))
      return ATTND_EINVAL;
    proto__buf_put_json_string(&b, j->valuestring);
  } else if (cJSON_IsNumber(j) && isfinite(j->valuedouble)) {
    if (id_number(c, &b)) {
      proto__buf_free(&b);
      return ATTND_EINVAL;
    }
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

static int dropout_fields(v1_ctx *c, const cJSON **pj, const cJSON **sj) {
  static const char *const names[2] = {"p", "seed"};
  for (const cJSON *m = c->f[F_DROPOUT]->child; m; m = m->next) {
    char name[48], hint[PROTO__HINT_MAX];
    const cJSON **slot = !strcmp(m->string, "p")      ? pj
                         : !strcmp(m->string, "seed") ? sj
                                                      : NULL;
    proto__quote_name(m->string, name, sizeof name);
    if (!slot) {
      proto__hint(hint, sizeof hint, m->string, names, 2, "allowed", names,
                  2);
      return ERR("dropout: unknown field '%s' (%s)", name, hint);
    }
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
  char what[48];
  if (!cJSON_IsNumber(pj) || !(pj->valuedouble >= 0) ||
      !((float)pj->valuedouble < 1.0f)) {
    proto__describe(pj, what, sizeof what);
    return ERR("dropout.p: must be a number in [0, 1), got %s", what);
  }
  if (sj && proto__json_count(sj, &seed)) {
    proto__describe(sj, what, sizeof what);
    return ERR("dropout.seed: must be an integer in [0, 2^53], got %s", what);
  }
  c->p->dropout_p = (float)pj->valuedouble;
  c->p->seed = (uint64_t)seed;
  return 0;
}

/* ---- phase 5: options that depend on the shapes ------------------------- */

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
  return proto__json_scale(j, "scale", &c->p->scale, c->err);
}

/* One side of the window: null is unbounded (-1); a side wider than the
 * problem is the same window as an unbounded one but clamped
 * (proto__window_side), so that the core's sums cannot overflow. */
static int window_side(v1_ctx *c, const cJSON *j, int which, int *out) {
  double x;
  if (cJSON_IsNull(j)) {
    *out = -1;
    return 0;
  }
  if (proto__json_count(j, &x)) {
    char what[48];
    proto__describe(j, what, sizeof what);
    return ERR("window[%d]: expected an integer in [0, 2^53] or null, got %s",
               which, what);
  }
  *out = proto__window_side(c->p, x);
  return 0;
}

static int opt_window(v1_ctx *c) {
  const cJSON *j = c->f[F_WINDOW];
  int rc;
  if (!j)
    return 0;
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2)
    return ERR("window: expected [left, right] (integers or null)");
  if ((rc = window_side(c, j->child, 0, &c->p->window_left)) ||
      (rc = window_side(c, j->child->next, 1, &c->p->window_right)))
    return rc;
  c->p->has_window = 1;
  return 0;
}

/* ---- phase 6: elements -------------------------------------------------- */

static int fill(v1_ctx *c, int in, const void **dst) {
  const proto__tensor *t = &c->ck.t[in];
  static const size_t size[3] = {sizeof(float), sizeof(int32_t),
                                 sizeof(uint8_t)};
  int kind = proto__input_kind(in);
  const char *what;
  long long hi = proto__input_hi(c->p, in, &what);
  if (!t->json)
    return 0;
  void *buf = proto__own_filled(c->req, t->n * size[kind]);
  if (!buf)
    return ATTND_ENOMEM;
  c->req->in_bytes += t->n * size[kind];
  *dst = buf;
  return proto__tensor_fill(t, kind, hi, what, buf, c->err);
}

static int fill_all(v1_ctx *c) {
  attn_problem *p = c->p;
  const void *slot[PROTO__IN_COUNT] = {NULL};
  int rc;
  for (int in = 0; in < PROTO__IN_COUNT; in++)
    if ((rc = fill(c, in, &slot[in])))
      return rc;
  p->q = slot[PROTO__IN_QUERY];
  p->k = slot[PROTO__IN_KEY];
  p->v = slot[PROTO__IN_VALUE];
  p->valid_lens = slot[PROTO__IN_VALID_LENS];
  p->mask = slot[PROTO__IN_MASK];
  p->bias = slot[PROTO__IN_BIAS];
  p->sinks = slot[PROTO__IN_SINKS];
  p->alibi_slopes = slot[PROTO__IN_ALIBI_SLOPES];
  p->cu_seqlens_q = slot[PROTO__IN_CU_SEQLENS_Q];
  p->cu_seqlens_k = slot[PROTO__IN_CU_SEQLENS_K];
  p->w_q = slot[PROTO__IN_W_Q];
  p->w_k = slot[PROTO__IN_W_K];
  p->w_v = slot[PROTO__IN_W_V];
  if ((rc = proto__check_cu_seqlens(&c->ck)))
    return rc;
  return proto__alloc_outputs(&c->ck);
}

/* ---- the decoder -------------------------------------------------------- */

static int decode_root(v1_ctx *c, const cJSON *root) {
  int rc;
  if ((rc = collect_fields(c, root)) || (rc = opt_scoring(c)) ||
      (rc = opt_causal(c)) || (rc = opt_return_weights(c)) ||
      (rc = opt_diagnostics(c)) || (rc = opt_return_lse(c)) ||
      (rc = opt_dropout(c)) || (rc = opt_softcap(c)) ||
      (rc = opt_precision(c)) ||
      (rc = opt_window_align(c)) || (rc = qkv_shapes(c)) ||
      (rc = valid_lens_shape(c)) || (rc = mask_bias_shapes(c)) ||
      (rc = weight_shapes(c)) || (rc = variant_shapes(c)) ||
      (rc = proto__check_budget(&c->ck)) || (rc = opt_scale(c)) ||
      (rc = opt_window(c)) || (rc = opt_id(c)) || (rc = fill_all(c)))
    return rc;
  c->req->qrank = c->ck.t[PROTO__IN_QUERY].rank;
  c->req->flat = c->ck.t[PROTO__IN_QUERY].flat;
  return 0;
}

static int decode(const char *body, size_t len, proto_request *req,
                  size_t max_elems, char *err, int leaves,
                  proto__json_stats *st) {
  v1_ctx c = {.req = req, .p = &req->prob, .max_elems = max_elems,
              .st = st, .body = body, .len = len, .err = err};
  c.ck.req = req;
  c.ck.p = &req->prob;
  c.ck.max_elems = max_elems;
  c.ck.err = err;
  cJSON *root = NULL;
  memset(req, 0, sizeof *req);
  attn_problem_init(&req->prob);
  err[0] = '\0';
  mem_json_arena_begin(); /* the tree lives until the delete below */
  int rc = parse_body(&c, body, len, leaves, &root);
  if (!rc)
    rc = decode_root(&c, root);
  if (!rc && leaves && !proto__json_leaves_read(root, PROTO_CODEC_V1))
    rc = ATTND_EINVAL;
  cJSON_Delete(root);
  mem_json_arena_end();
  if (rc) {
    if (rc == ATTND_ENOMEM && !err[0])
      snprintf(err, PROTO_ERR_MAX, "out of memory decoding the request");
    proto_request_free(req);
  }
  return rc;
}

/* The body's syntax is checked first, in one pass (jsoncheck.c), and the
 * tensors' numbers are read by numscan (numscan.c).  When that fails on a
 * body that is valid JSON, for a reason of the request's own, the cJSON
 * path decodes the body again and words the message, when the budget
 * holds its tree; otherwise the first pass's message stands. */
int proto_v1_decode(const char *body, size_t len, proto_request *req,
                    size_t max_elems, char err[PROTO_ERR_MAX]) {
  proto__json_stats st = {0};
  char first[PROTO_ERR_MAX];
  int rc = decode(body, len, req, max_elems, err, 1, &st);
  if (!proto__json_retry(&rc, &st, err))
    return rc;
  memcpy(first, err, PROTO_ERR_MAX);
  return proto__json_retried(rc, first,
                             decode(body, len, req, max_elems, err, 0, &st),
                             err);
}
