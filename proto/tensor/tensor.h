/* tensor.h - the tensor room of proto/: JSON tensors to typed buffers,
 * the KServe datatypes, the shape checks both codecs share and the
 * request's memory; not a public API.  Builds on the text room (text.h);
 * the codecs above use it.  Reentrant, as text.h says.
 */
#ifndef PROTO_TENSOR_H
#define PROTO_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"
#include "proto/text/text.h"

/* Largest tensor rank any field of the v1 API accepts. */
#define PROTO__MAX_RANK 4

/* ---- messages (tensor.c) ------------------------------------------------ */

/* Writes a short description of a JSON value for an error message:
 * true, false, null, a string, an array, an object, or the number. */
void proto__describe(const cJSON *v, char *s, size_t cap);

/* ---- tensors (tensor.c) -------------------------------------------------
 *
 * A tensor field is decoded in two steps so that the caller can check
 * ranks, dimensions and the memory budget before anything is allocated:
 *   proto__tensor_shape  reads the shape (nested arrays: along the first
 *                        elements; flat form: the "shape" array) and checks
 *                        that no axis is empty and that "data" has as many
 *                        elements as the shape needs;
 *   proto__tensor_fill   walks every element, checks its type and value,
 *                        reports ragged nested arrays, and converts.
 */
enum proto__kind {
  PROTO__KIND_F32 = 0,  /* finite numbers within float32 range -> float */
  PROTO__KIND_LEN = 1,  /* integers in [0, hi] -> int32_t (valid_lens) */
  PROTO__KIND_BOOL = 2, /* true/false or 0/1 -> uint8_t */
  PROTO__KIND_F16 = 3,  /* numbers rounded (to nearest, ties to even) onto
                           the FP16 grid, then widened exactly -> float */
  PROTO__KIND_BF16 = 4  /* the same on the BF16 grid */
};

/* How a tensor's "data" holds its elements. */
enum proto__form {
  PROTO__FORM_NESTED = 0, /* nested arrays whose lengths are the shape */
  PROTO__FORM_FLAT = 1,   /* one flat array, shape given beside it */
  PROTO__FORM_ANY = 2     /* v2: arrays nested any way, read depth first
                             in row-major order; only the count must match */
};

typedef struct proto__tensor {
  const char *name;             /* field name for messages */
  const cJSON *json;            /* the field's value (v2: the input object);
                                   NULL means the tensor is absent */
  const cJSON *data;            /* the array holding the elements; NULL
                                   for a v2 binary tensor */
  int flat;                     /* enum proto__form */
  int rank;                     /* may exceed PROTO__MAX_RANK: the caller
                                   rejects it before using shape or n */
  int shape[PROTO__MAX_RANK];
  size_t n;                     /* number of elements */
} proto__tensor;

/* Fills t from the JSON value j of field name.  Returns 0, or
 * ATTND_EINVAL with a message in err. */
int proto__tensor_shape(const cJSON *j, const char *name, proto__tensor *t,
                        char err[PROTO_ERR_MAX]);

/* Reads a "shape" array (positive integers, as in the flat form) into
 * t->rank, t->shape and t->n; t->name names it in messages.  A rank above
 * PROTO__MAX_RANK is recorded, not refused, and leaves n at 0: the caller
 * names the rank it wanted.  Returns 0 or ATTND_EINVAL with a message. */
int proto__tensor_dims(const cJSON *shape, proto__tensor *t,
                       char err[PROTO_ERR_MAX]);

/* Converts every element of t into dst (t->n elements of the kind's C
 * type).  hi bounds PROTO__KIND_LEN values; what names the bound in its
 * message ("key length").  Returns 0 or ATTND_EINVAL with a message. */
int proto__tensor_fill(const proto__tensor *t, int kind, long long hi,
                       const char *what, void *dst, char err[PROTO_ERR_MAX]);

/* Commas outside JSON strings in s[0..n): every tensor element but the
 * first of its tensor follows one, so a body with more commas than the
 * element budget allows cannot be a valid request (checked before cJSON
 * builds a tree for it). */
size_t proto__count_commas(const char *s, size_t n);

/* ATTND_ETOOBIG, with the message naming --max-inflight-mb, when s[0..n)
 * has more commas than max_elems elements and the envelope's few can
 * account for (0 = no budget), else 0: the decoders' check before any
 * parsing. */
int proto__over_element_budget(const char *s, size_t n, size_t max_elems,
                                char err[PROTO_ERR_MAX]);

/* Formats a shape as "[2,3,7]" into s. */
void proto__shape_str(const int *shape, int rank, char *s, size_t cap);

/* Counts the leaves of a PROTO__FORM_ANY "data" array into *n.  Returns 0,
 * or ATTND_EINVAL when an element is an empty array, an object, or the
 * nesting is deeper than 32. */
int proto__count_any(const cJSON *data, const char *name, size_t *n,
                     char err[PROTO_ERR_MAX]);

/* ---- shape checks shared by the codecs (check.c) ---------------------------
 *
 * Both codecs first read every tensor's shape into a proto__check, then run
 * the same checks in this order: proto__check_qkv, proto__check_valid_lens,
 * proto__check_mask_bias, (additive) proto__check_additive,
 * proto__check_budget; then allocate with proto__alloc_outputs.  Each
 * returns 0 or an ATTND_E* code with a message in err naming the input. */
enum proto__input {
  PROTO__IN_QUERY, PROTO__IN_KEY, PROTO__IN_VALUE, PROTO__IN_VALID_LENS,
  PROTO__IN_MASK, PROTO__IN_BIAS, PROTO__IN_SINKS, PROTO__IN_ALIBI_SLOPES,
  PROTO__IN_CU_SEQLENS_Q, PROTO__IN_CU_SEQLENS_K,
  /* the additive model's alone, last */
  PROTO__IN_W_Q, PROTO__IN_W_K, PROTO__IN_W_V, PROTO__IN_COUNT
};
_Static_assert(PROTO__IN_COUNT == PROTO_IN_COUNT,
               "proto.h counts every input");

/* How an input's elements are read (enum proto__kind: PROTO__KIND_LEN
 * for valid_lens and cu_seqlens_q/_k, PROTO__KIND_BOOL for the mask,
 * PROTO__KIND_F32 for the rest), and for the integer ones the largest
 * value allowed with the words naming it ("key length"). */
int proto__input_kind(int in);
long long proto__input_hi(const attn_problem *p, int in, const char **what);

/* "query", "key", ... in enum order. */
extern const char *const proto__input_names[PROTO__IN_COUNT];

typedef struct proto__check {
  proto__tensor t[PROTO__IN_COUNT]; /* t[i].json == NULL: input absent */
  proto_request *req;
  attn_problem *p;                  /* &req->prob; scoring set already */
  size_t max_elems;                 /* 0 = no bound */
  unsigned borrowed;                /* bit i: input i will be read where it
                                       lies in the body, whose bytes the
                                       request holds already (v2) */
  unsigned mapped;                  /* bit i: input i will be read where it
                                       lies in a shared memory region,
                                       which --shm-max-mb bounds, not the
                                       budget (v2) */
  char *err;
} proto__check;

/* Query rank 3 or 4, key and value of the same rank, and how B, H, Hkv,
 * Lq, Lk, D, Dk, Dv relate; fills those fields of the problem. */
int proto__check_qkv(proto__check *c);
/* valid_lens (B,) or (B, Lq), when present. */
int proto__check_valid_lens(proto__check *c);
/* mask and bias broadcast to (B, [H,] Lq, Lk), when present; fills the
 * problem's strides. */
int proto__check_mask_bias(proto__check *c);
/* w_q (Hd, D), w_k (Hd, Dk), w_v (Hd), all present; fills Hd. */
int proto__check_additive(proto__check *c);
/* sinks (H,), alibi_slopes (H,) or (B, H), cu_seqlens_q and _k both
 * (N + 1,) with N >= 1, B == 1 and no valid_lens, when present; sets
 * the problem's n_seqs and alibi_per_item.  Before the budget. */
int proto__check_variants(proto__check *c);
/* Once the elements are read: each cu_seqlens starts at 0, does not
 * decrease and ends at its length (each value already lies in [0, L]). */
int proto__check_cu_seqlens(proto__check *c);
/* A window side for the problem: negative (unbounded) stays -1; a side
 * wider than max(Lq, Lk), which is unbounded under either alignment,
 * is clamped to it so that the core's sums cannot overflow. */
int proto__window_side(const attn_problem *p, double x);
/* Inputs plus outputs (weights when req->return_weights or
 * req->diagnostics, and the four diagnostics when requested) within
 * max_elems, the inputs c->mapped marks left out; ATTND_ETOOBIG
 * otherwise.  Sets req->out_bytes, then holds (mem_hold) four bytes an
 * input element, but for the inputs c->borrowed or c->mapped marks, and
 * out_bytes: ATTND_EBUSY or ATTND_ETOOBIG when refused. */
int proto__check_budget(proto__check *c);
/* Allocates req->out, req->weights (when return_weights or diagnostics)
 * and the diagnostics (when requested). */
int proto__alloc_outputs(proto__check *c);

/* ---- datatypes (dtype.c) -------------------------------------------------
 *
 * The KServe v2 datatype strings.  Binary tensors are little-endian,
 * row-major, without padding. */
enum proto__dtype {
  PROTO__DT_BOOL, PROTO__DT_UINT8, PROTO__DT_UINT16, PROTO__DT_UINT32,
  PROTO__DT_UINT64, PROTO__DT_INT8, PROTO__DT_INT16, PROTO__DT_INT32,
  PROTO__DT_INT64, PROTO__DT_FP16, PROTO__DT_BF16, PROTO__DT_FP32,
  PROTO__DT_FP64, PROTO__DT_BYTES, PROTO__DT_COUNT
};

/* The enum value of a datatype string, or -1 when it is not one. */
int proto__dtype_parse(const char *s);
/* "FP32" etc.; "?" for a value out of range. */
const char *proto__dtype_name(int dt);
/* Bytes per element; 0 for BYTES (variable) and out-of-range values. */
size_t proto__dtype_size(int dt);
/* Converts n little-endian elements of float datatype dt (FP32, FP64,
 * FP16, BF16) at src (any alignment) into dst.  Returns n, or the index of
 * the first non-finite element (dst is then partly written). */
size_t proto__bin_to_f32(int dt, const void *src, size_t n, float *dst);
/* The index of the first of n little-endian FP32 words at src (any
 * alignment) that is not finite, or n. */
size_t proto__f32_first_bad(const void *src, size_t n);
/* The same with vectors of at most width bytes (64, 32, 16; for tests). */
size_t proto__f32_first_bad_width(const void *src, size_t n, int width);
/* INT32 or INT64 lengths in [0, hi] -> int32.  Returns n, or the index of
 * the first value outside, which is stored in *bad. */
size_t proto__bin_to_len(int dt, const void *src, size_t n, long long hi,
                         int32_t *dst, long long *bad);
/* BOOL bytes (0 or 1) -> uint8.  Returns n or the index of the first
 * other byte. */
size_t proto__bin_to_bool(const void *src, size_t n, uint8_t *dst);

/* ---- JSON numbers as tensor.c reads them ------------------------------- */

/* A scale factor given as a JSON number j (v1 "scale", v2
 * parameters.scale, named what in the messages): its float32, which must
 * be finite and non-zero, into *out.  0, or ATTND_EINVAL with the message
 * in err.  Each codec words "not a number" its own way, before. */
int proto__json_scale(const cJSON *j, const char *what, float *out,
                      char err[PROTO_ERR_MAX]);

/* ---- request memory (request.c) ------------------------------------------ */

/* Allocates n zeroed bytes owned by req (freed by proto_request_free).
 * Returns NULL when memory or the owned[] table runs out. */
void *proto__own(proto_request *req, size_t n);

/* The same, not zeroed, for a buffer written completely before anything
 * reads it: an input tensor the decoder fills (or fails the whole
 * request), an output the core writes element by element, masked and
 * empty positions included (attn_run_tasks' contract; test_core runs it
 * on NaN-filled buffers).  Zeroing it first would only cost a pass over
 * its memory. */
void *proto__own_filled(proto_request *req, size_t n);

/* proto__own_filled with room bytes before the n returned: the block req
 * owns (and frees) starts room bytes earlier. */
void *proto__own_room(proto_request *req, size_t n, size_t room);

/* The room before a v2 request's output when it is answered as binary
 * data: its JSON part (model name and version, id, the outputs' names,
 * shapes and sizes) usually fits, and the answer is then one buffer
 * (proto_parts.joined). */
#define PROTO__JSON_ROOM 512

/* Makes req own p, a mem_malloc'd block (a body whose tensors req reads
 * where they lie).  Returns 0, or ATTND_ENOMEM when the owned[] table is
 * full (p is then still the caller's). */
int proto__own_block(proto_request *req, void *p);

/* The reverse: p, a block req owns, becomes the caller's (freed with
 * mem_free).  Returns 0, or -1 when req does not own p. */
int proto__take_block(proto_request *req, void *p);

#endif /* PROTO_TENSOR_H */
