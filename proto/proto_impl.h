/* proto_impl.h - internals shared by the proto/ sources; not a public API.
 *
 * Names here carry the proto__ prefix (two underscores): they cross files
 * inside proto/ but nothing outside proto/ may use them.
 *
 * Every function is reentrant: no globals, no static buffers.
 */
#ifndef PROTO_IMPL_H
#define PROTO_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto.h"

/* Largest tensor rank any field of the v1 API accepts. */
#define PROTO__MAX_RANK 4

/* ---- growable output buffer (buf.c) ------------------------------------
 *
 * Appends never fail visibly: an allocation failure sets oom, later appends
 * become no-ops, and the caller checks oom once at the end.  p stays
 * NUL-terminated whenever cap > 0. */
typedef struct proto__buf {
  char *p;
  size_t len, cap;
  int oom;
} proto__buf;

/* Makes room for at least extra more bytes (plus the NUL).  Returns 0 or
 * ATTND_ENOMEM (and sets oom). */
int proto__buf_reserve(proto__buf *b, size_t extra);
void proto__buf_put(proto__buf *b, const char *s, size_t n);
void proto__buf_puts(proto__buf *b, const char *s);
void proto__buf_putc(proto__buf *b, char c);
void proto__buf_put_i64(proto__buf *b, long long v);
/* Appends s as a JSON string literal with its quotes.  Control characters
 * are escaped; bytes that are not valid UTF-8 become U+FFFD, so the output
 * is always valid JSON whatever the input bytes were. */
void proto__buf_put_json_string(proto__buf *b, const char *s);
/* Appends a float32 as a JSON number (see proto__fmt_f32). */
void proto__buf_put_f32(proto__buf *b, float x);
/* Releases the buffer's memory and zeroes it. */
void proto__buf_free(proto__buf *b);

/* Longest text proto__fmt_f32 writes, including the NUL. */
#define PROTO__F32_MAX 32

/* Writes x as the shortest decimal that reads back (strtof) as the same
 * float; exact zero (either sign) is "0".  A non-finite x, which the core
 * never produces, is written as null so that the document stays JSON.
 * s holds PROTO__F32_MAX bytes; returns the length written. */
int proto__fmt_f32(char *s, float x);

/* Shortest round-trip text of a double (for echoing numeric ids). */
int proto__fmt_f64(char *s, size_t cap, double x);

/* ---- messages (tensor.c) ------------------------------------------------ */

/* Writes a short description of a JSON value for an error message:
 * true, false, null, a string, an array, an object, or the number. */
void proto__describe(const cJSON *v, char *s, size_t cap);

/* Writes a client-supplied name for an error message: at most 40 bytes,
 * printable ASCII only (others become '?'), with "..." when cut. */
void proto__quote_name(const char *name, char *s, size_t cap);

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
  PROTO__KIND_BOOL = 2  /* true/false or 0/1 -> uint8_t */
};

typedef struct proto__tensor {
  const char *name;             /* field name for messages */
  const cJSON *json;            /* the field's value */
  const cJSON *data;            /* the array holding the elements */
  int flat;                     /* 1: {"shape","data"}, 0: nested arrays */
  int rank;                     /* may exceed PROTO__MAX_RANK: the caller
                                   rejects it before using shape or n */
  int shape[PROTO__MAX_RANK];
  size_t n;                     /* number of elements */
} proto__tensor;

/* Fills t from the JSON value j of field name.  Returns 0, or
 * ATTND_EINVAL with a message in err. */
int proto__tensor_shape(const cJSON *j, const char *name, proto__tensor *t,
                        char err[PROTO_ERR_MAX]);

/* Converts every element of t into dst (t->n elements of the kind's C
 * type).  hi bounds PROTO__KIND_LEN values; what names the bound in its
 * message ("key length").  Returns 0 or ATTND_EINVAL with a message. */
int proto__tensor_fill(const proto__tensor *t, int kind, long long hi,
                       const char *what, void *dst, char err[PROTO_ERR_MAX]);

/* Formats a shape as "[2,3,7]" into s. */
void proto__shape_str(const int *shape, int rank, char *s, size_t cap);

/* ---- request memory (request.c) ------------------------------------------ */

/* Allocates n zeroed bytes owned by req (freed by proto_request_free).
 * Returns NULL when memory or the owned[] table runs out. */
void *proto__own(proto_request *req, size_t n);

#endif /* PROTO_IMPL_H */
