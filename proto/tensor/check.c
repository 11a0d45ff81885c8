/* check.c - how the tensors of one request relate, for both codecs.
 *
 * /v1/attention and /v2/models/{m}/infer read their tensors differently
 * (named JSON fields; a list of inputs, JSON or binary) but once every
 * shape is known the rules are the same, and so are the messages: each
 * starts with the input it is about.  Nothing here reads an element or
 * allocates before proto__alloc_outputs. */
#include <stdio.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/tensor/tensor.h"

#define ERR(...) (snprintf(c->err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

const char *const proto__input_names[PROTO__IN_COUNT] = {
  "query", "key", "value", "valid_lens", "mask", "bias", "sinks",
  "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "w_q", "w_k", "w_v"};

int proto__input_kind(int in) {
  if (in == PROTO__IN_VALID_LENS || in == PROTO__IN_CU_SEQLENS_Q ||
      in == PROTO__IN_CU_SEQLENS_K)
    return PROTO__KIND_LEN;
  return in == PROTO__IN_MASK ? PROTO__KIND_BOOL : PROTO__KIND_F32;
}

long long proto__input_hi(const attn_problem *p, int in, const char **what) {
  if (in == PROTO__IN_CU_SEQLENS_Q) {
    *what = "query length";
    return p->Lq;
  }
  *what = "key length";
  return p->Lk;
}

int proto__window_side(const attn_problem *p, double x) {
  int lim = p->Lq > p->Lk ? p->Lq : p->Lk;
  if (x < 0)
    return -1;
  return x > lim ? lim : (int)x;
}

/* (B, [H,] L, W) of a rank-3 or rank-4 tensor. */
static void bhlw(const proto__tensor *t, int *b, int *h, int *l, int *w) {
  *b = t->shape[0];
  *h = t->rank == 4 ? t->shape[1] : 1;
  *l = t->shape[t->rank - 2];
  *w = t->shape[t->rank - 1];
}

static int qkv_ranks(proto__check *c) {
  const proto__tensor *q = &c->t[PROTO__IN_QUERY];
  if (q->rank != 3 && q->rank != 4)
    return ERR("query: expected rank 3 or 4, got %d (shape (B, Lq, D) or "
               "(B, H, Lq, D))", q->rank);
  if (c->t[PROTO__IN_KEY].rank != q->rank)
    return ERR("key: expected rank %d like query, got %d", q->rank,
               c->t[PROTO__IN_KEY].rank);
  if (c->t[PROTO__IN_VALUE].rank != q->rank)
    return ERR("value: expected rank %d like query, got %d", q->rank,
               c->t[PROTO__IN_VALUE].rank);
  return 0;
}

int proto__check_qkv(proto__check *c) {
  attn_problem *p = c->p;
  int kb, vb, vh, vl, rc;
  if ((rc = qkv_ranks(c)))
    return rc;
  bhlw(&c->t[PROTO__IN_QUERY], &p->B, &p->H, &p->Lq, &p->D);
  bhlw(&c->t[PROTO__IN_KEY], &kb, &p->Hkv, &p->Lk, &p->Dk);
  bhlw(&c->t[PROTO__IN_VALUE], &vb, &vh, &vl, &p->Dv);
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

int proto__check_valid_lens(proto__check *c) {
  const proto__tensor *t = &c->t[PROTO__IN_VALID_LENS];
  if (!t->json)
    return 0;
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
static int score_shape(const proto__check *c, int *dims) {
  int r = 0;
  dims[r++] = c->p->B;
  if (c->t[PROTO__IN_QUERY].rank == 4)
    dims[r++] = c->p->H;
  dims[r++] = c->p->Lq;
  dims[r++] = c->p->Lk;
  return r;
}

/* Turns a trailing-axis broadcast of input `in` to the score shape into
 * element strides over (b, h, i, j): a missing or size-1 axis gets 0. */
static int broadcast(proto__check *c, int in, int64_t stride[4]) {
  const proto__tensor *t = &c->t[in];
  int dims[4], r = score_shape(c, dims);
  static const int axis3[3] = {0, 2, 3}, axis4[4] = {0, 1, 2, 3};
  const int *axis = r == 4 ? axis4 : axis3;
  const char *name = proto__input_names[in];
  char want[64], got[64] = "of rank > 4";
  proto__shape_str(dims, r, want, sizeof want);
  if (t->rank <= PROTO__MAX_RANK)
    proto__shape_str(t->shape, t->rank, got, sizeof got);
  if (t->rank > r)
    return ERR("%s: shape %s does not broadcast to %s (rank %d > %d)", name,
               got, want, t->rank, r);
  int64_t cs = 1; /* contiguous stride of the tensor axis being mapped */
  stride[0] = stride[1] = stride[2] = stride[3] = 0;
  for (int ta = r - 1; ta >= 0; ta--) {
    int ma = ta - (r - t->rank);
    if (ma < 0)
      break;
    int d = t->shape[ma];
    if (d != dims[ta] && d != 1)
      return ERR("%s: shape %s does not broadcast to %s (axis %d: %d vs %d)",
                 name, got, want, ta, d, dims[ta]);
    stride[axis[ta]] = d == 1 ? 0 : cs;
    cs *= d;
  }
  return 0;
}

int proto__check_mask_bias(proto__check *c) {
  int rc;
  if (c->t[PROTO__IN_MASK].json &&
      (rc = broadcast(c, PROTO__IN_MASK, c->p->mask_stride)))
    return rc;
  if (c->t[PROTO__IN_BIAS].json &&
      (rc = broadcast(c, PROTO__IN_BIAS, c->p->bias_stride)))
    return rc;
  return 0;
}

int proto__check_additive(proto__check *c) {
  const proto__tensor *wq = &c->t[PROTO__IN_W_Q], *wk = &c->t[PROTO__IN_W_K],
                      *wv = &c->t[PROTO__IN_W_V];
  attn_problem *p = c->p;
  for (int i = 0; i < 3; i++) {
    const proto__tensor *t = &c->t[PROTO__IN_W_Q + i];
    if (t->rank != (i < 2 ? 2 : 1))
      return ERR("%s: expected rank %d, got %d",
                 proto__input_names[PROTO__IN_W_Q + i], i < 2 ? 2 : 1,
                 t->rank);
  }
  p->Hd = wq->shape[0];
  if (wq->shape[1] != p->D)
    return ERR("w_q: width %d does not match query width %d", wq->shape[1],
               p->D);
  if (wk->shape[0] != p->Hd)
    return ERR("w_k: %d rows do not match w_q's %d", wk->shape[0], p->Hd);
  if (wk->shape[1] != p->Dk)
    return ERR("w_k: width %d does not match key width %d", wk->shape[1],
               p->Dk);
  if (wv->shape[0] != p->Hd)
    return ERR("w_v: length %d does not match w_q's %d rows", wv->shape[0],
               p->Hd);
  return 0;
}

/* One of the (H,) per-head inputs: sinks, and alibi_slopes also (B, H). */
static int per_head(proto__check *c, int in, int per_item_ok, int *per_item) {
  const proto__tensor *t = &c->t[in];
  const char *name = proto__input_names[in];
  const attn_problem *p = c->p;
  char got[64] = "of rank > 4";
  if (!t->json)
    return 0;
  if (t->rank == 1 && t->shape[0] == p->H)
    return 0;
  if (per_item_ok && t->rank == 2 && t->shape[0] == p->B &&
      t->shape[1] == p->H) {
    *per_item = 1;
    return 0;
  }
  if (t->rank <= PROTO__MAX_RANK)
    proto__shape_str(t->shape, t->rank, got, sizeof got);
  if (per_item_ok)
    return ERR("%s: shape %s is neither (H,) = [%d] nor (B, H) = [%d,%d] "
               "(one slope per query head%s)", name, got, p->H, p->B, p->H,
               c->t[PROTO__IN_QUERY].rank == 3 ? "; H = 1 for a rank-3 query"
                                               : "");
  return ERR("%s: shape %s is not (H,) = [%d] (one logit per query head%s)",
             name, got, p->H,
             c->t[PROTO__IN_QUERY].rank == 3 ? "; H = 1 for a rank-3 query"
                                             : "");
}

static int packing(proto__check *c) {
  const proto__tensor *tq = &c->t[PROTO__IN_CU_SEQLENS_Q];
  const proto__tensor *tk = &c->t[PROTO__IN_CU_SEQLENS_K];
  attn_problem *p = c->p;
  if (!tq->json && !tk->json)
    return 0;
  if (!tq->json || !tk->json)
    return ERR("%s: given without %s (packed sequences need both)",
               tq->json ? "cu_seqlens_q" : "cu_seqlens_k",
               tq->json ? "cu_seqlens_k" : "cu_seqlens_q");
  for (int i = 0; i < 2; i++) {
    const proto__tensor *t = i ? tk : tq;
    if (t->rank != 1 || t->shape[0] < 2)
      return ERR("%s: expected shape (N + 1,) with N >= 1 sequences, got "
                 "rank %d%s", proto__input_names[PROTO__IN_CU_SEQLENS_Q + i],
                 t->rank, t->rank == 1 ? " of length 1" : "");
  }
  if (tq->shape[0] != tk->shape[0])
    return ERR("cu_seqlens_k: %d entries do not match cu_seqlens_q's %d "
               "(both are (N + 1,))", tk->shape[0], tq->shape[0]);
  if (p->B != 1)
    return ERR("cu_seqlens_q: packed sequences need batch 1, got %d (pack "
               "the batch along the length axis)", p->B);
  if (c->t[PROTO__IN_VALID_LENS].json)
    return ERR("valid_lens: not allowed with cu_seqlens_q/cu_seqlens_k "
               "(the sequences' lengths are the packing)");
  p->n_seqs = tq->shape[0] - 1;
  return 0;
}

int proto__check_variants(proto__check *c) {
  int rc, per_item = 0;
  if ((rc = per_head(c, PROTO__IN_SINKS, 0, &per_item)) ||
      (rc = per_head(c, PROTO__IN_ALIBI_SLOPES, 1, &per_item)))
    return rc;
  c->p->alibi_per_item = per_item;
  return packing(c);
}

int proto__check_cu_seqlens(proto__check *c) {
  const attn_problem *p = c->p;
  for (int i = 0; i < 2; i++) {
    const int32_t *cu = i ? p->cu_seqlens_k : p->cu_seqlens_q;
    const char *name = i ? "cu_seqlens_k" : "cu_seqlens_q";
    int len = i ? p->Lk : p->Lq;
    if (!cu)
      continue;
    if (cu[0] != 0)
      return ERR("%s[0]=%d: must be 0 (the first sequence starts at 0)",
                 name, (int)cu[0]);
    for (int n = 0; n < p->n_seqs; n++)
      if (cu[n + 1] < cu[n])
        return ERR("%s[%d]=%d is less than %s[%d]=%d (the offsets must not "
                   "decrease)", name, n + 1, (int)cu[n + 1], name, n,
                   (int)cu[n]);
    if (cu[p->n_seqs] != len)
      return ERR("%s[%d]=%d: the last offset must be the %s length %d",
                 name, p->n_seqs, (int)cu[p->n_seqs], i ? "key" : "query",
                 len);
  }
  return 0;
}

static int add_elems(size_t *total, size_t n) {
  return __builtin_add_overflow(*total, n, total) ? -1 : 0;
}

int proto__check_budget(proto__check *c) {
  const attn_problem *p = c->p;
  size_t total = 0, in = 0, rows, out, w = 0, diag = 0;
  int bad = 0;
  for (int i = 0; i < PROTO__IN_COUNT; i++) {
    size_t n = c->t[i].json && !(c->mapped >> i & 1u) ? c->t[i].n : 0;
    bad |= add_elems(&total, n);
    if (!(c->borrowed >> i & 1u))
      bad |= add_elems(&in, n);
  }
  bad |= __builtin_mul_overflow((size_t)p->B * (size_t)p->H, (size_t)p->Lq,
                                &rows);
  bad |= __builtin_mul_overflow(rows, (size_t)p->Dv, &out);
  /* diagnostics need the weights (returned or not) and 4 values a row */
  if (c->req->return_weights || c->req->diagnostics)
    bad |= __builtin_mul_overflow(rows, (size_t)p->Lk, &w);
  /* the four diagnostics, and the lse, are a value a row each */
  if (c->req->diagnostics)
    bad |= __builtin_mul_overflow(rows, (size_t)4, &diag);
  if (c->req->return_lse)
    bad |= add_elems(&diag, rows);
  bad |= add_elems(&total, out) | add_elems(&total, w) |
         add_elems(&total, diag);
  bad |= out > SIZE_MAX / 8 || w > SIZE_MAX / 8 || diag > SIZE_MAX / 8;
  if (bad || (c->max_elems && total > c->max_elems)) {
    char advice[160];
    proto_budget_advice(c->req, bad ? SIZE_MAX : total - w, c->max_elems,
                        advice, sizeof advice);
    if (bad)
      snprintf(c->err, PROTO_ERR_MAX, "request is too large: its tensor "
               "element count overflows%s", advice);
    else /* the limit: one float32 an element in the whole budget */
      snprintf(c->err, PROTO_ERR_MAX, "request needs %zu tensor elements "
               "(inputs and outputs), more than the server's limit of %zu "
               "(--max-inflight-mb, %zu MiB, at 4 bytes an element)%s",
               total, c->max_elems, (c->max_elems * sizeof(float)) >> 20,
               advice);
    return ATTND_ETOOBIG;
  }
  c->req->out_bytes = (out + w + diag) * sizeof(float);
  /* Held before they are allocated: the inputs (four bytes an element at
   * most) but those read where they lie in the body, held with it, or in
   * a region, the client's memory; and the outputs.  More than the whole
   * budget alone is left to the request's cost, which refuses it right
   * after the decode (413, with advice on the weights). */
  size_t need = in * sizeof(float) + c->req->out_bytes;
  int why = mem_hold(need);
  if (why == 0 || why == MEM_HOLD_OVER)
    return 0;
  return proto__hold_refused(why, need, "the request's tensors", c->err);
}

void proto_budget_advice(const proto_request *req, size_t without_weights,
                         size_t limit, char *s, size_t cap) {
  if (without_weights > limit || !(req->return_weights || req->diagnostics))
    snprintf(s, cap, "; send smaller tensors, or split the batch");
  else if (req->return_weights)
    snprintf(s, cap, "; most of it is the attention weights: for the "
             "output alone send \"return_weights\": false (v2: "
             "\"outputs\" without \"weights\")");
  else
    snprintf(s, cap, "; most of it is the attention weights, which the "
             "diagnostics need: send it without the diagnostics");
}

int proto__alloc_outputs(proto__check *c) {
  const attn_problem *p = c->p;
  proto_request *req = c->req;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  req->out_room = req->codec == PROTO_CODEC_V2 &&
                          req->binary[PROTO_OUT_OUTPUT]
                      ? PROTO__JSON_ROOM
                      : 0;
  req->out = proto__own_room(req, rows * p->Dv * sizeof(float),
                             req->out_room);
  if (!req->out)
    return ATTND_ENOMEM;
  if (req->return_weights || req->diagnostics) {
    req->weights = proto__own_filled(req, rows * p->Lk * sizeof(float));
    if (!req->weights)
      return ATTND_ENOMEM;
  }
  if (req->diagnostics) {
    /* one buffer, four (B, H, Lq) slices: int32 and float are 4 bytes */
    char *d = proto__own(req, rows * 4 * sizeof(float));
    if (!d)
      return ATTND_ENOMEM;
    req->allowed_keys = (int32_t *)(void *)d;
    req->entropy = (float *)(void *)(d + rows * sizeof(float));
    req->max_weight = (float *)(void *)(d + 2 * rows * sizeof(float));
    req->jacobian_norm = (float *)(void *)(d + 3 * rows * sizeof(float));
  }
  if (req->return_lse) {
    /* a block of its own, so that a binary answer can send it as is */
    req->lse = proto__own(req, rows * sizeof(float));
    if (!req->lse)
      return ATTND_ENOMEM;
  }
  return 0;
}
