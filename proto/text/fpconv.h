/* fpconv.h - JSON number text <-> float32, inside proto/ (not a public API).
 *
 *   fpread.cc   reads: one number (float32 or double), or a list of them
 *               (a tensor leaf's elements), held to the JSON grammar;
 *               fast_float (Debian libfast-float-dev) decides whatever
 *               its own fast paths leave.
 *   fpprint.cc  prints: the shortest decimal that reads back as the same
 *               float32 (Dragonbox, Debian libdragonbox-dev), one number
 *               or a list of them, 8 or 4 at a time with AVX-512F or AVX2.
 *
 * Plain C declarations, included by text/text.h (C) and by both C++
 * files.  Every function is reentrant: nothing allocates, throws or keeps
 * state, and no text is read outside [p, end). */
#ifndef PROTO_FPCONV_H
#define PROTO_FPCONV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading (fpread.cc) ------------------------------------------------ */

/* One JSON number token at p (the JSON grammar exactly, no leading space):
 * the correctly rounded double, or the correctly rounded float32 (the
 * decimal rounded to nearest, not its double), refused when that float is
 * infinite: accepted below FLT_MAX + half an ulp, so 3.4028235e38 is
 * FLT_MAX.  Return the token's end, or NULL. */
const char *proto__num_f64(const char *p, const char *end, double *out);
const char *proto__num_f32(const char *p, const char *end, float *out);

/* n comma-separated JSON numbers (whitespace around them) filling exactly
 * [p, end) -> dst, as proto__num_f32.  Returns 0 or -1 (dst then partly
 * written). */
int proto__num_list_f32(const char *p, const char *end, float *dst,
                        size_t n);
/* The same with vectors of at most width bytes (64, 32, 16; for tests:
 * every reader must give the same answer). */
int proto__num_list_f32_width(const char *p, const char *end, float *dst,
                              size_t n, int width);

/* ---- printing (fpprint.cc; proto__fmt_f32 in buf.c) --------------------- */

/* Longest text proto__fmt_f32 writes, including the NUL. */
#define PROTO__F32_MAX 32

/* Writes x as the shortest decimal that reads back (strtof) as the same
 * float; exact zero (either sign) is "0".  A non-finite x, which the core
 * never produces, is written as null so that the document stays JSON.
 * Exponents -5..8 are written plainly ("0.00001", "123456790"), others as
 * d.ddde-X ("1e-6", "1.5e9").  s holds PROTO__F32_MAX bytes; returns the
 * length written. */
int proto__fmt_f32(char *s, float x);

/* Writes x (finite, non-zero) as the shortest decimal that reads back as
 * x, the closest such when there are several (Dragonbox), laid out as
 * proto__fmt_f32 documents; s holds PROTO__F32_MAX bytes.  Returns the
 * length, or -1 (then nothing useful is in s). */
int proto__num_fmt_f32(char *s, float x);

/* x[0, n) as proto__fmt_f32 prints them, comma-separated, then a NUL: the
 * same text as n calls of it, several numbers at a time where the CPU
 * allows (AVX2, AVX-512F).  s holds n * (PROTO__F32_MAX + 1) + 1 bytes.
 * Returns the length, the NUL not counted. */
size_t proto__num_fmt_f32_list(char *s, const float *x, size_t n);
/* The same by the printer of a given width: 8 (AVX-512F), 4 (AVX2) or 1
 * number at a time, the last where the CPU lacks the one asked for (for
 * tests: every printer must write the same text). */
size_t proto__num_fmt_f32_list_width(char *s, const float *x, size_t n,
                                     int width);

/* The powers of ten the several-at-a-time printers multiply by, 10^k for
 * k in [PROTO__POW10_MIN_K, PROTO__POW10_MAX_K]: 10^k scaled by a power of
 * two into [2^63, 2^64) and rounded up, as Dragonbox defines its float32
 * cache.  The value for k, or 0 outside the range (for tests). */
#define PROTO__POW10_MIN_K (-31)
#define PROTO__POW10_MAX_K 46
uint64_t proto__num_pow10(int k);

/* ---- the CPU (numscan.c) ------------------------------------------------ */

/* The widest vectors the number paths use on this CPU, in bytes: 64
 * (AVX-512F, BW, DQ, VL and CD), 32 (AVX2), 16 (SSE2, every x86-64), 0
 * (none: not x86-64).  The one place that decides it. */
int proto__vector_bytes(void);

#ifdef __cplusplus
}
#endif

#endif /* PROTO_FPCONV_H */
