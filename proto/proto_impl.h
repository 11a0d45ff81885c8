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

#include "fpconv.h"
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

/* proto__fmt_f32 and PROTO__F32_MAX: fpconv.h. */

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

/* 1 when s[0..n) has more commas than max_elems elements and the
 * envelope's few can account for (0 = no budget): the decoders' check
 * before any parsing. */
int proto__over_element_budget(const char *s, size_t n, size_t max_elems);

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
 * max_elems; ATTND_ETOOBIG otherwise.  Sets req->out_bytes. */
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

/* Exact widenings.  Return 0, or -1 (and leave *out alone) for an
 * infinity or NaN. */
int proto__f16_to_f32(uint16_t h, float *out);
int proto__bf16_to_f32(uint16_t b, float *out);
/* Rounds to nearest, ties to even.  Returns -1 for a non-finite x or one
 * whose rounding overflows the target type. */
int proto__f64_to_f32(double x, float *out);
int proto__f64_to_f16(double x, uint16_t *out);
int proto__f64_to_bf16(double x, uint16_t *out);

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

/* ---- tensor numbers outside cJSON (numscan.c, fpread.cc) -----------------
 *
 * The JSON decoders first try numscan: cJSON parses a copy of the body in
 * which each innermost tensor array ("leaf") is empty, and the leaf's node
 * points at its elements' text in the body (see numscan.c for the node
 * layout).  tensor.c converts a leaf with the functions below.  Any error
 * on this path sends the decoder back to cJSON on the original body, which
 * then decides the request and words the message. */

/* Set in a leaf node's type once its elements are converted. */
#define PROTO__LEAF_READ 0x4000

/* 1 when a is a leaf whose elements are still text. */
static inline int proto__is_leaf(const cJSON *a) {
  return a && cJSON_IsArray(a) && (a->type & cJSON_IsReference) &&
         a->valuestring;
}

/* Parses body[0..len) (codec: enum proto_codec) with its tensor arrays as
 * leaves.  Returns 0 with *root the object (cJSON_Delete frees it),
 * ATTND_ENOMEM, ATTND_EBUSY or ATTND_ETOOBIG with a message in err when
 * the budget cannot hold the copy or its tree (proto__hold), or
 * ATTND_EINVAL when this path does not apply (cJSON on the original body
 * then decides); *root is NULL on error.  The body must have passed
 * proto__json_check. */
int proto__json_parse_leaves(const char *body, size_t len, int codec,
                             cJSON **root, char err[PROTO_ERR_MAX]);

/* 1 when every leaf under root has been converted (PROTO__LEAF_READ), so
 * that no element went unchecked. */
int proto__json_leaves_read(cJSON *root, int codec);

/* The index of the first byte of b[j, len) that opens or closes a
 * container or a string ([ ] { } "), len when none; the commas before it
 * added to *commas.  16 to 64 bytes a step (SSE2, AVX2, AVX-512BW). */
size_t proto__find_stop(const unsigned char *b, size_t j, size_t len,
                        size_t *commas);

#ifdef ATTND_TEST_HOOKS
/* on != 0: proto__json_parse_leaves does not apply, on the calling
 * thread, so that the decoders take the cJSON path alone (the unit tests
 * compare the two paths). */
void proto__test_cjson_path(int on);
#endif

/* ---- the top of a float range, from text (numscan.c, tensor.c) ---------
 *
 * cJSON keeps a number as its double, one rounding before the float32,
 * FP16 or BF16 it becomes.  That second rounding changes whether a value
 * is in range at one place: a decimal just below the largest finite value
 * plus half an ulp (float32: 2^128 - 2^103) rounds to that largest value,
 * but with enough digits its double can be the midpoint itself
 * (3.4028235677973366e38), which rounds on to infinity.  So the decoders
 * read the text of every number whose double is one of those three
 * midpoints once more and mark the node when the decimal is below it; its
 * value is then taken as the double just below (nextafter towards zero),
 * which rounds as the decimal does. */

/* Set in a number node's type: its double is one of the midpoints above,
 * its decimal nearer zero. */
#define PROTO__NUM_BELOW_TIE 0x2000

/* 1 when |x| is one of those midpoints and the decimal [p, q) that gave
 * it is nearer zero, exactly (digit by digit); 0 otherwise. */
int proto__num_below_tie(const char *p, const char *q, double x);

/* Set in a number node's type: the decimal's own float32 (rounded once,
 * from the text) is the float above (UP) or below (DOWN) the one its
 * double rounds to.  cJSON's double is the decimal rounded once; rounding
 * it again to float32 can land on the wrong side of a float midpoint when
 * the double is next to one (a long decimal such as
 * 1.00000005960464477539062500001, whose double is 1 + 2^-24 itself). */
#define PROTO__NUM_F32_UP 0x8000
#define PROTO__NUM_F32_DOWN 0x10000

/* Marks the numbers of root (parsed by cJSON from [text, end), end where
 * its parse stopped) as PROTO__NUM_BELOW_TIE and PROTO__NUM_F32_UP/DOWN
 * say.  Costs one walk over the tree; the text is read only when some
 * double is on or next to a midpoint (or is below FLT_MIN).  Cannot
 * fail. */
void proto__json_mark_ties(cJSON *root, const char *text, const char *end);

/* cJSON also reads "01", "-01", "1." and "1.e5" as numbers, which JSON
 * (RFC 8259 section 6) does not allow and attnd's own reader refuses.
 * Returns 0 when every number token outside strings in [text, end) is a
 * JSON number; otherwise ATTND_EINVAL with "body is not valid JSON (near
 * byte N<where>): <token> is not a JSON number" in err, for the first
 * that is not (where: "" or a suffix such as " of the inference
 * header").  For text cJSON has parsed (strings are well formed). */
int proto__json_refuse_bad_number(const char *text, const char *end,
                                  const char *where, char err[PROTO_ERR_MAX]);

/* The value of a cJSON number as its decimal rounds: its double, or the
 * double below it when PROTO__NUM_BELOW_TIE is set. */
double proto__json_num(const cJSON *j);

/* The float32 a cJSON number j rounds to into *out: 0, or -1 when it
 * rounds to infinity. */
int proto__json_f32(const cJSON *j, float *out);

/* A scale factor given as a JSON number j (v1 "scale", v2
 * parameters.scale, named what in the messages): its float32, which must
 * be finite and non-zero, into *out.  0, or ATTND_EINVAL with the message
 * in err.  Each codec words "not a number" its own way, before. */
int proto__json_scale(const cJSON *j, const char *what, float *out,
                      char err[PROTO_ERR_MAX]);

/* Writes "<what>: <x> is out of <type> range (...)" into err, for a
 * number x that rounds past every finite value of type ("float32", "FP16"
 * or "BF16"): x as its shortest text, the type's largest value, and when
 * x is the midpoint above it, the exact decimal from which on numbers
 * round to infinity (the text sent may have been just under that and
 * still refused).  Returns ATTND_EINVAL. */
int proto__range_err(char err[PROTO_ERR_MAX], const char *what, double x,
                     const char *type);

/* Reading and printing the numbers themselves (fpread.cc, fpprint.cc)
 * and proto__vector_bytes: fpconv.h. */

/* ---- a body cJSON refused (jsonerr.c) ----------------------------------- */

/* ---- the syntax of a JSON body (jsoncheck.c) ---------------------------
 *
 * proto__json_check reads text[0..len) once: blanks, one JSON value, and
 * stops after it (st->end; what follows is the caller's to judge).  0, or
 * ATTND_EINVAL with a message naming the byte and what was expected
 * ("body is not valid JSON at byte N<where>: expected a value, got '}'"),
 * a nesting deeper than PROTO_JSON_MAX_DEPTH ("body nests deeper than
 * 1000 levels"), or jsonerr.c's messages for a NUL byte and for NaN and
 * infinity.  Linear in len, no allocation.  st counts what a cJSON tree
 * of the text holds, for proto__json_tree_bytes (with lazy, an upper
 * bound).
 *
 * lazy != 0: the inside of an array that holds no container or string
 * (a list of numbers, the bulk of a body) is only scanned for its end,
 * not checked token by token.  The decoders check a body lazily: such a
 * list is either a leaf, whose every token numscan's reader checks as it
 * converts it, or lands in numscan's copy, which is checked fully before
 * cJSON reads it.  Whenever the decode fails, proto__json_retry checks
 * the whole body fully, so that a syntax error anywhere is the answer;
 * and a lazy check that fails checks fully, so that the message is of the
 * first error. */
#define PROTO_JSON_MAX_DEPTH 1000 /* cJSON's CJSON_NESTING_LIMIT */
typedef struct proto__json_stats {
  size_t values;       /* every value, containers included */
  size_t strings;      /* member names and string values */
  size_t string_bytes; /* their bytes */
  size_t end;          /* the offset after the value */
  char first;          /* the value's first byte ('{' for an object) */
  int valid;           /* the decoder's: the body is one JSON value */
  const char *text, *where; /* what was checked, how */
  size_t len;
  int codec, lazy;
} proto__json_stats;
int proto__json_check(const char *text, size_t len, int codec,
                      const char *where, int lazy, proto__json_stats *st,
                      char err[PROTO_ERR_MAX]);

/* When st is of a lazy check: the text checked again, token by token.  0
 * (st then holds the full counts), or ATTND_EINVAL with the message. */
int proto__json_strict(proto__json_stats *st, char err[PROTO_ERR_MAX]);

/* 0 when the checked value is an object (st->valid is then set: the
 * body is one JSON object), else ATTND_EINVAL with the message: the first
 * syntax error of a lazily checked text, or "body must be a JSON object,
 * got an array". */
int proto__json_want_object(proto__json_stats *st, char err[PROTO_ERR_MAX]);

/* After a first decode (numscan) that returned *rc, over a body checked
 * into st: when the decode failed on a body checked lazily, the body is
 * checked fully (a syntax error is then *rc, ATTND_EINVAL, with its
 * message in err; else st holds the full counts).  1 when cJSON's decode
 * of the whole body is to follow, for its message: the body is valid JSON
 * and *rc a refusal of the request's own (not memory, the budget or a
 * limit). */
int proto__json_retry(int *rc, proto__json_stats *st,
                      char err[PROTO_ERR_MAX]);

/* The outcome of the two decodes: the second's, unless the budget could
 * not hold its tree (then the first's rc and message, first, in err). */
int proto__json_retried(int rc, const char first[PROTO_ERR_MAX], int rc2,
                        char err[PROTO_ERR_MAX]);

/* An upper bound on the bytes of the cJSON tree of a text with st. */
size_t proto__json_tree_bytes(const proto__json_stats *st);

/* Holds n bytes of the in-flight budget for what (a phrase: "the cJSON
 * tree of the body") before the decoder allocates them (mem_hold).  0, or
 * ATTND_EBUSY (not now: 503) or ATTND_ETOOBIG (never) with a message. */
int proto__hold(size_t n, const char *what, char err[PROTO_ERR_MAX]);

/* The message of a hold mem_hold refused (why: MEM_HOLD_*): ATTND_EBUSY
 * or ATTND_ETOOBIG. */
int proto__hold_refused(int why, size_t n, const char *what,
                        char err[PROTO_ERR_MAX]);

/* The length of a NaN or infinity token at p (a sign, then "NaN",
 * "Infinity" or "Inf" in any case), or 0 (jsonerr.c). */
size_t proto__json_non_finite_len(const char *p, const char *end);

/* Writes the message for text[0..len), which cJSON failed to parse,
 * stopping at offset at, and returns ATTND_EINVAL.  A NUL byte outside
 * strings up to at: "body is not valid JSON: byte N is a NUL (0x00);
 * ...".  A NaN or infinity token at at:
 * "<place>: NaN is not a JSON number; attnd needs finite values", the
 * place as "query[0][1][2]", "query.data[5]" or "parameters.scale" (codec
 * PROTO_CODEC_V2: an input by its "name").  Otherwise "body is not valid
 * JSON (near byte N)".  where follows the byte offset in the messages
 * (" of the inference header", or ""). */
int proto__json_syntax_err(const char *text, size_t len, size_t at,
                           int codec, const char *where,
                           char err[PROTO_ERR_MAX]);

/* ---- names a client got wrong (suggest.c) ---------------------------------
 *
 * For the messages of the error path: which known name an unknown one was
 * probably meant to be.  Nothing here allocates. */

/* The Damerau-Levenshtein distance (optimal string alignment: insertions,
 * deletions, substitutions and swaps of adjacent characters, each 1)
 * between a and b, ASCII case ignored; -1 when either is longer than 64
 * bytes. */
int proto__edit_distance(const char *a, const char *b);

/* The index of the name in names[0..n) nearest to name, when it is within
 * a third of that name's length (at least 1, at most 3; the first of
 * equals), or -1. */
int proto__suggest(const char *name, const char *const *names, int n);

/* Writes names[0..n) as "a, b, c" into s (cut at cap); returns the
 * length written. */
size_t proto__names_join(char *s, size_t cap, const char *const *names,
                         int n);

/* Room for a hint: what proto__hint writes for any list attnd has, with
 * room left in a PROTO_ERR_MAX message for the place and the name. */
#define PROTO__HINT_MAX 300

/* Writes "did you mean 'x'? <label>: a, b, c" into s, the suggestion
 * taken from cand[0..ncand) (left out when none is near) and the list from
 * list[0..nlist); a message's parenthesis after an unknown name. */
void proto__hint(char *s, size_t cap, const char *name,
                 const char *const *cand, int ncand, const char *label,
                 const char *const *list, int nlist);

/* ---- v2 names (v2_params.c) ---------------------------------------------
 *
 * Which member names a v2 inference request may use, at each level; see
 * v2_params.c for the three kinds (served, Triton's not served, unknown)
 * and what Triton's clients send. */
enum proto__v2_level {
  PROTO__V2_REQUEST,  /* the request object and its "parameters" */
  PROTO__V2_INPUT,    /* an object of "inputs" and its "parameters" */
  PROTO__V2_OUTPUT    /* an object of "outputs" and its "parameters" */
};

/* Every member of params (a "parameters" object of that level, or NULL)
 * is a name attnd serves there.  Returns 0, or ATTND_EINVAL with
 * "<where>.<name>: not supported (...)" for a Triton parameter attnd does
 * not serve, or "<where>.<name>: unknown parameter (did you mean '...'?
 * <level> parameters: ...)".  where: "parameters",
 * "inputs[2].parameters". */
int proto__v2_check_params(const cJSON *params, int level, const char *where,
                           char err[PROTO_ERR_MAX]);

/* Every member of obj (the request, an input or an output object) is a
 * field of that level.  Returns 0, or ATTND_EINVAL with "<where>: unknown
 * field '<name>' (did you mean '...'? <level> fields: ...)"; where: ""
 * for the request, "inputs[2]", "outputs[0]". */
int proto__v2_check_fields(const cJSON *obj, int level, const char *where,
                           char err[PROTO_ERR_MAX]);

/* ---- system shared memory in a v2 request (v2_shm.c) ---------------------
 *
 * The shared_memory_* parameters of one input or output, kept apart from
 * the rest of v2_decode.c's parameter handling.  Messages start with
 * `where` ("query", "outputs[1]") and then say what Triton says. */
typedef struct proto__shm_use {
  const char *name;         /* shared_memory_region (the cJSON string);
                               NULL: the tensor is not in shared memory */
  uint64_t offset;          /* shared_memory_offset, default 0 */
  uint64_t byte_size;       /* shared_memory_byte_size, default 0 */
  void *region;             /* proto_shm.find's handle, once located */
} proto__shm_use;

/* The three parameter names, for duplicate and unknown-name checks. */
extern const char *const proto__shm_param_names[3];

/* Reads the shared_memory_* members of params (an object, or NULL) into
 * *u; u->name stays NULL without shared_memory_region (the other two are
 * then not read, as Triton reads them only with a region).  0, or
 * ATTND_EINVAL for a value of the wrong JSON type. */
int proto__v2_shm_params(const cJSON *params, const char *where,
                         proto__shm_use *u, char err[PROTO_ERR_MAX]);

/* Finds u's region through shm (NULL: none registered) and checks
 * Triton's rules for it, in Triton's order: the region exists (else
 * ATTND_ENOTFOUND), the offset lies inside it, offset + byte_size does
 * not overflow and fits.  0 or ATTND_EINVAL. */
int proto__v2_shm_locate(const proto_shm *shm, proto__shm_use *u,
                         const char *where, char err[PROTO_ERR_MAX]);

/* An input (name) whose parameters name a region: Triton's rule that an
 * input sets exactly one of data (data != 0), binary_data_size (bs != 0)
 * and shared_memory_region, with its message; then the parameters into
 * *u and the region found and checked (proto__v2_shm_locate).  0,
 * ATTND_EINVAL or ATTND_ENOTFOUND. */
int proto__v2_shm_input(const proto_shm *shm, const cJSON *params,
                        const char *name, int data, int bs,
                        proto__shm_use *u, char err[PROTO_ERR_MAX]);

/* The shared_memory_* parameters of an output (params: its parameters
 * object, or NULL): Triton's checks (not with binary_data true or with
 * classification), then the region found and checked as
 * proto__v2_shm_locate does, into *out (left alone without a region).
 * 0, ATTND_EINVAL or ATTND_ENOTFOUND. */
int proto__v2_shm_output(const proto_shm *shm, const cJSON *params,
                         const char *where, proto_shm_ref *out,
                         char err[PROTO_ERR_MAX]);

/* Once the problem's shapes are known: ATTND_EINVAL (Triton's message)
 * when an output's region byte size is smaller than the output. */
int proto__v2_shm_output_sizes(const proto_request *req,
                               char err[PROTO_ERR_MAX]);

/* Copies the n elements of datatype dt (byte size already checked) out
 * of u's region into dst, converting as fill_binary does for kind
 * (PROTO__KIND_F32 for every float datatype: float32 out;
 * PROTO__KIND_LEN: int32 lengths in [0, hi]; PROTO__KIND_BOOL: bytes 0 or
 * 1).  FP32 and BOOL are read straight into dst and checked there; other
 * datatypes go through a small buffer.  Returns 0 with *bad = the index
 * of the first element refused (n when none; *badval the refused length),
 * or what the read returned (message in err). */
int proto__v2_shm_fill(const proto_shm *shm, const proto__shm_use *u,
                       int kind, int dt, size_t n, long long hi, void *dst,
                       size_t *bad, long long *badval,
                       char err[PROTO_ERR_MAX]);

/* The n FP32 elements of u's region where they lie (proto_shm.view),
 * checked finite there: 0 with *at and *bad = the index of the first
 * element that is not (n when none); 1 when they cannot be read in place
 * (no view, an offset not aligned for float, a big-endian host): copy
 * them; or what the view returned (message in err). */
int proto__v2_shm_view(const proto_shm *shm, const proto__shm_use *u,
                       size_t n, const float **at, size_t *bad,
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

/* An Inference-Header-Content-Length value as sent: decimal digits, with
 * blanks (space, tab) around them.  Returns 0 with the count in *v
 * (ULLONG_MAX past its range), or -1 (v2_decode.c, which also says why
 * in its message). */
int proto__v2_header_count(const char *h, unsigned long long *v);

/* The reverse: p, a block req owns, becomes the caller's (freed with
 * mem_free).  Returns 0, or -1 when req does not own p. */
int proto__take_block(proto_request *req, void *p);

#endif /* PROTO_IMPL_H */
