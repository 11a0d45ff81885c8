/* support_num.c - see support_num.h. */
#include "support_num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x243f6a8885a308d3ull;

uint64_t num_rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

float num_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint32_t num_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

float num_rnd_float(void) {
  for (;;) {
    uint32_t u = (uint32_t)num_rnd();
    if (num_rnd() % 3 == 0)
      u &= 0x807fffffu;
    float f = num_bits_f32(u);
    if (isfinite(f))
      return f;
  }
}

void num_exact_digits(double x, char *d, size_t cap, long *e) {
  char s[1100];
  snprintf(s, sizeof s, "%.800e", fabs(x)); /* 767 digits at most */
  char *x_at = strchr(s, 'e');
  size_t n = 0;
  for (const char *p = s; p < x_at && n + 1 < cap; p++)
    if (*p != '.')
      d[n++] = *p;
  while (n > 1 && d[n - 1] == '0')
    n--;
  d[n] = '\0';
  *e = strtol(x_at + 1, NULL, 10) + 1;
}

void num_decimal(char *s, size_t cap, int neg, const char *d, long e,
                 int form) {
  long nd = (long)strlen(d);
  size_t o = (size_t)snprintf(s, cap, "%s", neg ? "-" : "");
  if (form == 0) {
    snprintf(s + o, cap - o, "%c%s%se%ld", d[0], nd > 1 ? "." : "", d + 1,
             e - 1);
  } else if (form == 1) {
    snprintf(s + o, cap - o, "%se%ld", d, e - nd);
  } else if (form == 3) {
    snprintf(s + o, cap - o, "0.%sE%+ld", d, e);
  } else if (e <= 0) {
    o += (size_t)snprintf(s + o, cap - o, "0.");
    for (long i = 0; i < -e && o + 1 < cap; i++)
      s[o++] = '0';
    snprintf(s + o, cap - o, "%s", d);
  } else if (e >= nd) {
    o += (size_t)snprintf(s + o, cap - o, "%s", d);
    for (long i = nd; i < e && o + 1 < cap; i++)
      s[o++] = '0';
    s[o] = '\0';
  } else {
    snprintf(s + o, cap - o, "%.*s.%s", (int)e, d, d + e);
  }
}

double num_f16_value(unsigned h) {
  unsigned e = h >> 10 & 31, m = h & 1023;
  return (h & 0x8000 ? -1 : 1) *
         (e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24));
}

double num_bf16_value(unsigned h) {
  unsigned e = h >> 7 & 255, m = h & 127;
  return (h & 0x8000 ? -1 : 1) *
         (e ? ldexp(128 + m, (int)e - 134) : ldexp(m, -133));
}
