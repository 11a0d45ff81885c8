/* support_ref.h - random attention problems of every variant and a
 * naive float64 reference of attn.h's formulas: the one reference of the
 * core's suites (test_core*.c).
 *
 * The reference is independent of core/: loops over (b, h, i, j) in
 * double, its own reading of which keys a query sees (packed sequences in
 * local coordinates), its own softmax with the sink term.  make_case
 * builds a problem of the kinds asked for (K_*) with float32 tensors the
 * case owns (free_case frees them).
 */
#ifndef ATTND_TESTS_SUPPORT_REF_H
#define ATTND_TESTS_SUPPORT_REF_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "core/attn.h"

typedef struct rng { uint64_t s; } rng;

enum {
  K_VL1 = 1 << 0, K_VL2 = 1 << 1, K_MASK = 1 << 2, K_UL = 1 << 3,
  K_LR = 1 << 4, K_WIN = 1 << 5, K_BIAS = 1 << 6, K_DROP = 1 << 7,
  K_ADD = 1 << 8,
  K_SINK = 1 << 9, K_CAP = 1 << 10, K_ALIBI = 1 << 11, K_ALIBI2 = 1 << 12,
  K_PACK = 1 << 13, K_WINLR = 1 << 14,
  /* scale 1/sqrt(D) and w_v in [-1, 1); without it 3/sqrt(D) and
   * [-2, 2), so that soft-capping bites */
  K_UNIT = 1 << 15
};
#define K_NEW (K_SINK | K_CAP | K_ALIBI)

typedef struct shape { int B, H, Hkv, Lq, Lk, D, Dv; } shape;

typedef struct tcase {
  attn_problem p;
  float *q, *k, *v, *bias, *wq, *wk, *wv, *sinks, *slopes;
  uint8_t *mask;
  int32_t *vl, *cuq, *cuk;
} tcase;

/* The query's sequence: offsets and lengths (the whole problem unpacked). */
typedef struct seq { int qo, ko, lq, lk; } seq;

uint64_t rng_next(rng *r);
double rng_unit(rng *r);
float rng_sym(rng *r, float a);
int rng_int(rng *r, int n);
float *rand_floats(rng *r, size_t n, float a);
size_t rand_strides(rng *r, const shape *s, int64_t st[4]);
int32_t *rand_cu(rng *r, int n, int len);
void make_new_kinds(tcase *c, const shape *s, int kinds, rng *r);
void make_case(tcase *c, const shape *s0, int kinds, uint64_t seed);
/* make_case with K_UNIT. */
void make_unit_case(tcase *c, const shape *s, int kinds, uint64_t seed);
void free_case(tcase *c);
seq ref_seq(const attn_problem *p, int i);
int ref_allowed(const attn_problem *p, int b, int h, int i, int j);
double ref_score(const attn_problem *p, int b, int h, int i, int j);
uint64_t ref_mix(uint64_t x);
int ref_keep(const attn_problem *p, int b, int h, int i, int j);
/* One query row: weights w (Lk), output o (Dv) and, when lse is not
 * NULL, the row's log-sum-exp; returns the allowed keys.  mag (Dv), when
 * not NULL, gets sum_j |w_j v_j| with the dropped weights: the size of
 * the terms, which bounds what float rounding can cost an output whose
 * values are far from unit scale. */
int ref_row_mag(const attn_problem *p, int b, int h, int i, double *w,
                double *o, double *lse, double *mag);
int ref_row(const attn_problem *p, int b, int h, int i, double *w,
            double *o, double *lse);

/* Elements of a problem's output (B H Lq Dv) and weights (B H Lq Lk). */
size_t ref_out_len(const attn_problem *p);
size_t ref_w_len(const attn_problem *p);

/* Runs both paths of the core (attn_forward with and without weights) on
 * NaN-filled buffers and compares every row with the reference: weights
 * within 1e-5 (masked ones exactly 0), rows summing to 1, outputs within
 * 1e-5 + 1e-5 |ref| (empty rows exactly 0).  scaled != 0 widens the
 * output tolerance by 1e-5 sum_j |w_j v_j| (ref_row_mag) for values far
 * from unit scale.  Returns the rows that had no allowed key, so that a
 * caller can insist its case exercised them. */
int ref_compare(const attn_problem *p, const char *what, int scaled);

/* Fails naming what and the index when x[0, n) holds a NaN or an
 * infinity. */
void assert_all_finite(const float *x, size_t n, const char *what);

/* attn_forward on both paths: with weights into out_w and w, without
 * into out_online; each must succeed. */
void ref_run_both(const attn_problem *p, float *out_w, float *w,
                  float *out_online);

/* check's ck_assert records a mark point (a write to its channel) even
 * when it passes; inside loops over millions of elements test first and
 * fail through ck_abort_msg only when it matters. */
#define EXPECT(cond, ...)                                                    \
  do {                                                                       \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                  \
  } while (0)

/* 1 when the native AVX-512F GEMM kernels run here; otherwise prints
 * test's skip line (support_skip.h) and returns 0. */
int ref_native_gemm_or_skip(const char *test);

/* 1 under ATTND_VALGRIND: the suites then take smaller shapes. */
int under_valgrind(void);

/* A core suite's main: s run with one BLAS thread (as in an attnd
 * worker); EXIT_SUCCESS when every test passed. */
int ref_run_suite(Suite *s);

#endif
