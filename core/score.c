/* score.c - raw attention scores of one task's query rows against a range
 * of keys: dot-product (one NT product) or additive (two projection
 * products and a vectorized tanh sum).
 */
#include "attn_impl.h"

static const float *q_rows(const attn_problem *p, const attn__task *t) {
  size_t head = (size_t)t->b * p->H + t->h;
  return p->q + (head * p->Lq + t->i0) * p->D;
}

static const float *k_rows(const attn_problem *p, const attn__task *t,
                           int j0) {
  size_t head = (size_t)t->b * p->Hkv + t->kvh;
  return p->k + (head * p->Lk + j0) * p->Dk;
}

int *attn__kept_ready(const attn_problem *p, const attn__task *t,
                      char *scratch, const attn__scratch *lay) {
  int *kready = (int *)(scratch + lay->kready);
  int head = t->b * p->Hkv + t->kvh;
  if (kready[0] != head) {
    memset(kready + 1, 0, 2 * (size_t)lay->kpanel_count * sizeof *kready);
    kready[0] = head;
  }
  return kready + 1;
}

/* s = scale * Q K^T for the block: row-major, Q (rows, D), K (n, D).
 * Blocks that start on a panel's first key use the head's kept panels. */
static void scores_dot(const attn_problem *p, const attn__task *t, int j0,
                       int n, float *s, int lds, char *scratch,
                       const attn__scratch *lay) {
#if ATTN__HAVE_AVX2_FMA
  if (attn__scores_kept(lay, j0)) {
    attn__gemm_nt_panels_avx512(t->rows, n, p->D, p->scale, q_rows(p, t),
                                p->D, k_rows(p, t, 0), p->Dk, j0, s,
                                lds, (float *)(scratch + lay->kpanels),
                                attn__kept_ready(p, t, scratch, lay));
    return;
  }
#endif
  attn__gemm_nt(lay->gemm, t->rows, n, p->D, p->scale, q_rows(p, t), p->D,
                k_rows(p, t, j0), p->Dk, s, lds,
                (float *)(scratch + lay->pack));
}

/* s[c] = sum_u w_v[u] tanh(qp[u] + kt[u][c]) for one query row.  The key
 * axis is innermost and contiguous, so the loop has no reduction and
 * vectorizes. */
ATTN__VEC_CLONES
static void additive_row(const float *qp, const float *kt, int ldk,
                         const float *wv, int hd, int n, float *s) {
  for (int c = 0; c < n; c++) s[c] = 0.0f;
  for (int u = 0; u < hd; u++) {
    const float *kr = kt + (size_t)u * ldk;
    float qu = qp[u], w = wv[u];
    for (int c = 0; c < n; c++) s[c] += w * attn__tanhf(qu + kr[c]);
  }
}

/* Additive scores: QP = Q W_q^T (rows, Hd) and KT = W_k K^T (Hd, n), the
 * second stored transposed so that each hidden unit is a contiguous row
 * over keys.  No scale. */
static void scores_additive(const attn_problem *p, const attn__task *t,
                            int j0, int n, float *s, int lds, char *scratch,
                            const attn__scratch *lay) {
  float *qp = (float *)(scratch + lay->qproj);
  float *kt = (float *)(scratch + lay->kproj);
  float *pack = (float *)(scratch + lay->pack);
  int hd = p->Hd;
  attn__gemm_nt(lay->gemm, t->rows, hd, p->D, 1.0f, q_rows(p, t), p->D,
                p->w_q, p->D, qp, hd, pack);
  attn__gemm_nt(lay->gemm, hd, n, p->Dk, 1.0f, p->w_k, p->Dk,
                k_rows(p, t, j0), p->Dk, kt, n, pack);
  /* A row is n * Hd tanh, so a block of them is far more work than a
   * dot product's: the stop flag is read between rows too.  Rows left
   * are zeroed, so that the rest of the block's work (whose result no
   * longer matters) reads no uninitialised scores before the caller
   * next reads the flag. */
  for (int r = 0; r < t->rows; r++) {
    if (attn__stopped(p)) {
      for (; r < t->rows; r++)
        memset(s + (size_t)r * lds, 0, (size_t)n * sizeof *s);
      return;
    }
    additive_row(qp + (size_t)r * hd, kt, n, p->w_v, hd, n,
                 s + (size_t)r * lds);
  }
}

int attn__scores_kept(const attn__scratch *lay, int j0) {
  return ATTN__HAVE_AVX2_FMA && lay->kpanel_count > 0 && j0 % 64 == 0;
}

void attn__scores(const attn_problem *p, const attn__task *t, int j0, int n,
                  float *s, int lds, char *scratch, const attn__scratch *lay) {
  if (p->scoring == ATTN_SCORING_ADDITIVE)
    scores_additive(p, t, j0, n, s, lds, scratch, lay);
  else if (attn__is_bf16(p))
    attn__bf16_scores(p, t, j0, n, s, lds, scratch, lay);
  else
    scores_dot(p, t, j0, n, s, lds, scratch, lay);
}
