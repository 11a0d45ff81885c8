/* test_core_extremes.c - core/ at the edges of float32: negative and
 * huge scales, inputs near 1e38, scores at -FLT_MAX, fully masked rows,
 * and values far beyond unit scale (equal huge values averaging to
 * themselves, long rows, every mask kind, additive scoring and dropout),
 * against the float64 reference (support_ref.c) within the size of the
 * terms; outputs stay finite, masked and empty positions exactly 0.
 */
#include <check.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/attn_impl.h"
#include "support_ref.h"
#include "support_skip.h"

/* ------------------------------------------------------------------ */
/* Edge numerics. */

START_TEST(test_negative_scale_matches_reference) {
  shape s = {2, 2, 1, 67, 131, 8, 5};
  tcase c;
  make_unit_case(&c, &s, K_VL1 | K_BIAS, 77);
  c.p.scale = -0.75f;
  ref_compare(&c.p, "negative scale", 0);
  free_case(&c);
}
END_TEST

/* A huge scale saturates the softmax to one-hot rows; everything stays
 * finite and rows still sum to 1. */
START_TEST(test_huge_scale_gives_one_hot_finite_rows) {
  shape s = {1, 2, 2, 40, 70, 8, 4};
  tcase c;
  make_unit_case(&c, &s, K_UL, 5);
  c.p.scale = 1e30f;
  ref_compare(&c.p, "scale 1e30", 0);
  free_case(&c);
}
END_TEST

/* Inputs near 1e38 overflow sgemm to +-inf and inf - inf = NaN; the core
 * must clamp and still answer finite numbers with exact zeros where
 * masked, in both paths and for both scorings. */
static void huge_inputs(int kinds) {
  shape s = {1, 2, 1, under_valgrind() ? 10 : 70, 300, 6, 3};
  tcase c;
  rng r = {9};
  make_unit_case(&c, &s, kinds | K_VL2 | K_BIAS, 3);
  size_t nq = (size_t)s.B * s.H * s.Lq * s.D, nk = (size_t)s.Lk * s.D;
  for (size_t i = 0; i < nq; i++) c.q[i] = rng_sym(&r, 3e38f);
  for (size_t i = 0; i < nk; i++) c.k[i] = rng_sym(&r, 3e38f);
  for (size_t i = 0; i < (size_t)s.Lk * s.Dv; i++) c.v[i] = rng_sym(&r, 3e38f);
  if (c.wq) {
    for (int i = 0; i < c.p.Hd * s.D; i++) c.wq[i] = rng_sym(&r, 3e38f);
    for (int i = 0; i < c.p.Hd; i++) c.wv[i] = rng_sym(&r, 3e38f);
  }
  float *o1 = malloc(ref_out_len(&c.p) * 4), *o2 = malloc(ref_out_len(&c.p) * 4);
  float *w = malloc(ref_w_len(&c.p) * 4);
  ref_run_both(&c.p, o1, w, o2);
  assert_all_finite(o1, ref_out_len(&c.p), "out (weights path)");
  assert_all_finite(o2, ref_out_len(&c.p), "out (online path)");
  assert_all_finite(w, ref_w_len(&c.p), "weights");
  for (int h = 0; h < s.H; h++)
    for (int i = 0; i < s.Lq; i++) {
      double sum = 0;
      int n = 0;
      for (int j = 0; j < s.Lk; j++) {
        float x = w[((size_t)h * s.Lq + i) * s.Lk + j];
        if (!ref_allowed(&c.p, 0, h, i, j))
          EXPECT(x == 0.0f, "masked weight (%d,%d,%d) = %g", h, i, j, x);
        n += ref_allowed(&c.p, 0, h, i, j);
        sum += x;
      }
      EXPECT(n == 0 ? sum == 0.0 : fabs(sum - 1.0) < 1e-5,
             "row (%d,%d) sums to %.9g", h, i, sum);
    }
  free(o1); free(o2); free(w);
  free_case(&c);
}

START_TEST(test_inputs_near_1e38_stay_finite) { huge_inputs(0); }
END_TEST

START_TEST(test_additive_inputs_near_1e38_stay_finite) { huge_inputs(K_ADD); }
END_TEST

/* Allowed scores that are themselves -FLT_MAX (a bias of -FLT_MAX) must
 * share the weight while forbidden keys, which also hold -FLT_MAX as
 * scores, get exactly 0: the decision is the allowed flag, not exp
 * underflow.  13 keys cover the 8-wide loop body and its tail; the
 * allowed ones are 0 and 1 (valid_lens) or 0, 1 and 9 (mask). */
static void minus_flt_max_scores(int use_mask) {
  enum { LK = 13 };
  float q[1] = {1}, k[LK], v[LK], bias[LK], o1[1], o2[1], w[LK];
  const int32_t vl[1] = {2};
  uint8_t mask[LK] = {0};
  attn_problem p;
  for (int j = 0; j < LK; j++) {
    bias[j] = -FLT_MAX;
    k[j] = 0.25f * (float)(j % 3);
    v[j] = j < 2 || j == 9 ? 1.0f + (float)j : 100.0f;
  }
  mask[0] = mask[1] = mask[9] = 1;
  attn_problem_init(&p);
  p.B = 1; p.Lq = 1; p.Lk = LK; p.D = p.Dk = 1; p.Dv = 1;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  if (use_mask) {
    p.mask = mask;
    p.mask_stride[3] = 1;
  } else {
    p.valid_lens = vl;
  }
  p.bias = bias; p.bias_stride[3] = 1;
  ref_run_both(&p, o1, w, o2);
  double sum = 0.0;
  for (int j = 0; j < LK; j++) {
    int allowed = use_mask ? mask[j] : j < 2;
    if (!allowed) ck_assert_msg(w[j] == 0.0f, "w[%d] = %g", j, w[j]);
    sum += w[j];
  }
  ck_assert_double_eq_tol(sum, 1.0, 1e-6);
  ck_assert(o1[0] >= 1.0f && o1[0] <= 10.0f);
  ck_assert(o2[0] >= 1.0f && o2[0] <= 10.0f);
}

START_TEST(test_allowed_scores_at_minus_flt_max_keep_masked_keys_zero) {
  minus_flt_max_scores(0);
  minus_flt_max_scores(1);
}
END_TEST

START_TEST(test_sanitize_maps_inf_to_flt_max_and_nan_to_zero) {
  ck_assert(attn__sanitize(INFINITY) == FLT_MAX);
  ck_assert(attn__sanitize(-INFINITY) == -FLT_MAX);
  ck_assert(attn__sanitize(NAN) == 0.0f);
  ck_assert(attn__sanitize(-NAN) == 0.0f);
  ck_assert(attn__sanitize(-FLT_MAX) == -FLT_MAX);
  ck_assert(attn__sanitize(1.5f) == 1.5f);
  ck_assert(attn__sanitize(-0x1p-140f) == -0x1p-140f);
}
END_TEST

/* Rows with no allowed key: all-zero weights and output, in both paths,
 * never NaN and never a uniform average. */
START_TEST(test_fully_masked_rows_are_zero_in_both_paths) {
  shape s = {2, 2, 2, 9, 5, 3, 4};
  tcase c;
  make_unit_case(&c, &s, K_VL1, 8);
  c.vl[0] = 0;
  c.vl[1] = 3;
  c.p.causal = ATTN_CAUSAL_LOWER_RIGHT; /* Lq > Lk: rows 0..3 see nothing */
  float o1[2 * 2 * 9 * 4], o2[2 * 2 * 9 * 4], w[2 * 2 * 9 * 5];
  ref_run_both(&c.p, o1, w, o2);
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 9; i++) {
      int empty_b1 = i < 4;
      for (int d = 0; d < 4; d++) {
        size_t a = ((size_t)0 * 2 + h) * 9 + i, b = ((size_t)1 * 2 + h) * 9 + i;
        ck_assert(o1[a * 4 + d] == 0.0f && o2[a * 4 + d] == 0.0f);
        if (empty_b1) ck_assert(o1[b * 4 + d] == 0.0f && o2[b * 4 + d] == 0.0f);
      }
      for (int j = 0; j < 5; j++)
        ck_assert(w[((size_t)h * 9 + i) * 5 + j] == 0.0f);
    }
  ref_compare(&c.p, "fully masked rows", 0);
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Values far beyond unit scale.  The output is a convex combination of
 * value rows (times 1/(1-p) under dropout), so it is no larger than the
 * largest value even when Lk * max|v| is far beyond FLT_MAX; sums of
 * unnormalised terms must not overflow on the way.  Outputs are measured
 * against the size of their terms (ref_compare scaled). */

/* Values of random sign (or all positive) with magnitudes spread
 * log-uniformly over [lo, hi]. */
static void set_values(tcase *c, rng *r, double lo, double hi, int signs) {
  const attn_problem *p = &c->p;
  size_t n = (size_t)p->B * p->Hkv * p->Lk * p->Dv;
  for (size_t i = 0; i < n; i++) {
    double m = exp(log(lo) + (log(hi) - log(lo)) * rng_unit(r));
    c->v[i] = (float)(signs && rng_int(r, 2) ? -m : m);
  }
}

/* Lk keys at score 0 with every value x (or pattern's values, one a
 * key): uniform weights, so the output is the mean, within the contract's
 * 1e-5 (relative, as the values are huge).  Equal terms are the hard case
 * for a long sum: each rounding errs the same way, so a sum of Lk of them
 * taken as one chain drifts by about Lk 2^-26 (4000 keys: 6e-5); the
 * products are summed in blocks, which keeps it near 1e-6.  gemm selects
 * the product (ATTN_GEMM_AUTO or ATTN_GEMM_BLAS). */
static void uniform_keys_with(int gemm, int lk, const float *pattern,
                              float x, double want) {
  float q[1] = {0}, o1[1], o2[1];
  float *k = calloc((size_t)lk, sizeof *k), *v = malloc((size_t)lk * 4);
  float *w = malloc((size_t)lk * 4);
  attn_problem p;
  for (int j = 0; j < lk; j++) v[j] = pattern ? pattern[j] : x;
  attn_problem_init(&p);
  p.B = 1; p.Lq = 1; p.Lk = lk; p.D = p.Dk = 1; p.Dv = 1;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  p.gemm = gemm;
  ref_run_both(&p, o1, w, o2);
  for (int j = 0; j < lk; j++)
    EXPECT(fabs(w[j] - 1.0 / lk) <= 1e-7, "Lk %d: w[%d] = %g", lk, j, w[j]);
  double tol = 1e-5 * (fabs(want) + fabs(x));
  EXPECT(fabs(o1[0] - want) <= tol,
         "Lk %d x %g gemm %d: weights path %.9g, want %g", lk, x, gemm, o1[0],
         want);
  EXPECT(fabs(o2[0] - want) <= tol,
         "Lk %d x %g gemm %d: online path %.9g, want %g", lk, x, gemm, o2[0],
         want);
  free(k); free(v); free(w);
}

static void uniform_keys(int lk, const float *pattern, float x, double want) {
  uniform_keys_with(ATTN_GEMM_AUTO, lk, pattern, x, want);
}

/* The same at unit scale, where the contract's tolerance is 1e-5 +
 * 1e-5 |ref|: the mean of 16384 values of 0.1 was 1.5e-5 off. */
START_TEST(test_long_rows_of_equal_values_average_within_tolerance) {
  static const float xs[] = {0.1f, 0.3f, 0.7f, -0.9f, 1e-3f};
  static const int lks[] = {1000, 4096, 16384};
  for (int g = 0; g < 2; g++)
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
      for (size_t l = 0; l < sizeof lks / sizeof lks[0]; l++)
        uniform_keys_with(g ? ATTN_GEMM_BLAS : ATTN_GEMM_AUTO, lks[l], NULL,
                          xs[i], xs[i]);
}
END_TEST

START_TEST(test_huge_equal_values_average_to_themselves) {
  static const float signs4[4] = {3e38f, 3e38f, -3e38f, -3e38f};
  uniform_keys(2, NULL, 2e38f, 2e38);
  uniform_keys(4, signs4, 3e38f, 0.0);
  uniform_keys(2, NULL, FLT_MAX, FLT_MAX);
  uniform_keys(4000, NULL, 1e35f, 1e35f);
  uniform_keys(400, NULL, 1e36f, 1e36f);
  uniform_keys(40, NULL, 1e37f, 1e37f);
  uniform_keys(40, NULL, -1e37f, -1e37f);
}
END_TEST

/* Random signs at 1e35 .. 3e38 (and one sign, the worst case for the
 * sums) with key lengths on both sides of the key block and of the
 * weights path's row chunk, query lengths past a query block, through
 * the GEMM the core picks and through cblas_sgemm. */
START_TEST(test_huge_values_match_reference_across_key_lengths) {
  static const int lk[] = {2, 3, 17, 511, 512, 513, 1025, 4096};
  size_t nl = sizeof lk / sizeof lk[0];
  rng r = {77};
  for (size_t t = 0; t < nl; t++)
    for (int signs = 0; signs < 4; signs++) {
      int lq = under_valgrind() ? 3 : lk[t] > 1024 ? 20 : 65;
      shape s = {1, 2, 1, lq, lk[t], 4, 3};
      tcase c;
      char label[96];
      make_unit_case(&c, &s, 0, 50 + t);
      set_values(&c, &r, 1e35, 3e38, signs & 1);
      c.p.gemm = signs & 2 ? ATTN_GEMM_BLAS : ATTN_GEMM_AUTO;
      snprintf(label, sizeof label, "huge values Lk %d signs %d gemm %d",
               lk[t], signs & 1, c.p.gemm);
      ref_compare(&c.p, label, 1);
      free_case(&c);
    }
}
END_TEST

/* Huge values under every mask kind, grouped heads, additive scoring and
 * dropout: masked weights and empty rows stay exactly 0.  Dropout values
 * stay below FLT_MAX (1 - p) so that the true output is a float. */
static void huge_values_kinds(int kinds, const char *what) {
  static const shape sh[] = {
    {2, 4, 2, 65, 129, 8, 5}, {1, 2, 1, 70, 600, 4, 3},
    {2, 3, 1, 9, 1100, 3, 2},
  };
  rng r = {(uint64_t)kinds + 5};
  int empty = 0;
  for (size_t t = 0; t < sizeof sh / sizeof sh[0]; t++) {
    tcase c;
    char label[128];
    make_unit_case(&c, &sh[t], kinds, 60 + t + (uint64_t)kinds);
    set_values(&c, &r, 1e35, (kinds & K_DROP) ? 1e38 : 3e38, t != 1);
    snprintf(label, sizeof label, "%s huge values B%d H%d/%d Lq%d Lk%d",
             what, sh[t].B, sh[t].H, sh[t].Hkv, sh[t].Lq, sh[t].Lk);
    empty += ref_compare(&c.p, label, 1);
    free_case(&c);
  }
  if (kinds & (K_VL1 | K_VL2)) ck_assert_int_gt(empty, 0);
}

START_TEST(test_huge_values_with_masks_match_reference) {
  huge_values_kinds(K_VL1, "valid_lens");
  huge_values_kinds(K_VL2 | K_MASK | K_UL | K_BIAS, "composed");
  huge_values_kinds(K_VL2 | K_LR | K_WIN, "window");
}
END_TEST

START_TEST(test_huge_values_additive_and_dropout_match_reference) {
  huge_values_kinds(K_ADD | K_VL2 | K_MASK, "additive");
  huge_values_kinds(K_DROP | K_VL2 | K_MASK, "dropout");
  huge_values_kinds(K_DROP | K_ADD | K_UL, "additive dropout");
}
END_TEST

/* The redone tasks keep the split invariant: tasks run one at a time in
 * reverse order give attn_forward's bits. */
static void huge_split(int with_weights) {
  shape s = {2, 4, 2, 150, 700, 4, 3};
  rng r = {88};
  tcase c;
  make_unit_case(&c, &s, K_VL2 | K_MASK | K_BIAS | K_DROP, 23);
  set_values(&c, &r, 1e35, 1e38, 0);
  size_t no = ref_out_len(&c.p), nw = with_weights ? ref_w_len(&c.p) : 0;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = nw ? malloc(nw * 4) : NULL, *w2 = nw ? malloc(nw * 4) : NULL;
  size_t bytes = (attn_scratch_bytes(&c.p, with_weights) + 63) / 64 * 64;
  size_t tasks = attn_task_count(&c.p, with_weights);
  ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
  for (size_t t = tasks; t-- > 0;) {
    void *scratch = aligned_alloc(64, bytes);
    memset(scratch, 0xA5, bytes);
    ck_assert_int_eq(attn_run_tasks(&c.p, t, t + 1, o2, w2, scratch), 0);
    free(scratch);
  }
  ck_assert_mem_eq(o1, o2, no * 4);
  if (nw) ck_assert_mem_eq(w1, w2, nw * 4);
  ref_compare(&c.p, "huge split", 1);
  free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_huge_values_task_split_is_bit_identical) {
  huge_split(1);
  huge_split(0);
}
END_TEST

static Suite *extremes_suite(void) {
  Suite *s = suite_create("core extremes");
  TCase *edge = tcase_create("edges");
  tcase_set_timeout(edge, 60);
  tcase_add_test(edge, test_negative_scale_matches_reference);
  tcase_add_test(edge, test_huge_scale_gives_one_hot_finite_rows);
  tcase_add_test(edge, test_inputs_near_1e38_stay_finite);
  tcase_add_test(edge, test_additive_inputs_near_1e38_stay_finite);
  tcase_add_test(edge, test_allowed_scores_at_minus_flt_max_keep_masked_keys_zero);
  tcase_add_test(edge, test_sanitize_maps_inf_to_flt_max_and_nan_to_zero);
  tcase_add_test(edge, test_fully_masked_rows_are_zero_in_both_paths);
  suite_add_tcase(s, edge);

  TCase *huge = tcase_create("huge values");
  tcase_set_timeout(huge, 120);
  tcase_add_test(huge, test_long_rows_of_equal_values_average_within_tolerance);
  tcase_add_test(huge, test_huge_equal_values_average_to_themselves);
  tcase_add_test(huge, test_huge_values_match_reference_across_key_lengths);
  tcase_add_test(huge, test_huge_values_with_masks_match_reference);
  tcase_add_test(huge, test_huge_values_additive_and_dropout_match_reference);
  tcase_add_test(huge, test_huge_values_task_split_is_bit_identical);
  suite_add_tcase(s, huge);
  return s;
}

int main(void) { return ref_run_suite(extremes_suite()); }
