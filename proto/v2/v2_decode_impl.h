/* v2_decode_impl.h - the v2 decoder's state, shared by v2_decode.c
 * (phases 1-4: the JSON part, parameters, outputs, inputs, shapes, the
 * binary layout and the counts) and v2_fill.c (phase 5: every input's
 * elements into the buffers the core reads).  Not a public API, and
 * included by those two files only: the names keep the decoder's short
 * forms (v2_ctx, v2_in, ERR), which nothing else sees.
 *
 * Reentrant: a v2_ctx lives on the decoding thread's stack for one
 * decode (v2_decode.c's decode()).
 */
#ifndef PROTO_V2_DECODE_IMPL_H
#define PROTO_V2_DECODE_IMPL_H

#include <stddef.h>
#include <stdio.h>

#include "proto/v2/v2.h"

/* Writes the message into c->err and is ATTND_EINVAL, for a return. */
#define ERR(...) (snprintf(c->err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

typedef struct v2_in {
  int dtype;                /* enum proto__dtype */
  int binary;               /* 1: bytes after the JSON part */
  size_t bin_size;          /* parameters.binary_data_size */
  size_t bin_off;           /* offset of those bytes in the body */
  int pos;                  /* index in "inputs", for messages */
  proto__shm_use shm;       /* shm.name: read from a shared memory region */
} v2_in;

typedef struct v2_ctx {
  proto__check ck;          /* tensors by enum proto__input */
  v2_in in[PROTO__IN_COUNT];
  const char *body;
  size_t len, hlen;         /* body length, JSON part length */
  const proto_body *src;    /* the body as received, or NULL: copy all */
  const proto_shm *shm;     /* the registered regions, or NULL: none */
  int in_place;             /* some input points into src */
  int has_header;           /* Inference-Header-Content-Length was sent */
  int shapes_only;          /* stop once the shapes and options are known
                               (proto_v2_decode_shapes) */
  int model;
  const cJSON *id, *params, *inputs, *outputs;
  const cJSON *window[2];   /* parameters window_left, window_right */
  proto_request *req;
  attn_problem *p;
  proto__json_stats *st;    /* the JSON part's syntax, once checked */
  char *err;
} v2_ctx;

/* Phase 5, once phases 1-4 have passed: every input the request has into
 * memory the request owns (proto__own_filled), converted from the binary
 * part, a shared memory region or the JSON tree; or, for an FP32 binary
 * input of a body received as a proto_body, read where it lies (then
 * c->in_place is set); or, for one c->ck.mapped marks, read where it
 * lies in its region.  Points c->p's tensors at them, adds the sizes of
 * those it allocates to c->req->in_bytes, then allocates the outputs
 * (proto__alloc_outputs).
 * 0, or an ATTND_E* code with the message in c->err (a refused element:
 * the input, its index and why). */
int proto__v2_fill_all(v2_ctx *c);

/* Before the budget (phases 1-4 passed): the inputs phase 5 will read
 * where they lie in the body, a bit each by enum proto__input, for
 * c->ck.borrowed: the request holds their bytes with the body already. */
unsigned proto__v2_borrowed(const v2_ctx *c);
/* Likewise the inputs phase 5 will read where they lie in a shared
 * memory region, for c->ck.mapped: the client's memory, which the
 * budget leaves out (--shm-max-mb bounds the mappings). */
unsigned proto__v2_mapped(const v2_ctx *c);

#endif /* PROTO_V2_DECODE_IMPL_H */
