/* v2_fill.c - phase 5 of the v2 decoder (v2_decode.c): each input's
 * elements, converted once into the buffer the core reads, straight from
 * the body's binary part, from a shared memory region or from the cJSON
 * tree; or, for an FP32 binary input of a body received as a proto_body,
 * its words where they lie, checked on arrival (body.c); for an FP32
 * float input in a region, when the answer prints no number, its words
 * where they lie in the region's mapping, checked there (proto.h); in
 * BF16 mode query, key and value sent as BF16 stay BF16 (fill_qkv_bf16).
 * A refused element gets a message naming the input and its multi-index.
 * The decoder's state: v2_decode_impl.h. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "v2_decode_impl.h"

/* "[1][0][2]", the multi-index of flat element i of t. */
static void index_of(const proto__tensor *t, size_t i, char *s, size_t cap) {
  int idx[PROTO__MAX_RANK];
  size_t o = 0;
  for (int d = t->rank - 1; d >= 0; d--) {
    idx[d] = (int)(i % (size_t)t->shape[d]);
    i /= (size_t)t->shape[d];
  }
  s[0] = '\0';
  for (int d = 0; d < t->rank && o < cap; d++)
    o += (size_t)snprintf(s + o, cap - o, "[%d]", idx[d]);
}

/* The message for element i of input in, refused by a binary conversion
 * into dst (bad: the refused length of valid_lens). */
static int bad_element(v2_ctx *c, int in, size_t i, long long bad,
                       const void *dst) {
  const proto__tensor *t = &c->ck.t[in];
  const v2_in *v = &c->in[in];
  char at[64];
  index_of(t, i, at, sizeof at);
  if (proto__input_kind(in) == PROTO__KIND_LEN) {
    const char *what;
    long long hi = proto__input_hi(c->p, in, &what);
    if (bad < 0)
      return ERR("%s%s=%lld is negative", t->name, at, bad);
    return ERR("%s%s=%lld exceeds %s %lld", t->name, at, bad, what, hi);
  }
  if (in == PROTO__IN_MASK)
    return ERR("%s%s: BOOL byte %u is neither 0 nor 1", t->name, at,
               ((const unsigned char *)dst)[i]);
  return ERR("%s%s: %s value is %s", t->name, at,
             proto__dtype_name(v->dtype),
             v->dtype == PROTO__DT_FP64 ? "not finite or out of float32 "
             "range" : "not finite (infinity or NaN)");
}

static int fill_binary(v2_ctx *c, int in, void *dst) {
  const proto__tensor *t = &c->ck.t[in];
  const v2_in *v = &c->in[in];
  const char *src = c->body + v->bin_off;
  long long bad = 0;
  size_t i;
  const char *what;
  if (proto__input_kind(in) == PROTO__KIND_LEN)
    i = proto__bin_to_len(v->dtype, src, t->n,
                          proto__input_hi(c->p, in, &what), dst, &bad);
  else if (in == PROTO__IN_MASK)
    i = proto__bin_to_bool(src, t->n, dst);
  else
    i = proto__bin_to_f32(v->dtype, src, t->n, dst);
  return i == t->n ? 0 : bad_element(c, in, i, bad, dst);
}

/* An input in a shared memory region: copied out once, into dst, and
 * checked there (v2_shm.c), with the messages of a binary input. */
static int fill_shm(v2_ctx *c, int in, void *dst) {
  const proto__tensor *t = &c->ck.t[in];
  const v2_in *v = &c->in[in];
  int kind = proto__input_kind(in);
  const char *what;
  long long bad = 0;
  size_t i;
  int rc = proto__v2_shm_fill(c->shm, &v->shm, kind, v->dtype, t->n,
                              proto__input_hi(c->p, in, &what), dst, &i,
                              &bad, c->err);
  if (rc)
    return rc;
  return i == t->n ? 0 : bad_element(c, in, i, bad, dst);
}

static int fill_json(v2_ctx *c, int in, void *dst) {
  const proto__tensor *t = &c->ck.t[in];
  int dt = c->in[in].dtype;
  int kind = proto__input_kind(in);
  const char *what;
  long long hi = proto__input_hi(c->p, in, &what);
  if (kind == PROTO__KIND_F32)
    kind = dt == PROTO__DT_FP16   ? PROTO__KIND_F16
           : dt == PROTO__DT_BF16 ? PROTO__KIND_BF16
                                  : PROTO__KIND_F32;
  return proto__tensor_fill(t, kind, hi, what, dst, c->err);
}

/* Where a binary FP32 input can be read as it lies: every one of its
 * words was checked finite on arrival (proto_body) and it is aligned for
 * float.  NULL: copy it. */
static const void *in_place(const v2_ctx *c, int in) {
  const proto_body *b = c->src;
  const v2_in *v = &c->in[in];
  const char *at = c->body + v->bin_off;
  if (!b || !v->binary || v->dtype != PROTO__DT_FP32 ||
      proto__input_kind(in) != PROTO__KIND_F32 ||
      b->scan_from == SIZE_MAX || v->bin_off < b->scan_from ||
      (v->bin_off - b->scan_from) % 4 || v->bin_off > b->clean_end ||
      v->bin_size > b->clean_end - v->bin_off ||
      (uintptr_t)at % _Alignof(float))
    return NULL;
  return at;
}

/* Query, key and value as BF16 bits where they lie in the body: kept
 * (a proto_body) and 2-byte aligned.  Their finiteness is checked in
 * fill_bf16. */
static int bf16_in_body(const v2_ctx *c, int in) {
  const v2_in *v = &c->in[in];
  return v->binary && !v->shm.name && c->src &&
         (uintptr_t)(c->body + v->bin_off) % _Alignof(uint16_t) == 0;
}

/* 1 when no output of the request prints numbers: each is binary or
 * goes into a region, and there are no diagnostics (computed from the
 * inputs after the core, outside its guard). */
static int answer_prints_no_number(const proto_request *req) {
  if (req->diagnostics)
    return 0;
  for (int m = 0; m < req->n_outputs; m++) {
    int k = req->outputs[m];
    if (!req->binary[k] && !req->shm_out[k].region)
      return 0;
  }
  return 1;
}

/* The FP32 float inputs in shared memory regions that can be read where
 * they lie (proto__v2_shm_viewable), up to PROTO_SHARED_MAX, when the
 * answer prints no number: those read in place (proto.h, "Triton's
 * system shared memory extension").  The budget leaves exactly these
 * out, so every other input is a copy it holds. */
unsigned proto__v2_mapped(const v2_ctx *c) {
  unsigned bits = 0;
  int n = 0;
  if (!answer_prints_no_number(c->req))
    return 0;
  for (int in = 0; in < PROTO__IN_COUNT && n < PROTO_SHARED_MAX; in++) {
    const v2_in *v = &c->in[in];
    if (c->ck.t[in].json && v->shm.name && v->dtype == PROTO__DT_FP32 &&
        proto__input_kind(in) == PROTO__KIND_F32 &&
        proto__v2_shm_viewable(c->shm, &v->shm)) {
      bits |= 1u << in;
      n++;
    }
  }
  return bits;
}

/* An input c->ck.mapped marks, read where it lies in its region, its
 * words checked there: 0 when taken (or refused, with a message), 1 when
 * it is to be copied.  Its bytes are the client's: in_bytes leaves them
 * out, as the budget did. */
static int shm_in_place(v2_ctx *c, int in, const void **slot) {
  const proto__tensor *t = &c->ck.t[in];
  proto_request *req = c->req;
  const float *at;
  size_t bad;
  int rc;
  if (!(c->ck.mapped >> in & 1u))
    return 1;
  assert(req->n_shared < PROTO_SHARED_MAX);
  rc = proto__v2_shm_view(c->shm, &c->in[in].shm, t->n, &at, &bad, c->err);
  if (rc)
    return rc; /* negative: the view's refusal */
  if (bad != t->n)
    return bad_element(c, in, bad, 0, at);
  req->shared[req->n_shared++] = (proto_range){at, t->n * sizeof(float)};
  *slot = at;
  return 0;
}

static int fill_one(v2_ctx *c, int in, const void **slot) {
  const proto__tensor *t = &c->ck.t[in];
  size_t es = proto__input_kind(in) == PROTO__KIND_BOOL ? 1 : 4;
  const void *at;
  if (!t->json)
    return 0;
  if ((at = in_place(c, in))) { /* counted with the body (v2_decode.c) */
    *slot = at;
    c->in_place = 1;
    return 0;
  }
  int rc = shm_in_place(c, in, slot);
  if (rc <= 0)
    return rc;
  void *buf = proto__own_filled(c->req, t->n * es);
  if (!buf)
    return ATTND_ENOMEM;
  c->req->in_bytes += t->n * es;
  *slot = buf;
  if (c->in[in].shm.name)
    return fill_shm(c, in, buf);
  return c->in[in].binary ? fill_binary(c, in, buf) : fill_json(c, in, buf);
}

/* BF16 mode with query, key and value all sent as BF16: the core reads
 * their BF16 bits as sent (attn_problem.dtype), with no float32 copy. */
static int bf16_as_sent(const v2_ctx *c) {
  if (c->p->precision != ATTN_PRECISION_BF16)
    return 0;
  for (int in = PROTO__IN_QUERY; in <= PROTO__IN_VALUE; in++)
    if (c->in[in].dtype != PROTO__DT_BF16)
      return 0;
  return 1;
}

/* The index of the first BF16 word at src that is not finite, or n. */
static size_t bf16_bad(const char *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    if ((h & 0x7f80u) == 0x7f80u)
      return i;
  }
  return n;
}

/* One of query, key and value as BF16 bits.  A binary one is read where
 * it lies when the body is kept (a proto_body) and it is 2-byte aligned,
 * else copied; one from JSON or shared memory is converted as ever (onto
 * the BF16 grid) and narrowed in its own buffer. */
static int fill_bf16(v2_ctx *c, int in, const uint16_t **slot) {
  const proto__tensor *t = &c->ck.t[in];
  const v2_in *v = &c->in[in];
  int rc;
  if (v->binary && !v->shm.name) {
    const char *at = c->body + v->bin_off;
    size_t i = bf16_bad(at, t->n);
    if (i != t->n) {
      float f;
      (void)proto__bin_to_f32(PROTO__DT_BF16, at + 2 * i, 1, &f);
      return bad_element(c, in, i, 0, &f);
    }
    if (bf16_in_body(c, in)) {
      *slot = (const uint16_t *)(const void *)at;
      c->in_place = 1;
      return 0;
    }
    uint16_t *h = proto__own_filled(c->req, t->n * 2);
    if (!h)
      return ATTND_ENOMEM;
    c->req->in_bytes += t->n * 2;
    memcpy(h, at, t->n * 2);
    *slot = h;
    return 0;
  }
  float *f = proto__own_filled(c->req, t->n * 4);
  if (!f)
    return ATTND_ENOMEM;
  c->req->in_bytes += t->n * 4;
  rc = v->shm.name ? fill_shm(c, in, f) : fill_json(c, in, f);
  if (rc)
    return rc;
  uint16_t *h = (uint16_t *)(void *)f; /* h[i] lies below f[i]: in place */
  for (size_t i = 0; i < t->n; i++) {
    uint32_t bits;
    memcpy(&bits, &f[i], 4);
    h[i] = (uint16_t)(bits >> 16); /* exact: f[i] is on the BF16 grid */
  }
  *slot = h;
  return 0;
}

static int fill_qkv_bf16(v2_ctx *c) {
  attn_problem *p = c->p;
  const uint16_t **slots[3] = {&p->q16, &p->k16, &p->v16};
  int rc;
  p->dtype = ATTN_DTYPE_BF16;
  for (int in = PROTO__IN_QUERY; in <= PROTO__IN_VALUE; in++)
    if ((rc = fill_bf16(c, in, slots[in - PROTO__IN_QUERY])))
      return rc;
  return 0;
}

unsigned proto__v2_borrowed(const v2_ctx *c) {
  unsigned bits = 0;
  int bf16 = bf16_as_sent(c);
  for (int in = 0; in < PROTO__IN_COUNT; in++) {
    int qkv = in <= PROTO__IN_VALUE;
    if (c->ck.t[in].json &&
        (bf16 && qkv ? bf16_in_body(c, in) : in_place(c, in) != NULL))
      bits |= 1u << in;
  }
  return bits;
}

int proto__v2_fill_all(v2_ctx *c) {
  attn_problem *p = c->p;
  const void **slots[PROTO__IN_COUNT] = {
    (const void **)&p->q, (const void **)&p->k, (const void **)&p->v,
    (const void **)&p->valid_lens, (const void **)&p->mask,
    (const void **)&p->bias, (const void **)&p->sinks,
    (const void **)&p->alibi_slopes, (const void **)&p->cu_seqlens_q,
    (const void **)&p->cu_seqlens_k, (const void **)&p->w_q,
    (const void **)&p->w_k, (const void **)&p->w_v};
  int rc, bf16 = bf16_as_sent(c);
  if (bf16 && (rc = fill_qkv_bf16(c)))
    return rc;
  for (int in = bf16 ? PROTO__IN_VALUE + 1 : 0; in < PROTO__IN_COUNT; in++)
    if ((rc = fill_one(c, in, slots[in])))
      return rc;
  if ((rc = proto__check_cu_seqlens(&c->ck)))
    return rc;
  return proto__alloc_outputs(&c->ck);
}
