/* numexact.c - a JSON number's decimal against a double, exactly.
 *
 * A number's double is its decimal rounded once.  Rounding that double
 * again, onto a narrower grid, can only go wrong where the double sits
 * exactly on a midpoint of that grid and the decimal does not: the
 * decimal then decides the tie.  Here it is compared, digit by digit,
 * with the double's exact decimal expansion.
 *
 * A finite double is m * 2^k (m odd, below 2^53): for k >= 0 an integer of
 * at most 309 digits, for k < 0 the integer m * 5^-k over 10^-k, at most
 * 767 significant digits (k >= -1074).  Both are worked out in a
 * fixed-size bignum of 32-bit limbs on the stack: the multiplications by
 * 5 (or 2) and the divisions by 10^9 that print it cost some thousands of
 * operations at the extremes of the range, a few dozen for the midpoints
 * of FP16 and BF16 (at most 12 significant bits).  The token is read
 * twice, once for its decimal exponent and once for its digits: linear in
 * its length. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "proto/text/text.h"

/* m * 5^1074 < 2^2547: 80 limbs; m * 2^971 < 2^1024: 32. */
#define LIMBS 84
/* The digits of LIMBS limbs (9.64 a limb), written nine at a time. */
#define DIGITS 810

typedef struct big {
  uint32_t w[LIMBS]; /* least significant first */
  int n;             /* limbs in use; the top one non-zero */
} big;

/* b *= f.  The bounds above keep the carry inside the LIMBS. */
static void big_mul(big *b, uint32_t f) {
  uint64_t carry = 0;
  for (int i = 0; i < b->n; i++) {
    uint64_t t = (uint64_t)b->w[i] * f + carry;
    b->w[i] = (uint32_t)t;
    carry = t >> 32;
  }
  if (carry && b->n < LIMBS)
    b->w[b->n++] = (uint32_t)carry;
}

/* b /= d; returns the remainder. */
static uint32_t big_div(big *b, uint32_t d) {
  uint64_t r = 0;
  for (int i = b->n - 1; i >= 0; i--) {
    uint64_t t = r << 32 | b->w[i];
    b->w[i] = (uint32_t)(t / d);
    r = t % d;
  }
  while (b->n && !b->w[b->n - 1])
    b->n--;
  return (uint32_t)r;
}

/* b *= base^n, in steps of the largest power that fits a limb (step). */
static void big_pow(big *b, uint32_t base, uint32_t step, int per, int n) {
  for (; n >= per; n -= per)
    big_mul(b, step);
  uint32_t f = 1;
  while (n-- > 0)
    f *= base;
  big_mul(b, f);
}

/* The exact decimal of a (finite, > 0) as 0.d[0]d[1]... * 10^(*e), its
 * digits without trailing zeros into d; returns how many. */
static int exact_digits(double a, char d[DIGITS], long long *e) {
  int k;
  uint64_t m = (uint64_t)ldexp(frexp(a, &k), 53); /* a = m * 2^(k-53) */
  int z = __builtin_ctzll(m); /* m > 0 */
  m >>= z;
  k += z - 53;
  big b; /* the limbs past n are never read */
  b.w[0] = (uint32_t)m;
  b.w[1] = (uint32_t)(m >> 32);
  b.n = m >> 32 ? 2 : 1;
  if (k >= 0)
    big_pow(&b, 2, 1u << 31, 31, k);
  else
    big_pow(&b, 5, 1220703125u, 13, -k); /* 5^13 */
  int n = DIGITS;
  while (b.n) { /* nine digits at a time, from the last */
    uint32_t r = big_div(&b, 1000000000u);
    for (int i = 0; i < 9; i++, r /= 10)
      d[--n] = (char)('0' + r % 10);
  }
  while (d[n] == '0')
    n++;
  int nd = DIGITS - n;
  memmove(d, d + n, (size_t)nd);
  *e = nd + (k < 0 ? k : 0);
  while (d[nd - 1] == '0')
    nd--;
  return nd;
}

/* The decimal [p, q) as 0.ddd * 10^(*e): its first significant digit, or
 * NULL for zero.  An exponent's magnitude is held at 10^17, past any
 * token the budget lets in. */
static const char *token_shape(const char *p, const char *q, long long *e) {
  const char *first = NULL;
  int frac = 0;
  *e = 0;
  if (p < q && (*p == '-' || *p == '+'))
    p++;
  for (; p < q && ((*p >= '0' && *p <= '9') || *p == '.'); p++) {
    if (*p == '.') {
      frac = 1;
    } else if (!first && *p == '0') {
      *e -= frac; /* a leading zero: after the '.', one place down */
    } else {
      if (!first)
        first = p;
      *e += !frac;
    }
  }
  if (p < q && (*p == 'e' || *p == 'E')) {
    int neg = ++p < q && *p == '-';
    long long x = 0;
    for (p += p < q && (*p == '-' || *p == '+'); p < q && *p >= '0' &&
         *p <= '9'; p++)
      x = x < 100000000000000000LL ? x * 10 + (*p - '0') : x;
    *e += neg ? -x : x;
  }
  return first;
}

/* A token of at most 15 digits and nothing else (no sign, '.' or
 * exponent) is a whole number below 2^53: its double is exactly it, so
 * comparing doubles is exact.  1 and the value in *v, or 0. */
static int plain_digits(const char *p, const char *q, double *v) {
  uint64_t n = 0;
  if (q - p > 15)
    return 0;
  for (; p < q; p++) {
    if (*p < '0' || *p > '9')
      return 0;
    n = n * 10 + (uint64_t)(*p - '0');
  }
  *v = (double)n;
  return 1;
}

int proto__num_cmp(const char *p, const char *q, double x) {
  char d[DIGITS];
  long long e, ex;
  double a = fabs(x), v;
  if (!isfinite(a))
    return -1;
  if (plain_digits(p, q, &v)) /* the common case: lengths, 0 and 1 */
    return (v > a) - (v < a);
  const char *s = token_shape(p, q, &e);
  if (!s || a == 0)
    return (s != NULL) - (a != 0);
  int nd = exact_digits(a, d, &ex), i = 0;
  if (e != ex)
    return e < ex ? -1 : 1;
  for (; s < q && *s != 'e' && *s != 'E'; s++) {
    if (*s == '.')
      continue;
    if (i == nd) { /* past x's last digit: any non-zero one is more */
      if (*s != '0')
        return 1;
      continue;
    }
    if (*s != d[i])
      return *s < d[i] ? -1 : 1;
    i++;
  }
  return i < nd ? -1 : 0; /* x's digits left over are not all zero */
}

double proto__num_toward(const char *p, const char *q, double x) {
  int c = proto__num_cmp(p, q, x);
  if (c < 0)
    return nextafter(x, 0.0);
  if (c > 0)
    return nextafter(x, copysign(INFINITY, x));
  return x;
}
