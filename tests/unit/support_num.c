/* support_num.c - see support_num.h. */
#include "support_num.h"

#include <math.h>
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
