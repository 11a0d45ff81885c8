/* fpnarrow.c - one number between float formats: FP16 and BF16 widened
 * exactly to float32, a double rounded (to nearest, ties to even) onto
 * the float32, FP16 or BF16 grid, with the values each cannot hold
 * refused.  The tensor room converts whole tensors with these; numscan
 * rounds a JSON number as its decimal does with proto__f64_to_f32.  For a
 * JSON number the double given to proto__f64_to_f16 or _bf16 has been
 * moved off the grid's midpoints toward its decimal (numexact.c), so that
 * the one rounding here is the decimal's. */
#include <math.h>
#include <string.h>

#include "proto/text/text.h"

int proto__f16_to_f32(uint16_t h, float *out) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f)
    return -1; /* infinity or NaN */
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact in float */
    float f = (float)man * 0x1p-24f;
    *out = sign ? -f : f;
    return 0;
  }
  bits = sign | ((exp + 112u) << 23) | (man << 13);
  memcpy(out, &bits, sizeof bits);
  return 0;
}

int proto__bf16_to_f32(uint16_t b, float *out) {
  uint32_t bits = (uint32_t)b << 16;
  if (((b >> 7) & 0xffu) == 0xff)
    return -1;
  memcpy(out, &bits, sizeof bits);
  return 0;
}

int proto__f64_to_f32(double x, float *out) {
  float f = (float)x;
  if (!isfinite(f))
    return -1; /* NaN, infinity, or rounds past FLT_MAX */
  *out = f;
  return 0;
}

/* Rounds |x| (finite, > 0) to a binary format with `mant` stored mantissa
 * bits, exponent bias `bias` and largest exponent `emax`, ties to even, in
 * one rounding from the double.  Returns the magnitude bits or -1 when the
 * result overflows.  Scaling by powers of two is exact in double, so
 * nearbyint does the only rounding. */
static long round_binary(double a, int mant, int bias, int emax) {
  int k;
  frexp(a, &k);
  int e = k - 1;                      /* a in [2^e, 2^(e+1)) */
  int emin = 1 - bias;
  if (e < emin) {                     /* subnormal: units of 2^(emin-mant) */
    double q = nearbyint(ldexp(a, mant - emin));
    return (long)q;                   /* 2^mant is the smallest normal */
  }
  double q = nearbyint(ldexp(a, mant - e));  /* in [2^mant, 2^(mant+1)] */
  if (q == ldexp(1.0, mant + 1)) {
    q /= 2;
    e++;
  }
  if (e > emax)
    return -1;
  return ((long)(e + bias) << mant) | ((long)q - (1L << mant));
}

static int round_to(double x, int mant, int bias, int emax, uint16_t *out) {
  uint16_t sign = signbit(x) ? 0x8000u : 0;
  if (!isfinite(x))
    return -1;
  if (x == 0) {
    *out = sign;
    return 0;
  }
  long m = round_binary(fabs(x), mant, bias, emax);
  if (m < 0)
    return -1;
  *out = (uint16_t)(sign | (uint16_t)m);
  return 0;
}

int proto__f64_to_f16(double x, uint16_t *out) {
  return round_to(x, 10, 15, 15, out);
}

int proto__f64_to_bf16(double x, uint16_t *out) {
  return round_to(x, 7, 127, 127, out);
}
