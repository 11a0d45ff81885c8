/* text.h - the text room of proto/: JSON syntax, numbers read and
 * printed, messages' pieces, the output buffer; not a public API.
 *
 * Rooms of proto/, lowest first: proto.h and mem.h, then text/, then
 * tensor/, then v1/ and v2/ (side by side, neither includes the other),
 * then body/.  A file includes headers of its own room and of rooms below
 * it, never above (tests/structure/test_rooms.py).  Names here carry the proto__
 * prefix: they cross files inside proto/, nothing outside proto/ uses
 * them.  Every function is reentrant: no globals, no static buffers
 * (test hooks aside).
 */
#ifndef PROTO_TEXT_H
#define PROTO_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"
#include "proto/text/fpconv.h"

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
/* A request's "id" string s: 0 when it is valid UTF-8 of at most
 * PROTO_ID_MAX bytes, else ATTND_EINVAL with "id: ..." in err (its
 * length and the limit, or the first byte that is not UTF-8). */
int proto__check_id(const char *s, char err[PROTO_ERR_MAX]);
/* Appends a float32 as a JSON number (see proto__fmt_f32). */
void proto__buf_put_f32(proto__buf *b, float x);
/* Releases the buffer's memory and zeroes it. */
void proto__buf_free(proto__buf *b);

/* proto__fmt_f32 and PROTO__F32_MAX: fpconv.h. */

/* Shortest round-trip text of a double (for echoing numeric ids). */
int proto__fmt_f64(char *s, size_t cap, double x);

/* ---- client names in messages (suggest.c) ------------------------------ */

/* Writes a client-supplied name for an error message: at most 40 bytes,
 * printable ASCII only (others become '?'), with "..." when cut. */
void proto__quote_name(const char *name, char *s, size_t cap);

/* ---- one number between float formats (fpnarrow.c) -------------------- */

/* Exact widenings.  Return 0, or -1 (and leave *out alone) for an
 * infinity or NaN. */
int proto__f16_to_f32(uint16_t h, float *out);
int proto__bf16_to_f32(uint16_t b, float *out);
/* Rounds to nearest, ties to even.  Returns -1 for a non-finite x or one
 * whose rounding overflows the target type. */
int proto__f64_to_f32(double x, float *out);
int proto__f64_to_f16(double x, uint16_t *out);
int proto__f64_to_bf16(double x, uint16_t *out);

/* ---- tensor numbers outside cJSON (numscan.c, fpread.cc) -----------------
 *
 * The JSON decoders first try numscan: cJSON parses a copy of the body in
 * which each innermost tensor array ("leaf") is empty, and the leaf's node
 * points at its elements' text in the body (see numscan.c for the node
 * layout).  tensor.c converts a leaf with the functions below.  Any error
 * on this path sends the decoder back to cJSON on the original body, which
 * then decides the request and words the message. */

/* JSON's blanks: space, tab, line feed, carriage return.  (Not
 * strchr(" \t\r\n", ch), which also finds the string's own NUL.) */
static inline int proto__json_blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

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
 * which rounds as the decimal does.  FP16 and BF16 values follow the
 * general rule for their midpoints (PROTO__NUM_MID_*, numexact.c), of
 * which their tops are two; this mark is read where a number becomes a
 * float32. */

/* Set in a number node's type: its double is one of the midpoints above,
 * its decimal nearer zero. */
#define PROTO__NUM_BELOW_TIE 0x2000

/* Set in a number node's type: the decimal's own float32 (rounded once,
 * from the text) is the float above (UP) or below (DOWN) the one its
 * double rounds to.  cJSON's double is the decimal rounded once; rounding
 * it again to float32 can land on the wrong side of a float midpoint when
 * the double is next to one (a long decimal such as
 * 1.00000005960464477539062500001, whose double is 1 + 2^-24 itself). */
#define PROTO__NUM_F32_UP 0x8000
#define PROTO__NUM_F32_DOWN 0x10000

/* Set in a number node's type: its double is a whole number of magnitude
 * at most 2^53 and its decimal is exactly that number (not 2.5 nor
 * 9007199254740993 nor 1.00000000000000001, which a double rounds to a
 * whole number). */
#define PROTO__NUM_EXACT_INT 0x20000

/* Set in a number node's type: its double is exactly on an FP16 or a BF16
 * midpoint (proto__half_midpoint, either type: the decimal's side of its
 * double does not depend on the type), and its decimal is nearer zero
 * than the double (BELOW) or farther from it (ABOVE).  Neither is set
 * when the decimal is the double itself.  proto__json_half reads them. */
#define PROTO__NUM_MID_BELOW 0x40000
#define PROTO__NUM_MID_ABOVE 0x80000

/* An integer in [0, 2^53] (the range a double holds exactly), as the
 * client wrote it (PROTO__NUM_EXACT_INT): 2.0 and 1e2 are whole numbers.
 * 0 with it in *out, or -1. */
int proto__json_count(const cJSON *j, double *out);

/* 1 when j is a number that is whole as the client wrote it: marked
 * PROTO__NUM_EXACT_INT, or past 2^53, where every double is whole and no
 * decimal is checked (such a number is past every bound a count has).
 * 1.00000000000000001 is not whole, though its double is 1. */
int proto__json_whole(const cJSON *j);

/* Marks the numbers of root (parsed by cJSON from [text, end), end where
 * its parse stopped) as PROTO__NUM_BELOW_TIE, PROTO__NUM_F32_UP/DOWN,
 * PROTO__NUM_MID_BELOW/ABOVE and PROTO__NUM_EXACT_INT say.  Costs one
 * walk over the tree; the text is read only when some double is on or
 * next to a midpoint (or is below FLT_MIN, or a whole number).  keep != 0
 * (the text outlives the tree): the text is read always, and each number
 * node points at its token there, for messages that echo the number as
 * the client wrote it (proto__num_text).  Cannot fail. */
void proto__json_mark_ties(cJSON *root, const char *text, const char *end,
                           int keep);

/* A number node marked with its token (keep above): cJSON_IsReference,
 * so that cJSON_Delete leaves valuestring alone, and valuestring the
 * token's first byte.  The token's first byte, or NULL when not kept. */
static inline const char *proto__num_token(const cJSON *j) {
  return cJSON_IsNumber(j) && (j->type & cJSON_IsReference) ? j->valuestring
                                                            : NULL;
}

/* Writes the number j for a message: as the client wrote it when its
 * token was kept ("1e400", cut with "..." to fit cap, at least 8), else
 * its double's shortest round-trip text.  Returns the length. */
size_t proto__num_text(const cJSON *j, char *s, size_t cap);

/* cJSON also reads "01", "-01", "1." and "1.e5" as numbers, which JSON
 * (RFC 8259 section 6) does not allow and attnd's own reader refuses.
 * Returns 0 when every number token outside strings in [text, end) is a
 * JSON number; otherwise ATTND_EINVAL with "body is not valid JSON (near
 * byte N<where>): <token> is not a JSON number" in err, for the first
 * that is not (where: "" or a suffix such as " of the inference
 * header").  For text cJSON has parsed (strings are well formed). */
int proto__json_refuse_bad_number(const char *text, const char *end,
                                  const char *where, char err[PROTO_ERR_MAX]);

/* The double of a cJSON number to round onto the FP16 or BF16 grid: its
 * own, or, when it is on a midpoint of either (PROTO__NUM_MID_*), the
 * next double toward its decimal, so that the one rounding that follows
 * gives what the decimal rounds to. */
double proto__json_half(const cJSON *j);

/* The float32 a cJSON number j rounds to into *out: 0, or -1 when it
 * rounds to infinity. */
int proto__json_f32(const cJSON *j, float *out);

/* Writes "<what>: <x> is out of <type> range (...)" into err, for a
 * number x that rounds past every finite value of type ("float32", "FP16"
 * or "BF16"): x as j's text (proto__num_text; j NULL: x's shortest
 * text), the type's largest value, and when x is the midpoint above it,
 * the exact decimal from which on numbers round to infinity (the text
 * sent may have been just under that and still refused).  Returns
 * ATTND_EINVAL. */
int proto__range_err(char err[PROTO_ERR_MAX], const char *what,
                     const cJSON *j, double x, const char *type);

/* Reading and printing the numbers themselves (fpread.cc, fpprint.cc)
 * and proto__vector_bytes: fpconv.h. */

/* ---- a decimal against its double, exactly (numexact.c) ----------------
 *
 * FP16 and BF16 numbers given as JSON are the decimal rounded once onto
 * the type's grid, as the binary form gives.  The decoders hold the
 * decimal's double (correctly rounded) and round that, which is right
 * except where the double is exactly on a midpoint of the grid and the
 * decimal is not (1.000488281250000000001, above FP16's midpoint 1 +
 * 2^-11, has that midpoint for its double, which ties to even: 1).  The
 * decimal is then on the same side of the midpoint as of its double: a
 * midpoint strictly between them would be a nearer double.  So the
 * double is moved one double toward its decimal first, which decides the
 * tie and nothing else. */

/* 1 when x is exactly halfway between two adjacent FP16 (bf == 0) or BF16
 * (bf != 0) values of the same sign: an odd multiple of half the grid's
 * spacing where |x| lies, in the subnormal and normal ranges and the one
 * above the largest finite value (65520, or BF16's 2^128 - 2^120 - 2^119),
 * which rounds to infinity.  Zero is not.  A few integer operations. */
static inline int proto__half_midpoint(double x, int bf) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  int e = (int)(b >> 52 & 0x7ff) - 1023; /* |x| in [2^e, 2^(e+1)) */
  int mant = bf ? 7 : 10, emin = bf ? -126 : -14, emax = bf ? 127 : 15;
  /* the midpoints there are the odd multiples of 2^s; z: the bit of the
   * significand worth 2^s (the subnormal doubles, e = -1023, have none
   * the types reach) */
  int z = (e < emin ? emin : e) - mant - 1 - e + 52;
  uint64_t sig = (b & 0xfffffffffffffull) | 1ull << 52;
  return e <= emax && z >= 0 && z <= 52 &&
         (sig & ((2ull << z) - 1)) == 1ull << z;
}

/* The decimal [p, q) (a JSON number token; a sign, digits, a '.', an
 * exponent, any length) against x in magnitude, exactly: -1 when the
 * decimal is nearer zero than x, 0 when it is x, 1 when it is farther.
 * Every finite x is compared exactly; an infinite or NaN x is beyond every
 * decimal (-1).  Linear in q - p, no allocation. */
int proto__num_cmp(const char *p, const char *q, double x);

/* x moved one double toward the decimal [p, q) (proto__num_cmp): the next
 * double toward zero when the decimal is nearer zero, away from zero when
 * farther, x itself when equal.  For x on a midpoint, the double that
 * rounds as the decimal does. */
double proto__num_toward(const char *p, const char *q, double x);

/* ---- a body cJSON refused (jsonerr.c) ----------------------------------- */

/* ---- the syntax of a JSON body (jsoncheck.c) ---------------------------
 *
 * proto__json_check reads text[0..len) once: blanks, one JSON value, and
 * stops after it (st->end; what follows is the caller's to judge).  0, or
 * ATTND_EINVAL with a message naming the byte and what was expected
 * ("body is not valid JSON at byte N<where>: expected a value, got '}'"),
 * a nesting deeper than PROTO_JSON_MAX_DEPTH ("body is nested 1001
 * levels deep at byte N; the limit is 1000 levels"), a string holding
 * the escape \u0000 ("body at byte N: \u0000 in a string; ..."; cJSON
 * would end the string there), or jsonerr.c's messages for a NUL byte,
 * for NaN and infinity, and for a lone surrogate escape.  Linear in len, no allocation.  st counts what a cJSON tree
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

/* In text[0..n), one JSON object whose syntax proto__json_check passed
 * (lazily or not): the value of its member name (ASCII; member names
 * compared with their escapes resolved), as its first byte, and its
 * length in *len; NULL when it has none.  Linear in n, for a value whose
 * text matters (a number echoed as the client wrote it). */
const char *proto__json_member(const char *text, size_t n, const char *name,
                               size_t *len);

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

/* Writes the message for the lone UTF-16 surrogate escape at offset at
 * (a \uD800-\uDBFF one not followed by a \uDC00-\uDFFF one, or a
 * \uDC00-\uDFFF one not after a \uD800-\uDBFF one) in the string whose
 * '"' is at str, and returns ATTND_EINVAL: "<place>: \ud800 at byte
 * N<where> is a lone UTF-16 surrogate (...)", the place as above; "body
 * is not valid JSON: \ud800 at byte N..." for a member name or a string
 * with no place. */
int proto__json_surrogate_err(const char *text, size_t len, size_t str,
                              size_t at, int codec, const char *where,
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

#endif /* PROTO_TEXT_H */
