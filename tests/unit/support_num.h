/* support_num.h - random floats and float bits for the number path's unit
 * tests (test_numparse*.c).
 *
 * num_rnd() is a xorshift64 generator with a fixed seed, so that a run
 * repeats (each check test runs in a child of its own and starts from the
 * seed).  num_rnd_float() is a random finite float32: any bit pattern, a
 * third of them subnormal.  num_bits_f32 and num_f32_bits convert between
 * a float and its bits. */
#ifndef ATTND_TESTS_SUPPORT_NUM_H
#define ATTND_TESTS_SUPPORT_NUM_H

#include <stdint.h>

uint64_t num_rnd(void);
float num_rnd_float(void);
float num_bits_f32(uint32_t u);
uint32_t num_f32_bits(float f);

#endif
