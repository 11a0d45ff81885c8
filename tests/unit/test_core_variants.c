/* test_core_variants.c - learned sinks, soft-capping, ALiBi, packed
 * sequences, the lower-right window and the row log-sum-exp, against a
 * float64 reference of attn.h's formulas.
 *
 * The reference is naive and independent of core/: loops over (b, h, i, j)
 * in double, its own reading of which keys a query sees (packed sequences
 * in local coordinates), its own softmax with the sink term.  Each variant
 * runs alone and combined with every older feature (mask, bias,
 * valid_lens, causal both ways, both window alignments, grouped heads,
 * additive scoring, dropout), on the weights path and the online path.
 * Tolerances as test_core.c: outputs 1e-5 + 1e-5 |ref|, weights 1e-5,
 * lse 1e-5 + 1e-6 |ref|; masked and empty positions exactly 0.
 */
#include <check.h>
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/attn.h"
#include "core/attn_impl.h"

typedef struct rng { uint64_t s; } rng;

static uint64_t rng_next(rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}

static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }
static float rng_sym(rng *r, float a) {
  return (float)((rng_unit(r) * 2.0 - 1.0) * a);
}
static int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

#define EXPECT(cond, ...)                                                    \
  do {                                                                       \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                  \
  } while (0)

static int under_valgrind(void) {
  const char *v = getenv("ATTND_VALGRIND");
  return v && *v && strcmp(v, "0") != 0;
}

/* ------------------------------------------------------------------ */
/* Cases: old kinds as in test_core.c, new ones above them. */

enum {
  K_VL1 = 1 << 0, K_VL2 = 1 << 1, K_MASK = 1 << 2, K_UL = 1 << 3,
  K_LR = 1 << 4, K_WIN = 1 << 5, K_BIAS = 1 << 6, K_DROP = 1 << 7,
  K_ADD = 1 << 8,
  K_SINK = 1 << 9, K_CAP = 1 << 10, K_ALIBI = 1 << 11, K_ALIBI2 = 1 << 12,
  K_PACK = 1 << 13, K_WINLR = 1 << 14
};
#define K_NEW (K_SINK | K_CAP | K_ALIBI)

typedef struct shape { int B, H, Hkv, Lq, Lk, D, Dv; } shape;

typedef struct tcase {
  attn_problem p;
  float *q, *k, *v, *bias, *wq, *wk, *wv, *sinks, *slopes;
  uint8_t *mask;
  int32_t *vl, *cuq, *cuk;
} tcase;

static float *rand_floats(rng *r, size_t n, float a) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (size_t i = 0; i < n; i++) x[i] = rng_sym(r, a);
  return x;
}

static size_t rand_strides(rng *r, const shape *s, int64_t st[4]) {
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
static int32_t *rand_cu(rng *r, int n, int len) {
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

static void make_new_kinds(tcase *c, const shape *s, int kinds, rng *r) {
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

static void make_case(tcase *c, const shape *s0, int kinds, uint64_t seed) {
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
  /* a larger scale than 1/sqrt(D), so that soft-capping bites */
  p->scale = (float)(3.0 / sqrt((double)s.D));
  if (kinds & K_ADD) {
    p->scoring = ATTN_SCORING_ADDITIVE;
    p->Hd = 1 + rng_int(&r, 12);
    c->wq = rand_floats(&r, (size_t)p->Hd * s.D, 1.0f / sqrtf((float)s.D));
    c->wk = rand_floats(&r, (size_t)p->Hd * s.D, 1.0f / sqrtf((float)s.D));
    c->wv = rand_floats(&r, (size_t)p->Hd, 2.0f);
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

static void free_case(tcase *c) {
  free(c->q); free(c->k); free(c->v); free(c->bias); free(c->wq);
  free(c->wk); free(c->wv); free(c->sinks); free(c->slopes); free(c->mask);
  free(c->vl); free(c->cuq); free(c->cuk);
}

/* ------------------------------------------------------------------ */
/* The float64 reference. */

/* The query's sequence: offsets and lengths (the whole problem unpacked). */
typedef struct seq { int qo, ko, lq, lk; } seq;

static seq ref_seq(const attn_problem *p, int i) {
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

static int ref_allowed(const attn_problem *p, int b, int h, int i, int j) {
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

static double ref_score(const attn_problem *p, int b, int h, int i, int j) {
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

static uint64_t ref_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static int ref_keep(const attn_problem *p, int b, int h, int i, int j) {
  uint64_t n = (((uint64_t)b * p->H + h) * p->Lq + i) * p->Lk + j;
  double u = (double)(ref_mix(p->seed ^ ref_mix(n)) >> 40) * ldexp(1.0, -24);
  return u >= (double)p->dropout_p;
}

/* One row: weights w (Lk), output o (Dv) and *lse; returns allowed keys. */
static int ref_row(const attn_problem *p, int b, int h, int i, double *w,
                   double *o, double *lse) {
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
  *lse = den > 0.0 ? mx + log(den) : -INFINITY;
  if (n == 0) return 0;
  for (int j = 0; j < p->Lk; j++) {
    w[j] /= den;
    double wd = w[j];
    if (p->dropout_p > 0.0f)
      wd = ref_keep(p, b, h, i, j) ? wd / (1.0 - p->dropout_p) : 0.0;
    const float *v = p->v + (((size_t)b * p->Hkv + kvh) * p->Lk + j) * p->Dv;
    for (int d = 0; d < p->Dv; d++) o[d] += wd * v[d];
  }
  return n;
}

/* ------------------------------------------------------------------ */
/* Comparing. */

static void check_lse(const char *what, int b, int h, int i, const char *path,
                      float got, double want) {
  if (isinf(want)) {
    EXPECT(isinf(got) && got < 0, "%s: lse (%d,%d,%d) %s %g, want -inf",
           what, b, h, i, path, got);
    return;
  }
  EXPECT(fabs(got - want) <= 1e-5 + 1e-6 * fabs(want),
         "%s: lse (%d,%d,%d) %s %.9g vs ref %.9g", what, b, h, i, path, got,
         want);
}

/* Both paths against the reference; returns the rows without keys. */
static int compare_with_ref(const attn_problem *p, const char *what) {
  size_t no = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t nw = (size_t)p->B * p->H * p->Lq * p->Lk;
  size_t nl = (size_t)p->B * p->H * p->Lq;
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *w = malloc(nw * 4);
  float *l1 = malloc(nl * 4), *l2 = malloc(nl * 4);
  double *rw = malloc((size_t)p->Lk * 8), *ro = malloc((size_t)p->Dv * 8);
  int empty = 0;
  ck_assert(o1 && o2 && w && l1 && l2 && rw && ro);
  memset(o1, 0xff, no * 4); memset(o2, 0xff, no * 4);
  memset(w, 0xff, nw * 4);
  memset(l1, 0xff, nl * 4); memset(l2, 0xff, nl * 4);
  ck_assert_int_eq(attn_check(p), 0);
  ck_assert_int_eq(attn_forward_lse(p, o1, w, l1), 0);
  ck_assert_int_eq(attn_forward_lse(p, o2, NULL, l2), 0);
  for (int b = 0; b < p->B; b++)
    for (int h = 0; h < p->H; h++)
      for (int i = 0; i < p->Lq; i++) {
        size_t row = ((size_t)b * p->H + h) * p->Lq + i;
        double lse, sum = 0.0, rsum = 0.0;
        int n = ref_row(p, b, h, i, rw, ro, &lse);
        const float *wr = w + row * p->Lk;
        empty += n == 0;
        for (int j = 0; j < p->Lk; j++) {
          if (!ref_allowed(p, b, h, i, j))
            EXPECT(wr[j] == 0.0f, "%s: masked weight (%d,%d,%d,%d) = %g",
                   what, b, h, i, j, wr[j]);
          EXPECT(fabs(wr[j] - rw[j]) <= 1e-5,
                 "%s: weight (%d,%d,%d,%d) %.9g vs ref %.9g", what, b, h, i,
                 j, wr[j], rw[j]);
          sum += wr[j];
          rsum += rw[j];
        }
        EXPECT(fabs(sum - rsum) <= 1e-5, "%s: row (%d,%d,%d) sums to %.9g,"
               " ref %.9g", what, b, h, i, sum, rsum);
        for (int d = 0; d < p->Dv; d++) {
          float a = o1[row * p->Dv + d], c = o2[row * p->Dv + d];
          double tol = 1e-5 + 1e-5 * fabs(ro[d]);
          if (n == 0)
            EXPECT(a == 0.0f && c == 0.0f, "%s: empty row (%d,%d,%d) out "
                   "%g / %g", what, b, h, i, a, c);
          EXPECT(fabs(a - ro[d]) <= tol, "%s: out (%d,%d,%d,%d) weights path"
                 " %.9g vs ref %.9g", what, b, h, i, d, a, ro[d]);
          EXPECT(fabs(c - ro[d]) <= tol, "%s: out (%d,%d,%d,%d) online path"
                 " %.9g vs ref %.9g", what, b, h, i, d, c, ro[d]);
        }
        check_lse(what, b, h, i, "weights path", l1[row], lse);
        check_lse(what, b, h, i, "online path", l2[row], lse);
      }
  free(o1); free(o2); free(w); free(l1); free(l2); free(rw); free(ro);
  return empty;
}

static const shape full_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1},     {2, 1, 1, 3, 7, 5, 3},
  {1, 4, 2, 65, 129, 16, 8}, {2, 1, 1, 130, 300, 8, 12},
  {1, 2, 1, 70, 33, 4, 6},   {1, 2, 2, 1, 300, 32, 16},
  {2, 4, 1, 65, 7, 3, 5},    {1, 1, 1, 130, 600, 2, 2},
  {1, 2, 2, 300, 300, 8, 4},
};
static const shape vg_shapes[] = {
  {1, 1, 1, 1, 1, 1, 1}, {2, 1, 1, 3, 7, 5, 3}, {1, 4, 2, 66, 9, 8, 4},
  {1, 1, 1, 5, 260, 4, 3},
};

static int compare_kinds(int kinds, const char *what) {
  const shape *s = under_valgrind() ? vg_shapes : full_shapes;
  size_t n = under_valgrind() ? sizeof vg_shapes / sizeof vg_shapes[0]
                              : sizeof full_shapes / sizeof full_shapes[0];
  int empty = 0;
  for (size_t t = 0; t < n; t++)
    for (uint64_t rep = 0; rep < ((kinds & K_PACK) ? 3 : 1); rep++) {
      tcase c;
      char label[200];
      make_case(&c, &s[t], kinds, 2000 + t * 7 + rep * 131 + (uint64_t)kinds);
      snprintf(label, sizeof label, "%s B%d H%d/%d Lq%d Lk%d D%d Dv%d seqs%d",
               what, c.p.B, s[t].H, s[t].Hkv, s[t].Lq, s[t].Lk, s[t].D,
               s[t].Dv, c.p.n_seqs);
      empty += compare_with_ref(&c.p, label);
      free_case(&c);
    }
  return empty;
}

/* ------------------------------------------------------------------ */
/* Each variant alone, then with every older feature. */

START_TEST(test_sinks_match_reference) { compare_kinds(K_SINK, "sinks"); }
END_TEST

START_TEST(test_softcap_matches_reference) { compare_kinds(K_CAP, "softcap"); }
END_TEST

START_TEST(test_alibi_per_head_matches_reference) {
  compare_kinds(K_ALIBI, "alibi (H,)");
}
END_TEST

START_TEST(test_alibi_per_item_and_head_matches_reference) {
  compare_kinds(K_ALIBI2, "alibi (B, H)");
}
END_TEST

START_TEST(test_lower_right_window_matches_reference) {
  compare_kinds(K_WINLR, "window lower right");
  compare_kinds(K_WINLR | K_LR, "window lower right, causal lower right");
}
END_TEST

START_TEST(test_packed_sequences_match_reference) {
  compare_kinds(K_PACK, "packed");
}
END_TEST

START_TEST(test_packed_with_causal_and_windows_match_reference) {
  compare_kinds(K_PACK | K_UL, "packed causal upper left");
  compare_kinds(K_PACK | K_LR, "packed causal lower right");
  compare_kinds(K_PACK | K_WIN, "packed window");
  compare_kinds(K_PACK | K_WINLR | K_LR, "packed window lower right");
}
END_TEST

/* The new variants together with one older feature each (_i loops). */
static const int older[] = {
  0, K_MASK, K_BIAS, K_VL1, K_VL2, K_UL, K_LR, K_WIN, K_WINLR | K_LR,
  K_ADD, K_DROP, K_MASK | K_BIAS | K_UL | K_WIN | K_DROP,
};
static const char *older_name[] = {
  "alone", "mask", "bias", "valid_lens (B,)", "valid_lens (B, Lq)",
  "causal upper left", "causal lower right", "window",
  "window lower right", "additive", "dropout", "everything",
};

START_TEST(test_sinks_softcap_alibi_with_older_features) {
  char what[120];
  snprintf(what, sizeof what, "sinks+softcap+alibi, %s", older_name[_i]);
  compare_kinds(K_NEW | older[_i], what);
}
END_TEST

START_TEST(test_packed_with_new_and_older_features) {
  char what[120];
  int k = older[_i];
  if (k & (K_VL1 | K_VL2)) return; /* refused with packing: see below */
  snprintf(what, sizeof what, "packed sinks+softcap+alibi, %s",
           older_name[_i]);
  compare_kinds(K_PACK | K_NEW | k, what);
  snprintf(what, sizeof what, "packed, %s", older_name[_i]);
  compare_kinds(K_PACK | k, what);
}
END_TEST

START_TEST(test_each_variant_with_each_older_feature) {
  static const int news[] = {K_SINK, K_CAP, K_ALIBI, K_ALIBI2};
  static const char *nn[] = {"sinks", "softcap", "alibi", "alibi (B, H)"};
  char what[120];
  for (size_t v = 0; v < 4; v++) {
    snprintf(what, sizeof what, "%s, %s", nn[v], older_name[_i]);
    compare_kinds(news[v] | older[_i], what);
  }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Rows with nothing allowed, exactly. */

START_TEST(test_all_masked_row_with_sink_is_zero_with_lse_sink) {
  shape s = {1, 2, 1, 5, 9, 4, 3};
  tcase c;
  make_case(&c, &s, K_SINK | K_MASK, 7);
  memset(c.mask, 0, 1); /* at least the first mask element is 0 */
  c.p.mask_stride[0] = c.p.mask_stride[1] = 0;
  c.p.mask_stride[2] = c.p.mask_stride[3] = 0; /* all keys masked */
  c.sinks[0] = 1.5f; c.sinks[1] = -40.0f;
  float o[2 * 5 * 3], w[2 * 5 * 9], l[2 * 5], o2[2 * 5 * 3], l2[2 * 5];
  ck_assert_int_eq(attn_forward_lse(&c.p, o, w, l), 0);
  ck_assert_int_eq(attn_forward_lse(&c.p, o2, NULL, l2), 0);
  for (int x = 0; x < 30; x++) ck_assert(o[x] == 0.0f && o2[x] == 0.0f);
  for (int x = 0; x < 90; x++) ck_assert(w[x] == 0.0f);
  for (int x = 0; x < 10; x++) {
    float want = x < 5 ? 1.5f : -40.0f;
    ck_assert(l[x] == want && l2[x] == want);
  }
  /* without sinks: -inf */
  c.p.sinks = NULL;
  ck_assert_int_eq(attn_forward_lse(&c.p, o, w, l), 0);
  ck_assert_int_eq(attn_forward_lse(&c.p, o2, NULL, l2), 0);
  for (int x = 0; x < 10; x++)
    ck_assert(isinf(l[x]) && l[x] < 0 && isinf(l2[x]) && l2[x] < 0);
  free_case(&c);
}
END_TEST

/* A packed sequence with queries and no keys: its rows are empty. */
START_TEST(test_packed_sequence_without_keys_gives_empty_rows) {
  shape s = {1, 1, 1, 6, 4, 3, 2};
  tcase c;
  int32_t cuq[3] = {0, 2, 6}, cuk[3] = {0, 4, 4};
  make_case(&c, &s, K_SINK, 3);
  c.p.cu_seqlens_q = cuq; c.p.cu_seqlens_k = cuk; c.p.n_seqs = 2;
  ck_assert_int_eq(compare_with_ref(&c.p, "seq without keys, sink"), 4);
  c.p.sinks = NULL;
  ck_assert_int_eq(compare_with_ref(&c.p, "seq without keys"), 4);
  free_case(&c);
}
END_TEST

/* w = exp(s - lse) for every allowed key: the lse includes the sink. */
START_TEST(test_weights_are_exp_of_score_minus_lse) {
  shape s = {1, 3, 1, 20, 37, 8, 4};
  tcase c;
  make_case(&c, &s, K_SINK | K_CAP | K_ALIBI | K_UL, 11);
  float o[3 * 20 * 4], w[3 * 20 * 37], l[3 * 20];
  ck_assert_int_eq(attn_forward_lse(&c.p, o, w, l), 0);
  for (int h = 0; h < 3; h++)
    for (int i = 0; i < 20; i++)
      for (int j = 0; j < 37; j++) {
        if (!ref_allowed(&c.p, 0, h, i, j)) continue;
        double want = exp(ref_score(&c.p, 0, h, i, j) - l[h * 20 + i]);
        EXPECT(fabs(w[(h * 20 + i) * 37 + j] - want) <= 2e-5 * want + 1e-12,
               "w (%d,%d,%d) %g vs exp(s - lse) %g", h, i, j,
               w[(h * 20 + i) * 37 + j], want);
      }
  free_case(&c);
}
END_TEST

/* gpt-oss: sliding_window = 128 is window [127, 0] with causal. */
START_TEST(test_gpt_oss_sliding_window_sees_128_keys) {
  shape s = {1, 4, 2, 300, 300, 8, 8};
  tcase c;
  make_case(&c, &s, K_SINK | K_LR, 5);
  c.p.has_window = 1; c.p.window_left = 127; c.p.window_right = 0;
  int32_t allowed[4 * 300];
  float *w = malloc(4 * 300 * 300 * 4), *o = malloc(4 * 300 * 8 * 4);
  ck_assert_int_eq(attn_forward(&c.p, o, w), 0);
  ck_assert_int_eq(attn_diagnostics(&c.p, w, allowed, NULL, NULL, NULL), 0);
  for (int i = 0; i < 300; i++)
    ck_assert_int_eq(allowed[i], i + 1 < 128 ? i + 1 : 128);
  compare_with_ref(&c.p, "gpt-oss layer");
  free(w); free(o);
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Splits, skipping and memory. */

/* Task by task, in any range, gives the same bits as one call. */
static void packed_split_identical(int with_weights) {
  shape s = {1, 3, 1, 600, 500, 8, 4};
  tcase c;
  make_case(&c, &s, K_PACK | K_NEW | K_UL, 21);
  attn_problem *p = &c.p;
  size_t nt = attn_task_count(p, with_weights), no = 3 * 600 * 4;
  size_t bytes = attn_scratch_bytes(p, with_weights);
  void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
  float *o1 = malloc(no * 4), *o2 = malloc(no * 4);
  float *w1 = with_weights ? malloc(3 * 600 * 500 * 4) : NULL;
  float *w2 = with_weights ? malloc(3 * 600 * 500 * 4) : NULL;
  float l1[3 * 600], l2[3 * 600];
  ck_assert_int_eq(attn_forward_lse(p, o1, w1, l1), 0);
  for (size_t t = nt; t-- > 0;) /* backwards: the walk restarts */
    ck_assert_int_eq(attn_run_tasks_lse(p, t, t + 1, o2, w2, l2, scratch), 0);
  ck_assert(memcmp(o1, o2, no * 4) == 0);
  ck_assert(memcmp(l1, l2, sizeof l1) == 0);
  if (with_weights) ck_assert(memcmp(w1, w2, 3 * 600 * 500 * 4) == 0);
  free(scratch); free(o1); free(o2); free(w1); free(w2);
  free_case(&c);
}

START_TEST(test_packed_task_split_is_bit_identical) {
  packed_split_identical(0);
  packed_split_identical(1);
}
END_TEST

/* Tasks follow the sequences: a packed batch splits into the blocks its
 * sequences need, and no task crosses a boundary. */
START_TEST(test_packed_tasks_never_cross_sequences) {
  shape s = {1, 2, 1, 700, 700, 4, 4};
  tcase c;
  int32_t cu[5] = {0, 1, 300, 300, 700};
  make_case(&c, &s, 0, 1);
  c.p.cu_seqlens_q = c.p.cu_seqlens_k = cu;
  c.p.n_seqs = 4;
  int qb = attn__query_block(&c.p);
  size_t want = 0;
  for (int n = 0; n < 4; n++) want += (size_t)((cu[n + 1] - cu[n] + qb - 1) / qb);
  ck_assert_uint_eq(attn_task_count(&c.p, 0), 2 * want);
  /* the work it has: each sequence's square, not the whole one */
  ck_assert(attn_score_pairs(&c.p) == 2.0 * (1 * 1 + 299 * 299 + 0 + 400 * 400));
  c.p.cu_seqlens_q = c.p.cu_seqlens_k = NULL;
  ck_assert(attn_score_pairs(&c.p) == 2.0 * 700 * 700);
  c.p.cu_seqlens_q = c.p.cu_seqlens_k = cu;
  attn__task_iter it;
  attn__task task;
  size_t seen = 0;
  attn__tasks_begin(&c.p, want, &it);
  it.end = 2 * want;
  while (attn__tasks_next(&it, &task)) {
    ck_assert_int_eq(task.h, (int)(seen++ / want));
    ck_assert_int_ge(task.i0, task.qoff);
    ck_assert_int_le(task.i0 + task.rows, task.qoff + task.lq);
    ck_assert_int_gt(task.rows, 0);
  }
  ck_assert_uint_eq(seen, 2 * want);
  free_case(&c);
}
END_TEST

/* Keys and values of a sequence with no queries sit in PROT_NONE pages:
 * neither path may read them. */
START_TEST(test_packed_paths_never_read_other_sequences_keys) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int width = (int)(page / sizeof(float)), Lk = 80, Lq = 70, hidden = 64;
  char *kb = mmap(NULL, page * Lk, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *vb = mmap(NULL, page * Lk, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert(kb != MAP_FAILED && vb != MAP_FAILED);
  rng r = {9};
  float *k = (float *)kb, *v = (float *)vb;
  for (size_t x = 0; x < (size_t)width * Lk; x++) {
    k[x] = rng_sym(&r, 1.0f);
    v[x] = rng_sym(&r, 1.0f);
  }
  ck_assert_int_eq(mprotect(kb, page * hidden, PROT_NONE), 0);
  ck_assert_int_eq(mprotect(vb, page * hidden, PROT_NONE), 0);
  float *q = rand_floats(&r, (size_t)Lq * width, 1.0f);
  float *o = malloc((size_t)Lq * width * 4), *w = malloc((size_t)Lq * Lk * 4);
  int32_t cuq[3] = {0, 0, Lq}, cuk[3] = {0, hidden, Lk};
  attn_problem p;
  attn_problem_init(&p);
  p.B = 1; p.Lq = Lq; p.Lk = Lk; p.D = p.Dk = p.Dv = width;
  p.q = q; p.k = k; p.v = v; p.scale = 1.0f / 32.0f;
  p.cu_seqlens_q = cuq; p.cu_seqlens_k = cuk; p.n_seqs = 2;
  ck_assert_int_eq(attn_forward(&p, o, NULL), 0);
  ck_assert_int_eq(attn_forward(&p, o, w), 0);
  for (int i = 0; i < Lq; i++)
    for (int j = 0; j < hidden; j++) ck_assert(w[i * Lk + j] == 0.0f);
  munmap(kb, page * Lk); munmap(vb, page * Lk);
  free(q); free(o); free(w);
}
END_TEST

/* The new inputs add no (Lq, Lk) buffer to the online path. */
START_TEST(test_online_scratch_unchanged_by_new_variants) {
  shape s = {1, 2, 1, 4096, 300, 64, 64};
  tcase c;
  make_case(&c, &s, 0, 1);
  size_t a = attn_scratch_bytes(&c.p, 0);
  free_case(&c);
  make_case(&c, &s, K_NEW | K_PACK, 1);
  ck_assert_uint_eq(attn_scratch_bytes(&c.p, 0), a);
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Checks and diagnostics. */

START_TEST(test_check_rejects_bad_new_fields) {
  shape s = {1, 2, 1, 6, 5, 4, 4};
  tcase c;
  int32_t cuq[3] = {0, 2, 6}, cuk[3] = {0, 3, 5};
  make_case(&c, &s, 0, 1);
  attn_problem p = c.p;
  ck_assert_int_eq(attn_check(&p), 0);
  p.softcap = -1.0f;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.softcap = NAN;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.softcap = INFINITY;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.softcap = FLT_MIN / 2.0f;  /* subnormal: 1 / softcap overflows */
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.softcap = FLT_TRUE_MIN;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.softcap = FLT_MIN;
  ck_assert_int_eq(attn_check(&p), 0);
  p.softcap = 0.5f;
  ck_assert_int_eq(attn_check(&p), 0);
  p.window_align = 2;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p = c.p;
  p.cu_seqlens_q = cuq; p.n_seqs = 2;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL); /* one of the two */
  p.cu_seqlens_k = cuk;
  ck_assert_int_eq(attn_check(&p), 0);
  p.n_seqs = 0;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.n_seqs = 2;
  cuk[1] = 6; /* decreasing */
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  cuk[1] = 3; cuk[2] = 4; /* does not end at Lk */
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  cuk[2] = 5; cuq[0] = 1; /* does not start at 0 */
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  cuq[0] = 0;
  int32_t vl[1] = {3};
  p.valid_lens = vl;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  p.valid_lens = NULL;
  p.B = 2;
  ck_assert_int_eq(attn_check(&p), ATTND_EINVAL);
  free_case(&c);
}
END_TEST

/* With a sink the diagnostics describe the weights as returned (summing
 * to less than 1): entropy and max over the keys, the Jacobian
 * diag(a) - a a^T, allowed_keys counting keys only. */
START_TEST(test_diagnostics_with_sinks_describe_returned_weights) {
  shape s = {1, 2, 1, 9, 13, 4, 4};
  tcase c;
  make_case(&c, &s, K_SINK | K_UL | K_PACK, 4);
  attn_problem *p = &c.p;
  float w[2 * 9 * 13], o[2 * 9 * 4], ent[18], mx[18], jac[18];
  int32_t al[18];
  double rw[13], ro[4], lse;
  ck_assert_int_eq(attn_forward(p, o, w), 0);
  /* a set stop flag stops the diagnostics too (they run on a worker) */
  _Atomic int stop = 1;
  p->stop = &stop;
  ck_assert_int_eq(attn_diagnostics(p, w, al, ent, mx, jac), ATTND_ECANCELED);
  p->stop = NULL;
  ck_assert_int_eq(attn_diagnostics(p, w, al, ent, mx, jac), 0);
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 9; i++) {
      int n = ref_row(p, 0, h, i, rw, ro, &lse), row = h * 9 + i;
      double e = 0, m = 0, s2 = 0, s3 = 0;
      for (int j = 0; j < 13; j++) {
        if (rw[j] > 0) e -= rw[j] * log(rw[j]);
        m = rw[j] > m ? rw[j] : m;
        s2 += rw[j] * rw[j];
        s3 += rw[j] * rw[j] * rw[j];
      }
      double jf = sqrt(fmax(0.0, s2 - 2 * s3 + s2 * s2));
      ck_assert_int_eq(al[row], n);
      EXPECT(fabs(ent[row] - e) <= 1e-5, "entropy %g vs %g", ent[row], e);
      EXPECT(fabs(mx[row] - m) <= 1e-5, "max %g vs %g", mx[row], m);
      EXPECT(fabs(jac[row] - jf) <= 1e-5, "jacobian %g vs %g", jac[row], jf);
    }
  free_case(&c);
}
END_TEST

/* The AVX-512 soft-capping and ALiBi loops against the portable ones (the
 * ones valgrind and CPUs without AVX-512F run) and against float64:
 * within 4 ulp of cap, NaN as 0, +-inf as +-cap, every tail length. */
START_TEST(softcap_and_alibi_loops_agree_with_float64) {
  enum { N = 200 };
  float x[N], a[N], b[N];
  rng r = {17};
  for (int i = 0; i < N; i++)
    x[i] = i % 7 == 0 ? rng_sym(&r, 0.5f) : rng_sym(&r, 200.0f);
  x[3] = NAN; x[5] = INFINITY; x[6] = -INFINITY; x[8] = FLT_MAX; x[9] = 0.0f;
  static const float caps[] = {FLT_MIN, 0.25f, 1.0f, 30.0f, 50.0f, 1e6f};
  for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++)
    for (int z = 1; z <= N; z += 37) {
      float cap = caps[k];
      memcpy(a, x, sizeof x);
      attn__softcap_portable(a, 0, z, cap);
      for (int i = 0; i < z; i++) {
        double xi = isnan(x[i]) ? 0.0 : x[i];
        double want = cap * tanh(xi / cap);
        EXPECT(fabs(a[i] - want) <= 4.0 * cap * FLT_EPSILON + 4e-7 * fabs(want),
               "portable softcap(%g) of %g: %.9g vs %.9g", cap, x[i], a[i], want);
      }
#if ATTN__HAVE_AVX2_FMA
      if (!attn__use_avx512()) continue;
      memcpy(b, x, sizeof x);
      attn__softcap_avx512(b, 0, z, cap);
      for (int i = 0; i < z; i++)
        EXPECT(fabs(a[i] - b[i]) <= 4.0 * cap * FLT_EPSILON,
               "avx512 softcap(%g) of %g: %.9g vs portable %.9g", cap, x[i], b[i],
               a[i]);
      for (int i = z; i < N; i++) EXPECT(b[i] == x[i] || (isnan(b[i]) && isnan(x[i])),
                                          "softcap wrote past z at %d", i);
#endif
    }
  for (int z = 1; z <= N; z += 23) {
    float s0[N];
    for (int i = 0; i < N; i++) s0[i] = rng_sym(&r, 3.0f);
    memcpy(a, s0, sizeof s0);
    attn__alibi_portable(a, 2, z, 0.375f, 50);
    for (int i = 2; i < z; i++) {
      double want = (double)s0[i] - 0.375 * fabs(50.0 - i);
      EXPECT(fabs(a[i] - want) <= 1e-5, "portable alibi at %d: %g vs %g", i, a[i], want);
    }
#if ATTN__HAVE_AVX2_FMA
    if (!attn__use_avx512()) continue;
    memcpy(b, s0, sizeof s0);
    attn__alibi_avx512(b, 2, z, 0.375f, 50);
    for (int i = 0; i < N; i++)
      EXPECT(i < 2 || i >= z ? b[i] == s0[i] : fabs(b[i] - a[i]) <= 1e-5,
             "avx512 alibi at %d: %g vs portable %g", i, b[i], a[i]);
#endif
  }
}
END_TEST

/* The smallest cap attn_check allows, FLT_MIN, on both paths against
 * float64: scores of zero (a query row of zeros) stay 0 rather than NaN
 * (0 times an overflowed 1 / cap), every other score becomes +-cap, and
 * the weights are those of the capped scores. */
START_TEST(test_smallest_softcap_matches_reference) {
  shape s = {1, 2, 1, 70, 33, 4, 6};
  tcase c;
  make_case(&c, &s, 0, 23);
  c.p.softcap = FLT_MIN;
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 70; i += 3)
      memset(c.q + ((size_t)h * 70 + i) * 4, 0, 4 * sizeof(float));
  compare_with_ref(&c.p, "softcap FLT_MIN");
  c.p.causal = ATTN_CAUSAL_LOWER_RIGHT;
  compare_with_ref(&c.p, "softcap FLT_MIN, causal");
  free_case(&c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* attn_cost_flops against the work the core does, counted here from the
 * reference's masks (ref_allowed) and the task split the core documents
 * (attn_impl.h): tasks of qb rows that never cross a sequence, taken
 * `rows` at a time (the weights path's chunks), each scoring the span of
 * keys its rows may see, in attn__scores calls of at most ATTN__KBLOCK
 * keys, each of which (additive) projects its rows and its keys. */
typedef struct work { double scores, keys, qrows; } work;

static void ref_chunk(const attn_problem *p, int i0, int n, work *w) {
  int klo = p->Lk, khi = 0;
  for (int i = i0; i < i0 + n; i++)
    for (int j = 0; j < p->Lk; j++)
      if (ref_allowed(p, 0, 0, i, j)) {
        klo = j < klo ? j : klo;
        khi = j + 1 > khi ? j + 1 : khi;
      }
  if (klo >= khi) return;
  w->scores += (double)n * (khi - klo);
  w->keys += khi - klo;
  w->qrows += (double)n * ((khi - klo + ATTN__KBLOCK - 1) / ATTN__KBLOCK);
}

/* The work of one (b, h), chunks of `rows` rows of tasks of qb rows. */
static work ref_work(const attn_problem *p, int qb, int rows) {
  work w = {0, 0, 0};
  int n = p->cu_seqlens_q ? p->n_seqs : 1;
  for (int sq = 0; sq < n; sq++) {
    int a = p->cu_seqlens_q ? p->cu_seqlens_q[sq] : 0;
    int z = p->cu_seqlens_q ? p->cu_seqlens_q[sq + 1] : p->Lq;
    for (int t0 = a; t0 < z; t0 += qb)
      for (int c0 = t0; c0 < t0 + qb && c0 < z; c0 += rows) {
        int end = t0 + qb < z ? t0 + qb : z;
        ref_chunk(p, c0, end - c0 < rows ? end - c0 : rows, &w);
      }
  }
  return w;
}

/* What the estimate charges per unit of one dimension: the products are
 * 2 flops per multiply-add, so d flops / d dim over heads (and Hd) is
 * 2 x the count the dimension multiplies. */
static double cost_per(attn_problem *p, int *dim, int with_weights,
                       double unit) {
  double f0 = attn_cost_flops(p, with_weights, 0);
  (*dim)++;
  return (attn_cost_flops(p, with_weights, 0) - f0) / (2.0 * unit);
}

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-6)

static void cost_agrees(attn_problem *p, const char *what) {
  double heads = (double)p->B * p->H;
  for (int wt = 0; wt < 2; wt++) {
    attn__scratch lay;
    attn__scratch_layout(p, wt, &lay);
    int qb = lay.qrows, rows = wt && lay.wrows < qb ? lay.wrows : qb;
    work want = ref_work(p, qb, rows);
    attn_problem q = *p;
    double s;
    if (p->scoring == ATTN_SCORING_ADDITIVE) {
      double hd = heads * p->Hd;
      s = cost_per(&q, &q.Dv, wt, heads);
      q = *p;
      double keys = cost_per(&q, &q.Dk, wt, hd);
      q = *p;
      double qrows = cost_per(&q, &q.D, wt, hd);
      EXPECT(NEAR(keys, want.keys), "%s (weights %d): keys projected %.9g, "
             "the core projects %.9g", what, wt, keys, want.keys);
      EXPECT(NEAR(qrows, want.qrows), "%s (weights %d): query rows projected "
             "%.9g, the core projects %.9g", what, wt, qrows, want.qrows);
    } else {
      /* D moved alone: the estimate does not check Dk = D */
      s = cost_per(&q, &q.D, wt, heads);
    }
    EXPECT(NEAR(s, want.scores), "%s (weights %d): %.9g scores charged, the "
           "core computes %.9g", what, wt, s, want.scores);
  }
}

START_TEST(test_cost_counts_the_work_the_core_does) {
  attn_problem p;
  attn_problem_init(&p);
  p.B = p.H = p.Hkv = 1;
  p.Lq = 700; p.Lk = 1300;
  p.D = p.Dk = p.Dv = 8;
  p.scale = 1.0f;
  p.causal = ATTN_CAUSAL_UPPER_LEFT;
  cost_agrees(&p, "causal upper-left");
  p.causal = ATTN_CAUSAL_LOWER_RIGHT;
  cost_agrees(&p, "causal lower-right");
  p.causal = ATTN_CAUSAL_NONE;
  p.has_window = 1; p.window_left = 100; p.window_right = 30;
  cost_agrees(&p, "window (100, 30)");
  p.window_align = ATTN_WINDOW_LOWER_RIGHT;
  cost_agrees(&p, "window (100, 30) lower-right");
  p.has_window = 0; p.window_align = ATTN_WINDOW_UPPER_LEFT;
  /* packed: one-row sequences, long ones, one without keys */
  static const int32_t cq[7] = {0, 1, 2, 302, 302, 450, 700};
  static const int32_t ck[7] = {0, 600, 600, 900, 1000, 1100, 1300};
  p.cu_seqlens_q = cq; p.cu_seqlens_k = ck; p.n_seqs = 6;
  cost_agrees(&p, "packed");
  p.causal = ATTN_CAUSAL_LOWER_RIGHT;
  cost_agrees(&p, "packed causal");
  p.causal = ATTN_CAUSAL_NONE;
  /* additive scoring projects each call's rows and keys: a one-row
   * sequence projects all 600 of its keys for its one row */
  p.scoring = ATTN_SCORING_ADDITIVE;
  p.Hd = 16; p.Dk = 5;
  cost_agrees(&p, "additive packed");
  p.cu_seqlens_q = p.cu_seqlens_k = NULL; p.n_seqs = 0;
  cost_agrees(&p, "additive");
  p.H = p.Hkv = 3;
  cost_agrees(&p, "additive, three heads");
}
END_TEST

/* The diagnostics read each row's own sequence's keys (diag.c) and are
 * charged so: their charge over a packed batch is the unpacked one's
 * times the share of (row, key) pairs within the sequences. */
START_TEST(test_cost_charges_diagnostics_by_sequence) {
  static const int32_t cu[5] = {0, 1, 2, 3, 400};
  attn_problem p;
  attn_problem_init(&p);
  p.B = p.H = p.Hkv = 1;
  p.Lq = p.Lk = 400;
  p.D = p.Dk = p.Dv = 8;
  p.scale = 1.0f;
  double whole = attn_cost_flops(&p, 1, 1) - attn_cost_flops(&p, 1, 0);
  p.cu_seqlens_q = p.cu_seqlens_k = cu;
  p.n_seqs = 4;
  double packed = attn_cost_flops(&p, 1, 1) - attn_cost_flops(&p, 1, 0);
  double share = (3.0 + 397.0 * 397.0) / (400.0 * 400.0);
  ck_assert_msg(NEAR(packed, whole * share), "diagnostics %.9g, want %.9g",
                packed, whole * share);
}
END_TEST

static Suite *variants_suite(void) {
  Suite *s = suite_create("core_variants");
  int nold = (int)(sizeof older / sizeof older[0]);
  TCase *ref = tcase_create("reference");
  tcase_set_timeout(ref, 300);
  tcase_add_test(ref, test_sinks_match_reference);
  tcase_add_test(ref, test_softcap_matches_reference);
  tcase_add_test(ref, test_alibi_per_head_matches_reference);
  tcase_add_test(ref, test_alibi_per_item_and_head_matches_reference);
  tcase_add_test(ref, test_lower_right_window_matches_reference);
  tcase_add_test(ref, test_packed_sequences_match_reference);
  tcase_add_test(ref, test_packed_with_causal_and_windows_match_reference);
  tcase_add_loop_test(ref, test_sinks_softcap_alibi_with_older_features, 0,
                      nold);
  tcase_add_loop_test(ref, test_packed_with_new_and_older_features, 0, nold);
  tcase_add_loop_test(ref, test_each_variant_with_each_older_feature, 0,
                      nold);
  suite_add_tcase(s, ref);

  TCase *edge = tcase_create("edge");
  tcase_set_timeout(edge, 120);
  tcase_add_test(edge, test_all_masked_row_with_sink_is_zero_with_lse_sink);
  tcase_add_test(edge, test_packed_sequence_without_keys_gives_empty_rows);
  tcase_add_test(edge, test_weights_are_exp_of_score_minus_lse);
  tcase_add_test(edge, test_gpt_oss_sliding_window_sees_128_keys);
  tcase_add_test(edge, test_packed_task_split_is_bit_identical);
  tcase_add_test(edge, test_packed_tasks_never_cross_sequences);
  tcase_add_test(edge, test_packed_paths_never_read_other_sequences_keys);
  tcase_add_test(edge, test_online_scratch_unchanged_by_new_variants);
  tcase_add_test(edge, test_check_rejects_bad_new_fields);
  tcase_add_test(edge, test_diagnostics_with_sinks_describe_returned_weights);
  tcase_add_test(edge, softcap_and_alibi_loops_agree_with_float64);
  tcase_add_test(edge, test_smallest_softcap_matches_reference);
  tcase_add_test(edge, test_cost_counts_the_work_the_core_does);
  tcase_add_test(edge, test_cost_charges_diagnostics_by_sequence);
  suite_add_tcase(s, edge);
  return s;
}

int main(void) {
  openblas_set_num_threads(1);
  SRunner *sr = srunner_create(variants_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
