/* fuzz_core.c - the core on any request proto/ accepts.
 *
 * proto/ promises that a decoded request is a valid problem; the core
 * promises (design.md, attn.h) that no input within float range yields
 * NaN or Inf, that weights are in [0, 1] with rows summing to 1 (or all
 * 0 for a row with no allowed key), and that the online path (no
 * weights) computes the same output as the materialised one.  This
 * harness decodes, runs attn_forward both ways (and attn_diagnostics when
 * the request asks for them) and checks all of that, then, where the core
 * picked its native AVX-512 GEMM, both ways again through cblas_sgemm
 * (the invariants, not the numbers):
 * these are our invariants, not the client's data.
 *
 * Input: one byte choosing the form, then
 *   0  a /v1/attention body;
 *   1  a v2 binary request as fuzz_v2_binary reads it;
 *   2  a v2 binary request this harness builds from the bytes: a few
 *      bytes of shapes and options (build() below: the model, shapes,
 *      masks, causal, scale, dropout, a sliding window and its
 *      alignment, the diagnostics outputs, sinks, softcap, ALiBi slopes,
 *      packed sequences, the lse output, BF16 mode), then raw tensor
 *      bytes in the chosen datatype (FP32, FP64, FP16 or BF16), so that
 *      the fuzzer controls every bit of every number: huge, tiny,
 *      subnormal, mixed signs. */
#include <float.h>
#include <stdarg.h>

#include "core/attn_impl.h"
#include "fuzz.h"
#include "proto/tensor/tensor.h"

/* A smaller budget than the codec harnesses': the core's cost grows as
 * Lq * Lk * D, and the online path does not count Lq * Lk. */
#define CORE_MAX_ELEMS 4096

/* ---- form 2: a v2 binary request built from the bytes ------------------ */

typedef struct fuzz_build {
  char json[4096];
  size_t jlen;
  uint8_t bin[1 << 16];
  size_t blen;
  const uint8_t *pool;      /* tensor bytes, read cyclically */
  size_t npool, at;
  int comma;
} fuzz_build;

__attribute__((format(printf, 2, 3)))
static void jput(fuzz_build *f, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(f->json + f->jlen, sizeof f->json - f->jlen, fmt, ap);
  va_end(ap);
  if (n > 0 && (size_t)n < sizeof f->json - f->jlen)
    f->jlen += (size_t)n;
}

static uint8_t next_byte(fuzz_build *f) {
  if (!f->npool)
    return 0;
  uint8_t b = f->pool[f->at % f->npool];
  f->at++;
  return b;
}

/* Appends one binary input; kind 0 floats of dtype dt, 1 INT32 lengths
 * (in [0, hi]), 2 BOOL, 3 INT32 offsets from 0 to hi, non-decreasing
 * (cu_seqlens), 4 INT32 offsets as the bytes give them (in [0, hi], any
 * order: mostly refused). */
static void input(fuzz_build *f, const char *name, const int *shape,
                  int rank, int kind, const char *dt, size_t es, int hi) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)shape[i];
  size_t bytes = n * (kind == 0 ? es : kind == 2 ? 1 : 4);
  if (bytes > sizeof f->bin - f->blen)
    return;  /* the decoder then reports the missing input */
  if (kind >= 3)
    kind = kind == 3 ? -1 : 1;  /* -1: sorted offsets, below */
  jput(f, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", f->comma++
       ? "," : "", name, kind == 0 ? dt : kind == 2 ? "BOOL" : "INT32");
  for (int i = 0; i < rank; i++)
    jput(f, "%s%d", i ? "," : "", shape[i]);
  jput(f, "],\"parameters\":{\"binary_data_size\":%zu}}", bytes);
  uint8_t *dst = f->bin + f->blen;
  int32_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    if (kind == -1) {  /* 0, then non-decreasing, the last one hi */
      int32_t v = i == 0 ? 0 : i + 1 == n ? hi
                  : prev + (int32_t)(next_byte(f) % (hi - prev + 1));
      memcpy(dst + 4 * i, &v, 4);
      prev = v;
    } else if (kind == 1) {
      int32_t v = next_byte(f) % (hi + 1);
      memcpy(dst + 4 * i, &v, 4);
    } else if (kind == 2) {
      dst[i] = next_byte(f) & 1;
    } else {
      for (size_t b = 0; b < es; b++)
        dst[es * i + b] = next_byte(f);
    }
  }
  f->blen += bytes;
}

/* Builds the request; returns 0, or -1 when the bytes are too few. */
static int build(fuzz_build *f, const uint8_t *c, size_t size) {
  static const char *const dts[4] = {"FP32", "FP64", "FP16", "BF16"};
  static const size_t ess[4] = {4, 8, 2, 2};
  static const char *const sides[8] = {"0", "1", "2", "3", "4", "5", "6",
                                       "null"};
  static const char *const causal[4] = {"false", "true", "\"lower_right\"",
                                        "\"upper_left\""};
  if (size < 13)
    return -1;
  int additive = c[0] & 1, dti = (c[0] >> 1) & 3, only_out = (c[0] >> 5) & 1;
  int rank4 = (c[0] >> 6) & 1, dropout = c[0] >> 7;
  int B = 1 + c[1] % 2, H = 1 + (c[1] >> 1) % 3;
  int Hkv = (c[1] >> 3) & 1 ? 1 : H;
  int Lq = 1 + c[2] % 8, Lk = 1 + (c[2] >> 3) % 8;
  int D = 1 + c[3] % 8, Dv = 1 + (c[3] >> 3) % 4, Hd = 1 + (c[3] >> 5) % 4;
  int flags = c[4];
  float scale;
  memcpy(&scale, c + 5, 4);
  int more = c[12];
  f->pool = c + 13;
  f->npool = size - 13;
  if (!rank4)
    H = Hkv = 1;

  int qs[4], ks[4], vs[4], r = 0;
  qs[r] = ks[r] = vs[r] = B, r++;
  if (rank4) {
    qs[r] = H, ks[r] = vs[r] = Hkv, r++;
  }
  qs[r] = Lq, ks[r] = vs[r] = Lk, r++;
  qs[r] = D, ks[r] = D, vs[r] = Dv, r++;

  jput(f, "{\"id\":\"fuzz\",\"inputs\":[");
  input(f, "query", qs, r, 0, dts[dti], ess[dti], 0);
  input(f, "key", ks, r, 0, dts[dti], ess[dti], 0);
  input(f, "value", vs, r, 0, dts[dti], ess[dti], 0);
  if (flags & 1) {
    int vl[2] = {B, Lq};
    input(f, "valid_lens", vl, flags & 2 ? 2 : 1, 1, NULL, 0, Lk);
  }
  if (flags & 4) {  /* (Lq, Lk) broadcast, or the full shape */
    int ms[4], mr = 0;
    if (flags & 8) {
      ms[mr++] = B;
      if (rank4)
        ms[mr++] = H;
    }
    ms[mr++] = Lq;
    ms[mr++] = Lk;
    input(f, "mask", ms, mr, 2, NULL, 0, 0);
  }
  if (flags & 16) {
    int bs[4], br = 0;
    if (flags & 32) {
      bs[br++] = B;
      if (rank4)
        bs[br++] = H;
    }
    bs[br++] = Lq;
    bs[br++] = Lk;
    input(f, "bias", bs, br, 0, dts[dti], ess[dti], 0);
  }
  /* c[12]: 1 sinks, 2 softcap, 4 alibi_slopes (H,), 8 (B, H) instead,
   * 16 packed sequences (64: offsets as the bytes give them), 32 the
   * window at the lower right, 128 the lse output */
  if (more & 1) {
    int hs[1] = {H};
    input(f, "sinks", hs, 1, 0, dts[dti], ess[dti], 0);
  }
  if (more & 4) {
    int as[2] = {B, H};
    if (more & 8)
      input(f, "alibi_slopes", as, 2, 0, dts[dti], ess[dti], 0);
    else
      input(f, "alibi_slopes", as + 1, 1, 0, dts[dti], ess[dti], 0);
  }
  if (more & 16) {
    int n[1] = {2 + next_byte(f) % 3};
    input(f, "cu_seqlens_q", n, 1, more & 64 ? 4 : 3, NULL, 0, Lq);
    input(f, "cu_seqlens_k", n, 1, more & 64 ? 4 : 3, NULL, 0, Lk);
  }
  if (additive) {
    int wq[2] = {Hd, D}, wv[1] = {Hd};
    input(f, "w_q", wq, 2, 0, dts[dti], ess[dti], 0);
    input(f, "w_k", wq, 2, 0, dts[dti], ess[dti], 0);
    input(f, "w_v", wv, 1, 0, dts[dti], ess[dti], 0);
  }
  jput(f, "],\"parameters\":{\"causal\":%s", causal[(c[0] >> 3) & 3]);
  if (c[11] & 2)  /* a sliding window; side 7 stands for null (unbounded) */
    jput(f, ",\"window_left\":%s,\"window_right\":%s",
         sides[(c[11] >> 2) & 7], sides[(c[11] >> 5) & 7]);
  if ((flags & 64) && !additive && isfinite(scale) && scale != 0.0f)
    jput(f, ",\"scale\":%.9g", (double)scale);
  if (flags & 128)  /* BF16 mode (refused with additive scoring) */
    jput(f, ",\"precision\":\"bf16\"");
  if (dropout)
    jput(f, ",\"dropout_p\":%.9g,\"seed\":%u", c[9] / 256.0, c[10]);
  if (more & 2)  /* from 1/16 to 16 */
    jput(f, ",\"softcap\":%.9g", (1 + next_byte(f)) / 16.0);
  if (more & 32)
    jput(f, ",\"window_align\":\"lower_right\"");
  jput(f, "},\"outputs\":[{\"name\":\"output\"}%s%s%s]}",
       more & 128 ? ",{\"name\":\"lse\"}" : "",
       only_out ? "" : ",{\"name\":\"weights\"}",
       c[11] & 1 ? ",{\"name\":\"allowed_keys\"},{\"name\":\"entropy\"},"
       "{\"name\":\"max_weight\"},{\"name\":\"jacobian_norm\"}" : "");
  return 0;
}

/* ---- the checks ---------------------------------------------------------- */

static float max_abs(const float *x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; i++)
    if (fabsf(x[i]) > m)
      m = fabsf(x[i]);
  return m;
}

/* The largest |v|: v as float32, or in BF16 mode as the BF16 words the
 * core uses as sent (attn_problem.v16). */
static double max_value(const attn_problem *p, size_t nv) {
  if (p->v) return max_abs(p->v, nv);
  float m = 0;
  for (size_t i = 0; i < nv; i++) {
    uint32_t u = (uint32_t)p->v16[i] << 16;
    float x;
    memcpy(&x, &u, 4);
    m = fabsf(x) > m ? fabsf(x) : m;
  }
  return m;
}

/* BF16 mode returns the probabilities rounded to BF16 (docs/api.md), each
 * within u = 2^-8 of itself relatively: a row sums to 1 within about u,
 * and its entropy, -sum w ln w, may pass ln k by up to about u (ln k + 1). */
static float bf16_slack(const attn_problem *p, int k) {
  if (p->precision != ATTN_PRECISION_BF16) return 0.0f;
  return 0x1p-8f * (logf((float)(k > 1 ? k : 1)) + 1.0f);
}

/* attn_diagnostics on the weights just computed: allowed keys in
 * [0, Lk], and for a row with none every figure 0; otherwise entropy in
 * [0, ln k] for k allowed keys, max weight in (0, 1], Jacobian norm in
 * [0, 1].  With sinks the weights sum to s <= 1 and may all be 0: max
 * weight in [0, 1], entropy at most s ln(k / s) <= ln k + 1/e. */
static void check_diagnostics(const proto_request *req) {
  const attn_problem *p = &req->prob;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  FUZZ_CHECK(req->weights && req->allowed_keys && req->entropy &&
                 req->max_weight && req->jacobian_norm,
             "diagnostics buffers");
  int rc = attn_diagnostics(p, req->weights, req->allowed_keys, req->entropy,
                            req->max_weight, req->jacobian_norm);
  FUZZ_CHECK(rc == 0, "attn_diagnostics rc %d", rc);
  for (size_t r = 0; r < rows; r++) {
    int32_t k = req->allowed_keys[r];
    float e = req->entropy[r], m = req->max_weight[r];
    float j = req->jacobian_norm[r];
    FUZZ_CHECK(k >= 0 && k <= p->Lk, "allowed_keys[%zu] = %d", r, (int)k);
    FUZZ_CHECK(isfinite(e) && isfinite(m) && isfinite(j),
               "row %zu: entropy %g max_weight %g jacobian_norm %g", r,
               (double)e, (double)m, (double)j);
    if (k == 0) {
      FUZZ_CHECK(e == 0 && m == 0 && j == 0, "empty row %zu not 0", r);
      continue;
    }
    float slack = (p->sinks ? 0.37f : 0.0f) + bf16_slack(p, k);
    FUZZ_CHECK(e >= -1e-6f && e <= logf((float)k) + slack + 1e-4f,
               "entropy[%zu] = %g with %d keys", r, (double)e, (int)k);
    FUZZ_CHECK((m > 0 || (p->sinks && m == 0)) && m <= 1,
               "max_weight[%zu] = %g", r, (double)m);
    FUZZ_CHECK(j >= 0 && j <= 1, "jacobian_norm[%zu] = %g", r, (double)j);
  }
}

/* attn_forward_lse of p into out (and w, lse when not NULL): rc 0,
 * finite outputs, weights in [0, 1] with rows summing to 1 or all 0 (to
 * at most 1 with sinks), each lse finite or -inf (never -inf with
 * sinks). */
static void check_forward(const attn_problem *p, float *out, float *w,
                          float *lse, const char *path) {
  size_t nout = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  int rc = attn_forward_lse(p, out, w, lse);
  FUZZ_CHECK(rc == 0, "%s: attn_forward rc %d", path, rc);
  for (size_t r = 0; lse && r < rows; r++)
    FUZZ_CHECK(isfinite(lse[r]) || (!p->sinks && lse[r] == -INFINITY),
               "%s: lse[%zu] = %g", path, r, (double)lse[r]);
  for (size_t i = 0; i < nout; i++)
    FUZZ_CHECK(isfinite(out[i]), "%s: output[%zu] = %g", path, i,
               (double)out[i]);
  for (size_t r = 0; w && r < rows; r++) {
    double sum = 0;
    for (int j = 0; j < p->Lk; j++) {
      float x = w[r * (size_t)p->Lk + (size_t)j];
      FUZZ_CHECK(isfinite(x) && x >= 0.0f && x <= 1.0f,
                 "%s: weights[%zu][%d] = %g", path, r, j, (double)x);
      sum += x;
    }
    double slack = 1e-4 * p->Lk + bf16_slack(p, 1);
    FUZZ_CHECK(sum == 0.0 || fabs(sum - 1.0) <= slack ||
                   (p->sinks && sum <= 1.0 + slack),
               "%s: weights row %zu sums to %.9g", path, r, sum);
  }
}

/* The same invariants with the matrix products forced through
 * cblas_sgemm, when the core's own choice was its native kernels (the
 * two round differently, so on extreme inputs they may pick different
 * one-hot winners: only the invariants are compared, not the numbers). */
static void check_blas_path(const attn_problem *p, const float *w) {
  attn_problem blas = *p;
  blas.gemm = ATTN_GEMM_BLAS;
  if (attn__gemm_pick(p) == ATTN_GEMM_BLAS)
    return;
  size_t nout = (size_t)p->B * p->H * p->Lq * p->Dv;
  float *out = malloc(nout * sizeof *out);
  float *w2 = w ? malloc((size_t)p->B * p->H * p->Lq * p->Lk * sizeof *w2)
                : NULL;
  FUZZ_CHECK(out != NULL && (!w || w2 != NULL), "out of memory");
  check_forward(&blas, out, w2, NULL, "blas");
  check_forward(&blas, out, NULL, NULL, "blas online");
  free(out);
  free(w2);
}

static void check_core(proto_request *req) {
  const attn_problem *p = &req->prob;
  size_t nout = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  float *online = malloc(nout * sizeof *online);
  float *lse = malloc(rows * sizeof *lse);
  /* As the worker does: weights when returned or needed by the
   * diagnostics, else the online path; the lse where asked for. */
  float *w = req->weights;
  FUZZ_CHECK(online != NULL && lse != NULL, "out of memory");

  check_forward(p, req->out, w, req->lse, "auto");

  if (req->diagnostics)
    check_diagnostics(req);

  /* The online path (no weights) must agree with the materialised one.
   * Without dropout the output is a convex combination of value rows, so
   * the two differ by rounding relative to the largest value; in BF16
   * mode by BF16's rounding of the probabilities, which the two paths
   * round at different points (normalised or not: docs/api.md). */
  if (w) {
    check_forward(p, online, NULL, lse, "online");
    /* both paths' lse: the same -inf rows, and the same value within
     * rounding relative to its size */
    for (size_t r = 0; req->lse && r < rows; r++)
      FUZZ_CHECK((isinf(lse[r]) && isinf(req->lse[r])) ||
                     fabs((double)lse[r] - req->lse[r]) <=
                         1e-4 * (1.0 + fabs((double)lse[r])),
                 "lse[%zu]: online %.9g, with weights %.9g", r,
                 (double)lse[r], (double)req->lse[r]);
    size_t nv = (size_t)p->B * p->Hkv * p->Lk * p->Dv;
    double rel = p->precision == ATTN_PRECISION_BF16 ? 0x1p-7 : 1e-5;
    double tol = rel * p->Lk * max_value(p, nv) + 1e-30;
    if (p->dropout_p > 0)
      tol /= 1.0 - p->dropout_p;
    for (size_t i = 0; i < nout; i++)
      FUZZ_CHECK(fabs((double)online[i] - req->out[i]) <= tol,
                 "output[%zu]: online %.9g, with weights %.9g (tol %g)", i,
                 (double)online[i], (double)req->out[i], tol);
  }
  check_blas_path(p, w);
  free(online);
  free(lse);
  fuzz_check_encode(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_build f;  /* 70 KB: off the stack */
  proto_request req;
  char err[PROTO_ERR_MAX], hbuf[48];
  int rc;
  if (size < 2)
    return 0;
  int form = data[0] % 3;
  data++;
  size--;
  if (form == 0) {
    rc = proto_v1_decode((const char *)data, size, &req, CORE_MAX_ELEMS,
                         err);
  } else if (form == 1) {
    int model = data[0] & 1;
    data++;
    size--;
    const char *hdr = fuzz_split_header(&data, &size, hbuf);
    rc = proto_v2_decode((const char *)data, size, hdr, model, &req,
                         CORE_MAX_ELEMS, err);
  } else {
    memset(&f, 0, sizeof f);
    if (build(&f, data, size) != 0)
      return 0;
    char hdr[32];
    snprintf(hdr, sizeof hdr, "%zu", f.jlen);
    char *body = malloc(f.jlen + f.blen + 1);
    FUZZ_CHECK(body != NULL, "out of memory");
    memcpy(body, f.json, f.jlen);
    memcpy(body + f.jlen, f.bin, f.blen);
    rc = proto_v2_decode(body, f.jlen + f.blen, hdr, data[0] & 1, &req,
                         CORE_MAX_ELEMS, err);
    free(body);
  }
  if (form == 0)
    fuzz_check_decode_rc(rc, err);
  else
    fuzz_check_v2_decode_rc(rc, err);
  if (getenv("FUZZ_VERBOSE"))  /* to see what the seeds decode to */
    fprintf(stderr, "form %d: decode rc %d %s\n", form, rc, err);
  if (rc != 0)
    return 0;
  fuzz_check_request(&req);
  check_core(&req);
  proto_request_free(&req);
  return 0;
}
