/* test_core.c - core/ against an independent float64 reference.
 *
 * The reference (support_ref.c, shared with the other core suites) is
 * deliberately naive: loops over (b, h, i, j) in double, its own reading
 * of the mask rules in attn.h, its own copy of the dropout hash.  Every numeric path of the core (weights path, online path,
 * dot and additive scoring, every mask kind, dropout) is compared with it
 * over random shapes whose lengths are not multiples of any block size.
 * Tolerances are design.md's: outputs 1e-5 + 1e-5 |ref|, weights 1e-5,
 * rows summing to 1 within 1e-5, masked and empty positions exactly 0.
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
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "support_skip.h"
#include "core/attn.h"
#include "core/attn_impl.h"
#include "support_ref.h"

/* The cases (make_case with K_UNIT: scale 1/sqrt(D)) and the float64
 * reference: support_ref.h. */
static void unit_case(tcase *c, const shape *s, int kinds, uint64_t seed) {
  make_case(c, s, kinds | K_UNIT, seed);
}

/* ------------------------------------------------------------------ */
/* Comparing the core with the reference. */

static const shape full_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1},     {2, 1, 1, 3, 7, 5, 3},
  {1, 4, 2, 65, 129, 16, 8}, {2, 1, 1, 130, 300, 8, 12},
  {1, 2, 1, 70, 33, 4, 6},   {1, 2, 2, 1, 300, 32, 16},
  {2, 4, 1, 65, 7, 3, 5},    {1, 1, 1, 130, 1, 2, 2},
};
/* Under valgrind: still one query length past a query block, one key
 * length past a key block, grouped heads and Lq > Lk, but fewer cells. */
static const shape vg_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1},   {2, 1, 1, 3, 7, 5, 3},
  {1, 4, 2, 66, 9, 8, 4},  {1, 1, 1, 5, 260, 4, 3},
};

/* Runs one mask combination over every shape; returns empty-row count. */
static int compare_kinds(int kinds, const char *what) {
  const shape *s = under_valgrind() ? vg_shapes : full_shapes;
  size_t n = under_valgrind() ? sizeof vg_shapes / sizeof vg_shapes[0]
                              : sizeof full_shapes / sizeof full_shapes[0];
  int empty = 0;
  for (size_t t = 0; t < n; t++) {
    tcase c;
    char label[160];
    unit_case(&c, &s[t], kinds, 1000 + t * 7 + (uint64_t)kinds);
    snprintf(label, sizeof label, "%s B%d H%d/%d Lq%d Lk%d D%d Dv%d", what,
             s[t].B, s[t].H, s[t].Hkv, s[t].Lq, s[t].Lk, s[t].D, s[t].Dv);
    empty += ref_compare(&c.p, label, 0);
    free_case(&c);
  }
  return empty;
}

/* ------------------------------------------------------------------ */
/* Every mask kind, both paths, against the reference. */

START_TEST(test_no_mask_matches_reference) {
  ck_assert_int_eq(compare_kinds(0, "no mask"), 0);
}
END_TEST

START_TEST(test_valid_lens_per_item_match_reference) {
  ck_assert_int_gt(compare_kinds(K_VL1, "valid_lens (B,)"), 0);
}
END_TEST

START_TEST(test_valid_lens_per_query_match_reference) {
  ck_assert_int_gt(compare_kinds(K_VL2, "valid_lens (B,Lq)"), 0);
}
END_TEST

START_TEST(test_broadcast_bool_mask_matches_reference) {
  compare_kinds(K_MASK, "bool mask");
}
END_TEST

START_TEST(test_causal_upper_left_matches_reference) {
  ck_assert_int_eq(compare_kinds(K_UL, "causal upper_left"), 0);
}
END_TEST

START_TEST(test_causal_lower_right_matches_reference) {
  /* Lq > Lk shapes leave the first Lq - Lk rows with no key at all. */
  ck_assert_int_gt(compare_kinds(K_LR, "causal lower_right"), 0);
}
END_TEST

START_TEST(test_window_matches_reference) {
  compare_kinds(K_WIN, "window");
}
END_TEST

START_TEST(test_bias_matches_reference) {
  ck_assert_int_eq(compare_kinds(K_BIAS, "bias"), 0);
}
END_TEST

START_TEST(test_composed_masks_match_reference) {
  compare_kinds(K_VL2 | K_MASK | K_UL | K_WIN | K_BIAS, "composed UL");
  compare_kinds(K_VL1 | K_MASK | K_LR | K_WIN | K_BIAS, "composed LR");
}
END_TEST

START_TEST(test_additive_scoring_matches_reference) {
  compare_kinds(K_ADD, "additive");
  compare_kinds(K_ADD | K_VL2 | K_MASK | K_LR | K_BIAS, "additive masked");
}
END_TEST

START_TEST(test_dropout_matches_reference) {
  compare_kinds(K_DROP, "dropout");
  compare_kinds(K_DROP | K_VL1 | K_UL | K_BIAS | K_ADD, "dropout masked");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Worked examples (background texts and design.md). */

static void run_both(const attn_problem *p, float *out_w, float *w,
                     float *out_online) {
  ck_assert_int_eq(attn_forward(p, out_w, w), 0);
  ck_assert_int_eq(attn_forward(p, out_online, NULL), 0);
}

/* q = [[1,0],[0,2]], k = [[1,1],[2,0],[0,3]]: dots [[1,2,0],[2,0,6]], so
 * with scale 1 the weights are the softmax of those rows. */
START_TEST(test_worked_example_dots_give_softmax_weights) {
  static const float q[] = {1, 0, 0, 2}, k[] = {1, 1, 2, 0, 0, 3};
  static const float v[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  static const double dots[2][3] = {{1, 2, 0}, {2, 0, 6}};
  attn_problem p;
  float o1[6], o2[6], w[6];
  attn_problem_init(&p);
  p.B = 1; p.Lq = 2; p.Lk = 3; p.D = p.Dk = 2; p.Dv = 3;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  run_both(&p, o1, w, o2);
  for (int i = 0; i < 2; i++) {
    double z = exp(dots[i][0]) + exp(dots[i][1]) + exp(dots[i][2]);
    for (int j = 0; j < 3; j++) {
      double want = exp(dots[i][j]) / z; /* v = I: output = weights */
      ck_assert_double_eq_tol(w[i * 3 + j], want, 1e-6);
      ck_assert_double_eq_tol(o1[i * 3 + j], want, 1e-6);
      ck_assert_double_eq_tol(o2[i * 3 + j], want, 1e-6);
    }
  }
}
END_TEST

/* Weights [0.25, 0.75] (scores 0 and ln 3) with values [2, 6] give 5. */
START_TEST(test_worked_example_weights_quarter_three_quarters_give_5) {
  const float q[] = {1}, k[] = {0, (float)log(3.0)}, v[] = {2, 6};
  attn_problem p;
  float o1[1], o2[1], w[2];
  attn_problem_init(&p);
  p.B = 1; p.Lq = 1; p.Lk = 2; p.D = p.Dk = 1; p.Dv = 1;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  run_both(&p, o1, w, o2);
  ck_assert_double_eq_tol(w[0], 0.25, 1e-6);
  ck_assert_double_eq_tol(w[1], 0.75, 1e-6);
  ck_assert_double_eq_tol(o1[0], 5.0, 1e-5);
  ck_assert_double_eq_tol(o2[0], 5.0, 1e-5);
}
END_TEST

/* d2l masked_softmax on a (2, 2, 4) input: the scores are fed through the
 * bias (q = 0), chosen as log of the printed weights inside the lengths
 * and a large 1e4 beyond them, which must not leak. */
static void d2l_masked_softmax(const float want[16], const int32_t *vl,
                               int per_query) {
  float q[8] = {0}, k[8] = {0}, v[8] = {0}, bias[16], o[8], w[16];
  attn_problem p;
  attn_problem_init(&p);
  p.B = 2; p.Lq = 2; p.Lk = 4; p.D = p.Dk = 1; p.Dv = 1;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  p.valid_lens = vl;
  p.valid_lens_per_query = per_query;
  for (int t = 0; t < 16; t++) bias[t] = want[t] > 0 ? logf(want[t]) : 1e4f;
  p.bias = bias;
  p.bias_stride[0] = 8; p.bias_stride[1] = 0;
  p.bias_stride[2] = 4; p.bias_stride[3] = 1;
  ck_assert_int_eq(attn_forward(&p, o, w), 0);
  for (int t = 0; t < 16; t++) {
    if (want[t] == 0.0f)
      ck_assert_msg(w[t] == 0.0f, "weight %d = %g beyond the length", t, w[t]);
    else
      ck_assert_double_eq_tol(w[t], want[t], 2e-6);
  }
}

START_TEST(test_d2l_masked_softmax_valid_lens_2_3) {
  static const float want[16] = {
    0.4922724f, 0.5077276f, 0, 0, 0.5997409f, 0.40025908f, 0, 0,
    0.3531402f, 0.19856434f, 0.4482954f, 0, 0.31042197f, 0.2873157f,
    0.40226236f, 0};
  static const int32_t vl[2] = {2, 3};
  d2l_masked_softmax(want, vl, 0);
}
END_TEST

START_TEST(test_d2l_masked_softmax_per_query_lens) {
  static const float want[16] = {
    1.0f, 0, 0, 0, 0.35672572f, 0.2543091f, 0.38896522f, 0,
    0.43679553f, 0.5632045f, 0, 0, 0.2580636f, 0.2509437f, 0.258296f,
    0.23269679f};
  static const int32_t vl[4] = {1, 3, 2, 4};
  d2l_masked_softmax(want, vl, 1);
}
END_TEST

/* d2l DotProductAttention / AdditiveAttention: keys all ones, values
 * arange(40).reshape(10, 4) per item, valid_lens (2, 6).  Equal keys give
 * equal weights over the valid prefix, so the outputs are the means of the
 * first 2 and 6 value rows: [2, 3, 4, 5] and [10, 11, 12, 13]. */
static void d2l_attention(int additive) {
  int D = additive ? 20 : 2;
  float q[2 * 20], k[2 * 10 * 2], v[2 * 10 * 4], o1[8], o2[8], w[20];
  float wq[8 * 20], wk[8 * 2], wv[8];
  const int32_t vl[2] = {2, 6};
  rng r = {42};
  attn_problem p;
  for (int t = 0; t < 2 * D; t++) q[t] = rng_sym(&r, 2.0f);
  for (int t = 0; t < 40; t++) k[t] = 1.0f;
  for (int t = 0; t < 80; t++) v[t] = (float)(t % 40);
  attn_problem_init(&p);
  p.B = 2; p.Lq = 1; p.Lk = 10; p.D = D; p.Dk = 2; p.Dv = 4;
  p.q = q; p.k = k; p.v = v; p.valid_lens = vl;
  if (additive) {
    for (int t = 0; t < 160; t++) wq[t] = rng_sym(&r, 0.3f);
    for (int t = 0; t < 16; t++) wk[t] = rng_sym(&r, 0.7f);
    for (int t = 0; t < 8; t++) wv[t] = rng_sym(&r, 0.5f);
    p.scoring = ATTN_SCORING_ADDITIVE;
    p.Hd = 8; p.w_q = wq; p.w_k = wk; p.w_v = wv;
  } else {
    p.scale = (float)(1.0 / sqrt(2.0));
  }
  run_both(&p, o1, w, o2);
  for (int d = 0; d < 4; d++) {
    ck_assert_double_eq_tol(o1[d], 2 + d, 1e-5);
    ck_assert_double_eq_tol(o2[d], 2 + d, 1e-5);
    ck_assert_double_eq_tol(o1[4 + d], 10 + d, 1e-4);
    ck_assert_double_eq_tol(o2[4 + d], 10 + d, 1e-4);
  }
  for (int j = 0; j < 10; j++) {
    ck_assert(j < 2 ? fabsf(w[j] - 0.5f) < 1e-6f : w[j] == 0.0f);
    ck_assert(j < 6 ? fabsf(w[10 + j] - 1.0f / 6) < 1e-6f : w[10 + j] == 0.0f);
  }
}

START_TEST(test_d2l_dot_product_attention_example) { d2l_attention(0); }
END_TEST

START_TEST(test_d2l_additive_attention_example) { d2l_attention(1); }
END_TEST

/* design.md's example request: valid_lens [2], scale 0.7071. */
START_TEST(test_design_example_request) {
  static const float q[] = {1, 0, 0, 2}, k[] = {1, 1, 2, 0, 0, 3};
  static const float v[] = {1, 0, 0, 1, 1, 1};
  static const int32_t vl[] = {2};
  attn_problem p;
  float o1[4], o2[4], w[6];
  attn_problem_init(&p);
  p.B = 1; p.Lq = 2; p.Lk = 3; p.D = p.Dk = 2; p.Dv = 2;
  p.q = q; p.k = k; p.v = v; p.scale = 0.7071f; p.valid_lens = vl;
  run_both(&p, o1, w, o2);
  /* row 0 scores [1, 2] * s, row 1 [2, 0] * s; key 2 masked */
  double a0 = 1.0 / (1.0 + exp(0.7071)), a1 = 1.0 / (1.0 + exp(-1.4142));
  double want_w[6] = {a0, 1 - a0, 0, a1, 1 - a1, 0};
  double want_o[4] = {a0, 1 - a0, a1, 1 - a1};
  for (int t = 0; t < 6; t++) ck_assert_double_eq_tol(w[t], want_w[t], 1e-6);
  ck_assert(w[2] == 0.0f && w[5] == 0.0f);
  for (int t = 0; t < 4; t++) {
    ck_assert_double_eq_tol(o1[t], want_o[t], 1e-6);
    ck_assert_double_eq_tol(o2[t], want_o[t], 1e-6);
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Edge numerics. */

START_TEST(test_negative_scale_matches_reference) {
  shape s = {2, 2, 1, 67, 131, 8, 5};
  tcase c;
  unit_case(&c, &s, K_VL1 | K_BIAS, 77);
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
  unit_case(&c, &s, K_UL, 5);
  c.p.scale = 1e30f;
  ref_compare(&c.p, "scale 1e30", 0);
  free_case(&c);
}
END_TEST

static void assert_all_finite(const float *x, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    EXPECT(isfinite(x[i]), "%s[%zu] = %g", what, i, x[i]);
}

/* Inputs near 1e38 overflow sgemm to +-inf and inf - inf = NaN; the core
 * must clamp and still answer finite numbers with exact zeros where
 * masked, in both paths and for both scorings. */
static void huge_inputs(int kinds) {
  shape s = {1, 2, 1, under_valgrind() ? 10 : 70, 300, 6, 3};
  tcase c;
  rng r = {9};
  unit_case(&c, &s, kinds | K_VL2 | K_BIAS, 3);
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
  run_both(&c.p, o1, w, o2);
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
  run_both(&p, o1, w, o2);
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
  unit_case(&c, &s, K_VL1, 8);
  c.vl[0] = 0;
  c.vl[1] = 3;
  c.p.causal = ATTN_CAUSAL_LOWER_RIGHT; /* Lq > Lk: rows 0..3 see nothing */
  float o1[2 * 2 * 9 * 4], o2[2 * 2 * 9 * 4], w[2 * 2 * 9 * 5];
  run_both(&c.p, o1, w, o2);
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
/* Determinism and the task split. */

START_TEST(test_dropout_same_seed_same_answer_other_seed_differs) {
  shape s = {1, 2, 1, 33, 50, 4, 4};
  tcase c;
  unit_case(&c, &s, K_DROP, 11);
  size_t n = ref_out_len(&c.p);
  float *a = malloc(n * 4), *b = malloc(n * 4), *d = malloc(n * 4);
  ck_assert_int_eq(attn_forward(&c.p, a, NULL), 0);
  ck_assert_int_eq(attn_forward(&c.p, b, NULL), 0);
  ck_assert_mem_eq(a, b, n * 4);
  c.p.seed ^= 1;
  ck_assert_int_eq(attn_forward(&c.p, d, NULL), 0);
  ck_assert(memcmp(a, d, n * 4) != 0);
  free(a); free(b); free(d);
  free_case(&c);
}
END_TEST

/* Runs tasks one by one in reverse order with a fresh scratch each time
 * and compares bit for bit with attn_forward. */
static void split_is_bit_identical(int kinds, int with_weights) {
  shape big = {2, 4, 2, 150, 290, 8, 6}, small = {2, 4, 2, 70, 260, 4, 3};
  shape s = under_valgrind() ? small : big;
  tcase c;
  unit_case(&c, &s, kinds, 21);
  size_t no = ref_out_len(&c.p), nw = with_weights ? ref_w_len(&c.p) : 0;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = nw ? malloc(nw * 4) : NULL, *w2 = nw ? malloc(nw * 4) : NULL;
  size_t bytes = attn_scratch_bytes(&c.p, with_weights);
  size_t tasks = attn_task_count(&c.p, with_weights);
  ck_assert_uint_gt(tasks, 2 * 4 * 2 - 1);
  memset(o2, 0xff, no * 4); /* NaN: every element must be written */
  if (nw) memset(w2, 0xff, nw * 4);
  ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
  for (size_t t = tasks; t-- > 0;) {
    void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memset(scratch, 0xA5, (bytes + 63) / 64 * 64); /* stale garbage */
    ck_assert_int_eq(attn_run_tasks(&c.p, t, t + 1, o2, w2, scratch), 0);
    free(scratch);
  }
  ck_assert_mem_eq(o1, o2, no * 4);
  if (nw) ck_assert_mem_eq(w1, w2, nw * 4);
  free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_task_split_is_bit_identical_weights_path) {
  split_is_bit_identical(K_VL2 | K_MASK | K_BIAS | K_DROP, 1);
}
END_TEST

START_TEST(test_task_split_is_bit_identical_online_path) {
  split_is_bit_identical(K_VL2 | K_MASK | K_BIAS | K_DROP | K_UL, 0);
}
END_TEST

/* Two threads run disjoint task ranges into the same buffers, each with
 * its own scratch, as attnd's workers do; the result is bit-identical to
 * attn_forward. */
typedef struct half_job {
  const attn_problem *p;
  size_t t0, t1;
  float *out, *w;
  int rc;
} half_job;

static void *run_half(void *arg) {
  half_job *j = arg;
  size_t bytes = (attn_scratch_bytes(j->p, j->w != NULL) + 63) / 64 * 64;
  void *scratch = aligned_alloc(64, bytes);
  j->rc = scratch ? attn_run_tasks(j->p, j->t0, j->t1, j->out, j->w, scratch)
                  : ATTND_ENOMEM;
  free(scratch);
  return NULL;
}

static void threads_match_forward(int with_weights) {
  shape s = {2, 2, 1, 150, 270, 8, 6};
  tcase c;
  unit_case(&c, &s, K_VL2 | K_MASK | K_UL | K_BIAS | K_DROP, 31);
  size_t no = ref_out_len(&c.p), nw = with_weights ? ref_w_len(&c.p) : 0;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = nw ? malloc(nw * 4) : NULL, *w2 = nw ? malloc(nw * 4) : NULL;
  size_t n = attn_task_count(&c.p, with_weights);
  half_job jobs[2] = {{&c.p, 0, n / 2, o2, w2, -1},
                      {&c.p, n / 2, n, o2, w2, -1}};
  pthread_t th[2];
  ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, run_half, &jobs[k]), 0);
  for (int k = 0; k < 2; k++) {
    pthread_join(th[k], NULL);
    ck_assert_int_eq(jobs[k].rc, 0);
  }
  ck_assert_mem_eq(o1, o2, no * 4);
  if (nw) ck_assert_mem_eq(w1, w2, nw * 4);
  free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_two_threads_on_disjoint_tasks_match_forward) {
  threads_match_forward(1);
  threads_match_forward(0);
}
END_TEST

/* Random shapes and random mask combinations, both paths, both
 * scorings; every draw must match the reference. */
START_TEST(test_random_problems_match_reference) {
  static const int len[] = {1, 2, 3, 7, 31, 64, 65, 100, 129, 257, 300};
  static const int heads[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {3, 1}};
  rng r = {20261129};
  int draws = under_valgrind() ? 6 : 40;
  for (int d = 0; d < draws; d++) {
    int hh = rng_int(&r, 5), nl = under_valgrind() ? 7 : 11;
    shape s = {1 + rng_int(&r, 2), heads[hh][0], heads[hh][1],
               len[rng_int(&r, nl)], len[rng_int(&r, nl)],
               1 + rng_int(&r, 24), 1 + rng_int(&r, 24)};
    int kinds = (int)(rng_next(&r) & 0x1ff);
    if ((kinds & K_VL1) && (kinds & K_VL2)) kinds &= ~K_VL1;
    if ((kinds & K_UL) && (kinds & K_LR)) kinds &= ~K_UL;
    tcase c;
    char label[160];
    unit_case(&c, &s, kinds, rng_next(&r));
    snprintf(label, sizeof label,
             "draw %d kinds 0x%x B%d H%d/%d Lq%d Lk%d D%d Dv%d", d, kinds,
             s.B, s.H, s.Hkv, s.Lq, s.Lk, s.D, s.Dv);
    ref_compare(&c.p, label, 0);
    free_case(&c);
  }
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
  run_both(&p, o1, w, o2);
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
      unit_case(&c, &s, 0, 50 + t);
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
    unit_case(&c, &sh[t], kinds, 60 + t + (uint64_t)kinds);
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
  unit_case(&c, &s, K_VL2 | K_MASK | K_BIAS | K_DROP, 23);
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

/* ------------------------------------------------------------------ */
/* The online path skips disallowed key blocks: keys and values beyond
 * the allowed ones live in PROT_NONE pages, so touching them crashes. */

typedef struct guarded {
  char *base;
  size_t bytes;
} guarded;

/* rows of row_floats floats, one page each; rows >= readable unreadable. */
static float *guard_rows(guarded *g, int rows, int readable, rng *r) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  g->bytes = page * (size_t)rows;
  g->base = mmap(NULL, g->bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert(g->base != MAP_FAILED);
  float *x = (float *)g->base;
  for (size_t i = 0; i < page / 4 * (size_t)readable; i++)
    x[i] = rng_sym(r, 1.0f);
  ck_assert_int_eq(mprotect(g->base + page * (size_t)readable,
                            page * (size_t)(rows - readable), PROT_NONE),
                   0);
  return x;
}

static void guarded_case(attn_problem *p, guarded *gk, guarded *gv, float *q,
                         int Lk, int readable, rng *r) {
  int width = (int)((size_t)sysconf(_SC_PAGESIZE) / sizeof(float));
  attn_problem_init(p);
  p->B = 1; p->Lq = 70; p->Lk = Lk; p->D = p->Dk = p->Dv = width;
  for (int i = 0; i < 70 * width; i++) q[i] = rng_sym(r, 1.0f);
  p->q = q;
  p->k = guard_rows(gk, Lk, readable, r);
  p->v = guard_rows(gv, Lk, readable, r);
  p->scale = 1.0f / 32.0f;
}

START_TEST(test_online_path_never_reads_keys_beyond_valid_lens) {
  int width = (int)((size_t)sysconf(_SC_PAGESIZE) / sizeof(float));
  float *q = malloc((size_t)70 * width * 4);
  float *o = malloc((size_t)70 * width * 4);
  const int32_t vl[1] = {3};
  guarded gk, gv;
  attn_problem p;
  rng r = {5};
  guarded_case(&p, &gk, &gv, q, 9, 3, &r);
  p.valid_lens = vl;
  ck_assert_int_eq(attn_forward(&p, o, NULL), 0);
  float *w = malloc((size_t)70 * 9 * 4);
  ck_assert_int_eq(attn_forward(&p, o, w), 0); /* weights path too */
  assert_all_finite(o, (size_t)70 * width, "out");
  munmap(gk.base, gk.bytes); munmap(gv.base, gv.bytes);
  free(q); free(o); free(w);
}
END_TEST

START_TEST(test_online_path_skips_key_blocks_the_mask_forbids) {
  int width = (int)((size_t)sysconf(_SC_PAGESIZE) / sizeof(float));
  int Lk = ATTN__KBLOCK + 20;
  float *q = malloc((size_t)70 * width * 4);
  float *o = malloc((size_t)70 * width * 4);
  uint8_t *mask = malloc((size_t)Lk);
  guarded gk, gv;
  attn_problem p;
  rng r = {6};
  guarded_case(&p, &gk, &gv, q, Lk, ATTN__KBLOCK, &r);
  for (int j = 0; j < Lk; j++) mask[j] = j < ATTN__KBLOCK && j % 3 != 1;
  p.mask = mask;
  p.mask_stride[3] = 1; /* (Lk,) broadcast over b, h and i */
  ck_assert_int_eq(attn_forward(&p, o, NULL), 0);
  assert_all_finite(o, (size_t)70 * width, "out");
  munmap(gk.base, gk.bytes); munmap(gv.base, gv.bytes);
  free(q); free(o); free(mask);
}
END_TEST

/* Without weights the scratch does not grow with Lk past one key block:
 * no (Lq, Lk) matrix exists anywhere. */
START_TEST(test_online_scratch_does_not_grow_with_lk) {
  shape s = {1, 1, 1, 4096, 300, 64, 64};
  tcase c;
  unit_case(&c, &s, 0, 1);
  size_t a = attn_scratch_bytes(&c.p, 0);
  c.p.Lk = 1 << 20;
  size_t b = attn_scratch_bytes(&c.p, 0);
  ck_assert_uint_eq(a, b);
  ck_assert_uint_lt(b, (size_t)ATTN__QBLOCK * 1024 * 4 * 4);
  ck_assert_uint_gt(attn_scratch_bytes(&c.p, 1), (size_t)c.p.Lk * 4);
  c.p.Lk = 300;
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Diagnostics. */

/* Entropy, max and Jacobian norm of a reference row, straight from the
 * definitions (the Jacobian entry by entry). */
static void ref_stats(const double *a, int n, double *h, double *mx,
                      double *jf) {
  double f2 = 0.0;
  *h = 0.0;
  *mx = 0.0;
  for (int i = 0; i < n; i++) {
    if (a[i] > 0.0) *h -= a[i] * log(a[i]);
    if (a[i] > *mx) *mx = a[i];
    for (int j = 0; j < n; j++) {
      double m = (i == j ? a[i] : 0.0) - a[i] * a[j];
      f2 += m * m;
    }
  }
  *jf = sqrt(f2);
}

static void diagnostics_vs_ref(int kinds, const shape *s, uint64_t seed) {
  tcase c;
  unit_case(&c, s, kinds, seed);
  const attn_problem *p = &c.p;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  float *o = malloc(ref_out_len(p) * 4), *w = malloc(ref_w_len(p) * 4);
  float *h = malloc(rows * 4), *mx = malloc(rows * 4), *jf = malloc(rows * 4);
  int32_t *n = malloc(rows * 4);
  double *rw = malloc((size_t)p->Lk * 8), *ro = malloc((size_t)p->Dv * 8);
  ck_assert_int_eq(attn_forward(p, o, w), 0);
  ck_assert_int_eq(attn_diagnostics(p, w, n, h, mx, jf), 0);
  for (int b = 0; b < p->B; b++)
    for (int hd = 0; hd < p->H; hd++)
      for (int i = 0; i < p->Lq; i++) {
        size_t row = ((size_t)b * p->H + hd) * p->Lq + i;
        int allowed = ref_row(p, b, hd, i, rw, ro, NULL);
        double rh, rmx, rjf;
        ref_stats(rw, p->Lk, &rh, &rmx, &rjf);
        EXPECT(n[row] == allowed, "allowed_keys %d vs %d", n[row], allowed);
        double e = fmax(fabs(h[row] - rh), fmax(fabs(mx[row] - rmx),
                                                fabs(jf[row] - rjf)));
        EXPECT(e <= 1e-5, "row (%d,%d,%d): entropy %.9g/%.9g max %.9g/%.9g "
               "jacobian %.9g/%.9g", b, hd, i, h[row], rh, mx[row], rmx,
               jf[row], rjf);
      }
  free(o); free(w); free(h); free(mx); free(jf); free(n); free(rw); free(ro);
  free_case(&c);
}

START_TEST(test_diagnostics_match_reference) {
  shape a = {2, 2, 1, 70, 130, 8, 3}, b = {1, 4, 2, 9, 300, 16, 2};
  diagnostics_vs_ref(0, &a, 1);
  diagnostics_vs_ref(K_VL2 | K_MASK | K_LR | K_WIN | K_BIAS, &a, 2);
  diagnostics_vs_ref(K_VL1 | K_MASK | K_UL | K_DROP | K_ADD, &b, 3);
}
END_TEST

/* Equal keys give uniform weights over the n allowed keys: entropy ln n,
 * max 1/n, Jacobian norm sqrt(n - 1) / n; a row with no key gets zeros. */
START_TEST(test_diagnostics_of_uniform_and_empty_rows) {
  float q[4] = {1, 2, 3, 4}, k[6] = {1, 1, 1, 1, 1, 1}, v[6] = {0};
  float o[4], w[24], h[4], mx[4], jf[4];
  const int32_t vl[4] = {0, 1, 4, 6};
  int32_t n[4];
  attn_problem p;
  attn_problem_init(&p);
  p.B = 1; p.Lq = 4; p.Lk = 6; p.D = p.Dk = 1; p.Dv = 1;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f;
  p.valid_lens = vl; p.valid_lens_per_query = 1;
  ck_assert_int_eq(attn_forward(&p, o, w), 0);
  ck_assert_int_eq(attn_diagnostics(&p, w, n, h, mx, jf), 0);
  ck_assert(n[0] == 0 && h[0] == 0.0f && mx[0] == 0.0f && jf[0] == 0.0f);
  for (int i = 1; i < 4; i++) {
    double c = vl[i];
    ck_assert_int_eq(n[i], vl[i]);
    ck_assert_double_eq_tol(h[i], log(c), 1e-6);
    ck_assert_double_eq_tol(mx[i], 1.0 / c, 1e-7);
    ck_assert_double_eq_tol(jf[i], sqrt(c - 1.0) / c, 1e-6);
  }
  ck_assert_int_eq(attn_diagnostics(&p, NULL, n, h, mx, jf), ATTND_EINVAL);
  ck_assert_int_eq(attn_diagnostics(&p, w, NULL, NULL, NULL, NULL), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* attn_check and the run_tasks arguments. */

static void valid_problem(attn_problem *p, const float *buf) {
  attn_problem_init(p);
  p->B = 1; p->Lq = 2; p->Lk = 3; p->D = p->Dk = 2; p->Dv = 2;
  p->q = p->k = p->v = buf;
  p->scale = 1.0f;
}

START_TEST(test_check_rejects_inconsistent_problems) {
  float buf[64] = {0}, out[64];
  uint8_t m[4] = {1, 1, 1, 1};
  attn_problem p;
  valid_problem(&p, buf);
  ck_assert_int_eq(attn_check(&p), 0);
  ck_assert_int_eq(attn_check(NULL), ATTND_EINVAL);
#define BAD(stmt)                                                        \
  do {                                                                   \
    valid_problem(&p, buf);                                              \
    stmt;                                                                \
    ck_assert_msg(attn_check(&p) == ATTND_EINVAL, "accepted: %s", #stmt); \
    ck_assert_int_eq(attn_forward(&p, out, NULL), ATTND_EINVAL);         \
  } while (0)
  BAD(p.B = 0);
  BAD(p.Lq = 0);
  BAD(p.Lk = -1);
  BAD(p.D = 0);
  BAD(p.Dv = 0);
  BAD(p.Dk = 3);
  BAD((p.H = 3, p.Hkv = 2));
  BAD(p.Hkv = 0);
  BAD(p.q = NULL);
  BAD(p.k = NULL);
  BAD(p.v = NULL);
  BAD(p.scale = 0.0f);
  BAD(p.scale = INFINITY);
  BAD(p.scale = NAN);
  BAD(p.dropout_p = 1.0f);
  BAD(p.dropout_p = -0.1f);
  BAD(p.dropout_p = NAN);
  BAD(p.causal = 3);
  BAD(p.scoring = 2);
  BAD((p.scoring = ATTN_SCORING_ADDITIVE, p.Hd = 0));
  BAD((p.scoring = ATTN_SCORING_ADDITIVE, p.Hd = 2, p.w_q = buf, p.w_k = buf));
  BAD((p.mask = m, p.mask_stride[2] = -1));
  BAD((p.B = 1 << 30, p.H = 1 << 30, p.Hkv = 1 << 30));
#undef BAD
  /* the additive problem with everything present is fine, any scale */
  valid_problem(&p, buf);
  p.scoring = ATTN_SCORING_ADDITIVE;
  p.Hd = 2; p.w_q = p.w_k = p.w_v = buf; p.scale = 0.0f;
  ck_assert_int_eq(attn_check(&p), 0);
}
END_TEST

START_TEST(test_run_tasks_rejects_ranges_beyond_task_count) {
  float buf[64] = {0}, out[64];
  attn_problem p;
  valid_problem(&p, buf);
  size_t n = attn_task_count(&p, 0);
  void *scratch = aligned_alloc(64, (attn_scratch_bytes(&p, 0) + 63) / 64 * 64);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n + 1, out, NULL, scratch),
                   ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 1, 0, out, NULL, scratch), ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n, NULL, NULL, scratch), ATTND_EINVAL);
  ck_assert_int_eq(attn_run_tasks(&p, 0, n, out, NULL, scratch), 0);
  ck_assert_int_eq(attn_run_tasks(&p, n, n, out, NULL, scratch), 0);
  free(scratch);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The vectorizable scalar kernels. */

/* |got - want| in units of the last place of the float nearest want. */
static double ulps(float got, double want) {
  return fabs((double)got - want) / ldexp(1.0, ilogbf((float)want) - 23);
}

START_TEST(test_expf_is_within_2_ulp_and_exactly_0_below_cutoff) {
  for (double x = -87.33; x <= 88.0; x += 0.00137) {
    float xf = (float)x;
    double want = exp((double)xf);
    EXPECT(ulps(attn__expf(xf), want) <= 2.0,
                  "exp(%.9g) = %.9g, want %.9g", xf, attn__expf(xf), want);
  }
  ck_assert(attn__expf(0.0f) == 1.0f);
  ck_assert(attn__expf(-87.34f) == 0.0f);
  ck_assert(attn__expf(-100.0f) == 0.0f);
  ck_assert(attn__expf(-FLT_MAX) == 0.0f);
  ck_assert(attn__expf(-INFINITY) == 0.0f);
  ck_assert(isfinite(attn__expf(FLT_MAX)));
}
END_TEST

START_TEST(test_tanhf_is_within_2_ulp) {
  for (double x = -12.0; x <= 12.0; x += 0.000731) {
    float xf = (float)x;
    double want = tanh((double)xf);
    if (xf == 0.0f) continue;
    EXPECT(ulps(attn__tanhf(xf), want) <= 2.0,
                  "tanh(%.9g) = %.9g, want %.9g", xf, attn__tanhf(xf), want);
  }
  ck_assert(attn__tanhf(FLT_MAX) == 1.0f && attn__tanhf(-FLT_MAX) == -1.0f);
  ck_assert(attn__tanhf(INFINITY) == 1.0f && attn__tanhf(0.0f) == 0.0f);
}
END_TEST

START_TEST(test_dropout_keep_follows_documented_formula) {
  rng r = {99};
  int kept = 0, n = 20000;
  attn_problem p;
  attn_problem_init(&p);
  p.B = 3; p.H = 5; p.Hkv = 5; p.Lq = 7; p.Lk = 11;
  p.dropout_p = 0.3f;
  p.seed = 12345;
  for (int t = 0; t < n; t++) {
    int b = rng_int(&r, 3), h = rng_int(&r, 5), i = rng_int(&r, 7),
        j = rng_int(&r, 11);
    uint64_t idx = (((uint64_t)b * 5 + h) * 7 + i) * 11 + j;
    int keep = attn__dropout_keep(p.seed, idx, p.dropout_p);
    EXPECT(keep == ref_keep(&p, b, h, i, j), "keep(%d,%d,%d,%d) = %d", b, h,
           i, j, keep);
    kept += keep;
  }
  ck_assert_int_gt(kept, (int)(0.67 * n));
  ck_assert_int_lt(kept, (int)(0.73 * n));
}
END_TEST

/* ------------------------------------------------------------------ */
/* The softmax row kernels, portable and AVX2 + FMA alike. */

typedef float exp_sum_fn(float *s, const float *f, int a, int z, float m);

/* s[a, z) = exp(s - m) * f within 2 ulp (exactly 0 below the cut-off or
 * where f is 0), s outside [a, z) untouched, the sum within 1e-6. */
static void check_exp_sum(exp_sum_fn *fn, const char *name) {
  enum { N = 203 };
  float s[N], x[N], f[N];
  rng r = {17};
  for (int round = 0; round < 40; round++) {
    int a = rng_int(&r, 9), z = a + rng_int(&r, N - a);
    int masked = round % 2;
    float m = round % 3 == 0 ? 0.0f : rng_sym(&r, 50.0f);
    for (int c = 0; c < N; c++) {
      /* x - m spans [-95, 0]: below the cut-off too */
      x[c] = m - (float)(95.0 * rng_unit(&r));
      if (c % 17 == 3) x[c] = m; /* the maximum itself */
      f[c] = rng_int(&r, 4) ? 1.0f : 0.0f;
      s[c] = x[c];
    }
    double want_sum = 0.0;
    float got_sum = fn(s, masked ? f : NULL, a, z, m);
    for (int c = 0; c < N; c++) {
      if (c < a || c >= z) {
        EXPECT(s[c] == x[c], "%s: s[%d] outside [%d, %d) changed", name, c,
               a, z);
        continue;
      }
      float arg = x[c] - m;
      double want = arg < -87.33654f ? 0.0 : exp((double)arg);
      if (masked) want *= f[c];
      want_sum += want;
      if (want == 0.0)
        EXPECT(s[c] == 0.0f, "%s: exp(%.9g) = %g, want exactly 0", name,
               arg, s[c]);
      else
        EXPECT(ulps(s[c], want) <= 2.0, "%s: exp(%.9g) = %.9g, want %.9g",
               name, arg, s[c], want);
    }
    EXPECT(fabs(got_sum - want_sum) <= 1e-6 * (1.0 + want_sum),
           "%s: sum %.9g, want %.9g", name, got_sum, want_sum);
  }
  /* -inf and -FLT_MAX arguments give 0, never NaN */
  float t[3] = {-INFINITY, -FLT_MAX, 0.0f};
  ck_assert(fn(t, NULL, 0, 3, 0.0f) == 1.0f);
  ck_assert(t[0] == 0.0f && t[1] == 0.0f && t[2] == 1.0f);
}

START_TEST(test_exp_sum_kernels_within_2_ulp) {
  check_exp_sum(attn__exp_sum_portable, "portable");
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx2_fma()) check_exp_sum(attn__exp_sum_avx2, "avx2");
  if (attn__use_avx2_fma() && __builtin_cpu_supports("avx512f"))
    check_exp_sum(attn__exp_sum_avx512, "avx512");
#endif
}
END_TEST

START_TEST(test_avx2_row_max_flags_non_finite) {
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx2_fma()) return;
  enum { N = 70 };
  float s[N];
  rng r = {23};
  for (int round = 0; round < 60; round++) {
    int a = rng_int(&r, 10), z = a + 1 + rng_int(&r, N - a - 1), finite;
    float want = -FLT_MAX;
    for (int c = 0; c < N; c++) s[c] = rng_sym(&r, 1000.0f);
    s[rng_int(&r, N)] = 5000.0f; /* maybe outside [a, z): ignored */
    for (int c = a; c < z; c++) want = s[c] > want ? s[c] : want;
    ck_assert(attn__max_avx2(s, a, z, &finite) == want);
    ck_assert_int_eq(finite, 1);
    int c = a + rng_int(&r, z - a);
    float bad[3] = {INFINITY, -INFINITY, NAN};
    s[c] = bad[round % 3];
    attn__max_avx2(s, a, z, &finite);
    ck_assert_msg(finite == 0, "%g at %d in [%d, %d) not seen", s[c], c, a,
                  z);
  }
#endif
}
END_TEST

/* Weights rows: zeros around [klo, khi), s * inv inside, whatever the
 * alignment of the row and with or without streaming stores. */
START_TEST(test_weight_rows_are_written_exactly) {
  enum { LK = 75 };
  float buf[LK + 16], s[LK];
  rng r = {29};
  for (int round = 0; round < 64; round++) {
    int off = round % 8, klo = rng_int(&r, LK);
    int khi = klo + rng_int(&r, LK - klo + 1);
    float inv = (float)rng_unit(&r), *w = buf + off;
    for (int c = 0; c < LK + 16; c++) buf[c] = 7.0f;
    for (int c = 0; c < LK; c++) s[c] = rng_sym(&r, 1.0f);
    attn__write_weight_row(w, LK, klo, khi, s, inv, round % 2);
    attn__write_weights_done(round % 2);
    for (int c = 0; c < LK; c++) {
      float want = c >= klo && c < khi ? s[c - klo] * inv : 0.0f;
      EXPECT(w[c] == want, "w[%d] = %g, want %g (klo %d khi %d off %d)", c,
             w[c], want, klo, khi, off);
    }
    for (int c = 0; c < off; c++) ck_assert(buf[c] == 7.0f);
    for (int c = off + LK; c < LK + 16; c++) ck_assert(buf[c] == 7.0f);
  }
}
END_TEST

/* Key lengths past ATTN__WFLOATS / (rows per task) split a task's rows
 * into several weights-path chunks; 32 heads of 2 query blocks each get
 * tasks of twice ATTN__QBLOCK rows. */
START_TEST(test_weights_path_row_chunks_match_reference) {
  if (under_valgrind()) return; /* 17 M weights: too slow there */
  int lk = ATTN__WFLOATS / (2 * ATTN__QBLOCK) + 37;
  shape s = {1, ATTN__MIN_TASKS / 2, 8, 2 * ATTN__QBLOCK + 3, lk, 2, 1};
  tcase c;
  unit_case(&c, &s, K_VL2 | K_MASK | K_UL, 41);
  attn__scratch lay;
  attn__scratch_layout(&c.p, 1, &lay);
  ck_assert_int_eq(attn__query_block(&c.p), 2 * ATTN__QBLOCK);
  ck_assert_int_lt(lay.wrows, 2 * ATTN__QBLOCK);
  ref_compare(&c.p, "row chunks", 0);
  free_case(&c);
}
END_TEST

/* Weights larger than ATTN__STREAM_BYTES go out with streaming stores. */
START_TEST(test_streamed_weights_match_reference) {
  if (under_valgrind()) return; /* 9 M weights: too slow there */
  int l = (int)sqrt(ATTN__STREAM_BYTES / 4 / 2) + 5;
  shape s = {1, 2, 1, l, l + 3, 4, 3};
  tcase c;
  unit_case(&c, &s, K_VL1 | K_LR | K_BIAS, 43);
  attn__scratch lay;
  attn__scratch_layout(&c.p, 1, &lay);
  ck_assert_int_eq(lay.stream, 1);
  ref_compare(&c.p, "streamed weights", 0);
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The two GEMM paths (gemm.c): the native AVX-512F kernels on their own
 * against float64, then the whole attention through each path. */

static int native_gemm_or_skip(const char *test) {
  if (attn__use_avx512()) return 1;
  support_skip(test, "this CPU (or valgrind) has no AVX-512F + FMA for the "
               "native kernels");
  return 0;
}

/* Float error bound of a k-term dot product with sum |a_i b_i| = mag. */
static double gemm_tol(int k, double mag) {
  return (double)(k + 2) * 0x1p-23 * mag + 1e-35;
}

enum { GEMM_PAD = 7 }; /* extra columns of every leading dimension */

typedef void gemm_nt_fn(int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float *c, int ldc,
                        float *pack);
typedef void gemm_nn_fn(int m, int n, int k, const float *a, int lda,
                        const float *b, int ldb, float beta, float *c,
                        int ldc);

/* C = alpha A B^T for A (m, k), B (n, k); C's padding columns and the
 * rows' tails beyond n keep their sentinel. */
static void check_nt(gemm_nt_fn *fn, int gemm, int m, int n, int k,
                     float alpha, int pad, rng *r, const char *name) {
  int lda = k + pad % GEMM_PAD, ldb = k + (pad * 3) % GEMM_PAD;
  int ldc = n + (pad * 5) % GEMM_PAD;
  float *a = rand_floats(r, (size_t)m * lda, 1.0f);
  float *b = rand_floats(r, (size_t)n * ldb, 1.0f);
  float *c = malloc((size_t)m * ldc * sizeof *c);
  float *pack = aligned_alloc(64, (size_t)64 * k * sizeof *pack);
  ck_assert(c && pack);
  for (size_t x = 0; x < (size_t)m * ldc; x++) c[x] = 12345.0f;
  if (fn)
    fn(m, n, k, alpha, a, lda, b, ldb, c, ldc, pack);
  else
    attn__gemm_nt(gemm, m, n, k, alpha, a, lda, b, ldb, c, ldc, pack);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldc; j++) {
      float got = c[(size_t)i * ldc + j];
      if (j >= n) {
        EXPECT(got == 12345.0f, "%s NT m%d n%d k%d: C[%d][%d] beyond n "
               "written", name, m, n, k, i, j);
        continue;
      }
      double want = 0.0, mag = 0.0;
      for (int d = 0; d < k; d++) {
        double t = (double)a[(size_t)i * lda + d] * b[(size_t)j * ldb + d];
        want += t;
        mag += fabs(t);
      }
      want *= alpha;
      EXPECT(fabs(got - want) <= gemm_tol(k, mag * fabs(alpha)),
             "%s NT m%d n%d k%d lda%d ldb%d ldc%d alpha %g: C[%d][%d] "
             "%.9g, want %.9g", name, m, n, k, lda, ldb, ldc, alpha, i, j,
             got, want);
    }
  free(a); free(b); free(c); free(pack);
}

/* C = A B + beta C for A (m, k), B (k, n); beta 0 must not read C (it
 * holds NaN then). */
static void check_nn(gemm_nn_fn *fn, int gemm, int m, int n, int k,
                     float beta, int pad, rng *r, const char *name) {
  int lda = k + pad % GEMM_PAD, ldb = n + (pad * 3) % GEMM_PAD;
  int ldc = n + (pad * 5) % GEMM_PAD;
  float *a = rand_floats(r, (size_t)m * lda, 1.0f);
  float *b = rand_floats(r, (size_t)k * ldb, 1.0f);
  float *c = rand_floats(r, (size_t)m * ldc, 1.0f);
  float *c0 = malloc((size_t)m * ldc * sizeof *c0);
  ck_assert(c0);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldc; j++)
      if (beta == 0.0f && j < n) c[(size_t)i * ldc + j] = NAN;
  memcpy(c0, c, (size_t)m * ldc * sizeof *c);
  if (fn)
    fn(m, n, k, a, lda, b, ldb, beta, c, ldc);
  else
    attn__gemm_nn(gemm, m, n, k, a, lda, b, ldb, beta, c, ldc);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldc; j++) {
      float got = c[(size_t)i * ldc + j], old = c0[(size_t)i * ldc + j];
      if (j >= n) {
        EXPECT(got == old, "%s NN m%d n%d k%d: C[%d][%d] beyond n "
               "written", name, m, n, k, i, j);
        continue;
      }
      double want = beta == 0.0f ? 0.0 : (double)beta * old;
      double mag = fabs(want);
      for (int d = 0; d < k; d++) {
        double t = (double)a[(size_t)i * lda + d] * b[(size_t)d * ldb + j];
        want += t;
        mag += fabs(t);
      }
      EXPECT(fabs(got - want) <= gemm_tol(k + 1, mag),
             "%s NN m%d n%d k%d lda%d ldb%d ldc%d beta %g: C[%d][%d] "
             "%.9g, want %.9g", name, m, n, k, lda, ldb, ldc, beta, i, j,
             got, want);
    }
  free(a); free(b); free(c); free(c0);
}

/* Sizes around every tile edge: 16-lane vectors, 64-column strips, 6- and
 * 12-row tiles, 128-key blocks of the NN kernel. */
static const int gemm_m[] = {1, 2, 5, 6, 7, 11, 12, 13, 16, 25, 70};
static const int gemm_n[] = {1, 3, 15, 16, 17, 31, 33, 48, 63, 64, 65, 130};
static const int gemm_k[] = {1, 2, 15, 16, 17, 32, 63, 64, 127, 129, 300};
#define GEMM_COUNT(x) ((int)(sizeof x / sizeof x[0]))

static void gemm_sweep(gemm_nt_fn *nt, gemm_nn_fn *nn, int gemm,
                       const char *name) {
  static const float alphas[] = {1.0f, 0.125f, -3.0f};
  static const float betas[] = {0.0f, 1.0f, 0.5f};
  rng r = {0x6e6d6d};
  int rounds = under_valgrind() ? 30 : 400;
  for (int t = 0; t < rounds; t++) {
    int m = gemm_m[rng_int(&r, GEMM_COUNT(gemm_m))];
    int n = gemm_n[rng_int(&r, GEMM_COUNT(gemm_n))];
    int k = gemm_k[rng_int(&r, GEMM_COUNT(gemm_k))];
    check_nt(nt, gemm, m, n, k, alphas[t % 3], t, &r, name);
    check_nn(nn, gemm, m, n, k, betas[t % 3], t, &r, name);
  }
  /* every row count of a tile and every lane count of the last vector */
  for (int m = 1; m <= 13; m++)
    for (int n = 1; n <= 17; n += 4) {
      check_nt(nt, gemm, m, n, 1 + m % 3, 0.5f, m + n, &r, name);
      check_nn(nn, gemm, m, n, 1 + n % 5, m % 2 ? 1.0f : 0.0f, m * n, &r,
               name);
    }
}

START_TEST(test_native_gemm_kernels_match_float64) {
#if ATTN__HAVE_AVX2_FMA
  if (!native_gemm_or_skip("test_native_gemm_kernels_match_float64")) return;
  gemm_sweep(attn__gemm_nt_avx512, attn__gemm_nn_avx512, ATTN_GEMM_NATIVE,
             "native");
#else
  native_gemm_or_skip("test_native_gemm_kernels_match_float64");
#endif
}
END_TEST

/* The dispatching entry points, each path (NATIVE falls back to BLAS on a
 * CPU without AVX-512F only through attn__gemm_pick, so it is asked for
 * only when available). */
START_TEST(test_gemm_entry_points_match_float64) {
  gemm_sweep(NULL, NULL, ATTN_GEMM_BLAS, "blas");
  if (attn__use_avx512())
    gemm_sweep(NULL, NULL, ATTN_GEMM_NATIVE, "native via attn__gemm");
}
END_TEST

/* attn_problem.gemm: 0 is auto, which is the native kernels exactly when
 * the CPU has them; BLAS and NATIVE force a path (NATIVE only where it can
 * run); anything else is a programmer error. */
START_TEST(test_gemm_override_is_checked_and_picked) {
  shape s = {1, 1, 1, 5, 7, 4, 3};
  tcase c;
  attn__scratch lay;
  unit_case(&c, &s, 0, 3);
  int native = attn__use_avx512() ? ATTN_GEMM_NATIVE
                                             : ATTN_GEMM_BLAS;
  ck_assert_int_eq(c.p.gemm, ATTN_GEMM_AUTO);
  ck_assert_int_eq(attn__gemm_pick(&c.p), native);
  c.p.gemm = ATTN_GEMM_BLAS;
  ck_assert_int_eq(attn_check(&c.p), 0);
  ck_assert_int_eq(attn__gemm_pick(&c.p), ATTN_GEMM_BLAS);
  attn__scratch_layout(&c.p, 0, &lay);
  ck_assert_int_eq(lay.gemm, ATTN_GEMM_BLAS);
  c.p.gemm = ATTN_GEMM_NATIVE;
  ck_assert_int_eq(attn_check(&c.p), 0);
  ck_assert_int_eq(attn__gemm_pick(&c.p), native);
  attn__scratch_layout(&c.p, 1, &lay);
  ck_assert_int_eq(lay.gemm, native);
  for (int bad = -1; bad <= 4; bad += 5) { /* 3 is ATTN_GEMM_BF16 */
    c.p.gemm = bad;
    ck_assert_int_eq(attn_check(&c.p), ATTND_EINVAL);
    ck_assert_uint_eq(attn_scratch_bytes(&c.p, 0), 0);
  }
  free_case(&c);
}
END_TEST

/* Every mask kind, causal, dropout, grouped heads and both scorings, both
 * attention paths, through each GEMM path, against the reference;
 * ref_compare also insists on exact zeros where masked and in rows
 * without keys. */
static void kinds_through(int gemm, const char *name) {
  static const int kinds[] = {
    0, K_VL1, K_VL2, K_MASK, K_UL, K_LR, K_WIN, K_BIAS, K_DROP, K_ADD,
    K_VL2 | K_MASK | K_UL | K_WIN | K_BIAS,
    K_VL1 | K_MASK | K_LR | K_WIN | K_BIAS | K_DROP,
    K_ADD | K_VL2 | K_MASK | K_LR | K_BIAS | K_DROP,
  };
  const shape *sh = under_valgrind() ? vg_shapes : full_shapes;
  size_t ns = under_valgrind() ? sizeof vg_shapes / sizeof vg_shapes[0]
                               : sizeof full_shapes / sizeof full_shapes[0];
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t t = 0; t < ns; t++) {
      tcase c;
      char label[160];
      unit_case(&c, &sh[t], kinds[k], 7000 + t * 13 + (uint64_t)kinds[k]);
      c.p.gemm = gemm;
      snprintf(label, sizeof label, "%s gemm kinds 0x%x B%d H%d/%d Lq%d "
               "Lk%d D%d Dv%d", name, kinds[k], sh[t].B, sh[t].H, sh[t].Hkv,
               sh[t].Lq, sh[t].Lk, sh[t].D, sh[t].Dv);
      ref_compare(&c.p, label, 0);
      free_case(&c);
    }
}

START_TEST(test_attention_through_blas_gemm_matches_reference) {
  kinds_through(ATTN_GEMM_BLAS, "blas");
}
END_TEST

START_TEST(test_attention_through_native_gemm_matches_reference) {
  if (!native_gemm_or_skip(
          "test_attention_through_native_gemm_matches_reference"))
    return;
  kinds_through(ATTN_GEMM_NATIVE, "native");
}
END_TEST

/* Long rows (several 64-key panels and 128-key blocks), wide heads (more
 * than one 64-column strip) and k = 1, through the native path. */
START_TEST(test_native_gemm_wide_heads_match_reference) {
  static const shape wide[] = {
    {1, 2, 1, 37, 300, 130, 129}, {1, 1, 1, 13, 700, 1, 1},
    {2, 2, 2, 70, 130, 65, 17},
  };
  if (!native_gemm_or_skip("test_native_gemm_wide_heads_match_reference"))
    return;
  for (size_t t = 0; t < sizeof wide / sizeof wide[0]; t++) {
    tcase c;
    unit_case(&c, &wide[t], K_VL2 | K_UL | K_BIAS, 90 + t);
    c.p.gemm = ATTN_GEMM_NATIVE;
    ref_compare(&c.p, "native wide", 0);
    free_case(&c);
  }
}
END_TEST

/* The AVX-512 row helpers give the bits of the ones they replace: the
 * maximum (and its inf/NaN flag), scale-and-sanitize, and the one-call
 * softmax of a span against the two loops it fuses. */
START_TEST(test_avx512_row_helpers_match_the_others) {
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx512()) {
    support_skip("test_avx512_row_helpers_match_the_others",
                 "this CPU (or valgrind) has no AVX-512F");
    return;
  }
  enum { N = 90 };
  static const float odd[3] = {INFINITY, -INFINITY, NAN};
  float s[N], t[N], u[N];
  rng r = {31};
  for (int round = 0; round < 200; round++) {
    int a = rng_int(&r, 20), z = a + 1 + rng_int(&r, N - a - 1), f1, f2;
    int n = z + rng_int(&r, N - z + 1);
    if (round % 2) z = a + 1 + rng_int(&r, 16 < N - a ? 16 : N - a);
    if (z > n) n = z;
    float floor = round % 3 ? -FLT_MAX : rng_sym(&r, 20.0f);
    for (int c = 0; c < N; c++) s[c] = t[c] = rng_sym(&r, 30.0f);
    ck_assert(attn__max_avx512(s, a, z, &f1) == attn__max_avx2(s, a, z, &f2));
    ck_assert(f1 == 1 && f2 == 1);
    /* fused softmax vs max then exp-and-sum */
    float m, sum;
    ck_assert(attn__softmax_span_avx512(s, n, a, z, floor, &m, &sum));
    float want_m = attn__max_avx512(t, a, z, &f1);
    want_m = want_m > floor ? want_m : floor;
    float want_sum = attn__exp_sum_avx512(t, NULL, a, z, want_m);
    for (int c = 0; c < n; c++)
      if (c < a || c >= z) t[c] = 0.0f;
    ck_assert(m == want_m && sum == want_sum);
    ck_assert_mem_eq(s, t, (size_t)N * sizeof *s);
    /* an inf or NaN: the max flags it, the fused call declines */
    s[a + rng_int(&r, z - a)] = round % 2 ? NAN : -INFINITY;
    memcpy(t, s, sizeof t);
    attn__max_avx512(s, a, z, &f1);
    ck_assert_int_eq(f1, 0);
    ck_assert(!attn__softmax_span_avx512(s, n, a, z, floor, &m, &sum));
    ck_assert_mem_eq(s, t, (size_t)N * sizeof *s);
    /* scale and sanitize, with infinities and NaN among the inputs */
    float g = rng_sym(&r, 2.0f);
    for (int c = 0; c < N; c++) {
      s[c] = rng_int(&r, 9) ? rng_sym(&r, 3e38f) : odd[c % 3];
      u[c] = -1.0f;
    }
    int finite = 1;
    for (int c = 0; c < n; c++) finite &= isfinite(s[c] * g) != 0;
    ck_assert_int_eq(attn__scale_sanitize_avx512(u, s, n, g), finite);
    for (int c = 0; c < N; c++) {
      float want = c < n ? attn__sanitize(s[c] * g) : -1.0f;
      EXPECT(memcmp(&u[c], &want, sizeof want) == 0,
             "scale_sanitize %g * %g = %g, want %g", s[c], g, u[c], want);
    }
  }
#else
  support_skip("test_avx512_row_helpers_match_the_others",
               "built without the AVX2 and AVX-512 row helpers");
#endif
}
END_TEST

/* ------------------------------------------------------------------ */
/* Stopping a run (attn_problem.stop). */

/* A flag already set: nothing runs to the end, on either path; a flag
 * left at 0 changes no bit of the answer. */
START_TEST(test_a_set_stop_flag_cancels_the_run) {
  static const shape sh = {1, 2, 1, 70, 600, 8, 4};
  for (int weights = 0; weights < 2; weights++) {
    tcase c;
    _Atomic int stop = 1;
    size_t no = (size_t)2 * 70 * 4, nw = (size_t)2 * 70 * 600;
    float *o1 = calloc(no, sizeof *o1), *o2 = calloc(no, sizeof *o2);
    float *w1 = weights ? calloc(nw, sizeof *w1) : NULL;
    float *w2 = weights ? calloc(nw, sizeof *w2) : NULL;
    unit_case(&c, &sh, K_UL | K_BIAS, 7);
    ck_assert_int_eq(attn_forward(&c.p, o1, w1), 0);
    c.p.stop = &stop;
    ck_assert_int_eq(attn_forward(&c.p, o2, w2), ATTND_ECANCELED);
    atomic_store(&stop, 0);
    ck_assert_int_eq(attn_forward(&c.p, o2, w2), 0);
    ck_assert_mem_eq(o1, o2, no * sizeof *o1);
    if (weights)
      ck_assert_mem_eq(w1, w2, nw * sizeof *w1);
    free(o1); free(o2); free(w1); free(w2);
    free_case(&c);
  }
}
END_TEST

struct stopper {
  _Atomic int flag;
  int after_ms;
};

static void *stop_later(void *arg) {
  struct stopper *s = arg;
  struct timespec t = {s->after_ms / 1000, (long)(s->after_ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  atomic_store(&s->flag, 1);
  return NULL;
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A long run on the online path, stopped by another thread 10 ms in:
 * it ends well before the same run left alone (its CPU time, so a loaded
 * machine does not matter), one task of one long row of keys. */
START_TEST(test_stop_set_by_another_thread_ends_one_long_task) {
  static const shape sh = {1, 1, 1, 64, 1 << 20, 16, 16};
  tcase c;
  struct stopper st = {0, 10};
  pthread_t th;
  float *o = calloc((size_t)64 * 16, sizeof *o);
  double t0, whole, stopped;
  unit_case(&c, &sh, 0, 11);
  t0 = cpu_now();
  ck_assert_int_eq(attn_forward(&c.p, o, NULL), 0);
  whole = cpu_now() - t0;
  c.p.stop = &st.flag;
  ck_assert_int_eq(pthread_create(&th, NULL, stop_later, &st), 0);
  t0 = cpu_now();
  ck_assert_int_eq(attn_forward(&c.p, o, NULL), ATTND_ECANCELED);
  stopped = cpu_now() - t0;
  pthread_join(th, NULL);
  ck_assert_msg(stopped < whole / 2, "stopped after %.3f s of a %.3f s run",
                stopped, whole);
  free(o);
  free_case(&c);
}
END_TEST

/* The weights path stops within one key block, counted rather than
 * timed: the stop flag is the first score of the chunk's scratch, 0
 * until the first key block's product writes it, and the rest of the
 * scores hold a marker.  The run must return ATTND_ECANCELED with the
 * scores of every later key block, and every weight, untouched: one key
 * block's product done, none after it.  Dot and additive scoring. */
START_TEST(test_the_weights_path_stops_within_one_key_block) {
  static const shape sh = {1, 1, 1, 64, 4 * ATTN__KBLOCK, 8, 4};
  const uint32_t mark = 0x7fc0beefu;  /* a NaN no product writes */
  for (int add = 0; add < 2; add++) {
    tcase c;
    attn__scratch lay;
    size_t nw = (size_t)sh.Lq * sh.Lk, bytes, untouched = 0, blocks = 0;
    float *o = calloc((size_t)sh.Lq * sh.Dv, sizeof *o);
    uint32_t *w = malloc(nw * sizeof *w), *sc;
    char *scratch;
    unit_case(&c, &sh, add ? K_ADD : 0, 23);
    attn__scratch_layout(&c.p, 1, &lay);
    ck_assert_int_eq(lay.wrows, sh.Lq);  /* one chunk of every row */
    bytes = attn_scratch_bytes(&c.p, 1);
    scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    ck_assert_ptr_nonnull(scratch);
    sc = (uint32_t *)(scratch + lay.scores);
    for (size_t i = 0; i < nw; i++) sc[i] = w[i] = mark;
    sc[0] = 0;
    c.p.stop = (const _Atomic int *)(const void *)sc;
    ck_assert_int_eq(attn_run_tasks_lse(&c.p, 0, attn_task_count(&c.p, 1), o,
                                        (float *)w, NULL, scratch),
                     ATTND_ECANCELED);
    for (size_t i = 0; i < nw; i++) untouched += w[i] == mark;
    ck_assert_uint_eq(untouched, nw);
    /* key blocks with any score written, over all rows */
    for (int j0 = 0; j0 < sh.Lk; j0 += ATTN__KBLOCK) {
      size_t written = 0;
      for (int r = 0; r < sh.Lq; r++)
        for (int j = j0; j < j0 + ATTN__KBLOCK; j++)
          written += sc[(size_t)r * sh.Lk + j] != mark;
      blocks += written > 0;
    }
    ck_assert_msg(blocks == 1, "%zu of %d key blocks scored after the stop",
                  blocks, sh.Lk / ATTN__KBLOCK);
    free(scratch); free(o); free(w);
    free_case(&c);
  }
}
END_TEST

/* attn_cost_flops: the products at 2 flops per multiply-add, a charge
 * per score so that D = 1 is not free, and nothing for what causal and
 * window let the core skip. */
static attn_problem cost_problem(int L, int D) {
  attn_problem p;
  attn_problem_init(&p);
  p.B = 2;
  p.H = p.Hkv = 4;
  p.Lq = p.Lk = L;
  p.D = p.Dk = p.Dv = D;
  p.scale = 1.0f;
  return p; /* no tensors: the estimate never reads them */
}

START_TEST(test_cost_counts_products_scores_and_skipped_blocks) {
  attn_problem p = cost_problem(2048, 64);
  double scores = 8.0 * 2048 * 2048, dense = attn_cost_flops(&p, 0, 0);
  /* The products alone are 4 D flops per score; the rest is per score. */
  ck_assert(dense > scores * 4 * 64);
  ck_assert(dense < scores * 4 * 64 * 1.5);
  attn_problem d1 = cost_problem(2048, 1);
  ck_assert(attn_cost_flops(&d1, 0, 0) > scores * 20);
  /* Weights, diagnostics and dropout each cost more. */
  ck_assert(attn_cost_flops(&p, 1, 0) > dense);
  ck_assert(attn_cost_flops(&p, 1, 1) > attn_cost_flops(&p, 1, 0));
  p.dropout_p = 0.5f;
  ck_assert(attn_cost_flops(&p, 0, 0) > dense);
  p.dropout_p = 0.0f;
  /* Causal: about half the scores, never less (whole query blocks). */
  p.causal = ATTN_CAUSAL_UPPER_LEFT;
  double causal = attn_cost_flops(&p, 0, 0);
  ck_assert(causal > dense * 0.5 && causal < dense * 0.65);
  /* A window of 128 keys: a small fraction. */
  p.causal = ATTN_CAUSAL_NONE;
  p.has_window = 1;
  p.window_left = 64;
  p.window_right = 63;
  ck_assert(attn_cost_flops(&p, 0, 0) < dense * 0.3);
  /* Rows with no key at all (lower-right causal, Lk < Lq) cost nothing. */
  attn_problem e = cost_problem(512, 8);
  e.Lk = 64;
  e.causal = ATTN_CAUSAL_LOWER_RIGHT;
  ck_assert(attn_cost_flops(&e, 0, 0) < 8.0 * 64 * 64 * 200);
  /* Additive scoring pays a tanh per hidden unit per score. */
  attn_problem a = cost_problem(256, 16);
  a.scoring = ATTN_SCORING_ADDITIVE;
  a.Hd = 32;
  ck_assert(attn_cost_flops(&a, 0, 0) > 8.0 * 256 * 256 * 32 * 10);
  attn_problem z;
  attn_problem_init(&z);
  ck_assert(attn_cost_flops(&z, 0, 0) == 0.0);
  /* Four packed sequences of a quarter each: a quarter of the square's
   * scores (B = 1 with packing); with weights, the whole square of
   * weights is still written, zeros across sequences. */
  static const int32_t cu[5] = {0, 128, 256, 384, 512};
  attn_problem sq = cost_problem(512, 8), pk;
  sq.B = 1;
  pk = sq;
  pk.cu_seqlens_q = pk.cu_seqlens_k = cu;
  pk.n_seqs = 4;
  for (int w = 0; w < 2; w++) {
    double full = attn_cost_flops(&sq, w, 0), packed = attn_cost_flops(&pk, w, 0);
    ck_assert_msg(packed < full * (w ? 0.75 : 0.3) && packed > full * 0.2,
                  "packed %g of %g (weights %d)", packed, full, w);
  }
}
END_TEST

static Suite *core_suite(void) {
  Suite *s = suite_create("core");
  TCase *ref = tcase_create("reference");
  tcase_set_timeout(ref, 120);
  tcase_add_test(ref, test_no_mask_matches_reference);
  tcase_add_test(ref, test_valid_lens_per_item_match_reference);
  tcase_add_test(ref, test_valid_lens_per_query_match_reference);
  tcase_add_test(ref, test_broadcast_bool_mask_matches_reference);
  tcase_add_test(ref, test_causal_upper_left_matches_reference);
  tcase_add_test(ref, test_causal_lower_right_matches_reference);
  tcase_add_test(ref, test_window_matches_reference);
  tcase_add_test(ref, test_bias_matches_reference);
  tcase_add_test(ref, test_composed_masks_match_reference);
  tcase_add_test(ref, test_additive_scoring_matches_reference);
  tcase_add_test(ref, test_dropout_matches_reference);
  tcase_add_test(ref, test_random_problems_match_reference);
  suite_add_tcase(s, ref);

  TCase *ex = tcase_create("examples");
  tcase_add_test(ex, test_worked_example_dots_give_softmax_weights);
  tcase_add_test(ex, test_worked_example_weights_quarter_three_quarters_give_5);
  tcase_add_test(ex, test_d2l_masked_softmax_valid_lens_2_3);
  tcase_add_test(ex, test_d2l_masked_softmax_per_query_lens);
  tcase_add_test(ex, test_d2l_dot_product_attention_example);
  tcase_add_test(ex, test_d2l_additive_attention_example);
  tcase_add_test(ex, test_design_example_request);
  suite_add_tcase(s, ex);

  TCase *edge = tcase_create("edges");
  tcase_set_timeout(edge, 60);
  tcase_add_test(edge, test_negative_scale_matches_reference);
  tcase_add_test(edge, test_huge_scale_gives_one_hot_finite_rows);
  tcase_add_test(edge, test_inputs_near_1e38_stay_finite);
  tcase_add_test(edge, test_additive_inputs_near_1e38_stay_finite);
  tcase_add_test(edge,
                 test_allowed_scores_at_minus_flt_max_keep_masked_keys_zero);
  tcase_add_test(edge, test_fully_masked_rows_are_zero_in_both_paths);
  tcase_add_test(edge, test_dropout_same_seed_same_answer_other_seed_differs);
  tcase_add_test(edge, test_task_split_is_bit_identical_weights_path);
  tcase_add_test(edge, test_task_split_is_bit_identical_online_path);
  tcase_add_test(edge, test_two_threads_on_disjoint_tasks_match_forward);
  tcase_add_test(edge, test_online_path_never_reads_keys_beyond_valid_lens);
  tcase_add_test(edge, test_online_path_skips_key_blocks_the_mask_forbids);
  tcase_add_test(edge, test_online_scratch_does_not_grow_with_lk);
  suite_add_tcase(s, edge);

  TCase *huge = tcase_create("huge values");
  tcase_set_timeout(huge, 120);
  tcase_add_test(huge, test_huge_equal_values_average_to_themselves);
  tcase_add_test(huge, test_long_rows_of_equal_values_average_within_tolerance);
  tcase_add_test(huge, test_huge_values_match_reference_across_key_lengths);
  tcase_add_test(huge, test_huge_values_with_masks_match_reference);
  tcase_add_test(huge, test_huge_values_additive_and_dropout_match_reference);
  tcase_add_test(huge, test_huge_values_task_split_is_bit_identical);
  suite_add_tcase(s, huge);

  TCase *api = tcase_create("api");
  tcase_add_test(api, test_check_rejects_inconsistent_problems);
  tcase_add_test(api, test_cost_counts_products_scores_and_skipped_blocks);
  tcase_add_test(api, test_diagnostics_match_reference);
  tcase_add_test(api, test_diagnostics_of_uniform_and_empty_rows);
  tcase_add_test(api, test_run_tasks_rejects_ranges_beyond_task_count);
  tcase_add_test(api, test_expf_is_within_2_ulp_and_exactly_0_below_cutoff);
  tcase_add_test(api, test_tanhf_is_within_2_ulp);
  tcase_add_test(api, test_sanitize_maps_inf_to_flt_max_and_nan_to_zero);
  tcase_add_test(api, test_dropout_keep_follows_documented_formula);
  tcase_add_test(api, test_exp_sum_kernels_within_2_ulp);
  tcase_add_test(api, test_avx2_row_max_flags_non_finite);
  tcase_add_test(api, test_weight_rows_are_written_exactly);
  tcase_add_test(api, test_a_set_stop_flag_cancels_the_run);
  tcase_add_test(api, test_stop_set_by_another_thread_ends_one_long_task);
  tcase_add_test(api, test_the_weights_path_stops_within_one_key_block);
  tcase_add_test(edge, test_weights_path_row_chunks_match_reference);
  tcase_add_test(edge, test_streamed_weights_match_reference);
  suite_add_tcase(s, api);

  TCase *gemm = tcase_create("gemm");
  tcase_set_timeout(gemm, 120);
  tcase_add_test(gemm, test_native_gemm_kernels_match_float64);
  tcase_add_test(gemm, test_gemm_entry_points_match_float64);
  tcase_add_test(gemm, test_gemm_override_is_checked_and_picked);
  tcase_add_test(gemm, test_attention_through_blas_gemm_matches_reference);
  tcase_add_test(gemm, test_attention_through_native_gemm_matches_reference);
  tcase_add_test(gemm, test_native_gemm_wide_heads_match_reference);
  tcase_add_test(gemm, test_avx512_row_helpers_match_the_others);
  suite_add_tcase(s, gemm);
  return s;
}

int main(void) {
  /* One BLAS thread, as in an attnd worker; keeps valgrind runs sane. */
  openblas_set_num_threads(1);
  SRunner *sr = srunner_create(core_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
