/* encode.c - computed request -> {"id": .., "output": .., "weights": ..,
 * "lse": .., "diagnostics": {..}}.
 *
 * The response mirrors the query's form: nested arrays of the query's rank
 * when the query came nested, {"shape": [..], "data": [..]} when it came
 * flat.  A rank-3 query (B, Lq, D) has H = 1, so its output is printed as
 * (B, Lq, Dv) and its weights as (B, Lq, Lk); each diagnostic is shaped
 * like the output without its last axis, (B, [H,] Lq), and so is the lse,
 * whose -inf (a row with nothing allowed and no sink) prints as null. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/tensor/tensor.h"

/* Bytes a float takes on average in the output, for the first reserve. */
#define BYTES_PER_FLOAT 12

/* Numbers of a flat "data" array printed per reserve. */
#define FLAT_CHUNK 4096

/* The printed shape of a (B, H, Lq, W) buffer for the query's rank. */
static int out_shape(const proto_request *req, int w, int *dims) {
  const attn_problem *p = &req->prob;
  int r = 0;
  dims[r++] = p->B;
  if (req->qrank == 4)
    dims[r++] = p->H;
  dims[r++] = p->Lq;
  dims[r++] = w;
  return r;
}

/* A tensor to print: float32 values, or int32 ones (allowed_keys) when
 * ix is set.  inf_null: a non-finite float prints as null (the lse's
 * -inf: JSON has no infinity). */
typedef struct vals {
  const float *x;
  const int32_t *ix;
  int inf_null;
} vals;

/* Writes element i of v at s; returns the length written (at most
 * PROTO__F32_MAX - 1, an int32 included). */
static int fmt_val(char *s, vals v, size_t i) {
  if (v.ix)
    return snprintf(s, PROTO__F32_MAX, "%d", (int)v.ix[i]);
  if (v.inf_null && !isfinite(v.x[i]))
    return (int)(memcpy(s, "null", 5), 4);
  return proto__fmt_f32(s, v.x[i]);
}

/* v[0, n) comma-separated at s, which holds n * (PROTO__F32_MAX + 1) + 1
 * bytes, then a NUL; returns the length. */
static size_t put_vals(char *s, vals v, size_t n) {
  if (!v.ix && !v.inf_null)
    return proto__num_fmt_f32_list(s, v.x, n);
  char *o = s;
  for (size_t i = 0; i < n; i++) {
    if (i)
      *o++ = ',';
    o += fmt_val(o, v, i);
  }
  *o = '\0';
  return (size_t)(o - s);
}

static vals offset(vals v, size_t i) {
  if (v.ix)
    v.ix += i;
  else
    v.x += i;
  return v;
}

static void put_row(proto__buf *b, vals x, int n) {
  if (proto__buf_reserve(b, (size_t)n * (PROTO__F32_MAX + 1) + 2))
    return;
  char *s = b->p + b->len;
  *s++ = '[';
  s += put_vals(s, x, (size_t)n);
  *s++ = ']';
  *s = '\0';
  b->len = (size_t)(s - b->p);
}

/* Nested arrays: brackets open and close as the multi-index rolls over. */
static void put_nested(proto__buf *b, vals x, const int *dims, int r) {
  size_t rows = 1;
  for (int d = 0; d < r - 1; d++)
    rows *= (size_t)dims[d];
  int w = dims[r - 1];
  for (size_t row = 0; row < rows && !b->oom; row++) {
    /* open one bracket for every outer axis whose index just became 0 */
    size_t rest = row;
    int opens = 0;
    for (int d = r - 2; d >= 0 && rest % (size_t)dims[d] == 0; d--) {
      opens++;
      rest /= (size_t)dims[d];
    }
    if (row)
      proto__buf_putc(b, ',');
    for (int i = 0; i < opens; i++)
      proto__buf_putc(b, '[');
    put_row(b, offset(x, row * (size_t)w), w);
    /* close the brackets of the axes whose index is at its end */
    rest = row + 1;
    for (int d = r - 2; d >= 0 && rest % (size_t)dims[d] == 0; d--) {
      proto__buf_putc(b, ']');
      rest /= (size_t)dims[d];
    }
  }
}

static void put_flat(proto__buf *b, vals x, const int *dims, int r) {
  size_t n = 1;
  proto__buf_puts(b, "{\"shape\":[");
  for (int d = 0; d < r; d++) {
    if (d)
      proto__buf_putc(b, ',');
    proto__buf_put_i64(b, dims[d]);
    n *= (size_t)dims[d];
  }
  proto__buf_puts(b, "],\"data\":");
  /* one long row, printed straight into the buffer in chunks, so that a
   * reserve never spans the tensor */
  if (proto__buf_reserve(b, n * BYTES_PER_FLOAT))
    return;
  proto__buf_putc(b, '[');
  for (size_t i = 0; i < n && !b->oom; i += FLAT_CHUNK) {
    size_t m = n - i < FLAT_CHUNK ? n - i : FLAT_CHUNK;
    if (proto__buf_reserve(b, m * (PROTO__F32_MAX + 1) + 1))
      return;
    char *s = b->p + b->len;
    if (i)
      *s++ = ',';
    s += put_vals(s, offset(x, i), m);
    b->len = (size_t)(s - b->p);
  }
  proto__buf_puts(b, "]}");
}

static void put_tensor(proto__buf *b, const proto_request *req,
                       const float *x, int w) {
  int dims[4], r = out_shape(req, w, dims);
  vals v = {x, NULL, 0};
  if (req->flat)
    put_flat(b, v, dims, r);
  else
    put_nested(b, v, dims, r);
}

/* A (B, H, Lq) diagnostic at the output's rank without its last axis. */
static void put_diag(proto__buf *b, const proto_request *req, const char *name,
                     vals v) {
  int dims[4], r = out_shape(req, 1, dims) - 1;
  proto__buf_putc(b, '"');
  proto__buf_puts(b, name);
  proto__buf_puts(b, "\":");
  if (req->flat)
    put_flat(b, v, dims, r);
  else
    put_nested(b, v, dims, r);
}

static void put_diagnostics(proto__buf *b, const proto_request *req) {
  proto__buf_puts(b, ",\"diagnostics\":{");
  put_diag(b, req, "allowed_keys", (vals){NULL, req->allowed_keys, 0});
  proto__buf_putc(b, ',');
  put_diag(b, req, "entropy", (vals){req->entropy, NULL, 0});
  proto__buf_putc(b, ',');
  put_diag(b, req, "max_weight", (vals){req->max_weight, NULL, 0});
  proto__buf_putc(b, ',');
  put_diag(b, req, "jacobian_norm", (vals){req->jacobian_norm, NULL, 0});
  proto__buf_putc(b, '}');
}

int proto_v1_encode(const proto_request *req, char **body, size_t *len) {
  const attn_problem *p = &req->prob;
  proto__buf b = {0};
  size_t n = (size_t)p->B * p->H * p->Lq * (size_t)p->Dv;
  if (req->return_weights && req->weights)
    n += (size_t)p->B * p->H * p->Lq * (size_t)p->Lk;
  if (req->diagnostics)
    n += (size_t)p->B * p->H * p->Lq * 4;
  if (req->return_lse)
    n += (size_t)p->B * p->H * p->Lq;
  proto__buf_reserve(&b, n * BYTES_PER_FLOAT + 64);
  proto__buf_putc(&b, '{');
  if (req->id_json) {
    proto__buf_puts(&b, "\"id\":");
    proto__buf_puts(&b, req->id_json);
    proto__buf_putc(&b, ',');
  }
  proto__buf_puts(&b, "\"output\":");
  put_tensor(&b, req, req->out, p->Dv);
  if (req->return_weights && req->weights) {
    proto__buf_puts(&b, ",\"weights\":");
    put_tensor(&b, req, req->weights, p->Lk);
  }
  if (req->return_lse && req->lse) {
    proto__buf_putc(&b, ',');
    put_diag(&b, req, "lse", (vals){req->lse, NULL, 1});
  }
  if (req->diagnostics && req->allowed_keys)
    put_diagnostics(&b, req);
  proto__buf_putc(&b, '}');
  if (b.oom) {
    proto__buf_free(&b);
    return ATTND_ENOMEM;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}

int proto_error_body(const char *msg, char **body, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"error\":");
  proto__buf_put_json_string(&b, msg ? msg : "");
  proto__buf_putc(&b, '}');
  if (b.oom) {
    proto__buf_free(&b);
    return ATTND_ENOMEM;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}
