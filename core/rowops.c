/* rowops.c - the per-row loops of the softmax shared by both paths.
 *
 * Each loop runs over one row's span of keys and is written so that gcc
 * -O3 vectorizes it without -ffast-math: the helpers it calls are the
 * branch-free inlines of attn_impl.h, the maximum is an integer reduction
 * over order keys, and the sum is kept in eight explicit lanes (a float
 * reduction would need reassociation).  The lanes also fix the summation
 * order, so results do not depend on the vector width.
 */
#include <math.h>

#include "attn_impl.h"

static void row_bias(const attn_problem *p, const attn__task *t, int i,
                     int j0, int a, int z, float *s) {
  const int64_t *bs = p->bias_stride;
  const float *bb = p->bias + t->b * bs[0] + t->h * bs[1] + i * bs[2];
  if (bs[3] == 1) {
    for (int c = a; c < z; c++) s[c] += bb[j0 + c];
  } else {
    for (int c = a; c < z; c++) s[c] += bb[(int64_t)(j0 + c) * bs[3]];
  }
}

/* Soft-capping: s = cap * tanh(s / cap) over [a, z).  The score is
 * sanitized first so that a NaN from an overflowed product becomes 0, as
 * it would without the cap; the result lies in [-cap, cap]. */
ATTN__VEC_CLONES
static void row_softcap(float *s, int a, int z, float cap) {
  float inv = 1.0f / cap;
  for (int c = a; c < z; c++)
    s[c] = cap * attn__tanhf(attn__sanitize(s[c]) * inv);
}

/* ALiBi: s -= slope * |i + Lk - Lq - j| over [a, z), with i, j, Lq, Lk
 * counted within the row's sequence; key c of the block is j0 + c. */
ATTN__VEC_CLONES
static void alibi_span(float *s, int a, int z, float slope, int base) {
  for (int c = a; c < z; c++) {
    float d = (float)(base - c);
    s[c] -= slope * __builtin_fabsf(d);
  }
}

static void row_alibi(const attn_problem *p, const attn__task *t, int i,
                      int j0, int a, int z, float *s) {
  size_t at = (p->alibi_per_item ? (size_t)t->b * p->H : 0) + (size_t)t->h;
  /* i + Lk - Lq - j within the sequence, for key j = j0 + c: base - c */
  int64_t base = (int64_t)(i - t->qoff) + t->lk - t->lq - (j0 - t->koff);
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx512()) {
    attn__alibi_avx512(s, a, z, p->alibi_slopes[at], (int)base);
    return;
  }
#endif
  alibi_span(s, a, z, p->alibi_slopes[at], (int)base);
}

void attn__softcap_portable(float *s, int a, int z, float cap) {
  row_softcap(s, a, z, cap);
}

void attn__alibi_portable(float *s, int a, int z, float slope, int base) {
  alibi_span(s, a, z, slope, base);
}

static void row_softcap_any(float *s, int a, int z, float cap) {
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx512()) {
    attn__softcap_avx512(s, a, z, cap);
    return;
  }
#endif
  row_softcap(s, a, z, cap);
}

/* s = sanitize(s) over [a, z); returns the maximum. */
ATTN__VEC_CLONES
static float clean_max(float *s, int a, int z) {
  uint32_t k = attn__fkey(-FLT_MAX);
  for (int c = a; c < z; c++) {
    float v = attn__sanitize(s[c]);
    uint32_t kv = attn__fkey(v);
    s[c] = v;
    k = kv > k ? kv : k;
  }
  return attn__funkey(k);
}

/* As clean_max, with forbidden keys set to -FLT_MAX (which never beats
 * an allowed score, so the maximum is over allowed keys). */
ATTN__VEC_CLONES
static float clean_max_masked(float *s, const float *f, int a, int z) {
  uint32_t k = attn__fkey(-FLT_MAX);
  for (int c = a; c < z; c++) {
    float v = attn__mask_score(attn__sanitize(s[c]), f[c]);
    uint32_t kv = attn__fkey(v);
    s[c] = v;
    k = kv > k ? kv : k;
  }
  return attn__funkey(k);
}

/* Sanitize and the maximum of the span (-FLT_MAX if empty). */
static float row_max(const attn__span *sp, float *s) {
  if (sp->a == sp->z) return -FLT_MAX;
  if (sp->flags) return clean_max_masked(s, sp->flags, sp->a, sp->z);
#if ATTN__HAVE_AVX2_FMA
  /* Read-only when every score is finite (sanitize would change none). */
  if (attn__use_avx2_fma()) {
    int finite;
    float m = attn__use_avx512() ? attn__max_avx512(s, sp->a, sp->z, &finite)
                                 : attn__max_avx2(s, sp->a, sp->z, &finite);
    if (finite) return m;
  }
#endif
  return clean_max(s, sp->a, sp->z);
}

static float lanes_sum(const float acc[8]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

ATTN__VEC_CLONES
static float exp_sum(float *s, int a, int z, float m) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int c = a;
  for (; c + 8 <= z; c += 8)
    for (int l = 0; l < 8; l++) {
      float e = attn__expf(s[c + l] - m);
      s[c + l] = e;
      acc[l] += e;
    }
  for (; c < z; c++) {
    s[c] = attn__expf(s[c] - m);
    acc[(c - a) & 7] += s[c];
  }
  return lanes_sum(acc);
}

ATTN__VEC_CLONES
static float exp_sum_masked(float *s, const float *f, int a, int z,
                            float m) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int c = a;
  for (; c + 8 <= z; c += 8)
    for (int l = 0; l < 8; l++) {
      float e = attn__expf(s[c + l] - m) * f[c + l];
      s[c + l] = e;
      acc[l] += e;
    }
  for (; c < z; c++) {
    s[c] = attn__expf(s[c] - m) * f[c];
    acc[(c - a) & 7] += s[c];
  }
  return lanes_sum(acc);
}

float attn__exp_sum_portable(float *s, const float *f, int a, int z,
                             float m) {
  if (f) return exp_sum_masked(s, f, a, z, m);
  return exp_sum(s, a, z, m);
}

/* exp(s - m) over the span, zeros around it; returns the sum. */
static float row_exp(float *s, int n, const attn__span *sp, float m) {
  if (sp->a > 0) memset(s, 0, (size_t)sp->a * sizeof *s);
  if (sp->z < n) memset(s + sp->z, 0, (size_t)(n - sp->z) * sizeof *s);
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx2_fma()) {
    if (attn__use_avx512())
      return attn__exp_sum_avx512(s, sp->flags, sp->a, sp->z, m);
    return attn__exp_sum_avx2(s, sp->flags, sp->a, sp->z, m);
  }
#endif
  return attn__exp_sum_portable(s, sp->flags, sp->a, sp->z, m);
}

void attn__rows_max(const attn_problem *p, const attn__span *span,
                    const float *s, int n, int rows, float *mx) {
  for (int r = 0; r < rows; r++) mx[r] = NAN;
#if ATTN__HAVE_AVX2_FMA
  if (p->softcap > 0.0f || p->bias || p->alibi_slopes || !attn__use_avx512())
    return;
  for (int r = 0; r < rows; r++) {
    const attn__span *sp = &span[r];
    int finite;
    if (sp->flags || sp->z - sp->a <= 16) continue;
    float m = attn__max_avx512(s + (size_t)r * n, sp->a, sp->z, &finite);
    if (finite) mx[r] = m;
  }
#else
  (void)p, (void)span, (void)s, (void)n;
#endif
}

float attn__row_softmax(const attn_problem *p, const attn__task *t, int i,
                        int j0, const attn__span *sp, float *s, int n,
                        float floor, int round, const float *mx,
                        float *m_out) {
  if (p->softcap > 0.0f && sp->a < sp->z)
    row_softcap_any(s, sp->a, sp->z, p->softcap);
  if (p->bias && sp->a < sp->z) row_bias(p, t, i, j0, sp->a, sp->z, s);
  if (p->alibi_slopes && sp->a < sp->z)
    row_alibi(p, t, i, j0, sp->a, sp->z, s);
#if ATTN__HAVE_AVX2_FMA
  float sum;
  if (!sp->flags && attn__use_avx512() &&
      (attn__is_bf16(p)
           ? attn__softmax_span_bf16_avx512(s, n, sp->a, sp->z, floor, mx,
                                            m_out, &sum, round)
           : attn__softmax_span_avx512(s, n, sp->a, sp->z, floor, mx, m_out,
                                       &sum)))
    return sum;
#endif
  float bm = row_max(sp, s);
  *m_out = bm > floor ? bm : floor;
  float total = row_exp(s, n, sp, *m_out);
  for (int c = sp->a; c < sp->z && round; c++) s[c] = attn__bf16_round(s[c]);
  return total;
}

void attn__write_weight_row(float *w, int lk, int klo, int khi,
                            const float *s, float inv, int stream) {
#if ATTN__HAVE_AVX2_FMA
  if (!stream && attn__use_avx512()) {
    attn__write_row_avx512(w, lk, klo, khi, s, inv);
    return;
  }
  if (attn__use_avx2_fma()) {
    attn__write_row_avx2(w, lk, klo, khi, s, inv, stream);
    return;
  }
#endif
  (void)stream;
  memset(w, 0, (size_t)klo * sizeof *w);
  for (int c = klo; c < khi; c++) w[c] = s[c - klo] * inv;
  memset(w + khi, 0, (size_t)(lk - khi) * sizeof *w);
}

void attn__write_weights_done(int stream) {
#if ATTN__HAVE_AVX2_FMA
  if (stream && attn__use_avx2_fma()) attn__sfence_avx2();
#endif
  (void)stream;
}

/* Whether a product was inf or NaN is an integer compare on its
 * magnitude bits OR-ed into one flag: no branch, so the loop still
 * vectorizes. */
ATTN__VEC_CLONES
static int scale_sanitize(float *dst, const float *src, int n, float g) {
  uint32_t clipped = 0;
  for (int c = 0; c < n; c++) {
    float x = src[c] * g;
    clipped |= (attn__f2u(x) & 0x7fffffffu) >= 0x7f800000u;
    dst[c] = attn__sanitize(x);
  }
  return clipped == 0;
}

int attn__scale_sanitize(float *dst, const float *src, int n, float g) {
#if ATTN__HAVE_AVX2_FMA
  if (attn__use_avx512()) return attn__scale_sanitize_avx512(dst, src, n, g);
#endif
  return scale_sanitize(dst, src, n, g);
}
