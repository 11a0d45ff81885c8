/* encode.c - computed request -> {"id": .., "output": .., "weights": ..}.
 *
 * The response mirrors the query's form: nested arrays of the query's rank
 * when the query came nested, {"shape": [..], "data": [..]} when it came
 * flat.  A rank-3 query (B, Lq, D) has H = 1, so its output is printed as
 * (B, Lq, Dv) and its weights as (B, Lq, Lk). */
#include <stdlib.h>
#include <string.h>

#include "proto_impl.h"

/* Bytes a float takes on average in the output, for the first reserve. */
#define BYTES_PER_FLOAT 12

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

static void put_row(proto__buf *b, const float *x, int n) {
  if (proto__buf_reserve(b, (size_t)n * (PROTO__F32_MAX + 1) + 2))
    return;
  char *s = b->p + b->len;
  *s++ = '[';
  for (int i = 0; i < n; i++) {
    if (i)
      *s++ = ',';
    s += proto__fmt_f32(s, x[i]);
  }
  *s++ = ']';
  *s = '\0';
  b->len = (size_t)(s - b->p);
}

/* Nested arrays: brackets open and close as the multi-index rolls over. */
static void put_nested(proto__buf *b, const float *x, const int *dims,
                       int r) {
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
    put_row(b, x + row * (size_t)w, w);
    /* close the brackets of the axes whose index is at its end */
    rest = row + 1;
    for (int d = r - 2; d >= 0 && rest % (size_t)dims[d] == 0; d--) {
      proto__buf_putc(b, ']');
      rest /= (size_t)dims[d];
    }
  }
}

static void put_flat(proto__buf *b, const float *x, const int *dims, int r) {
  size_t n = 1;
  proto__buf_puts(b, "{\"shape\":[");
  for (int d = 0; d < r; d++) {
    if (d)
      proto__buf_putc(b, ',');
    proto__buf_put_i64(b, dims[d]);
    n *= (size_t)dims[d];
  }
  proto__buf_puts(b, "],\"data\":");
  /* one long row, written in chunks so a reserve never spans the tensor */
  if (proto__buf_reserve(b, n * BYTES_PER_FLOAT))
    return;
  proto__buf_putc(b, '[');
  for (size_t i = 0; i < n && !b->oom; i++) {
    if (i)
      proto__buf_putc(b, ',');
    proto__buf_put_f32(b, x[i]);
  }
  proto__buf_puts(b, "]}");
}

static void put_tensor(proto__buf *b, const proto_request *req,
                       const float *x, int w) {
  int dims[4], r = out_shape(req, w, dims);
  if (req->flat)
    put_flat(b, x, dims, r);
  else
    put_nested(b, x, dims, r);
}

int proto_v1_encode(const proto_request *req, char **body, size_t *len) {
  const attn_problem *p = &req->prob;
  proto__buf b = {0};
  size_t n = (size_t)p->B * p->H * p->Lq * (size_t)p->Dv;
  if (req->weights)
    n += (size_t)p->B * p->H * p->Lq * (size_t)p->Lk;
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
