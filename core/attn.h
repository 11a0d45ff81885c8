/* attn.h - masked scaled dot-product (and additive) attention on the CPU.
 *
 * core/ is pure computation: no I/O, no globals, no threads of its own.
 * Tensors in, tensors out, an error code.  proto/ has validated every
 * client-supplied value before a problem reaches this header; core/ checks
 * only what a programmer could get wrong (attn_check) and never asserts on
 * values that came from a client.
 *
 * Shapes (row-major, contiguous, float32):
 *
 *   q        (B, H,   Lq, D)
 *   k        (B, Hkv, Lk, Dk)     Dk == D for dot-product scoring
 *   v        (B, Hkv, Lk, Dv)
 *   out      (B, H,   Lq, Dv)
 *   weights  (B, H,   Lq, Lk)     optional
 *
 * A rank-3 problem (B, L, D) is H = Hkv = 1.  Grouped heads: H is a multiple
 * of Hkv and query head h reads kv head h / (H / Hkv).
 *
 * Which keys a query (b, h, i) may attend to: key j is allowed when ALL of
 *   - valid_lens:  j < valid_lens[b]            (per-item lengths, shape (B,))
 *                  j < valid_lens[b * Lq + i]   (per-query lengths, (B, Lq))
 *   - causal:      UPPER_LEFT  j <= i;  LOWER_RIGHT  j <= i + Lk - Lq
 *   - window:      UPPER_LEFT  i - left <= j <= i + right
 *                  LOWER_RIGHT i + Lk - Lq - left <= j <= i + Lk - Lq + right
 *                  (a side < 0 is unbounded; window_align picks)
 *   - packing:     j lies in the query's own sequence (below)
 *   - mask:        mask[b*ms[0] + h*ms[1] + i*ms[2] + j*ms[3]] != 0
 * hold.  The mask and bias are addressed through element strides so that a
 * broadcast axis simply has stride 0 (proto/ turns the client's trailing-axis
 * broadcast into these strides).
 *
 * Packed sequences (cu_seqlens_q/_k, FlashAttention's varlen convention):
 * sequence n holds queries [cu_q[n], cu_q[n+1]) and keys [cu_k[n],
 * cu_k[n+1]); a query sees only its own sequence's keys, and causal, the
 * window and ALiBi count i, j, Lq and Lk within that sequence (i minus
 * cu_q[n], j minus cu_k[n], the sequence's lengths).  The mask, the bias
 * and dropout's index keep the coordinates of the whole (Lq, Lk).
 *
 * Scores: dot       s = (q . k) * scale
 *         additive  s = w_v . tanh(W_q q + W_k k)              (no scale)
 * then  s = softcap * tanh(s / softcap)                   (softcap > 0)
 *       s = s + bias - alibi_slopes[h] * |i + Lk - Lq - j|    (each if given)
 * A disallowed score is the most negative finite float, so its weight is
 * exactly 0.  The softmax of a row over its allowed keys A, with the
 * learned sink logit sk = sinks[h] when sinks are given:
 *   m   = max(max_{j in A} s_j, sk)          (sk left out without sinks)
 *   den = sum_{j in A} exp(s_j - m) + exp(sk - m)
 *   w_j = exp(s_j - m) / den,  out = sum_j w_j v_j,  lse = m + ln(den)
 * The sink takes probability mass but has no value row, so with sinks a
 * row's weights sum to less than 1.  A row with no allowed key has
 * all-zero weights and an all-zero output row; its lse is sinks[h], or
 * -inf without sinks.  Softmax subtracts the row maximum: no finite input
 * yields NaN or Inf.  Nor does the output overflow on the way: it is the
 * weighted mean of value rows even when Lk max|v| is beyond FLT_MAX (only
 * dropout's 1/(1-p) can take a true output past FLT_MAX, and then it is
 * clamped to +-FLT_MAX).
 *
 * Dropout (dropout_p > 0): each weight is kept with probability 1 - p and
 * survivors are scaled by 1 / (1 - p); the decision for (b, h, i, j) is a
 * pure function of (seed, b, h, i, j), so the answer does not depend on how
 * the work is split.  Returned weights are the pre-dropout weights; the
 * output is computed from the dropped and rescaled ones.  Exactly, so that
 * a client can reproduce it:
 *   mix(x):  x += 0x9E3779B97F4A7C15;
 *            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
 *            x = (x ^ (x >> 27)) * 0x94D049BB133111EB;  return x ^ (x >> 31)
 *   n = ((b * H + h) * Lq + i) * Lk + j                  (uint64 arithmetic)
 *   u = (mix(seed ^ mix(n)) >> 40) * 2^-24               (in [0, 1))
 *   keep when u >= p; a kept weight becomes w * (1 / (1 - p)) in float.
 *
 * Without weights (weights == NULL) the core never materialises an (Lq, Lk)
 * matrix: an online-softmax blocked pass keeps O(block * (Lk_block + Dv))
 * scratch per task, skips disallowed key blocks instead of filling them, and
 * returns 0 for a row whose running sum stays 0.
 *
 * Packed sequences cost what the sequences cost: a task's query block
 * never crosses a sequence boundary, and its keys lie in its sequence,
 * so neither path computes a score across sequences (the weights path
 * writes zeros there).
 *
 * Work is split into tasks, one per (b, h, query block), so that callers can
 * run disjoint task ranges on different threads into the same out/weights
 * buffers (each task writes only its own rows).  Each thread needs its own
 * scratch of attn_scratch_bytes() bytes.
 *
 * Matrix products: cblas_sgemm (the caller chooses the BLAS thread count;
 * attnd runs one BLAS thread per worker), or the core's own AVX-512F
 * kernels where the CPU has AVX-512F (see attn_problem.gemm).  Both meet
 * the same tolerances; they may differ in the last bits, so a problem's
 * answer is bit-for-bit reproducible on one machine and one choice.
 * The products P V run with the calling thread's flush-to-zero bit set
 * (and restored after): a term below FLT_MIN counts as 0, which spares
 * subnormal arithmetic and costs less than 1.2e-38 per term.
 *
 * BF16 mode (attn_problem.precision, enum attn_precision below): both
 * products take BF16 operands and sum in float32; q, k and v may then
 * be given as BF16 (attn_problem.dtype), read as they are.  Its kernels
 * are AMX's where the CPU has AMX-BF16 and the caller allows them
 * (attn_problem.amx), else the AVX512-BF16 ones where they outrun the
 * float32 FMA, else the float32 ones on BF16-rounded operands
 * (attn_kernel_name says which).
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "attnd_err.h"

enum attn_causal {
  ATTN_CAUSAL_NONE = 0,
  ATTN_CAUSAL_UPPER_LEFT = 1,  /* query i sees keys j <= i */
  ATTN_CAUSAL_LOWER_RIGHT = 2  /* query i sees keys j <= i + Lk - Lq */
};

/* Which corner a sliding window is anchored at (attn_problem.window_align);
 * FlashAttention's window_size is LOWER_RIGHT. */
enum attn_window_align {
  ATTN_WINDOW_UPPER_LEFT = 0,  /* query i: keys i - left .. i + right */
  ATTN_WINDOW_LOWER_RIGHT = 1  /* shifted by Lk - Lq */
};

enum attn_scoring {
  ATTN_SCORING_DOT = 0,
  ATTN_SCORING_ADDITIVE = 1
};

/* Which matrix-product code runs (attn_problem.gemm). */
enum attn_gemm {
  ATTN_GEMM_AUTO = 0,   /* the core decides per call: native where the
                         * CPU has AVX-512F and FMA (gemm.c says why) */
  ATTN_GEMM_BLAS = 1,   /* always cblas_sgemm */
  ATTN_GEMM_NATIVE = 2, /* the AVX-512F kernels; cblas_sgemm where the CPU
                         * lacks AVX-512F (or under valgrind, which hides
                         * it) */
  ATTN_GEMM_BF16 = 3,   /* BF16 mode: the AVX512-BF16 kernels (VDPBF16PS)
                         * where the CPU has them, else as NATIVE; auto
                         * picks them only where they outrun the float32
                         * FMA kernels (AMD Zen 4 and 5) and AMX is not
                         * allowed.  In BF16 mode NATIVE and BLAS run the
                         * float32 products on BF16-rounded operands.
                         * float32 mode: as auto */
  ATTN_GEMM_AMX = 4     /* BF16 mode: the AMX kernels (TDPBF16PS) where
                         * the CPU has AMX-BF16 and attn_problem.amx
                         * allows them, else as auto, which picks them
                         * under the same condition.  float32 mode: as
                         * auto */
};

/* Arithmetic of the two matrix products (attn_problem.precision).  In
 * BF16 mode each product takes BF16 operands, rounded to nearest even
 * from float32 (q, k, v, and the probabilities that multiply v; values
 * beyond BF16's largest finite 0x1.fep127 become it, float32 subnormals
 * become 0), and accumulates in float32.  Everything else (scale, masks,
 * bias, softcap, ALiBi, sinks, the softmax, lse) stays float32; the
 * returned weights are the BF16-rounded probabilities that multiplied v
 * (before dropout).  BF16 mode needs dot scoring.  docs/api.md gives the
 * error bound. */
enum attn_precision {
  ATTN_PRECISION_FP32 = 0,
  ATTN_PRECISION_BF16 = 1
};

/* How q, k and v are stored (attn_problem.dtype). */
enum attn_dtype {
  ATTN_DTYPE_F32 = 0,   /* q, k, v float32 */
  ATTN_DTYPE_BF16 = 1   /* q16, k16, v16: BF16 bit patterns (the top half
                         * of a float32), used as they are; BF16 mode
                         * only */
};

/* A problem describes one request.  It points at tensors it does not own:
 * whoever fills it in (proto/) owns and frees every buffer. */
typedef struct attn_problem {
  int scoring;              /* enum attn_scoring */
  int B, H, Hkv;            /* batch items, query heads, key/value heads */
  int Lq, Lk;               /* query and key lengths, >= 1 */
  int D, Dk, Dv;            /* query, key and value widths, >= 1 */

  const float *q, *k, *v;   /* shapes above, contiguous (dtype F32) */
  int precision;            /* enum attn_precision */
  int dtype;                /* enum attn_dtype */
  const uint16_t *q16, *k16, *v16; /* the same shapes (dtype BF16) */

  float scale;              /* dot scoring: finite, non-zero (may be < 0) */
  int causal;               /* enum attn_causal */

  /* valid_lens: NULL, (B,) when valid_lens_per_query == 0, else (B, Lq).
   * Every value lies in [0, Lk]. */
  const int32_t *valid_lens;
  int valid_lens_per_query;

  /* Sliding window: has_window != 0 turns it on; a negative side is
   * unbounded on that side; window_align is an enum attn_window_align. */
  int has_window;
  int window_left, window_right;
  int window_align;

  /* Boolean mask and additive float bias, NULL when absent.  Element
   * strides over (b, h, i, j); 0 broadcasts that axis. */
  const uint8_t *mask;
  int64_t mask_stride[4];
  const float *bias;
  int64_t bias_stride[4];

  /* Additive scoring: W_q (Hd, D), W_k (Hd, Dk), w_v (Hd). */
  int Hd;
  const float *w_q, *w_k, *w_v;

  /* Learned attention sinks: NULL, or (H,) logits, one per query head,
   * finite.  Soft-capping: 0 is off, else finite and > 0.  ALiBi: NULL,
   * or slopes (H,) when alibi_per_item == 0, else (B, H); finite. */
  const float *sinks;
  float softcap;
  const float *alibi_slopes;
  int alibi_per_item;

  /* Packed sequences: both NULL, or both (n_seqs + 1,) with n_seqs >= 1,
   * each starting at 0, non-decreasing, ending at Lq and Lk.  Packing
   * needs B == 1 and no valid_lens. */
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int n_seqs;

  /* Dropout on the weights: 0 <= dropout_p < 1; 0 turns it off. */
  float dropout_p;
  uint64_t seed;

  /* enum attn_gemm; 0 (auto) unless a test or benchmark forces a path. */
  int gemm;

  /* 1 when the calling process holds the permission to use AMX tile
   * data (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
   * succeeded), so that BF16 mode may run on AMX where the CPU has it;
   * 0 (attn_problem_init) keeps the core off AMX.  A tile instruction
   * without the permission is SIGILL, and asking for it is the
   * process's business (the server's), not the core's. */
  int amx;

  /* Stopping a problem that runs: NULL, or a flag the caller (or any
   * other thread) may set non-zero at any time.  The core reads it,
   * relaxed, between key blocks of the online path, between key blocks
   * of both products and between rows of the softmax on the weights
   * path, between query rows of additive scoring's key blocks (a row is
   * 512 * Hd tanh), and between tasks; once it reads non-zero,
   * attn_run_tasks returns ATTND_ECANCELED and the rows of the task it
   * stopped in are
   * unspecified (on the weights path a stopped row chunk writes no
   * weights).  Between two reads: one key block (512 keys) of a task's
   * rows (a row chunk's on the weights path), about 4 MFLOP for D = Dv =
   * 64 and 64 rows, or one row's softmax. */
  const _Atomic int *stop;
} attn_problem;

/* Zero-initialises a problem: no mask, no bias, no dropout, dot scoring,
 * causal off, H = Hkv = 1, gemm auto.  The caller then sets shapes and
 * tensors. */
void attn_problem_init(attn_problem *p);

/* Checks a problem for programmer errors (inconsistent shapes, missing
 * tensors, scale 0 or not finite, H not a multiple of Hkv, dropout_p out of
 * [0, 1), gemm not an enum attn_gemm, softcap not 0 and not a normal
 * positive float, packing
 * with B > 1, with valid_lens, with one cu_seqlens only, or cu_seqlens
 * that do not start at 0, decrease or do not end at the lengths; BF16
 * precision with additive scoring, dtype BF16 without BF16 precision,
 * the tensors of the dtype missing).
 * Returns 0 or ATTND_EINVAL.  Reads no tensor contents but cu_seqlens
 * (the task split depends on them). */
int attn_check(const attn_problem *p);

/* Number of independent tasks (b, h, query block) the problem splits into.
 * with_weights selects the weights path (1) or the online path (0). */
size_t attn_task_count(const attn_problem *p, int with_weights);

/* The (query, key) pairs whose scores the problem has: B H Lq Lk, or with
 * packed sequences H times the sum of each sequence's lq lk.  A request's
 * work scales with it (before masks), so schedulers estimate from it.
 * 0 when attn_check fails. */
double attn_score_pairs(const attn_problem *p);

/* Bytes of scratch one thread needs to run any task of this problem. */
size_t attn_scratch_bytes(const attn_problem *p, int with_weights);

/* What running the problem costs, in floating-point operations or their
 * equivalent, from its shapes and options alone: the tensor pointers may
 * be NULL and no tensor is read, so that a server can refuse a request
 * before it has its data.  The two products count 2 flops per
 * multiply-add (additive scoring: its projections and a tanh per hidden
 * unit); every computed score adds a fixed charge for the softmax (and
 * the mask, bias and dropout when present), every weight written one
 * more, every weight the diagnostics read (a packed row's own
 * sequence's) one more, so that D = 1 is not free.  Key blocks
 * that causal or window let the core skip are not charged; valid_lens
 * and the mask, which are data, are charged as if every key were
 * allowed.  with_weights: the weights path (1) or the online one (0);
 * diagnostics: 1 when attn_diagnostics runs afterwards.  0 for a problem
 * whose shapes are not set. */
double attn_cost_flops(const attn_problem *p, int with_weights,
                       int diagnostics);

/* Runs tasks [t0, t1) of the problem.  out (B, H, Lq, Dv) is required;
 * weights (B, H, Lq, Lk) may be NULL, which selects the online path.
 * scratch must hold attn_scratch_bytes(p, weights != NULL) bytes, 64-byte
 * aligned, owned by the calling thread for the duration of the call.
 * Every element of the tasks' rows of out and weights is written, masked
 * and empty positions as 0, so neither buffer needs initialising.
 * Returns 0, ATTND_EINVAL (t1 beyond the task count) or ATTND_ECANCELED
 * (p->stop was set: the rows of the tasks run are unspecified). */
int attn_run_tasks(const attn_problem *p, size_t t0, size_t t1,
                   float *out, float *weights, void *scratch);

/* attn_run_tasks that also writes each row's log-sum-exp (attn.h's lse,
 * natural log, -inf for a row with no allowed key and no sink) into lse
 * (B, H, Lq) when lse is not NULL.  lse is that of the pre-dropout
 * weights, so w = exp(s - lse) holds for every allowed key. */
int attn_run_tasks_lse(const attn_problem *p, size_t t0, size_t t1,
                       float *out, float *weights, float *lse,
                       void *scratch);

/* Convenience: checks the problem, allocates scratch, runs every task on
 * the calling thread, frees the scratch.  Returns 0, ATTND_EINVAL or
 * ATTND_ENOMEM; on error out and weights are unspecified. */
int attn_forward(const attn_problem *p, float *out, float *weights);

/* attn_forward with the row log-sum-exp (B, H, Lq) into lse (may be
 * NULL), as attn_run_tasks_lse. */
int attn_forward_lse(const attn_problem *p, float *out, float *weights,
                     float *lse);

/* Which kernels the products of a problem with this precision and
 * attn_problem.amx (amx) run on this CPU by default: "avx512" (the
 * native float32 kernels), "blas" (cblas_sgemm), "amx-bf16" (TDPBF16PS),
 * "avx512bf16" (VDPBF16PS), or in BF16 mode "avx512"/"blas" on
 * BF16-rounded operands.  A static string. */
const char *attn_kernel_name(int precision, int amx);

/* Per-row diagnostics (design.md), each shaped (B, H, Lq) and each
 * optional (NULL skips it), for query row (b, h, i):
 *   allowed_keys   how many keys the row may attend to under p's masks;
 *   entropy        -sum_j a_j ln a_j in nats (terms with a_j = 0 are 0);
 *   max_weight     max_j a_j;
 *   jacobian_norm  Frobenius norm of the softmax Jacobian diag(a) - a a^T,
 *                  sqrt(sum a^2 - 2 sum a^3 + (sum a^2)^2);
 * where a is the row of weights (B, H, Lq, Lk) that attn_forward or
 * attn_run_tasks returned for p (pre-dropout).  A row with no allowed key
 * gets 0 everywhere.  With sinks the weights sum to 1 - (the sink's share)
 * and each figure describes them as returned: allowed_keys counts keys
 * (never the sink), entropy and max_weight are over the keys' weights
 * alone, and diag(a) - a a^T stays the exact Jacobian of the returned
 * weights with respect to the key scores (the sink is a constant in the
 * denominator).  With packed sequences a row's weights outside its
 * sequence are 0 and are not read: the figures are over its sequence's
 * keys.  Reads weights and the mask tensors, allocates nothing; linear
 * in the size of weights.  Returns 0, ATTND_EINVAL
 * (attn_check fails, weights NULL) or ATTND_ECANCELED (p->stop was set,
 * read once per task: the rows not reached are unspecified). */
int attn_diagnostics(const attn_problem *p, const float *weights,
                     int32_t *allowed_keys, float *entropy,
                     float *max_weight, float *jacobian_norm);

#endif /* ATTN_H */
