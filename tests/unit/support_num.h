/* support_num.h - random floats and float bits for the number path's unit
 * tests (test_numparse*.c).
 *
 * num_rnd() is a xorshift64 generator with a fixed seed, so that a run
 * repeats (each check test runs in a child of its own and starts from the
 * seed).  num_rnd_float() is a random finite float32: any bit pattern, a
 * third of them subnormal.  num_bits_f32 and num_f32_bits convert between
 * a float and its bits.
 *
 * For decimals next to a double: num_exact_digits gives a double's exact
 * decimal expansion (printf's, which glibc writes exactly), and
 * num_decimal writes significant digits in one of several JSON forms. */
#ifndef ATTND_TESTS_SUPPORT_NUM_H
#define ATTND_TESTS_SUPPORT_NUM_H

#include <stddef.h>
#include <stdint.h>

uint64_t num_rnd(void);
float num_rnd_float(void);
float num_bits_f32(uint32_t u);
uint32_t num_f32_bits(float f);

/* The FP16 and BF16 values with bits h, from the formats' definitions
 * (the pattern after the largest finite one gives the next power of two,
 * not infinity). */
double num_f16_value(unsigned h);
double num_bf16_value(unsigned h);

/* The exact decimal of |x| (finite, non-zero) as 0.d * 10^(*e): its
 * significant digits, without trailing zeros, into d (cap 1024 is
 * enough for any double). */
void num_exact_digits(double x, char *d, size_t cap, long *e);

/* The decimal 0.d * 10^e (d: significant digits, first non-zero), with
 * a '-' when neg, as JSON text into s, in form 0 ("1.25e-3"), 1 (all the
 * digits whole: "125e-5"), 2 (no exponent: "0.00125") or 3 ("0.125E-2"
 * and "0.125E+2"). */
void num_decimal(char *s, size_t cap, int neg, const char *d, long e,
                 int form);

#endif
