/* test_core_bf16.c - BF16 mode (attn_problem.precision) on every kernel
 * path, against float64 references and the error bound of docs/api.md.
 *
 * Kernel paths: the AMX products (gemm AMX; the suite asks for AMX's
 * permission as attnd does, and skips them where the CPU lacks AMX-BF16
 * or the permission does not come), the AVX512-BF16 products (gemm
 * BF16; skipped where the CPU lacks AVX512-BF16), the native float32
 * products on BF16-rounded operands (gemm NATIVE; skipped without
 * AVX-512F), cblas_sgemm on them (gemm BLAS, everywhere) and whatever
 * auto picks (AMX where allowed).  For every variant
 * (mask, valid_lens, causal both ways, windows, bias, dropout, softcap,
 * ALiBi, sinks, packing, grouped heads) and both paths (weights and
 * online), per output element and row:
 *   - against the float64 reference of the float32 operands, within
 *     bound(a) = ((1 + rho)(1 + u)^(r + 1)(1 + g) - 1) sum_j w_j |v_j|,
 *     rho = e^(2 Delta)(1 + e)^2 (1 + 2 g) - 1,
 *     Delta = (2u + u^2) max_j |scale| sum_d |q_d k_d| + (D + 8) 2^-24 M,
 *     u = 2^-8, e the exp's relative error, g = (Lk + 8) 2^-24, r the
 *     roundings of a probability (1, 2 with dropout), M the largest
 *     magnitude a score's terms reach;
 *   - against the float64 reference of the BF16-rounded operands within
 *     the same with Delta = (D + 8) 2^-24 M and no rounding of v;
 *   - the weights path's output is sum_j w_j bf16(v_j) of the weights it
 *     returned (float32 sums), and those weights are BF16 values: so P
 *     and V were rounded, and nothing else was;
 *   - masked and empty positions exactly 0, lse within Delta.
 * And: BF16 inputs (dtype BF16) give the bits of float32 inputs holding
 * the same values; batch items, task splits and the other rows of a
 * row's tile do not change a bit; attn_check refuses what BF16 mode does
 * not do; the kernels alone meet float64 on the edges of every tile.
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
#include "server/amx.h"
#include "support_ref.h"
#include "support_skip.h"

static const double U = 0x1p-8;  /* BF16's unit roundoff */
static const double EXP_ERR = 0x1p-16; /* the softmax exp (docs/api.md) */

/* ------------------------------------------------------------------ */
/* Kernel paths. */

typedef struct kpath { const char *name; int gemm; } kpath;

static const kpath paths[] = {
  {"auto", ATTN_GEMM_AUTO}, {"amx-bf16", ATTN_GEMM_AMX},
  {"avx512bf16", ATTN_GEMM_BF16},
  {"native float32 on bf16 operands", ATTN_GEMM_NATIVE},
  {"cblas on bf16 operands", ATTN_GEMM_BLAS},
};
#define NPATHS (int)(sizeof paths / sizeof paths[0])

/* AMX's permission (amx_request in main, before the runner forks) and
 * why it did not come. */
static int amx_ok;
static char amx_why[160];

/* 1 when the AMX kernels can run here; else prints the skip line. */
static int amx_runs(const char *test) {
  if (amx_ok && attn__use_amx()) return 1;
  support_skip(test, "amx-bf16: %s", amx_why[0] ? amx_why
               : "this CPU has no AMX-BF16 (or valgrind hides it)");
  return 0;
}

/* 1 when the path can run here; else prints the skip line. */
static int path_runs(int k, const char *test) {
  if (paths[k].gemm == ATTN_GEMM_AMX) return amx_runs(test);
  if (paths[k].gemm == ATTN_GEMM_BF16 && !attn__use_avx512bf16()) {
    support_skip(test, "%s: this CPU has no AVX512-BF16 (or valgrind "
                 "hides it)", paths[k].name);
    return 0;
  }
  if (paths[k].gemm == ATTN_GEMM_NATIVE && !attn__use_avx512()) {
    support_skip(test, "%s: this CPU has no AVX-512F (or valgrind hides "
                 "it)", paths[k].name);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ */
/* The bound's pieces for one row. */

static double bf16d(double x) { return attn__bf16_round((float)x); }

typedef struct rowb {
  double delta;   /* score error bound */
  double wv;      /* sum_j w_j |v_j| (dropped weights under dropout) */
} rowb;

/* Largest |scale| sum |q k| (A) and largest magnitude of a score's
 * terms (M) over the row's allowed keys. */
static void row_mags(const attn_problem *p, int b, int h, int i, double *A,
                     double *M) {
  int kvh = h / (p->H / p->Hkv);
  const float *q = p->q + (((size_t)b * p->H + h) * p->Lq + i) * p->D;
  *A = 0.0;
  *M = 1.0 + p->softcap;
  for (int j = 0; j < p->Lk; j++) {
    if (!ref_allowed(p, b, h, i, j)) continue;
    const float *k = p->k + (((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->D;
    double a = 0.0, m;
    for (int d = 0; d < p->D; d++) a += fabs((double)q[d] * k[d]);
    a *= fabs(p->scale);
    m = a + fabs(ref_score(p, b, h, i, j)) + fabs(p->softcap);
    if (p->bias) {
      const int64_t *t = p->bias_stride;
      m += fabs(p->bias[b * t[0] + h * t[1] + i * t[2] + j * t[3]]);
    }
    *A = a > *A ? a : *A;
    *M = m > *M ? m : *M;
  }
}

/* sum_j w_j |v_j| with the dropped weights under dropout. */
static double row_wv(const attn_problem *p, int b, int h, int i,
                     const double *w, int d) {
  int kvh = h / (p->H / p->Hkv);
  double s = 0.0;
  for (int j = 0; j < p->Lk; j++) {
    double wd = w[j];
    if (p->dropout_p > 0.0f)
      wd = ref_keep(p, b, h, i, j) ? wd / (1.0 - p->dropout_p) : 0.0;
    s += wd * fabs(p->v[(((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->Dv +
                        d]);
  }
  return s;
}

/* The relative error of a probability before its own rounding, and the
 * output bound's factor: see the top of the file. */
static double rho_of(const attn_problem *p, double delta) {
  double g = (p->Lk + 8) * 0x1p-24;
  return exp(2.0 * delta) * (1 + EXP_ERR) * (1 + EXP_ERR) * (1 + 2 * g) - 1;
}

static double out_factor(const attn_problem *p, double delta, int round_v) {
  double g = (p->Lk + 8) * 0x1p-24, r = p->dropout_p > 0.0f ? 2 : 1;
  return (1 + rho_of(p, delta)) * pow(1 + U, r + round_v) * (1 + g) - 1;
}

/* ------------------------------------------------------------------ */
/* One problem on one path against the references. */

typedef struct refs {
  attn_problem pr;      /* the problem on BF16-rounded operands */
  float *q, *k, *v;
} refs;

static float *rounded_copy(const float *x, size_t n) {
  float *y = malloc((n ? n : 1) * sizeof *y);
  ck_assert_ptr_nonnull(y);
  for (size_t i = 0; i < n; i++) y[i] = attn__bf16_round(x[i]);
  return y;
}

static void refs_make(refs *r, const attn_problem *p) {
  size_t nq = (size_t)p->B * p->H * p->Lq * p->D;
  size_t nk = (size_t)p->B * p->Hkv * p->Lk * p->D;
  size_t nv = (size_t)p->B * p->Hkv * p->Lk * p->Dv;
  r->pr = *p;
  r->q = rounded_copy(p->q, nq);
  r->k = rounded_copy(p->k, nk);
  r->v = rounded_copy(p->v, nv);
  r->pr.q = r->q; r->pr.k = r->k; r->pr.v = r->v;
  r->pr.precision = ATTN_PRECISION_FP32;
}

static void refs_free(refs *r) { free(r->q); free(r->k); free(r->v); }

typedef struct run {
  float *o1, *o2, *w, *l1, *l2;
} run;

static void run_both(const attn_problem *p, run *x) {
  size_t no = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t nw = (size_t)p->B * p->H * p->Lq * p->Lk;
  size_t nl = (size_t)p->B * p->H * p->Lq;
  x->o1 = malloc(no * 4); x->o2 = malloc(no * 4); x->w = malloc(nw * 4);
  x->l1 = malloc(nl * 4); x->l2 = malloc(nl * 4);
  ck_assert(x->o1 && x->o2 && x->w && x->l1 && x->l2);
  memset(x->o1, 0xff, no * 4); memset(x->o2, 0xff, no * 4);
  memset(x->w, 0xff, nw * 4);
  ck_assert_int_eq(attn_check(p), 0);
  ck_assert_int_eq(attn_forward_lse(p, x->o1, x->w, x->l1), 0);
  ck_assert_int_eq(attn_forward_lse(p, x->o2, NULL, x->l2), 0);
}

static void run_free(run *x) {
  free(x->o1); free(x->o2); free(x->w); free(x->l1); free(x->l2);
}

static void check_lse(const char *what, const char *path, float got,
                      double want, double tol) {
  if (isinf(want)) {
    EXPECT(isinf(got) && got < 0, "%s: lse %s %g, want -inf", what, path,
           got);
    return;
  }
  EXPECT(fabs(got - want) <= tol, "%s: lse %s %.9g vs ref %.9g (bound %g)",
         what, path, got, want, tol);
}

/* The weights path's output against its own returned weights times the
 * rounded values: only float32 sums between them. */
static void check_pv_of_weights(const attn_problem *p, const refs *r,
                                const run *x, int b, int h, int i,
                                const char *what) {
  size_t row = ((size_t)b * p->H + h) * p->Lq + i;
  int kvh = h / (p->H / p->Hkv);
  const float *wr = x->w + row * p->Lk;
  float ks = 1.0f / (1.0f - p->dropout_p);
  for (int d = 0; d < p->Dv; d++) {
    double s = 0.0, a = 0.0;
    for (int j = 0; j < p->Lk; j++) {
      double wd = wr[j];
      if (p->dropout_p > 0.0f)
        wd = ref_keep(p, b, h, i, j) ? bf16d(wr[j] * ks) : 0.0;
      double t = wd * r->v[(((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->Dv +
                           d];
      s += t;
      a += fabs(t);
    }
    double got = x->o1[row * p->Dv + d];
    EXPECT(fabs(got - s) <= (p->Lk + 8) * 0x1p-24 * a + 1e-37,
           "%s: out (%d,%d,%d,%d) %.9g is not its weights times bf16(v) "
           "%.9g", what, b, h, i, d, got, s);
  }
}

static void check_row(const attn_problem *p, const refs *r, const run *x,
                      int b, int h, int i, const char *what, double *rw,
                      double *ro, double *rwb, double *rob) {
  size_t row = ((size_t)b * p->H + h) * p->Lq + i;
  double lse, lseb, A, M, Ab, Mb;
  int n = ref_row(p, b, h, i, rw, ro, &lse);
  (void)ref_row(&r->pr, b, h, i, rwb, rob, &lseb);
  row_mags(p, b, h, i, &A, &M);
  row_mags(&r->pr, b, h, i, &Ab, &Mb);
  double delta = (2 * U + U * U) * A + (p->D + 8) * 0x1p-24 * M;
  double deltab = (p->D + 8) * 0x1p-24 * Mb;
  double fa = out_factor(p, delta, 1), fb = out_factor(p, deltab, 0);
  double wa = (1 + rho_of(p, delta)) * (1 + U) - 1;
  double wb = (1 + rho_of(p, deltab)) * (1 + U) - 1;
  const float *wr = x->w + row * p->Lk;
  for (int j = 0; j < p->Lk; j++) {
    uint32_t bits = attn__f2u(wr[j]);
    EXPECT((bits & 0xffffu) == 0, "%s: weight (%d,%d,%d,%d) %.9g is not a "
           "BF16 value", what, b, h, i, j, wr[j]);
    if (!ref_allowed(p, b, h, i, j))
      EXPECT(wr[j] == 0.0f, "%s: masked weight (%d,%d,%d,%d) = %g", what, b,
             h, i, j, wr[j]);
    EXPECT(fabs(wr[j] - rw[j]) <= wa * rw[j] + 1e-37,
           "%s: weight (%d,%d,%d,%d) %.9g vs ref %.9g", what, b, h, i, j,
           wr[j], rw[j]);
    EXPECT(fabs(wr[j] - rwb[j]) <= wb * rwb[j] + 1e-37,
           "%s: weight (%d,%d,%d,%d) %.9g vs bf16-operand ref %.9g", what,
           b, h, i, j, wr[j], rwb[j]);
  }
  for (int d = 0; d < p->Dv; d++) {
    double ta = fa * row_wv(p, b, h, i, rw, d) + 1e-37;
    double tb = fb * row_wv(&r->pr, b, h, i, rwb, d) + 1e-37;
    for (int path = 0; path < 2; path++) {
      float got = (path ? x->o2 : x->o1)[row * p->Dv + d];
      const char *pn = path ? "online" : "weights";
      if (n == 0)
        EXPECT(got == 0.0f, "%s: empty row (%d,%d,%d) %s out %g", what, b,
               h, i, pn, got);
      EXPECT(fabs(got - ro[d]) <= ta, "%s: out (%d,%d,%d,%d) %s path %.9g "
             "vs ref %.9g (bound %g)", what, b, h, i, d, pn, got, ro[d], ta);
      EXPECT(fabs(got - rob[d]) <= tb, "%s: out (%d,%d,%d,%d) %s path %.9g "
             "vs bf16-operand ref %.9g (bound %g)", what, b, h, i, d, pn,
             got, rob[d], tb);
    }
  }
  check_pv_of_weights(p, r, x, b, h, i, what);
  double tl = delta + 2 * EXP_ERR + (p->Lk + 8) * 0x1p-23 +
              0x1p-23 * fabs(lse);
  check_lse(what, "weights path", x->l1[row], lse, tl);
  check_lse(what, "online path", x->l2[row], lse, tl);
}

static void compare_bf16(const attn_problem *p0, int gemm, const char *what) {
  attn_problem p = *p0;
  refs r;
  run x;
  p.precision = ATTN_PRECISION_BF16;
  p.gemm = gemm;
  p.amx = amx_ok;
  refs_make(&r, &p);
  run_both(&p, &x);
  double *rw = malloc((size_t)p.Lk * 8), *ro = malloc((size_t)p.Dv * 8);
  double *rwb = malloc((size_t)p.Lk * 8), *rob = malloc((size_t)p.Dv * 8);
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < p.H; h++)
      for (int i = 0; i < p.Lq; i++)
        check_row(&p, &r, &x, b, h, i, what, rw, ro, rwb, rob);
  free(rw); free(ro); free(rwb); free(rob);
  run_free(&x);
  refs_free(&r);
}

/* ------------------------------------------------------------------ */
/* Every variant on every path. */

static const shape full_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1},     {2, 1, 1, 3, 7, 5, 3},
  {1, 4, 2, 65, 129, 16, 8}, {2, 1, 1, 130, 300, 8, 12},
  {1, 2, 1, 70, 33, 64, 70}, {1, 2, 2, 1, 600, 33, 16},
  {2, 4, 1, 65, 7, 3, 5},    {1, 2, 2, 300, 300, 8, 4},
  {1, 2, 1, 33, 47, 48, 20}, {1, 1, 1, 17, 15, 130, 129},
};
static const shape vg_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1}, {2, 1, 1, 3, 7, 5, 3}, {1, 4, 2, 66, 9, 8, 4},
};

static void compare_kinds(int kinds, const char *what) {
  const shape *s = under_valgrind() ? vg_shapes : full_shapes;
  size_t n = under_valgrind() ? sizeof vg_shapes / sizeof vg_shapes[0]
                              : sizeof full_shapes / sizeof full_shapes[0];
  for (int k = 0; k < NPATHS; k++) {
    if (!path_runs(k, what)) continue;
    for (size_t t = 0; t < n; t++) {
      tcase c;
      char label[240];
      make_case(&c, &s[t], kinds, 4000 + t * 7 + (uint64_t)kinds);
      snprintf(label, sizeof label, "%s [%s] B%d H%d/%d Lq%d Lk%d D%d Dv%d",
               what, paths[k].name, c.p.B, s[t].H, s[t].Hkv, s[t].Lq,
               s[t].Lk, s[t].D, s[t].Dv);
      compare_bf16(&c.p, paths[k].gemm, label);
      free_case(&c);
    }
  }
}

static const int kinds[] = {
  0, K_MASK, K_VL1, K_VL2, K_UL, K_LR, K_WIN, K_WINLR | K_LR, K_BIAS,
  K_DROP, K_CAP, K_ALIBI, K_ALIBI2, K_SINK, K_PACK, K_PACK | K_UL | K_WIN,
  K_MASK | K_BIAS | K_UL | K_WIN | K_SINK | K_CAP | K_ALIBI,
  K_PACK | K_NEW | K_LR, K_MASK | K_DROP | K_SINK,
};
static const char *kind_name[] = {
  "plain", "mask", "valid_lens (B,)", "valid_lens (B, Lq)", "causal ul",
  "causal lr", "window", "window lr + causal lr", "bias", "dropout",
  "softcap", "alibi (H,)", "alibi (B, H)", "sinks", "packed",
  "packed causal window", "mask bias causal window sinks softcap alibi",
  "packed sinks softcap alibi causal lr", "mask dropout sinks",
};

START_TEST(test_bf16_variants_within_bound) {
  compare_kinds(kinds[_i], kind_name[_i]);
}
END_TEST

/* ------------------------------------------------------------------ */
/* BF16 inputs, invariance, refusals. */

static uint16_t *bits_of(const float *x, size_t n) {
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < n; i++)
    h[i] = (uint16_t)(attn__f2u(attn__bf16_round(x[i])) >> 16);
  return h;
}

/* dtype BF16 gives the bits of float32 inputs that hold BF16 values, on
 * every path and both paths, and stays within the bound. */
START_TEST(test_bf16_inputs_used_as_sent) {
  shape s = {2, 4, 2, 70, 301, 33, 17};
  for (int k = 0; k < NPATHS; k++) {
    if (!path_runs(k, "test_bf16_inputs_used_as_sent")) continue;
    tcase c;
    make_case(&c, &s, K_MASK | K_UL | K_SINK, 77);
    size_t nq = (size_t)s.B * s.H * s.Lq * s.D;
    size_t nk = (size_t)s.B * s.Hkv * s.Lk * s.D;
    size_t nv = (size_t)s.B * s.Hkv * s.Lk * s.Dv;
    for (size_t i = 0; i < nq; i++) c.q[i] = attn__bf16_round(c.q[i]);
    for (size_t i = 0; i < nk; i++) c.k[i] = attn__bf16_round(c.k[i]);
    for (size_t i = 0; i < nv; i++) c.v[i] = attn__bf16_round(c.v[i]);
    attn_problem p = c.p, ph;
    p.precision = ATTN_PRECISION_BF16;
    p.gemm = paths[k].gemm;
    p.amx = amx_ok;
    ph = p;
    ph.dtype = ATTN_DTYPE_BF16;
    ph.q16 = bits_of(c.q, nq); ph.k16 = bits_of(c.k, nk);
    ph.v16 = bits_of(c.v, nv);
    ph.q = ph.k = ph.v = NULL;
    run a, b;
    run_both(&p, &a);
    run_both(&ph, &b);
    size_t no = (size_t)s.B * s.H * s.Lq * s.Dv;
    size_t nw = (size_t)s.B * s.H * s.Lq * s.Lk;
    EXPECT(!memcmp(a.o1, b.o1, no * 4) && !memcmp(a.o2, b.o2, no * 4) &&
           !memcmp(a.w, b.w, nw * 4), "%s: BF16 inputs differ from float32"
           " inputs of the same values", paths[k].name);
    compare_bf16(&p, paths[k].gemm, paths[k].name);
    run_free(&a); run_free(&b);
    free((void *)ph.q16); free((void *)ph.k16); free((void *)ph.v16);
    free_case(&c);
  }
}
END_TEST

/* An item's rows are the same bits alone (B = 1) as inside a batch of 3,
 * and however the tasks are split. */
START_TEST(test_bf16_batch_and_split_invariant) {
  shape s = {3, 2, 1, 130, 520, 64, 64};
  for (int k = 0; k < NPATHS; k++) {
    if (!path_runs(k, "test_bf16_batch_and_split_invariant")) continue;
    tcase c;
    make_case(&c, &s, K_LR | K_SINK, 9);
    attn_problem p = c.p, one;
    p.precision = ATTN_PRECISION_BF16;
    p.gemm = paths[k].gemm;
    p.amx = amx_ok;
    one = p;
    one.B = 1;
    size_t per_o = (size_t)s.H * s.Lq * s.Dv;
    size_t per_q = (size_t)s.H * s.Lq * s.D;
    size_t per_k = (size_t)s.Hkv * s.Lk * s.D;
    size_t per_v = (size_t)s.Hkv * s.Lk * s.Dv;
    one.q = c.q + per_q; one.k = c.k + per_k; one.v = c.v + per_v;
    run all, it;
    run_both(&p, &all);
    run_both(&one, &it);
    EXPECT(!memcmp(all.o2 + per_o, it.o2, per_o * 4) &&
           !memcmp(all.o1 + per_o, it.o1, per_o * 4),
           "%s: item 1 differs alone and in the batch", paths[k].name);
    /* tasks run one at a time against all at once */
    size_t nt = attn_task_count(&p, 0), bytes = attn_scratch_bytes(&p, 0);
    void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    float *o = malloc((size_t)s.B * per_o * 4);
    for (size_t t = nt; t-- > 0;)
      ck_assert_int_eq(attn_run_tasks(&p, t, t + 1, o, NULL, scratch), 0);
    EXPECT(!memcmp(o, all.o2, (size_t)s.B * per_o * 4),
           "%s: task split changed the answer", paths[k].name);
    free(o); free(scratch);
    run_free(&all); run_free(&it);
    free_case(&c);
  }
}
END_TEST

/* Which kernels run: AMX only in BF16 mode, only when the caller allows
 * it (attn_problem.amx) and the CPU has it, by default and when forced;
 * forced without it, the default rule; attn_kernel_name agrees. */
START_TEST(test_bf16_pick_amx_only_when_allowed) {
  shape s = {1, 1, 1, 5, 7, 4, 3};
  tcase c;
  make_case(&c, &s, 0, 3);
  attn_problem p = c.p;
  int fallback, native = attn__use_avx512() ? ATTN_GEMM_NATIVE
                                           : ATTN_GEMM_BLAS;
  p.precision = ATTN_PRECISION_BF16;
  fallback = attn__gemm_pick(&p); /* amx 0: the rule without AMX */
  ck_assert_int_ne(fallback, ATTN_GEMM_AMX);
  ck_assert_str_ne(attn_kernel_name(ATTN_PRECISION_BF16, 0), "amx-bf16");
  p.gemm = ATTN_GEMM_AMX;
  ck_assert_int_eq(attn_check(&p), 0);
  ck_assert_int_eq(attn__gemm_pick(&p), fallback);
  p.amx = 1; /* allowed: picked where the CPU has it */
  int want = attn__use_amx() ? ATTN_GEMM_AMX : fallback;
  ck_assert_int_eq(attn__gemm_pick(&p), want);
  p.gemm = ATTN_GEMM_AUTO;
  ck_assert_int_eq(attn__gemm_pick(&p), want);
  ck_assert_str_eq(attn_kernel_name(ATTN_PRECISION_BF16, 1),
                   attn__use_amx() ? "amx-bf16"
                                   : attn_kernel_name(ATTN_PRECISION_BF16, 0));
  p.gemm = ATTN_GEMM_NATIVE; /* another path forced */
  ck_assert_int_eq(attn__gemm_pick(&p), native);
  p.precision = ATTN_PRECISION_FP32; /* float32 never runs on AMX */
  p.gemm = ATTN_GEMM_AMX;
  ck_assert_int_eq(attn__gemm_pick(&p), native);
  ck_assert_str_eq(attn_kernel_name(ATTN_PRECISION_FP32, 1),
                   attn_kernel_name(ATTN_PRECISION_FP32, 0));
  free_case(&c);
}
END_TEST

START_TEST(test_bf16_check_refusals) {
  shape s = {1, 1, 1, 4, 4, 4, 4};
  tcase c;
  make_case(&c, &s, K_ADD, 1);
  attn_problem p = c.p;
  uint16_t h[16] = {0};
  p.precision = ATTN_PRECISION_BF16;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL); /* additive */
  free_case(&c);
  make_case(&c, &s, 0, 1);
  p = c.p;
  p.precision = 2;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.precision = ATTN_PRECISION_FP32;
  p.dtype = ATTN_DTYPE_BF16;
  p.q16 = p.k16 = p.v16 = h;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL); /* BF16 data, fp32 */
  p.precision = ATTN_PRECISION_BF16;
  ck_assert_int_eq(attn_check(&p), 0);
  p.v16 = NULL;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.v16 = h;
  p.dtype = 5;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  free_case(&c);
}
END_TEST

/* The rounding itself: nearest even, ties, subnormals, saturation, and
 * the AVX-512 loops agree with the portable one bit for bit. */
START_TEST(test_bf16_rounding) {
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(1.0f + 0x1p-8f)),
                    0x3f800000u); /* tie to even: down */
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(1.0f + 3 * 0x1p-8f)),
                    0x3f820000u); /* tie to even: up */
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(1.0f + 0x1p-8f + 0x1p-20f)),
                    0x3f810000u);
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(-1e-39f)), 0x80000000u);
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(FLT_MAX)), 0x7f7f0000u);
  ck_assert_uint_eq(attn__f2u(attn__bf16_round(-FLT_MAX)), 0xff7f0000u);
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx512()) {
    support_skip("test_bf16_rounding", "AVX-512 rounding loops: this CPU "
                 "has no AVX-512F");
    return;
  }
  enum { N = 4099 };
  static float x[N], y[N];
  static uint16_t hx[N];
  rng r = {12345};
  for (int i = 0; i < N; i++) {
    uint32_t u = (uint32_t)rng_next(&r);
    if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu; /* finite */
    x[i] = attn__u2f(u);
    hx[i] = (uint16_t)(u >> 16);
  }
  attn__bf16_round_avx512(y, x, N);
  for (int i = 0; i < N; i++)
    EXPECT(attn__f2u(y[i]) == attn__f2u(attn__bf16_round(x[i])),
           "round %08x: avx512 %08x", attn__f2u(x[i]), attn__f2u(y[i]));
  attn__bf16_widen_avx512(y, hx, N);
  for (int i = 0; i < N; i++)
    if ((hx[i] & 0x7f80u) != 0x7f80u)
      EXPECT(attn__f2u(y[i]) ==
                 attn__f2u(attn__bf16_round(attn__bf16_widen(hx[i]))),
             "widen %04x: avx512 %08x", hx[i], attn__f2u(y[i]));
#endif
}
END_TEST

/* BF16 mode's exp against exp in float64: within 2^-17 relatively (the
 * docs grant 2^-16), exactly 0 below ln(FLT_MIN), the sum that of the
 * unrounded terms and the stored ones those terms rounded. */
START_TEST(test_bf16_exp_within_its_bound) {
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx512()) {
    support_skip("test_bf16_exp_within_its_bound", "this CPU has no "
                 "AVX-512F (the cheaper exp exists only there)");
    return;
  }
  enum { N = 1000 };
  static float s[N], s2[N];
  double worst = 0.0;
  for (int rep = 0; rep < 200; rep++) {
    for (int c = 0; c < N; c++)
      s[c] = s2[c] = -(float)((rep * N + c) % 90001) * 0.001f;
    s[0] = s2[0] = 0.0f;  /* the maximum */
    s[N - 1] = s2[N - 1] = -100.0f;
    float m, sum, m2, sum2;
    ck_assert(attn__softmax_span_bf16_avx512(s, N, 0, N, -FLT_MAX, NULL, &m, &sum,
                                             0));
    ck_assert(attn__softmax_span_bf16_avx512(s2, N, 0, N, -FLT_MAX, NULL, &m2,
                                             &sum2, 1));
    ck_assert(m == 0.0f && m2 == 0.0f && sum == sum2);
    double total = 0.0;
    for (int c = 0; c < N; c++) {
      double x = -(double)((float)((rep * N + c) % 90001) * 0.001f);
      if (c == 0) x = 0.0;
      if (c == N - 1) x = -100.0;
      double want = exp(x);
      if (x < -87.33654) {
        ck_assert(s[c] == 0.0f);
        continue;
      }
      double rel = fabs(s[c] - want) / want;
      worst = rel > worst ? rel : worst;
      total += s[c];
      EXPECT(attn__f2u(s2[c]) == attn__f2u(attn__bf16_round(s[c])),
             "stored %.9g is not bf16(%.9g)", s2[c], s[c]);
    }
    EXPECT(fabs(sum - total) <= N * 0x1p-24 * total, "sum %.9g vs %.9g",
           sum, total);
  }
  EXPECT(worst <= 0x1p-17, "exp off by %.3g relatively", worst);
#else
  support_skip("test_bf16_exp_within_its_bound", "not an x86-64 build");
#endif
}
END_TEST

#if ATTN__HAVE_AVX2_FMA
/* C = 0.5 A B^T and C = A B + 0.75 C against float64 on the rounded
 * operands, on odd sizes (edges of every tile, panel, pair and key
 * block); and a row's bits the same computed alone (m = 1). */
static void kernels_vs_float64(const char *name, attn__bf16_nt_fn *nt,
                               attn__bf16_nn_fn *nn) {
  static const int dims[][3] = {{1, 1, 1},     {7, 65, 3},   {13, 130, 33},
                                {12, 64, 64},  {30, 17, 129}, {6, 600, 80},
                                {33, 47, 48},  {17, 15, 96},  {40, 100, 70}};
  rng r = {99};
  for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
    int m = dims[t][0], n = dims[t][1], k = dims[t][2];
    float *a = rand_floats(&r, (size_t)m * 1024, 2.0f);
    float *b = rand_floats(&r, (size_t)1024 * 1024, 2.0f);
    float *c = rand_floats(&r, (size_t)m * 1024, 1.0f);
    float *c0 = malloc((size_t)m * 1024 * 4), c1[1024];
    uint32_t *a2 = aligned_alloc(64, 1 << 20), *pk = aligned_alloc(64, 1 << 21);
    memcpy(c0, c, (size_t)m * 1024 * 4);
    nt(m, n, k, 0.5f, a, ATTN_DTYPE_F32, (size_t)k, b, ATTN_DTYPE_F32,
       (size_t)k, c, n, a2, pk);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        double s = 0, ab = 0;
        for (int d = 0; d < k; d++) {
          double x = bf16d(a[i * k + d]) * bf16d(b[j * k + d]);
          s += x;
          ab += fabs(x);
        }
        EXPECT(fabs(c[i * n + j] - 0.5 * s) <= (k + 2) * 0x1p-24 * ab,
               "%s nt %dx%dx%d (%d,%d): %.9g vs %.9g", name, m, n, k, i, j,
               c[i * n + j], 0.5 * s);
      }
    nt(1, n, k, 0.5f, a + (size_t)(m - 1) * k, ATTN_DTYPE_F32, (size_t)k, b,
       ATTN_DTYPE_F32, (size_t)k, c1, n, a2, pk);
    EXPECT(!memcmp(c1, c + (size_t)(m - 1) * n, (size_t)n * 4),
           "%s nt %dx%dx%d: the last row alone differs", name, m, n, k);
    /* NN: n <= 80 columns */
    int nn_ = n > 80 ? 80 : n;
    memcpy(c, c0, (size_t)m * 1024 * 4);
    nn(m, nn_, k, a, k, b, ATTN_DTYPE_F32, (size_t)nn_, 0.75f, c, nn_, a2,
       pk);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < nn_; j++) {
        double s = 0.75 * c0[i * nn_ + j], ab = fabs(s);
        for (int d = 0; d < k; d++) {
          double x = bf16d(a[i * k + d]) * bf16d(b[d * nn_ + j]);
          s += x;
          ab += fabs(x);
        }
        EXPECT(fabs(c[i * nn_ + j] - s) <= (k + 4) * 0x1p-24 * ab,
               "%s nn %dx%dx%d (%d,%d): %.9g vs %.9g", name, m, nn_, k, i,
               j, c[i * nn_ + j], s);
      }
    memcpy(c1, c0 + (size_t)(m - 1) * nn_, (size_t)nn_ * 4);
    nn(1, nn_, k, a + (size_t)(m - 1) * k, k, b, ATTN_DTYPE_F32,
       (size_t)nn_, 0.75f, c1, nn_, a2, pk);
    EXPECT(!memcmp(c1, c + (size_t)(m - 1) * nn_, (size_t)nn_ * 4),
           "%s nn %dx%dx%d: the last row alone differs", name, m, nn_, k);
    free(a); free(b); free(c); free(c0); free(a2); free(pk);
  }
}

/* check on the AVX512-BF16 kernels and on the AMX ones, each where it
 * can run here (else the test's skip line for it). */
static void on_bf16_kernels(const char *test,
                            void (*check)(const char *, attn__bf16_nt_fn *,
                                          attn__bf16_nn_fn *)) {
  if (!attn__use_avx512bf16())
    support_skip(test, "avx512bf16: this CPU has no AVX512-BF16 (or "
                 "valgrind hides it)");
  else
    check("avx512bf16", attn__bf16_nt_avx512, attn__bf16_nn_avx512);
  if (amx_runs(test))
    check("amx-bf16", attn__bf16_nt_amx, attn__bf16_nn_amx);
}
#endif

/* The kernels alone against float64. */
START_TEST(test_bf16_kernels_match_float64) {
#if ATTN__HAVE_AVX2_FMA
  on_bf16_kernels("test_bf16_kernels_match_float64", kernels_vs_float64);
#else
  support_skip("test_bf16_kernels_match_float64", "not an x86-64 build");
#endif
}
END_TEST

#if ATTN__HAVE_AVX2_FMA
/* nn(A) against nn(A rounded by attn__bf16_round): the same bits, so
 * the kernel's own rounding of P is the contract's.  A holds ties
 * (halfway between two BF16 values, odd and even), subnormals, values
 * near 1 and negative ones. */
static void nn_rounds_as_contract(const char *name, attn__bf16_nt_fn *nt,
                                  attn__bf16_nn_fn *nn) {
  enum { M = 5, N = 40, K = 77 };
  (void)nt;
  rng r = {7};
  float *a = rand_floats(&r, M * K, 2.0f), *ar = malloc(M * K * 4);
  float *b = rand_floats(&r, K * N, 2.0f), c0[M * N], c1[M * N];
  uint32_t *a2 = aligned_alloc(64, 1 << 20), *pk = aligned_alloc(64, 1 << 21);
  for (int i = 0; i < M * K; i++) {
    uint32_t u;
    memcpy(&u, &a[i], 4);
    if (i % 5 == 1) u = (u & 0xffff0000u) | 0x8000u;        /* a tie */
    if (i % 7 == 2) u = (u & 0x80000000u) | (u & 0x7fffffu); /* subnormal */
    if (i % 11 == 3) u = 0x3f7fffffu + (uint32_t)(i % 3);   /* near 1 */
    memcpy(&a[i], &u, 4);
    ar[i] = attn__bf16_round(a[i]);
  }
  nn(M, N, K, a, K, b, ATTN_DTYPE_F32, N, 0.0f, c0, N, a2, pk);
  nn(M, N, K, ar, K, b, ATTN_DTYPE_F32, N, 0.0f, c1, N, a2, pk);
  EXPECT(!memcmp(c0, c1, sizeof c0),
         "%s: nn's rounding of A is not attn__bf16_round's", name);
  free(a); free(ar); free(b); free(a2); free(pk);
}
#endif

/* The P V kernels round the probabilities as attn__bf16_round does:
 * on VDPBF16PS the online path leaves that rounding to them (online.c). */
START_TEST(test_bf16_nn_rounds_p_as_the_contract) {
#if ATTN__HAVE_AVX2_FMA
  on_bf16_kernels("test_bf16_nn_rounds_p_as_the_contract",
                  nn_rounds_as_contract);
#else
  support_skip("test_bf16_nn_rounds_p_as_the_contract",
               "not an x86-64 build");
#endif
}
END_TEST

/* The VDPBF16PS kernels over a head's kept operands give the bits of
 * the kernels that pack per call, block after block as the online path
 * calls them: a panel packed with few keys, then again with more, one
 * with more keys than a later block reads, an odd key count, D odd. */
START_TEST(test_bf16_kept_operands_give_the_bits_of_packing_per_call) {
#if ATTN__HAVE_AVX2_FMA
  if (!attn__use_avx512bf16()) {
    support_skip("test_bf16_kept_operands_give_the_bits_of_packing_per_call",
                 "avx512bf16: this CPU has no AVX512-BF16 (or valgrind "
                 "hides it)");
    return;
  }
  enum { LK = 300, D = 33, DV = 24, M = 7, PANELS = (LK + 63) / 64 };
  static const int blocks[][2] = {{0, 37}, {0, 100}, {64, 200}, {0, 64},
                                  {256, 44}, {128, 171}};
  rng r = {11};
  float *q = rand_floats(&r, M * D, 2.0f), *k = rand_floats(&r, LK * D, 2.0f);
  float *v = rand_floats(&r, LK * DV, 2.0f), *pr = rand_floats(&r, M * LK, 1.0f);
  float c0[M * LK], c1[M * LK], o0[M * DV], o1[M * DV];
  uint32_t *a2 = aligned_alloc(64, 1 << 20), *pk = aligned_alloc(64, 1 << 21);
  uint32_t *kp = aligned_alloc(64, PANELS * 64 * attn__bf16_pairs(D) * 4);
  uint32_t *vp = aligned_alloc(64, PANELS * 32 * attn__bf16_ldp(DV) * 4);
  int kready[PANELS] = {0}, vready[PANELS] = {0};
  for (int i = 0; i < M * LK; i++) pr[i] = fabsf(pr[i]);
  for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
    int j0 = blocks[b][0], n = blocks[b][1];
    attn__bf16_nt_avx512(M, n, D, 0.125f, q, ATTN_DTYPE_F32, D,
                         k + (size_t)j0 * D, ATTN_DTYPE_F32, D, c0, n, a2, pk);
    attn__bf16_nt_kept_avx512(M, n, D, 0.125f, q, ATTN_DTYPE_F32, D, k,
                              ATTN_DTYPE_F32, D, j0, c1, n, a2, kp, kready);
    EXPECT(!memcmp(c0, c1, (size_t)M * n * 4),
           "nt over kept panels, keys [%d, %d): other bits", j0, j0 + n);
    for (int beta = 0; beta < 2; beta++) {
      for (int i = 0; i < M * DV; i++) o0[i] = o1[i] = (float)(i % 13) - 6;
      attn__bf16_nn_avx512(M, DV, n, pr + j0, LK, v + (size_t)j0 * DV,
                           ATTN_DTYPE_F32, DV, (float)beta, o0, DV, a2, pk);
      attn__bf16_nn_kept_avx512(M, DV, n, pr + j0, LK, v, ATTN_DTYPE_F32, DV,
                                j0, (float)beta, o1, DV, a2, vp, vready);
      EXPECT(!memcmp(o0, o1, sizeof o0),
             "nn over kept pairs, keys [%d, %d), beta %d: other bits", j0,
             j0 + n, beta);
    }
  }
  free(q); free(k); free(v); free(pr); free(a2); free(pk); free(kp); free(vp);
#else
  support_skip("test_bf16_kept_operands_give_the_bits_of_packing_per_call",
               "not an x86-64 build");
#endif
}
END_TEST

/* A query row's bits are the same computed alone (Lq = 1) as among the
 * rows of its tile and task, on the core's own kernels and both paths:
 * rows 0, 15, 16 and the last of 37, plain and with sinks.  Not through
 * cblas_sgemm, whose kernels and sums change with the number of rows. */
START_TEST(test_bf16_row_alone_as_in_its_tile) {
  shape s = {1, 2, 1, 37, 300, 40, 24};
  static const int rows[] = {0, 15, 16, 36};
  for (int k = 0; k < NPATHS; k++) {
    if (!path_runs(k, "test_bf16_row_alone_as_in_its_tile")) continue;
    for (int sinks = 0; sinks < 2; sinks++) {
      tcase c;
      make_case(&c, &s, sinks ? K_SINK : 0, 31 + (uint64_t)sinks);
      attn_problem p = c.p, one;
      p.precision = ATTN_PRECISION_BF16;
      p.gemm = paths[k].gemm;
      p.amx = amx_ok;
      if (attn__gemm_pick(&p) == ATTN_GEMM_BLAS) {
        free_case(&c);
        break;
      }
      run all, it;
      run_both(&p, &all);
      float q1[2 * 40];
      for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        int i = rows[ri];
        for (int h = 0; h < s.H; h++)
          memcpy(q1 + h * s.D, c.q + ((size_t)h * s.Lq + i) * s.D,
                 (size_t)s.D * 4);
        one = p;
        one.Lq = 1;
        one.q = q1;
        run_both(&one, &it);
        for (int h = 0; h < s.H; h++) {
          size_t row = (size_t)h * s.Lq + i;
          EXPECT(!memcmp(it.o1 + (size_t)h * s.Dv, all.o1 + row * s.Dv,
                         (size_t)s.Dv * 4) &&
                 !memcmp(it.o2 + (size_t)h * s.Dv, all.o2 + row * s.Dv,
                         (size_t)s.Dv * 4) &&
                 !memcmp(it.w + (size_t)h * s.Lk, all.w + row * s.Lk,
                         (size_t)s.Lk * 4),
                 "%s: row %d of head %d alone differs from it among 37 "
                 "(sinks %d)", paths[k].name, i, h, sinks);
        }
        run_free(&it);
      }
      run_free(&all);
      free_case(&c);
    }
  }
}
END_TEST

static Suite *bf16_suite(void) {
  Suite *s = suite_create("core_bf16");
  TCase *ref = tcase_create("reference");
  tcase_set_timeout(ref, 600);
  tcase_add_loop_test(ref, test_bf16_variants_within_bound, 0,
                      (int)(sizeof kinds / sizeof kinds[0]));
  tcase_add_test(ref, test_bf16_inputs_used_as_sent);
  tcase_add_test(ref, test_bf16_kernels_match_float64);
  tcase_add_test(ref, test_bf16_nn_rounds_p_as_the_contract);
  tcase_add_test(ref, test_bf16_kept_operands_give_the_bits_of_packing_per_call);
  suite_add_tcase(s, ref);
  TCase *edge = tcase_create("edge");
  tcase_set_timeout(edge, 300);
  tcase_add_test(edge, test_bf16_batch_and_split_invariant);
  tcase_add_test(edge, test_bf16_row_alone_as_in_its_tile);
  tcase_add_test(edge, test_bf16_check_refusals);
  tcase_add_test(edge, test_bf16_pick_amx_only_when_allowed);
  tcase_add_test(edge, test_bf16_rounding);
  tcase_add_test(edge, test_bf16_exp_within_its_bound);
  suite_add_tcase(s, edge);
  return s;
}

int main(void) {
  amx_ok = amx_request(amx_why, sizeof amx_why);
  return ref_run_suite(bf16_suite());
}
