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

#include "support_ref.h"

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
  attn__task_walk walk;
  attn__walk_start(&c.p, &walk);
  for (size_t t = 0; t < 2 * want; t++) {
    attn__task task, alone;
    attn__task_walk fresh;
    attn__walk_task(&c.p, &walk, t, &task);
    /* a walk started at t finds the same task as one that came along */
    attn__walk_start(&c.p, &fresh);
    attn__walk_task(&c.p, &fresh, t, &alone);
    ck_assert(memcmp(&task, &alone, sizeof task) == 0);
    ck_assert_int_ge(task.i0, task.qoff);
    ck_assert_int_le(task.i0 + task.rows, task.qoff + task.lq);
    ck_assert_int_gt(task.rows, 0);
  }
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
  static const float caps[] = {0.25f, 1.0f, 30.0f, 50.0f, 1e6f};
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
  suite_add_tcase(s, edge);
  return s;
}

int main(void) { return ref_run_suite(variants_suite()); }
