/* support_ref.c - the shared cases and float64 reference (support_ref.h). */
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn_impl.h"
#include "support_ref.h"
#include "support_skip.h"

uint64_t rng_next(rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}

double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }
float rng_sym(rng *r, float a) {
  return (float)((rng_unit(r) * 2.0 - 1.0) * a);
}
int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

/* ------------------------------------------------------------------ */
/* Cases. */

float *rand_floats(rng *r, size_t n, float a) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (size_t i = 0; i < n; i++) x[i] = rng_sym(r, a);
  return x;
}

size_t rand_strides(rng *r, const shape *s, int64_t st[4]) {
  int64_t dims[4] = {s->B, s->H, s->Lq, s->Lk};
  int64_t n = 1;
  for (int a = 3; a >= 0; a--) {
    if (rng_int(r, 3) == 0) {
      st[a] = 0;
    } else {
      st[a] = n;
      n *= dims[a];
    }
  }
  return (size_t)n;
}

/* n + 1 boundaries from 0 to len, non-decreasing, empty pieces likely. */
int32_t *rand_cu(rng *r, int n, int len) {
  int32_t *cu = malloc((size_t)(n + 1) * sizeof *cu);
  cu[0] = 0;
  cu[n] = len;
  for (int s = 1; s < n; s++) cu[s] = rng_int(r, len + 1);
  for (int a = 1; a < n; a++) /* insertion sort */
    for (int b = a; b > 1 && cu[b] < cu[b - 1]; b--) {
      int32_t x = cu[b]; cu[b] = cu[b - 1]; cu[b - 1] = x;
    }
  return cu;
}

void make_new_kinds(tcase *c, const shape *s, int kinds, rng *r) {
  attn_problem *p = &c->p;
  if (kinds & K_SINK) {
    /* some sinks far above every score, so that they take the row */
    c->sinks = rand_floats(r, (size_t)s->H, 2.0f);
    if (s->H > 1) c->sinks[s->H - 1] = 30.0f;
    p->sinks = c->sinks;
  }
  if (kinds & K_CAP) p->softcap = (float)(0.3 + 3.0 * rng_unit(r));
  if (kinds & (K_ALIBI | K_ALIBI2)) {
    size_t n = (kinds & K_ALIBI2) ? (size_t)s->B * s->H : (size_t)s->H;
    c->slopes = malloc(n * sizeof *c->slopes);
    for (size_t h = 0; h < n; h++) /* BLOOM's slopes, 2^(-8 (h + 1) / H) */
      c->slopes[h] = (float)pow(2.0, -8.0 * (double)(h % s->H + 1) / s->H);
    p->alibi_slopes = c->slopes;
    p->alibi_per_item = (kinds & K_ALIBI2) != 0;
  }
  if (kinds & K_PACK) {
    int n = 1 + rng_int(r, 5);
    c->cuq = rand_cu(r, n, s->Lq);
    c->cuk = rand_cu(r, n, s->Lk);
    p->cu_seqlens_q = c->cuq;
    p->cu_seqlens_k = c->cuk;
    p->n_seqs = n;
  }
  if (kinds & K_WINLR) p->window_align = ATTN_WINDOW_LOWER_RIGHT;
}

void make_case(tcase *c, const shape *s0, int kinds, uint64_t seed) {
  rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
  attn_problem *p = &c->p;
  shape s = *s0;
  if (kinds & K_PACK) s.B = 1;
  memset(c, 0, sizeof *c);
  attn_problem_init(p);
  p->B = s.B; p->H = s.H; p->Hkv = s.Hkv; p->Lq = s.Lq; p->Lk = s.Lk;
  p->D = s.D; p->Dk = s.D; p->Dv = s.Dv;
  c->q = rand_floats(&r, (size_t)s.B * s.H * s.Lq * s.D, 1.0f);
  c->k = rand_floats(&r, (size_t)s.B * s.Hkv * s.Lk * s.D, 1.0f);
  c->v = rand_floats(&r, (size_t)s.B * s.Hkv * s.Lk * s.Dv, 1.0f);
  p->q = c->q; p->k = c->k; p->v = c->v;
  /* without K_UNIT a larger scale than 1/sqrt(D), so that soft-capping
   * bites */
  p->scale = (float)(((kinds & K_UNIT) ? 1.0 : 3.0) / sqrt((double)s.D));
  if (kinds & K_ADD) {
    p->scoring = ATTN_SCORING_ADDITIVE;
    p->Hd = 1 + rng_int(&r, 12);
    c->wq = rand_floats(&r, (size_t)p->Hd * s.D, 1.0f / sqrtf((float)s.D));
    c->wk = rand_floats(&r, (size_t)p->Hd * s.D, 1.0f / sqrtf((float)s.D));
    c->wv = rand_floats(&r, (size_t)p->Hd, (kinds & K_UNIT) ? 1.0f : 2.0f);
    p->w_q = c->wq; p->w_k = c->wk; p->w_v = c->wv;
  }
  if (kinds & (K_VL1 | K_VL2)) {
    size_t n = (size_t)s.B * ((kinds & K_VL2) ? (size_t)s.Lq : 1);
    c->vl = malloc(n * sizeof *c->vl);
    for (size_t i = 0; i < n; i++)
      c->vl[i] = rng_int(&r, 5) == 0 ? 0 : rng_int(&r, s.Lk + 1);
    p->valid_lens = c->vl;
    p->valid_lens_per_query = (kinds & K_VL2) != 0;
  }
  if (kinds & K_MASK) {
    size_t n = rand_strides(&r, &s, p->mask_stride);
    c->mask = malloc(n);
    for (size_t i = 0; i < n; i++) c->mask[i] = rng_int(&r, 10) < 7;
    p->mask = c->mask;
  }
  if (kinds & K_BIAS) {
    size_t n = rand_strides(&r, &s, p->bias_stride);
    c->bias = rand_floats(&r, n, 2.0f);
    p->bias = c->bias;
  }
  if (kinds & K_UL) p->causal = ATTN_CAUSAL_UPPER_LEFT;
  if (kinds & K_LR) p->causal = ATTN_CAUSAL_LOWER_RIGHT;
  if (kinds & (K_WIN | K_WINLR)) {
    p->has_window = 1;
    p->window_left = rng_int(&r, 4) == 0 ? -1 : rng_int(&r, 40);
    p->window_right = rng_int(&r, 4) == 0 ? -1 : rng_int(&r, 40);
  }
  if (kinds & K_DROP) {
    p->dropout_p = (float)(0.1 + 0.5 * rng_unit(&r));
    p->seed = rng_next(&r);
  }
  make_new_kinds(c, &s, kinds, &r);
}

void make_unit_case(tcase *c, const shape *s, int kinds, uint64_t seed) {
  make_case(c, s, kinds | K_UNIT, seed);
}

void free_case(tcase *c) {
  free(c->q); free(c->k); free(c->v); free(c->bias); free(c->wq);
  free(c->wk); free(c->wv); free(c->sinks); free(c->slopes); free(c->mask);
  free(c->vl); free(c->cuq); free(c->cuk);
}

/* ------------------------------------------------------------------ */
/* The float64 reference. */

seq ref_seq(const attn_problem *p, int i) {
  seq s = {0, 0, p->Lq, p->Lk};
  if (!p->cu_seqlens_q) return s;
  for (int n = 0; n < p->n_seqs; n++)
    if (i >= p->cu_seqlens_q[n] && i < p->cu_seqlens_q[n + 1]) {
      s.qo = p->cu_seqlens_q[n];
      s.ko = p->cu_seqlens_k[n];
      s.lq = p->cu_seqlens_q[n + 1] - s.qo;
      s.lk = p->cu_seqlens_k[n + 1] - s.ko;
      return s;
    }
  ck_abort_msg("query %d in no sequence", i);
  return s;
}

int ref_allowed(const attn_problem *p, int b, int h, int i, int j) {
  seq s = ref_seq(p, i);
  long il = i - s.qo, jl = j - s.ko;
  if (jl < 0 || jl >= s.lk) return 0;
  if (p->valid_lens) {
    int32_t vl = p->valid_lens_per_query ? p->valid_lens[b * p->Lq + i]
                                         : p->valid_lens[b];
    if (!(j < vl)) return 0;
  }
  if (p->causal == ATTN_CAUSAL_UPPER_LEFT && !(jl <= il)) return 0;
  if (p->causal == ATTN_CAUSAL_LOWER_RIGHT && !(jl <= il + s.lk - s.lq))
    return 0;
  if (p->has_window) {
    long c = p->window_align == ATTN_WINDOW_LOWER_RIGHT ? il + s.lk - s.lq
                                                         : il;
    if (p->window_left >= 0 && jl < c - p->window_left) return 0;
    if (p->window_right >= 0 && jl > c + p->window_right) return 0;
  }
  if (p->mask) {
    const int64_t *m = p->mask_stride;
    if (!p->mask[b * m[0] + h * m[1] + i * m[2] + j * m[3]]) return 0;
  }
  return 1;
}

double ref_score(const attn_problem *p, int b, int h, int i, int j) {
  int kvh = h / (p->H / p->Hkv);
  const float *q = p->q + (((size_t)b * p->H + h) * p->Lq + i) * p->D;
  const float *k = p->k + (((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->Dk;
  double s = 0.0;
  if (p->scoring == ATTN_SCORING_DOT) {
    for (int d = 0; d < p->D; d++) s += (double)q[d] * k[d];
    s *= p->scale;
  } else {
    for (int u = 0; u < p->Hd; u++) {
      double a = 0.0;
      for (int d = 0; d < p->D; d++) a += (double)p->w_q[u * p->D + d] * q[d];
      for (int d = 0; d < p->Dk; d++)
        a += (double)p->w_k[u * p->Dk + d] * k[d];
      s += (double)p->w_v[u] * tanh(a);
    }
  }
  if (p->softcap > 0.0f) s = p->softcap * tanh(s / p->softcap);
  if (p->bias) {
    const int64_t *t = p->bias_stride;
    s += p->bias[b * t[0] + h * t[1] + i * t[2] + j * t[3]];
  }
  if (p->alibi_slopes) {
    seq q0 = ref_seq(p, i);
    double slope = p->alibi_slopes[(p->alibi_per_item ? b * p->H : 0) + h];
    s -= slope * fabs((double)(i - q0.qo) + q0.lk - q0.lq - (j - q0.ko));
  }
  return s;
}

uint64_t ref_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int ref_keep(const attn_problem *p, int b, int h, int i, int j) {
  uint64_t n = (((uint64_t)b * p->H + h) * p->Lq + i) * p->Lk + j;
  double u = (double)(ref_mix(p->seed ^ ref_mix(n)) >> 40) * ldexp(1.0, -24);
  return u >= (double)p->dropout_p;
}

int ref_row_mag(const attn_problem *p, int b, int h, int i, double *w,
                double *o, double *lse, double *mag) {
  int kvh = h / (p->H / p->Hkv), n = 0;
  double mx = p->sinks ? (double)p->sinks[h] : -INFINITY, den = 0.0;
  for (int j = 0; j < p->Lk; j++) {
    w[j] = 0.0;
    if (!ref_allowed(p, b, h, i, j)) continue;
    w[j] = ref_score(p, b, h, i, j);
    mx = w[j] > mx ? w[j] : mx;
    n++;
  }
  for (int j = 0; j < p->Lk; j++)
    if (ref_allowed(p, b, h, i, j)) den += (w[j] = exp(w[j] - mx));
  if (p->sinks) den += exp(p->sinks[h] - mx);
  for (int d = 0; d < p->Dv; d++) o[d] = 0.0;
  for (int d = 0; mag && d < p->Dv; d++) mag[d] = 0.0;
  if (lse) *lse = den > 0.0 ? mx + log(den) : -INFINITY;
  if (n == 0) return 0;
  for (int j = 0; j < p->Lk; j++) {
    w[j] /= den;
    double wd = w[j];
    if (p->dropout_p > 0.0f)
      wd = ref_keep(p, b, h, i, j) ? wd / (1.0 - p->dropout_p) : 0.0;
    const float *v = p->v + (((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->Dv;
    for (int d = 0; d < p->Dv; d++) o[d] += wd * v[d];
    for (int d = 0; mag && d < p->Dv; d++) mag[d] += fabs(wd * v[d]);
  }
  return n;
}

int ref_row(const attn_problem *p, int b, int h, int i, double *w,
            double *o, double *lse) {
  return ref_row_mag(p, b, h, i, w, o, lse, NULL);
}

int under_valgrind(void) {
  const char *v = getenv("ATTND_VALGRIND");
  return v && *v && strcmp(v, "0") != 0;
}

/* ------------------------------------------------------------------ */
/* Comparing the core with the reference. */

size_t ref_out_len(const attn_problem *p) {
  return (size_t)p->B * p->H * p->Lq * p->Dv;
}

size_t ref_w_len(const attn_problem *p) {
  return (size_t)p->B * p->H * p->Lq * p->Lk;
}

/* mag, when not NULL, widens the output tolerance by 1e-5 sum_j |w_j v_j|
 * (ref_row_mag), for values far from unit scale. */
static void check_row(const attn_problem *p, const char *what, int b, int h,
                      int i, int n, const double *rw, const double *ro,
                      const double *mag, const float *w, const float *o1,
                      const float *o2) {
  double sum = 0.0;
  for (int j = 0; j < p->Lk; j++) {
    int ok = ref_allowed(p, b, h, i, j);
    if (!ok)
      EXPECT(w[j] == 0.0f, "%s: masked weight (%d,%d,%d,%d) = %g",
                    what, b, h, i, j, w[j]);
    EXPECT(fabs(w[j] - rw[j]) <= 1e-5,
                  "%s: weight (%d,%d,%d,%d) %.9g vs ref %.9g", what, b, h, i,
                  j, w[j], rw[j]);
    sum += w[j];
  }
  if (n > 0)
    EXPECT(fabs(sum - 1.0) <= 1e-5, "%s: row (%d,%d,%d) sums to %.9g",
                  what, b, h, i, sum);
  for (int d = 0; d < p->Dv; d++) {
    double tol = 1e-5 + 1e-5 * fabs(ro[d]) + (mag ? 1e-5 * mag[d] : 0.0);
    if (n == 0)
      EXPECT(o1[d] == 0.0f && o2[d] == 0.0f,
                    "%s: empty row (%d,%d,%d) output %g / %g", what, b, h, i,
                    o1[d], o2[d]);
    EXPECT(fabs(o1[d] - ro[d]) <= tol,
                  "%s: out (%d,%d,%d,%d) weights path %.9g vs ref %.9g", what,
                  b, h, i, d, o1[d], ro[d]);
    EXPECT(fabs(o2[d] - ro[d]) <= tol,
                  "%s: out (%d,%d,%d,%d) online path %.9g vs ref %.9g", what,
                  b, h, i, d, o2[d], ro[d]);
  }
}

void assert_all_finite(const float *x, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    EXPECT(isfinite(x[i]), "%s[%zu] = %g", what, i, x[i]);
}

void ref_run_both(const attn_problem *p, float *out_w, float *w,
                  float *out_online) {
  ck_assert_int_eq(attn_forward(p, out_w, w), 0);
  ck_assert_int_eq(attn_forward(p, out_online, NULL), 0);
}

int ref_compare(const attn_problem *p, const char *what, int scaled) {
  float *o1 = malloc(ref_out_len(p) * sizeof *o1);
  float *o2 = malloc(ref_out_len(p) * sizeof *o2);
  float *w = malloc(ref_w_len(p) * sizeof *w);
  double *rw = malloc((size_t)p->Lk * sizeof *rw);
  double *ro = malloc((size_t)p->Dv * sizeof *ro);
  double *mag = malloc((size_t)p->Dv * sizeof *mag);
  int empty = 0;
  ck_assert(o1 && o2 && w && rw && ro && mag);
  /* NaN everywhere first: attnd hands the core unzeroed buffers, so an
   * element the core does not write must fail the comparison */
  memset(o1, 0xff, ref_out_len(p) * sizeof *o1);
  memset(o2, 0xff, ref_out_len(p) * sizeof *o2);
  memset(w, 0xff, ref_w_len(p) * sizeof *w);
  ck_assert_int_eq(attn_forward(p, o1, w), 0);
  ck_assert_int_eq(attn_forward(p, o2, NULL), 0);
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int i = 0; i < p->Lq; i++) {
        size_t row = ((size_t)b * p->H + h) * p->Lq + i;
        int n = ref_row_mag(p, b, h, i, rw, ro, NULL, mag);
        empty += n == 0;
        check_row(p, what, b, h, i, n, rw, ro, scaled ? mag : NULL,
                  w + row * p->Lk, o1 + row * p->Dv, o2 + row * p->Dv);
      }
  free(o1); free(o2); free(w); free(rw); free(ro); free(mag);
  return empty;
}

int ref_native_gemm_or_skip(const char *test) {
  if (attn__use_avx512()) return 1;
  support_skip(test, "this CPU (or valgrind) has no AVX-512F + FMA for the "
               "native kernels");
  return 0;
}

int ref_run_suite(Suite *s) {
  /* One BLAS thread, as in an attnd worker; keeps valgrind runs sane. */
  openblas_set_num_threads(1);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
