/* test_core_kernels.c - core/'s kernels on their own, against float64
 * or against the loops they replace: the vectorizable scalar functions
 * (exp, tanh, the dropout hash), the softmax row kernels (portable, AVX2
 * + FMA and AVX-512 alike), the weights rows written in chunks and
 * streamed, and the two GEMM paths (the native AVX-512F kernels and
 * cblas) over sizes that are not multiples of any block.  A kernel this
 * CPU lacks prints its skip line.  The whole attention through each path
 * is test_core.c's; the float64 reference is support_ref.c's.
 */
#include <check.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "core/attn_impl.h"
#include "support_ref.h"
#include "support_skip.h"

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
  make_unit_case(&c, &s, K_VL2 | K_MASK | K_UL, 41);
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
  make_unit_case(&c, &s, K_VL1 | K_LR | K_BIAS, 43);
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
 * 12-row tiles, 256-key blocks of the NN kernel. */
static const int gemm_m[] = {1, 2, 5, 6, 7, 11, 12, 13, 16, 25, 70};
static const int gemm_n[] = {1, 3, 15, 16, 17, 31, 33, 48, 63, 64, 65, 130};
static const int gemm_k[] = {1, 2, 15, 16, 17, 32, 63, 64, 127, 129,
                             255, 257, 300, 513};
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
  if (!ref_native_gemm_or_skip("test_native_gemm_kernels_match_float64")) return;
  gemm_sweep(attn__gemm_nt_avx512, attn__gemm_nn_avx512, ATTN_GEMM_NATIVE,
             "native");
#else
  ref_native_gemm_or_skip("test_native_gemm_kernels_match_float64");
#endif
}
END_TEST

#if ATTN__HAVE_AVX2_FMA
/* One call of the kept-panel scores product against the packing one on
 * the keys [j0, j0 + n) of kb (nb keys of k): the same bits, and only
 * those keys read (every other key is NaN in the copy passed, which
 * would show). */
static void check_kept_block(int m, int k, int nb, const float *kb, int j0,
                             int n, float *panels, int *ready, rng *r) {
  float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)nb * k * 4);
  float *c1 = malloc((size_t)m * n * 4), *c2 = malloc((size_t)m * n * 4);
  float *pack = aligned_alloc(64, (size_t)64 * k * 4);
  for (int i = 0; i < m * k; i++) a[i] = rng_sym(r, 1.0f);
  for (int i = 0; i < nb * k; i++)
    b[i] = i / k >= j0 && i / k < j0 + n ? kb[i] : NAN;
  attn__gemm_nt_avx512(m, n, k, 0.25f, a, k, b + (size_t)j0 * k, k, c1, n,
                       pack);
  attn__gemm_nt_panels_avx512(m, n, k, 0.25f, a, k, b, k, j0, c2, n, panels,
                              ready);
  EXPECT(memcmp(c1, c2, (size_t)m * n * 4) == 0,
         "kept panels m%d k%d keys %d: block [%d, %d) differs", m, k, nb, j0,
         j0 + n);
  free(a); free(b); free(c1); free(c2); free(pack);
}

/* The scores product on a head's kept panels gives the bits of the one
 * that packs per call, on every tail: keys and D not multiples of 16,
 * heads shorter than a panel or a block, blocks starting on any panel,
 * and a panel packed for a short block, then packed again when a later
 * block needs more of its keys. */
#endif

START_TEST(test_kept_panels_give_the_bits_of_packing) {
#if ATTN__HAVE_AVX2_FMA
  if (!ref_native_gemm_or_skip("test_kept_panels_give_the_bits_of_packing"))
    return;
  static const int ks[] = {1, 17, 64, 100, 128};
  static const int nbs[] = {1, 15, 63, 64, 65, 700};
  static const int ms[] = {1, 7, 32};
  rng r = {0x6b657074};
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t ni = 0; ni < sizeof nbs / sizeof nbs[0]; ni++) {
      int k = ks[ki], nb = nbs[ni], q = (nb + 63) / 64;
      float *kb = malloc((size_t)nb * k * 4);
      float *panels = aligned_alloc(64, (size_t)q * 64 * k * 4);
      int *ready = calloc((size_t)q, sizeof *ready);
      for (int i = 0; i < nb * k; i++) kb[i] = rng_sym(&r, 1.0f);
      for (int j0 = 0; j0 < nb; j0 += 64) {
        int n = nb - j0 < 512 ? nb - j0 : 512, m = ms[(j0 / 64) % 3];
        memset(ready, 0, (size_t)q * sizeof *ready);
        if (n > 20)
          check_kept_block(m, k, nb, kb, j0, n - 19, panels, ready, &r);
        check_kept_block(m, k, nb, kb, j0, n, panels, ready, &r);
        check_kept_block(m, k, nb, kb, j0, n, panels, ready, &r);
      }
      free(kb); free(panels); free(ready);
    }
#else
  ref_native_gemm_or_skip("test_kept_panels_give_the_bits_of_packing");
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
  make_unit_case(&c, &s, 0, 3);
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
  for (int bad = -1; bad <= 5; bad += 6) { /* 3, 4: BF16 and AMX */
    c.p.gemm = bad;
    ck_assert_int_eq(attn_check(&c.p), ATTND_EINVAL);
    ck_assert_uint_eq(attn_scratch_bytes(&c.p, 0), 0);
  }
  free_case(&c);
}
END_TEST

/* The online path's row maxima found ahead of the rows' softmax
 * (attn__rows_max): each is the span's maximum, NaN where the row must
 * find its own, and a row given it has the bits of a row that finds it,
 * within 2 ulp of the float64 exp per key, exactly 0 below the cut-off
 * and outside the span. */
enum { AH_ROWS = 6, AH_N = 80 };

static void ahead_rows(float *s, float *flags, attn__span *sp) {
  static const int span[AH_ROWS][2] = {{0, 80}, {5, 70}, {3, 15},
                                       {0, 64}, {0, 80}, {10, 80}};
  rng r = {43};
  for (int i = 0; i < AH_ROWS * AH_N; i++) s[i] = rng_sym(&r, 8.0f);
  for (int c = 10; c < 80; c += 3) s[5 * AH_N + c] = -95.0f - c; /* cut */
  s[3 * AH_N + 40] = NAN;
  for (int c = 0; c < AH_N; c++) flags[c] = (float)(c % 2);
  for (int i = 0; i < AH_ROWS; i++) {
    sp[i].a = span[i][0];
    sp[i].z = span[i][1];
    sp[i].allowed = sp[i].z - sp[i].a;
    sp[i].flags = i == 4 ? flags : NULL;
  }
}

static void check_ahead_row(const attn_problem *p, const attn__span *sp,
                            const float *raw, float *s, const float *mx,
                            int row) {
  attn__task t;
  float want[AH_N], m1, m2;
  memset(&t, 0, sizeof t);
  memcpy(want, raw, sizeof want);
  float sum = attn__row_softmax(p, &t, 0, 0, sp, s, AH_N, -FLT_MAX, 0, mx,
                                &m1);
  float want_sum = attn__row_softmax(p, &t, 0, 0, sp, want, AH_N, -FLT_MAX,
                                     0, NULL, &m2);
  ck_assert_msg(m1 == m2 && sum == want_sum, "row %d", row);
  ck_assert_mem_eq(s, want, sizeof want);
  double ref = 0.0;
  for (int c = 0; c < AH_N; c++) {
    float x = raw[c] - m1;
    if (c < sp->a || c >= sp->z || x < ATTN__EXP_LO) {
      EXPECT(s[c] == 0.0f, "row %d key %d: %g, want 0", row, c, s[c]);
      continue;
    }
    ref += exp((double)x);
    EXPECT(ulps(s[c], exp((double)x)) <= 2.0, "row %d key %d: %.9g", row,
           c, s[c]);
  }
  EXPECT(fabs(sum - ref) <= 1e-6 * ref, "row %d: sum %.9g, want %.9g", row,
         sum, ref);
}

START_TEST(test_row_maxima_ahead_give_the_row_softmax_bits) {
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx512()) {
    support_skip("test_row_maxima_ahead_give_the_row_softmax_bits",
                 "this CPU (or valgrind) has no AVX-512F");
    return;
  }
  static float s[AH_ROWS * AH_N], raw[AH_ROWS * AH_N], flags[AH_N];
  float mx[AH_ROWS];
  attn__span sp[AH_ROWS];
  attn_problem p;
  memset(&p, 0, sizeof p);
  ahead_rows(s, flags, sp);
  memcpy(raw, s, sizeof raw);
  attn__rows_max(&p, sp, s, AH_N, AH_ROWS, mx);
  ck_assert_mem_eq(s, raw, sizeof raw); /* read only */
  for (int i = 0; i < AH_ROWS; i++) {
    /* rows 2 (16 keys or fewer), 3 (a NaN) and 4 (mask flags) find
     * their own */
    if (i >= 2 && i <= 4) {
      ck_assert_msg(isnan(mx[i]), "row %d: %g, want NaN", i, mx[i]);
      continue;
    }
    float want = -FLT_MAX;
    for (int c = sp[i].a; c < sp[i].z; c++)
      want = fmaxf(want, raw[i * AH_N + c]);
    ck_assert_msg(mx[i] == want, "row %d: max %g, want %g", i, mx[i], want);
    check_ahead_row(&p, &sp[i], raw + i * AH_N, s + i * AH_N, &mx[i], i);
  }
  /* soft-capping changes the scores before their maximum: none ahead */
  p.softcap = 30.0f;
  attn__rows_max(&p, sp, raw, AH_N, AH_ROWS, mx);
  for (int i = 0; i < AH_ROWS; i++) ck_assert(isnan(mx[i]));
#else
  support_skip("test_row_maxima_ahead_give_the_row_softmax_bits",
               "built without the AVX2 + FMA kernels");
#endif
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
    ck_assert(attn__softmax_span_avx512(s, n, a, z, floor, NULL, &m, &sum));
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
    ck_assert(!attn__softmax_span_avx512(s, n, a, z, floor, NULL, &m, &sum));
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

static Suite *kernels_suite(void) {
  Suite *s = suite_create("core kernels");
  TCase *rows = tcase_create("row kernels");
  tcase_set_timeout(rows, 120);
  tcase_add_test(rows, test_expf_is_within_2_ulp_and_exactly_0_below_cutoff);
  tcase_add_test(rows, test_tanhf_is_within_2_ulp);
  tcase_add_test(rows, test_dropout_keep_follows_documented_formula);
  tcase_add_test(rows, test_exp_sum_kernels_within_2_ulp);
  tcase_add_test(rows, test_avx2_row_max_flags_non_finite);
  tcase_add_test(rows, test_weight_rows_are_written_exactly);
  tcase_add_test(rows, test_weights_path_row_chunks_match_reference);
  tcase_add_test(rows, test_streamed_weights_match_reference);
  suite_add_tcase(s, rows);

  TCase *gemm = tcase_create("gemm kernels");
  tcase_set_timeout(gemm, 120);
  tcase_add_test(gemm, test_native_gemm_kernels_match_float64);
  tcase_add_test(gemm, test_kept_panels_give_the_bits_of_packing);
  tcase_add_test(gemm, test_gemm_entry_points_match_float64);
  tcase_add_test(gemm, test_gemm_override_is_checked_and_picked);
  tcase_add_test(gemm, test_avx512_row_helpers_match_the_others);
  tcase_add_test(gemm, test_row_maxima_ahead_give_the_row_softmax_bits);
  suite_add_tcase(s, gemm);
  return s;
}

int main(void) { return ref_run_suite(kernels_suite()); }
