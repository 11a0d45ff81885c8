/* test_core.c - core/ against an independent float64 reference.
 *
 * The reference (support_ref.c, shared with the other core suites) is
 * deliberately naive: loops over (b, h, i, j) in double, its own reading
 * of the mask rules in attn.h, its own copy of the dropout hash.  Every
 * numeric path of the core (weights path, online path, dot and additive
 * scoring, every mask kind, dropout, each GEMM path) is compared with it
 * over random shapes whose lengths are not multiples of any block size;
 * with the worked examples, what the online path reads, and the
 * diagnostics.  The other core suites: test_core_extremes.c (float32's
 * edges), test_core_tasks.c (task splits, checks, stopping),
 * test_core_kernels.c (the kernels alone), test_core_variants.c and
 * test_core_bf16.c.
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

/* The cases (make_unit_case: scale 1/sqrt(D)) and the float64 reference:
 * support_ref.h. */

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
    make_unit_case(&c, &s[t], kinds, 1000 + t * 7 + (uint64_t)kinds);
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
  ref_run_both(&p, o1, w, o2);
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
  ref_run_both(&p, o1, w, o2);
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
  ref_run_both(&p, o1, w, o2);
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
  ref_run_both(&p, o1, w, o2);
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

/* Without weights the scratch does not grow with Lk past one key block
 * but for a head's kept operands (K panels; on VDPBF16PS also V pairs),
 * which stop at ATTN__KPANEL_BYTES: no (Lq, Lk) matrix exists anywhere.
 * In float32 and in BF16 mode, whichever kernels this CPU picks for it. */
START_TEST(test_online_scratch_does_not_grow_with_lk) {
  shape s = {1, 1, 1, 4096, 300, 64, 64};
  tcase c;
  make_unit_case(&c, &s, 0, 1);
  c.p.precision = _i ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
  size_t a = attn_scratch_bytes(&c.p, 0);
  c.p.Lk = 1 << 20;
  size_t b = attn_scratch_bytes(&c.p, 0);
  c.p.Lk = 1 << 22;
  ck_assert_uint_eq(attn_scratch_bytes(&c.p, 0), b);
  ck_assert_uint_le(a, b + ATTN__KPANEL_BYTES + 4096);
  /* around the most keys a head keeps at D = 64 (4 MiB: 16384 x 64 x 4 B
   * of K, or on VDPBF16PS 16384 x 64 x 2 B each of K and V) and past it */
  for (int lk = 1024; lk <= 1 << 17; lk *= 2)
    for (int d = -1; d <= 1; d++) {
      c.p.Lk = lk + d;
      ck_assert_uint_le(attn_scratch_bytes(&c.p, 0),
                        b + ATTN__KPANEL_BYTES + 4096);
    }
  c.p.Lk = 1 << 20;
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
  make_unit_case(&c, s, kinds, seed);
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
/* The whole attention through each GEMM path (gemm.c); the kernels alone
 * are test_core_kernels.c's. */

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
      make_unit_case(&c, &sh[t], kinds[k], 7000 + t * 13 + (uint64_t)kinds[k]);
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
  if (!ref_native_gemm_or_skip(
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
  if (!ref_native_gemm_or_skip("test_native_gemm_wide_heads_match_reference"))
    return;
  for (size_t t = 0; t < sizeof wide / sizeof wide[0]; t++) {
    tcase c;
    make_unit_case(&c, &wide[t], K_VL2 | K_UL | K_BIAS, 90 + t);
    c.p.gemm = ATTN_GEMM_NATIVE;
    ref_compare(&c.p, "native wide", 0);
    free_case(&c);
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

  TCase *edge = tcase_create("online path");
  tcase_set_timeout(edge, 60);
  tcase_add_test(edge, test_online_path_never_reads_keys_beyond_valid_lens);
  tcase_add_test(edge, test_online_path_skips_key_blocks_the_mask_forbids);
  tcase_add_loop_test(edge, test_online_scratch_does_not_grow_with_lk, 0, 2);
  suite_add_tcase(s, edge);

  TCase *api = tcase_create("diagnostics");
  tcase_add_test(api, test_diagnostics_match_reference);
  tcase_add_test(api, test_diagnostics_of_uniform_and_empty_rows);
  suite_add_tcase(s, api);

  TCase *gemm = tcase_create("gemm");
  tcase_set_timeout(gemm, 120);
  tcase_add_test(gemm, test_attention_through_blas_gemm_matches_reference);
  tcase_add_test(gemm, test_attention_through_native_gemm_matches_reference);
  tcase_add_test(gemm, test_native_gemm_wide_heads_match_reference);
  suite_add_tcase(s, gemm);
  return s;
}

int main(void) { return ref_run_suite(core_suite()); }
