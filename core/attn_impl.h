/* attn_impl.h - internals shared by the core/ files and its unit tests.
 *
 * Nothing here is part of attnd's public contract (that is attn.h).  The
 * scalar helpers are static inline so that the loops that call them
 * (softmax, tanh sum) stay free of function calls and gcc -O3 can
 * vectorize them.
 */
#ifndef ATTN_IMPL_H
#define ATTN_IMPL_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"

#include <stdatomic.h>

/* 1 once the problem's stop flag is set (attn.h). */
static inline int attn__stopped(const attn_problem *p) {
  return p->stop && atomic_load_explicit(p->stop, memory_order_relaxed);
}

/* The few loops that carry the softmax and the tanh sum are also built
 * for AVX2 and picked at load time (an ifunc), since the Makefile builds
 * for the baseline x86-64 (SSE2, 4 lanes).  "avx2" without "fma" keeps
 * each operation the same IEEE operation as the baseline build, and the
 * sums use eight explicit lanes, so both clones give identical bits. */
/* ThreadSanitizer's runtime is not yet set up when the loader runs ifunc
 * resolvers, so a -fsanitize=thread build crashes at load with clones. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__) && !defined(__SANITIZE_THREAD__)
#define ATTN__VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ATTN__VEC_CLONES
#endif

/* The hottest loops (row maximum, exp and sum, writing weight rows) also
 * exist as AVX2 + FMA intrinsics (vexp.c), picked per call when the CPU
 * has both; see vexp.c for how their results relate to the portable
 * ones. */
#if defined(__GNUC__) && defined(__x86_64__)
#define ATTN__HAVE_AVX2_FMA 1
static inline int attn__use_avx2_fma(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
/* AVX-512F and FMA: the AVX-512 loops of vexp.c and the native matrix
 * products of gemm.c.  valgrind hides AVX-512 from CPUID, so under it the
 * AVX2 loops and the cblas path run. */
static inline int attn__use_avx512(void) {
  return attn__use_avx2_fma() && __builtin_cpu_supports("avx512f");
}
/* AVX512-BF16 (VDPBF16PS, with AVX512BW for the packing): the BF16
 * mode's kernels of gemm_bf16_avx512.c can run.  attn__fast_avx512bf16:
 * and they outrun the float32 FMA kernels, which is so where a VDPBF16PS
 * costs what an FMA costs (AMD Zen 4 and 5: twice the multiply-adds).
 * Intel's cores issue one every two cycles against two FMAs a cycle, so
 * there the BF16 products take twice as long as the float32 ones on the
 * same operands (docs/decisions.md has the figures), and the float32
 * kernels run on the BF16-rounded operands. */
static inline int attn__use_avx512bf16(void) {
  return attn__use_avx512() && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512bf16");
}
static inline int attn__fast_avx512bf16(void) {
  return attn__use_avx512bf16() && __builtin_cpu_is("amd");
}
/* AMX-TILE and AMX-BF16 (TDPBF16PS), with AVX512-BF16 for the packing:
 * the kernels of gemm_bf16_amx.c can run on this CPU.  libgcc counts
 * AMX only where the OS enables its state (XCR0); using it further
 * needs the process's permission, which the caller holds and says so in
 * attn_problem.amx.  clang's __builtin_cpu_supports does not know AMX's
 * names (clang builds only the fuzzers), so there AMX counts as absent. */
static inline int attn__use_amx(void) {
#if defined(__clang__)
  return 0;
#else
  return attn__use_avx512bf16() && __builtin_cpu_supports("amx-tile") &&
         __builtin_cpu_supports("amx-bf16");
#endif
}
#else
#define ATTN__HAVE_AVX2_FMA 0
static inline int attn__use_avx2_fma(void) { return 0; }
static inline int attn__use_avx512(void) { return 0; }
static inline int attn__use_avx512bf16(void) { return 0; }
static inline int attn__fast_avx512bf16(void) { return 0; }
static inline int attn__use_amx(void) { return 0; }
#endif

/* Flush-to-zero around the products P V.  A probability near FLT_MIN
 * (a score some 80 below its row's maximum: ALiBi's distant keys, a
 * sharp softmax) times a value is a subnormal, and on x86 every
 * subnormal result costs a microcode assist, which made a whole
 * request a third slower.  With the MXCSR's FTZ bit such a product or
 * sum is 0 instead: an absolute error below FLT_MIN (1.2e-38) per term,
 * far below every tolerance.  The bit is the calling thread's, so it is
 * set for the product only and put back at once. */
#if defined(__SSE__)
#include <xmmintrin.h>
static inline unsigned attn__ftz_on(void) {
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8000u);
  return csr;
}
static inline void attn__ftz_off(unsigned csr) { _mm_setcsr(csr); }
#else
static inline unsigned attn__ftz_on(void) { return 0; }
static inline void attn__ftz_off(unsigned csr) { (void)csr; }
#endif

/* The mask of lanes [0, k) of 16 (k >= 1; 16 and more is all of them),
 * for the masked tails of the AVX-512 loops. */
static inline unsigned attn__lanes16(int k) {
  return k >= 16 ? 0xffffu : (1u << k) - 1u;
}

/* Query rows per task and key columns per online block.  OpenBLAS packs
 * both operands of every sgemm, so a key block's K and V are packed once
 * per task: more query rows per task amortize that packing (at 64 rows
 * it took about a fifth of the sgemm time).  A task has ATTN__QBLOCK
 * rows, doubled up to ATTN__QBLOCK_MAX while the problem still splits
 * into at least ATTN__MIN_TASKS tasks (attn__query_block), so that small
 * problems still spread over workers.  512 keys per block halve the
 * running-max rescales of 256; 256 x 512 scores (512 KiB) stay in a
 * core's L2. */
#ifndef ATTN__QBLOCK
#define ATTN__QBLOCK 64
#endif
#ifndef ATTN__QBLOCK_MAX
#define ATTN__QBLOCK_MAX 256
#endif
#ifndef ATTN__MIN_TASKS
#define ATTN__MIN_TASKS 64
#endif
#ifndef ATTN__KBLOCK
#define ATTN__KBLOCK 512
#endif
/* Rows of a block that go together from scores to P V where the scores
 * read kept panels: 32 x 512 scores (64 KiB) against 512 KiB for a whole
 * task's 256 rows. */
#ifndef ATTN__SUBROWS
#define ATTN__SUBROWS 32
#endif
/* A head's K is packed for the scores once per thread and call rather
 * than once per task while its panels take at most this many bytes of
 * scratch (Lk 8192 at D = 128); beyond, each task packs its own. */
#ifndef ATTN__KPANEL_BYTES
#define ATTN__KPANEL_BYTES (4u << 20)
#endif
/* Weights path: a chunk of a task's rows holds at most this many scores
 * (2 MiB) but never fewer than 64 rows, for the same packing reason;
 * weights go out with streaming stores when the whole weights tensor is
 * larger than ATTN__STREAM_BYTES (it cannot stay in a cache for whoever
 * reads it next, and streaming saves reading it in before writing). */
#ifndef ATTN__WFLOATS
#define ATTN__WFLOATS 524288
#endif
#ifndef ATTN__STREAM_BYTES
#define ATTN__STREAM_BYTES (32.0 * 1024 * 1024)
#endif

/* Scratch sub-buffers start on 64-byte boundaries. */
#define ATTN__ALIGN 64

/* Branch-free helpers.  Under the default -ftrapping-math gcc will not
 * if-convert a float select whose arms need float arithmetic, and after
 * inlining a float clamp with constant bounds it duplicates the
 * arithmetic into each arm; either way the loop stops vectorizing.  So
 * clamps and cut-offs work on the float's bits with integer operations
 * (which cannot trap), and blends multiply finite values by exact 0/1
 * factors. */
static inline uint32_t attn__f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float attn__u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* An unsigned key with the order of the floats: negative floats have
 * their bits inverted, positive ones get the sign bit set.  NaNs sort
 * beyond the infinities of their sign.  The map is its own inverse up to
 * the sign-bit test. */
static inline uint32_t attn__fkey(float x) {
  uint32_t u = attn__f2u(x);
  uint32_t neg = 0u - (u >> 31);
  return u ^ (neg | 0x80000000u);
}

static inline float attn__funkey(uint32_t k) {
  uint32_t pos = 0u - (k >> 31); /* key top bit set: was non-negative */
  return attn__u2f(k ^ (~pos | 0x80000000u));
}

/* Clamp x to [lo, hi] (lo <= hi, both finite); NaN goes to lo or hi. */
static inline float attn__clampf(float x, float lo, float hi) {
  uint32_t k = attn__fkey(x), kl = attn__fkey(lo), kh = attn__fkey(hi);
  k = k < kl ? kl : k;
  k = k > kh ? kh : k;
  return attn__funkey(k);
}

/* exp(x) in float for the softmax: Cody-Waite range reduction to
 * r = x - n ln2 with |r| <= ln2/2, the Cephes expf polynomial for e^r,
 * then the 2^n scale built in the exponent bits.  About 1 ulp on
 * [-87.33, 88].  Arguments below ln(FLT_MIN) = -87.33 (including -inf)
 * give exactly 0, never a subnormal; arguments above 88 are treated as 88
 * (only tanh asks for them, and there any huge value gives the same
 * answer).  No calls, no double: loops that call it vectorize.  The
 * 1.5 * 2^23 trick rounds to nearest without rintf, which plain SSE2
 * cannot vectorize. */
#define ATTN__EXP_LO (-87.33654f) /* ln(FLT_MIN): exp is 0 below it */
static inline float attn__expf(float x) {
  const float big = 12582912.0f; /* 1.5 * 2^23 */
  const float lo = ATTN__EXP_LO;
  float xc = attn__clampf(x, lo, 88.0f);
  float nf = (xc * 1.44269504088896341f + big) - big;
  float r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float r2 = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  int32_t bits = ((int32_t)nf + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  /* All bits kept when x >= lo, none below it (including -inf). */
  uint32_t keep = attn__fkey(x) < attn__fkey(lo) ? 0u : ~0u;
  return attn__u2f(attn__f2u(y * scale) & keep);
}

/* tanh(x) in float: an odd polynomial for |x| < 0.625 (Cephes tanhf),
 * 1 - 2 / (e^{2|x|} + 1) with the sign of x above; both are computed and
 * one is picked by a bit mask so the additive-scoring loop vectorizes.
 * Infinite arguments give +-1; NaN may give anything, and the caller
 * sanitizes the scores anyway. */
static inline float attn__tanhf(float x) {
  float ax = __builtin_fabsf(x);
  float xs = attn__clampf(x, -0.625f, 0.625f);
  float z = xs * xs;
  float small = -5.70498872745e-3f;
  small = small * z + 2.06390887954e-2f;
  small = small * z - 5.37397155531e-2f;
  small = small * z + 1.33314422036e-1f;
  small = small * z - 3.33332819422e-1f;
  small = small * z * xs + xs;
  float e = attn__expf(2.0f * attn__clampf(ax, 0.0f, 44.0f));
  float large = __builtin_copysignf(1.0f - 2.0f / (e + 1.0f), x);
  uint32_t sel = attn__f2u(ax) < attn__f2u(0.625f) ? ~0u : 0u;
  return attn__u2f((attn__f2u(small) & sel) | (attn__f2u(large) & ~sel));
}

/* Maps a raw score to a finite float: +-inf (sgemm overflow) clamps to
 * +-FLT_MAX and NaN (inf - inf inside a dot product of ~1e38 inputs)
 * becomes 0, the value of the symmetric case and the same every time.
 * Integer compares on the magnitude bits: cheap, and they vectorize. */
static inline float attn__sanitize(float s) {
  uint32_t u = attn__f2u(s);
  int32_t mag = (int32_t)(u & 0x7fffffffu);
  uint32_t big = (u & 0x80000000u) | 0x7f7fffffu; /* +-FLT_MAX */
  u = mag >= 0x7f800000 ? big : u;
  u = mag > 0x7f800000 ? 0u : u;
  return attn__u2f(u);
}

/* Score of a key after masking: s where allowed (flag 1), -FLT_MAX where
 * not (flag 0); s must be finite. */
static inline float attn__mask_score(float s, float flag) {
  return s * flag + (flag - 1.0f) * FLT_MAX;
}

/* The dropout hash of attn.h (splitmix64 finaliser). */
static inline uint64_t attn__mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Dropout keep decision for flat index n = ((b*H + h)*Lq + i)*Lk + j:
 * 1 to keep the weight, 0 to drop it.  u = k * 2^-24 is exact in float,
 * so comparing in float is the same as comparing exactly. */
static inline int attn__dropout_keep(uint64_t seed, uint64_t n, float p) {
  uint64_t k = attn__mix64(seed ^ attn__mix64(n)) >> 40;
  float u = (float)k * 0x1p-24f;
  return u >= p;
}

/* Internals shared between attn.c (driver, checks, scratch) and the two
 * paths.  A task is (b, h, query block); attn__task describes one. */
typedef struct attn__task {
  int b, h, kvh;      /* batch item, query head, key/value head */
  int i0, rows;       /* first query row of the block, rows in it */
  /* The packed sequence the rows belong to: its first query and key and
   * its lengths (0, 0, Lq, Lk without packing).  A task's rows never
   * cross a sequence boundary. */
  int qoff, koff, lq, lk;
} attn__task;

/* Scratch layout (byte offsets from the 64-byte aligned base). */
typedef struct attn__scratch {
  size_t lo, hi;      /* int[QB]: per-row allowed key interval [lo, hi) */
  size_t flags;       /* float: mask flags, 1 or 0 (online: mask only) */
  size_t scores;      /* float[QB * KB]: online path score block */
  size_t drop;        /* float[QB * KB]: weights path dropped weights */
  size_t acc;         /* float[QB * Dv]: online path accumulator */
  size_t rowmax, rowsum, rowscale; /* float[QB]: online running state */
  size_t rowahead;    /* float[QB]: online block's row maxima (attn__rows_max) */
  size_t span;        /* attn__span[QB]: online rows' spans in a block */
  size_t qproj;       /* float[QB * Hd]: additive W_q q */
  size_t kproj;       /* float[Hd * KB]: additive W_k k, transposed */
  size_t pack;        /* float[attn__gemm_pack_floats]: native NT panel */
  size_t kpanels;     /* attn__kept_bytes: one head's K packed for the
                       * scores (and on VDPBF16PS its V in pairs), 0 when
                       * not kept (attn__kpanels) */
  size_t kready;      /* int[1 + 2 kpanel_count]: the head whose operands
                       * are kept, then the keys packed per K panel and
                       * per V group (score.c, bf16.c) */
  int kpanel_count;   /* 64-key panels of a head: ceil(Lk / 64), or 0 */
  size_t b16a, b16b;  /* BF16 mode: the products' operands (bf16.c) */
  size_t total;
  int wrows;          /* weights path: rows per chunk (scores wrows * Lk) */
  int stream;         /* weights path: write weights with streaming stores */
  int gemm;           /* ATTN_GEMM_BLAS, _NATIVE or, in BF16 mode, _BF16
                       * or _AMX (attn__gemm_pick) */
  int qrows;          /* query rows per task (attn__query_block) */
  size_t nqb;         /* query blocks per (b, h), over every sequence */
} attn__scratch;

void attn__scratch_layout(const attn_problem *p, int with_weights,
                          attn__scratch *s);

/* The work attn_cost_flops charges, counted over every (b, h): scores
 * computed, and for additive scoring the query rows and keys projected
 * (each call of attn__scores projects its rows and its keys).  Upper
 * bounds of what the paths do: valid_lens and the mask are not looked at,
 * and a key block no row may see is counted though the online path skips
 * it. */
typedef struct attn__cost_work {
  double scores, rows_projected, keys_projected;
  double pairs;  /* (row, key) pairs within each row's sequence: what
                    attn_diagnostics reads (Lq * Lk per (b, h) unpacked) */
} attn__cost_work;

void attn__cost_count(const attn_problem *p, int with_weights,
                      attn__cost_work *w);

/* Query rows per task of a problem (ATTN__QBLOCK .. ATTN__QBLOCK_MAX). */
int attn__query_block(const attn_problem *p);

/* A walk over the tasks of a (checked) problem: which (b, h) and which
 * query rows task t has.  The walk keeps where it stands in cu_seqlens, so
 * tasks taken in increasing order read cu_seqlens once per (b, h): a walk
 * over every task is linear in the problem's size. */
typedef struct attn__task_walk {
  size_t nqb;   /* query blocks per (b, h) */
  int rows;     /* query rows per task */
  int seq;      /* packed sequence whose first query block is first */
  size_t first;
} attn__task_walk;

void attn__walk_start(const attn_problem *p, attn__task_walk *w);
void attn__walk_task(const attn_problem *p, attn__task_walk *w, size_t t,
                     attn__task *task);

/* Allowed key interval of each row of a task from valid_lens, causal and
 * window (the mask is element-wise and applied later).  Writes lo/hi and
 * returns the union [*klo, *khi) over rows with a non-empty interval
 * (klo >= khi when no row has any key). */
void attn__row_intervals(const attn_problem *p, const attn__task *t,
                         int *lo, int *hi, int *klo, int *khi);

/* A run of a task's rows in a key block (online.c, where the scores
 * read kept panels, and cost.c): attn__run_keys gives the union [*a, *z)
 * of the rows' non-empty intervals (*a >= *z when none), and
 * attn__run_width the keys of the block [j0, j0 + n) the run computes:
 * from j0 to the end of that union within the block, 0 when the union
 * misses the block, or 1 then when the block is the task's first
 * computed one (first != 0), which must still write the rows' acc. */
void attn__run_keys(const int *lo, const int *hi, int rows, int *a, int *z);
int attn__run_width(int a, int z, int j0, int n, int first);

/* One row's allowed keys inside a block of n keys starting at j0: they
 * lie in [a, z) (block coordinates, 0 <= a <= z <= n); flags, when not
 * NULL, says which keys of [a, z) the mask allows (1.0f or 0.0f; entries
 * outside [a, z) are not written).  NULL flags means all of [a, z). */
typedef struct attn__span {
  int a, z;
  int allowed;
  const float *flags;
} attn__span;

/* The span of row i (interval [lo, hi) from attn__row_intervals) in the
 * block [j0, j0 + n); fills flags[a, z) when the problem has a mask. */
void attn__row_span(const attn_problem *p, const attn__task *t, int i,
                    int lo, int hi, int j0, int n, float *flags,
                    attn__span *sp);

/* Raw scores of a task's rows against keys [j0, j0 + n) into s (leading
 * dimension lds): dot (q.k)*scale or additive w_v.tanh(..).  Bias is not
 * added yet. */
void attn__scores(const attn_problem *p, const attn__task *t, int j0, int n,
                  float *s, int lds, char *scratch, const attn__scratch *lay);

/* 1 when the dot scores of a block starting at key j0 come from the
 * head's kept K panels (attn__kpanels; j0 on a panel's first key), and
 * on VDPBF16PS its P V from the head's kept V pairs: then a call for a
 * few rows costs no packing, and the online path runs a block
 * ATTN__SUBROWS rows at a time. */
int attn__scores_kept(const attn__scratch *lay, int j0);

/* The ready counts of the task's head's kept operands (score.c):
 * [0, kpanel_count) the keys packed per K panel, then as many per V
 * group (VDPBF16PS).  A head other than the one they hold clears them,
 * so that a panel is packed only when a task of the thread reads it,
 * and again only when a later block needs more of its keys; the
 * scratch's first int names the head (-1: none, at a call's start). */
int *attn__kept_ready(const attn_problem *p, const attn__task *t,
                      char *scratch, const attn__scratch *lay);

/* Allowed keys of row i in [lo, hi) under the mask (hi - lo without). */
int attn__row_count(const attn_problem *p, const attn__task *t, int i,
                    int lo, int hi);

/* The row kernel (rowops.c).  s holds the raw scores of row i for keys
 * [j0, j0 + n) and the span sp has at least one allowed key.  It
 * soft-caps, adds the bias and ALiBi, sanitizes, takes the maximum over the span's allowed keys and
 * m = max(that, floor) (floor -FLT_MAX for a plain softmax, the running
 * maximum for the online one), then replaces s by exp(s - m) over the
 * span (exactly 0 where the mask forbids a key, by flag and not by
 * underflow), zeroes the rest of [0, n), sets *m_out = m and returns the
 * sum.  Each term is in [0, 1] and the maximum contributes 1 when
 * floor is below it.  In BF16 mode the exp is the cheaper one where
 * AVX-512 runs (vexp.c), and with round != 0 s holds the terms rounded
 * to BF16 while the sum is of the unrounded ones (the online path; the
 * weights path rounds the normalised weights instead).  mx, when not
 * NULL, is the maximum of s[a, z) that attn__rows_max found (the same
 * value, so the same answers). */
float attn__row_softmax(const attn_problem *p, const attn__task *t, int i,
                        int j0, const attn__span *sp, float *s, int n,
                        float floor, int round, const float *mx,
                        float *m_out);

/* The maxima of rows [0, rows) of a block of scores (leading dimension
 * n, row r's span span[r]) before any of them is turned into
 * probabilities: mx[r] is the maximum attn__row_softmax would find, or
 * NaN where that call finds its own (mask flags, a bias, soft-capping or
 * ALiBi change the scores first, a span of at most 16 keys, an inf or a
 * NaN, or no AVX-512).  Found all at once, the rows' maxima do not wait
 * on each other's probabilities, and each row's probabilities wait on no
 * pass of their own row: the core overlaps them. */
void attn__rows_max(const attn_problem *p, const attn__span *span,
                    const float *s, int n, int rows, float *mx);

/* The exp-and-sum loop both ways, for the tests: s[c] = exp(s[c] - m)
 * (times f[c] when f is not NULL) over [a, z), returning the sum.  The
 * AVX2 one exists only when ATTN__HAVE_AVX2_FMA and may be called only
 * when attn__use_avx2_fma(); the AVX-512 ones only when the CPU also has
 * avx512f (attn__use_avx512).  attn__max_avx2 and _avx512 return the
 * maximum of s[a, z) (a < z) and set *finite to 0 if an entry is inf or
 * NaN; the AVX-512 row writer and scale_sanitize give the same bits as
 * the others (no streaming: that stays AVX2).  attn__softmax_span_avx512
 * is attn__row_softmax for a row without mask flags whose bias is added:
 * maximum and exp-and-sum of s[a, z) (a < z) as the two AVX-512 loops
 * above give them, zeros on the rest of [0, n); it returns 0 without
 * writing when a score is inf or NaN.  mx, when not NULL, is that
 * maximum as attn__max_avx512 gave it for a span of more than 16 keys
 * whose scores are finite (the call then reads s once). */
float attn__exp_sum_portable(float *s, const float *f, int a, int z,
                             float m);
#if ATTN__HAVE_AVX2_FMA
float attn__exp_sum_avx2(float *s, const float *f, int a, int z, float m);
float attn__exp_sum_avx512(float *s, const float *f, int a, int z, float m);
float attn__max_avx2(const float *s, int a, int z, int *finite);
float attn__max_avx512(const float *s, int a, int z, int *finite);
void attn__write_row_avx2(float *w, int lk, int klo, int khi,
                          const float *s, float inv, int stream);
void attn__write_row_avx512(float *w, int lk, int klo, int khi,
                            const float *s, float inv);
int attn__scale_sanitize_avx512(float *dst, const float *src, int n,
                                float g);
/* attn__scale_floats in sixteen lanes (the same products). */
void attn__scale_avx512(float *x, size_t n, float g);
int attn__softmax_span_avx512(float *s, int n, int a, int z, float floor,
                              const float *mx, float *m_out, float *sum);
/* The same with BF16 mode's cheaper exp (within 2^-17 of exp; vexp.c),
 * for probabilities that are rounded to BF16 next; round != 0 stores
 * them rounded (the sum stays that of the unrounded). */
int attn__softmax_span_bf16_avx512(float *s, int n, int a, int z,
                                   float floor, const float *mx,
                                   float *m_out, float *sum, int round);
/* Soft-capping and ALiBi of rowops.c over s[a, z) in sixteen lanes (FMA
 * rounding: they may differ from the portable loops in the last bit). */
void attn__softcap_avx512(float *s, int a, int z, float cap);
void attn__alibi_avx512(float *s, int a, int z, float slope, int base);
void attn__sfence_avx2(void);
#endif

/* The portable soft-capping and ALiBi loops of rowops.c, for the tests:
 * s = cap tanh(s / cap) (NaN as 0, +-inf as +-cap) and
 * s -= slope |base - c| over [a, z). */
void attn__softcap_portable(float *s, int a, int z, float cap);
void attn__alibi_portable(float *s, int a, int z, float slope, int base);

/* dst[c] = src[c] * g with +-inf clamped to +-FLT_MAX and NaN as 0;
 * dst may be src.  Returns 1 when every product was finite, 0 when one
 * was clipped (how the paths notice that a sum overflowed). */
int attn__scale_sanitize(float *dst, const float *src, int n, float g);

/* One row of returned weights: w[0, klo) = 0, w[klo, khi) = s * inv,
 * w[khi, lk) = 0.  stream != 0 asks for streaming (non-temporal) stores
 * where the CPU has them, for weights too large to stay in a cache; then
 * attn__write_weights_done(stream) must follow a task's last row. */
void attn__write_weight_row(float *w, int lk, int klo, int khi,
                            const float *s, float inv, int stream);
void attn__write_weights_done(int stream);

/* Matrix products (gemm.c), row-major with leading dimensions, any
 * m, n, k >= 1:
 *   attn__gemm_nt  C (m, n) = alpha * A (m, k) B (n, k)^T
 *   attn__gemm_nn  C (m, n) = A (m, k) B (k, n) + beta C   (beta 0: C is
 *                  not read)
 * gemm is ATTN_GEMM_BLAS (cblas_sgemm) or ATTN_GEMM_NATIVE (the AVX-512F
 * kernels: only when attn__use_avx512()).  The NT kernel
 * packs B through pack, attn__gemm_pack_floats(p) floats of 64-byte
 * aligned scratch, for any k <= max(D, Dk); BLAS ignores it. */
void attn__gemm_nt(int gemm, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb, float *c,
                   int ldc, float *pack);
void attn__gemm_nn(int gemm, int m, int n, int k, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc);
size_t attn__gemm_pack_floats(const attn_problem *p);

/* The 64-key panels of a head's K the scores product keeps for every
 * task of that head a thread runs in one call (score.c): their count,
 * or 0 where the product does not keep them (not a dot product on the
 * native float32 or the VDPBF16PS kernels, or a head's kept operands
 * beyond ATTN__KPANEL_BYTES).  The VDPBF16PS kernels keep V's pairs
 * beside them, a 64-key group each (bf16.c).  attn__kept_bytes: what a
 * head's kept operands take, 0 where none are kept. */
int attn__kpanels(const attn_problem *p, int gemm);
size_t attn__kept_bytes(const attn_problem *p, int gemm);

/* The GEMM a checked problem's products use: ATTN_GEMM_BLAS or
 * ATTN_GEMM_NATIVE, in BF16 mode also ATTN_GEMM_BF16 or ATTN_GEMM_AMX,
 * from p->gemm, p->amx and the CPU (gemm.c). */
int attn__gemm_pick(const attn_problem *p);

#if ATTN__HAVE_AVX2_FMA
/* The native kernels themselves, for the tests and the benchmark; call
 * only when attn__use_avx512(). */
void attn__gemm_nt_avx512(int m, int n, int k, float alpha, const float *a,
                          int lda, const float *b, int ldb, float *c,
                          int ldc, float *pack);
void attn__gemm_nn_avx512(int m, int n, int k, const float *a, int lda,
                          const float *b, int ldb, float beta, float *c,
                          int ldc);
/* attn__gemm_nt_avx512 for keys [j0, j0 + n) (j0 a multiple of 64) of
 * b (leading dimension ldb) through kept panels: panel q at
 * panels + 64 q k with ready[q] of its keys packed (0 at first), packed
 * again with the block's keys when it has fewer.  The same bits as
 * attn__gemm_nt_avx512 on the same keys, and no other key is read. */
void attn__gemm_nt_panels_avx512(int m, int n, int k, float alpha,
                                 const float *a, int lda, const float *b,
                                 int ldb, int j0, float *c, int ldc,
                                 float *panels, int *ready);
#endif

/* BF16 mode (bf16.c; the AVX512-BF16 kernels in gemm_bf16_avx512.c).
 * ATTN__BF16_MAX is BF16's largest finite value. */
#define ATTN__BF16_MAX 0x1.fep127f

static inline int attn__is_bf16(const attn_problem *p) {
  return p->precision == ATTN_PRECISION_BF16;
}

/* x rounded to BF16 (in float32): nearest even; zero and subnormals to
 * a zero of their sign (as VCVTNE2PS2BF16 does), beyond ATTN__BF16_MAX
 * to it.  x finite. */
static inline float attn__bf16_round(float x) {
  uint32_t u = attn__f2u(x), sign = u & 0x80000000u;
  uint32_t mag = u & 0x7fffffffu;
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  r = mag < 0x00800000u ? sign : r; /* integer selects: loops vectorize */
  r = mag >= 0x7f7f8000u ? (sign | 0x7f7f0000u) : r;
  return attn__u2f(r);
}

static inline float attn__bf16_widen(uint16_t h) {
  return attn__u2f((uint32_t)h << 16);
}

/* The pair layout of the BF16 products: words per row of k values (a
 * word holds two), and the words of a value pair row (Dv rounded up to
 * sixteen). */
static inline int attn__bf16_pairs(int k) { return (k + 1) / 2; }
static inline int attn__bf16_ldp(int dv) { return (dv + 15) / 16 * 16; }

/* Bytes of the two operand buffers of a problem's BF16 products, for
 * tasks of up to rows query rows. */
void attn__bf16_scratch(const attn_problem *p, size_t rows, size_t *a,
                        size_t *b);

/* BF16 mode's scores of a task's rows against keys [j0, j0 + n), n <=
 * ATTN__KBLOCK: s = scale bf16(Q) bf16(K)^T, as attn__scores. */
void attn__bf16_scores(const attn_problem *p, const attn__task *t, int j0,
                       int n, float *s, int lds, char *scratch,
                       const attn__scratch *lay);

/* BF16 mode's o (rows, Dv) = bf16(P) bf16(V[j0, j0 + n)) + beta o, P
 * (t->rows, n) with leading dimension lds; the float32 kernels round P
 * in place unless rounded says it holds BF16 values already (the
 * AVX512-BF16 ones round their copy the same way). */
void attn__bf16_pv(const attn_problem *p, const attn__task *t, float *s,
                   int lds, int j0, int n, int rounded, float beta, float *o,
                   char *scratch, const attn__scratch *lay);

#if ATTN__HAVE_AVX2_FMA
/* BF16 mode's kernels, one pair per instruction set with one contract.
 * a and b are float32 or BF16 (adt, bdt: enum attn_dtype); a2 and pack
 * hold A as BF16 and B in pairs (bf16.c sizes them).
 *   NT  C (m, n) = alpha A (m, k) B (n, k)^T
 *   NN  C (m, n) = A (m, k) B (k, n) + beta C   (A float32, finite and
 *       at most ATTN__BF16_MAX in magnitude: the probabilities)
 * _avx512 (VDPBF16PS): call only when attn__use_avx512bf16().  _amx
 * (TDPBF16PS): call only when attn__use_amx() and the process holds the
 * tile-data permission (attn_problem.amx). */
typedef void attn__bf16_nt_fn(int m, int n, int k, float alpha,
                              const void *a, int adt, size_t lda,
                              const void *b, int bdt, size_t ldb, float *c,
                              int ldc, uint32_t *a2, uint32_t *pack);
typedef void attn__bf16_nn_fn(int m, int n, int k, const float *a, int lda,
                              const void *b, int bdt, size_t ldb, float beta,
                              float *c, int ldc, uint32_t *a2,
                              uint32_t *pack);
attn__bf16_nt_fn attn__bf16_nt_avx512, attn__bf16_nt_amx;
attn__bf16_nn_fn attn__bf16_nn_avx512, attn__bf16_nn_amx;
/* The VDPBF16PS products over a head's kept operands, j0 a multiple of
 * 64, b the head's first key or value row: NT reads key panel q (keys
 * 64 q ..) at panels + 64 q pairs(k) words, NN value group q at vpairs
 * + 32 q ldp(n) words; ready[q] counts the keys packed (0 at first),
 * and a panel or group is packed again, with the block's keys, when it
 * has fewer.  The same bits as attn__bf16_nt_avx512 and
 * attn__bf16_nn_avx512 on the same keys, and no other key is read. */
void attn__bf16_nt_kept_avx512(int m, int n, int k, float alpha,
                               const void *a, int adt, size_t lda,
                               const void *b, int bdt, size_t ldb, int j0,
                               float *c, int ldc, uint32_t *a2,
                               uint32_t *panels, int *ready);
void attn__bf16_nn_kept_avx512(int m, int n, int k, const float *a, int lda,
                               const void *b, int bdt, size_t ldb, int j0,
                               float beta, float *c, int ldc, uint32_t *a2,
                               uint32_t *vpairs, int *ready);
/* dst[0, n) = attn__bf16_round of src (floats) or of src widened (BF16),
 * for the float32 kernels' operands; call only when attn__use_avx512(). */
void attn__bf16_round_avx512(float *dst, const float *src, int n);
void attn__bf16_widen_avx512(float *dst, const uint16_t *src, int n);
#endif

/* Overflowed outputs (rescale.c).  attn__value_scale is the power of two
 * g <= 1 by which a task's probabilities are scaled when it runs again
 * after its sums over keys [j0, j1) overflowed: small enough that
 * (j1 - j0) max|v| g, with dropout's 1/(1-p), stays below 2^126.
 * attn__scale_floats multiplies x[0, n) by g. */
float attn__value_scale(const attn_problem *p, const attn__task *t, int j0,
                        int j1);
void attn__scale_floats(float *x, size_t n, float g);

/* The sink logit of head h clamped to finite floats, or -FLT_MAX without
 * sinks (then it never raises a row maximum: the caller adds its term
 * only when p->sinks). */
static inline float attn__sink(const attn_problem *p, int h) {
  return p->sinks ? attn__clampf(p->sinks[h], -FLT_MAX, FLT_MAX) : -FLT_MAX;
}

/* A row's lse from its maximum m and den = sum exp(s - m) (sink term
 * included): m + ln(den), -inf when den is 0. */
float attn__lse(float m, float den);

/* The two paths, one task each; lse (B, H, Lq) may be NULL. */
void attn__task_weights(const attn_problem *p, const attn__task *t,
                        float *out, float *weights, float *lse,
                        char *scratch, const attn__scratch *lay);
void attn__task_online(const attn_problem *p, const attn__task *t,
                       float *out, float *lse, char *scratch,
                       const attn__scratch *lay);

#endif /* ATTN_IMPL_H */
