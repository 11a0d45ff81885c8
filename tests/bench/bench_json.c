/* bench_json.c - the JSON number path of proto/: numscan against the
 * cJSON path and against a library peer.
 *
 * build/attnd-bench-json prints a table (or, with --json, one JSON object
 * per line) of the best of several timings (thread CPU time) of:
 *
 *   decode   proto_v1_decode / proto_v2_decode of a request whose q, k, v
 *            are random floats as their shortest round-trip text:
 *            "numscan" is the decoder as shipped; "cjson" is the same
 *            decoder on the same body sent down the cJSON path alone (the
 *            test hook proto__test_cjson_path: the decoder as it was
 *            before numscan); "simdjson" is the peer of
 *            bench_simdjson.cc (simdjson On Demand, fast_float reading
 *            each number token as a float32) decoding the same body into
 *            the same floats, which are compared with the decoder's.
 *            numscan and the peer are timed in turns, three rounds, each
 *            its best.  ns per number and body MB/s.  docs/decisions.md
 *            states the rule these rows decide (attnd keeps its own
 *            reader while it is at least 1.5x faster than the peer).
 *   syntax   proto__json_check, the one pass every JSON body gets before
 *            anything else, over the same bodies: "check" lazily (lists
 *            of numbers scanned for their end, as the decoders run it),
 *            "strict" token by token (as on the decoders' error path);
 *            "refused" the decoder
 *            refusing the body with one byte at its end made invalid
 *            (where an attacker puts it: the whole body is read).  Body
 *            MB/s.
 *   encode   proto_v1_encode (nested) and proto_v2_encode (flat data) of
 *            output and weights; ns per number and response MB/s.
 *   print    one float32 to text: proto__fmt_f32 (as shipped, through
 *            Dragonbox; std::to_chars before), the midpoint printer that
 *            came before both (kept here verbatim), and snprintf("%.9g").
 *
 *   attnd-bench-json [--json] [--quick]
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"
#include "proto/tensor/tensor.h"
#include "tests/bench/bench_simdjson.h"

static int json_out, quick;

/* The calling thread's CPU time: on a shared, busy machine this leaves out
 * the time other processes take, which wall time cannot. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

/* Roughly N(0, 1): what q, k and v hold. */
static float normal(void) {
  double s = 0;
  for (int i = 0; i < 4; i++)
    s += uniform();
  return (float)((s - 2.0) * 1.7320508);
}

static void report(const char *what, const char *path, double ns,
                   double mbs) {
  if (json_out)
    printf("{\"kind\":\"json\",\"what\":\"%s\",\"path\":\"%s\","
           "\"ns_per_number\":%.2f,\"mb_per_s\":%.1f}\n", what, path, ns,
           mbs);
  else if (mbs > 0)
    printf("  %-34s %-10s %9.2f ns/number %9.1f MB/s\n", what, path, ns,
           mbs);
  else
    printf("  %-34s %-10s %9.2f ns/number\n", what, path, ns);
}

/* ---- request bodies ------------------------------------------------------ */

/* How a client writes the numbers: as attnd prints them (shortest, no
 * spaces), or as Python's json.dumps writes a float32 tensor's tolist()
 * (", " between numbers, each a float64 repr: about 17 digits). */
static int python_style;

static void put_number(proto__buf *b, float x) {
  if (!python_style) {
    proto__buf_put_f32(b, x);
    return;
  }
  char s[32];
  snprintf(s, sizeof s, "%.17g", (double)x);
  proto__buf_puts(b, s);
}

static void put_nested(proto__buf *b, int rank, const int *dims) {
  size_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  for (size_t i = 0; i < n; i++) {
    size_t period = 1;
    int opens = 0;
    for (int d = rank - 1; d >= 0; d--) { /* axes whose index is 0 */
      period *= (size_t)dims[d];
      if (i % period == 0)
        opens++;
    }
    if (i)
      proto__buf_puts(b, python_style ? ", " : ",");
    for (int k = 0; k < opens; k++)
      proto__buf_putc(b, '[');
    put_number(b, normal());
    period = 1;
    for (int d = rank - 1; d >= 0; d--) {
      period *= (size_t)dims[d];
      if ((i + 1) % period == 0)
        proto__buf_putc(b, ']');
    }
  }
}

/* A /v1 body with nested q, k, v of shape (B, H, L, D). */
static char *v1_body(const int *dims, size_t *len, size_t *numbers) {
  proto__buf b = {0};
  const char *names[3] = {"query", "key", "value"};
  proto__buf_putc(&b, '{');
  for (int t = 0; t < 3; t++) {
    proto__buf_puts(&b, t ? ",\"" : "\"");
    proto__buf_puts(&b, names[t]);
    proto__buf_puts(&b, "\":");
    put_nested(&b, 4, dims);
  }
  proto__buf_puts(&b, ",\"return_weights\":false}");
  *len = b.len;
  *numbers = 3 * (size_t)dims[0] * dims[1] * dims[2] * dims[3];
  return b.p;
}

/* A v2 JSON body with flat FP32 data for q, k, v. */
static char *v2_body(const int *dims, size_t *len, size_t *numbers) {
  proto__buf b = {0};
  const char *names[3] = {"query", "key", "value"};
  size_t n = (size_t)dims[0] * dims[1] * dims[2] * dims[3];
  proto__buf_puts(&b, "{\"inputs\":[");
  for (int t = 0; t < 3; t++) {
    char head[160];
    snprintf(head, sizeof head, "%s{\"name\":\"%s\",\"datatype\":\"FP32\","
             "\"shape\":[%d,%d,%d,%d],\"data\":[", t ? "," : "", names[t],
             dims[0], dims[1], dims[2], dims[3]);
    proto__buf_puts(&b, head);
    for (size_t i = 0; i < n; i++) {
      if (i)
        proto__buf_putc(&b, ',');
      proto__buf_put_f32(&b, normal());
    }
    proto__buf_puts(&b, "]}");
  }
  proto__buf_puts(&b, "],\"outputs\":[{\"name\":\"output\"}]}");
  *len = b.len;
  *numbers = 3 * n;
  return b.p;
}

/* An element budget, as the server always passes one: the decoders then
 * count the body's commas first, as they do in attnd. */
#define MAX_ELEMS ((size_t)1 << 30)

/* Best seconds per decode of body (v2 when v2); exits on a failure. */
static double time_decode(const char *body, size_t len, int v2, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    proto_request req;
    char err[PROTO_ERR_MAX];
    double t0 = now_s();
    int rc = v2 ? proto_v2_decode(body, len, NULL, PROTO_MODEL_ATTENTION,
                                  &req, MAX_ELEMS, err)
                : proto_v1_decode(body, len, &req, MAX_ELEMS, err);
    double t = now_s() - t0;
    if (rc) {
      fprintf(stderr, "bench_json: decode failed: %s\n", err);
      exit(1);
    }
    proto_request_free(&req);
    if (t < best)
      best = t;
  }
  return best;
}

/* Best seconds per decode of body by the simdjson peer; exits when it
 * refuses the body or reads any number to another float than attnd's
 * decoder (whose request req holds), so that the two rows time the same
 * answer. */
static double time_peer(const char *body, size_t len, int v2, int reps,
                        const proto_request *req) {
  size_t cap = len + SIMD_PEER_PADDING;
  char *padded = calloc(1, cap);
  simd_peer *peer = simd_peer_new();
  if (!padded || !peer) {
    fprintf(stderr, "bench_json: out of memory\n");
    exit(1);
  }
  memcpy(padded, body, len);
  double best = 1e30;
  for (int r = 0; r <= reps; r++) { /* the first allocates the parser */
    double t0 = now_s();
    long n = simd_peer_decode(peer, padded, len, cap, v2);
    double t = now_s() - t0;
    if (n < 0) {
      fprintf(stderr, "bench_json: the simdjson peer refused the body\n");
      exit(1);
    }
    if (r > 0 && t < best)
      best = t;
  }
  const float *ours[3] = {req->prob.q, req->prob.k, req->prob.v};
  size_t each = (size_t)req->prob.B * req->prob.H * req->prob.Lq *
                req->prob.D;
  for (int i = 0; i < 3; i++)
    if (memcmp(simd_peer_tensor(peer, i), ours[i], each * sizeof(float))) {
      fprintf(stderr, "bench_json: the simdjson peer read other floats\n");
      exit(1);
    }
  simd_peer_free(peer);
  free(padded);
  return best;
}

static void bench_decode(const char *what, char *body, size_t len,
                         size_t numbers, int v2, int reps) {
  proto__test_cjson_path(1);
  double t_old = time_decode(body, len, v2, reps);
  proto__test_cjson_path(0);
  /* numscan and the peer in turns, each its best over the rounds */
  double t_new = 1e30, t_peer = 1e30;
  for (int round = 0; round < 3; round++) {
    double t = time_decode(body, len, v2, reps);
    t_new = t < t_new ? t : t_new;
    proto_request req;
    char err[PROTO_ERR_MAX];
    int rc = v2 ? proto_v2_decode(body, len, NULL, PROTO_MODEL_ATTENTION,
                                  &req, MAX_ELEMS, err)
                : proto_v1_decode(body, len, &req, MAX_ELEMS, err);
    if (rc) {
      fprintf(stderr, "bench_json: decode failed: %s\n", err);
      exit(1);
    }
    t = time_peer(body, len, v2, reps, &req);
    t_peer = t < t_peer ? t : t_peer;
    proto_request_free(&req);
  }
  report(what, "cjson", t_old * 1e9 / (double)numbers,
         (double)len / t_old / 1e6);
  report(what, "numscan", t_new * 1e9 / (double)numbers,
         (double)len / t_new / 1e6);
  report(what, "simdjson", t_peer * 1e9 / (double)numbers,
         (double)len / t_peer / 1e6);
  if (!json_out)
    printf("  %-34s %-10s %9.2fx simdjson's time per number\n", "",
           "numscan", t_peer / t_new);
}

/* The syntax check alone, lazily as the decoders run it and fully as
 * they do on their error path, and the decoder refusing the body for its
 * last byte: body MB/s. */
static void bench_check(const char *what, char *body, size_t len,
                        size_t numbers, int v2, int reps) {
  double best[2] = {1e30, 1e30}, refused = 1e30;
  char err[PROTO_ERR_MAX];
  for (int r = 0; r < 2 * reps; r++) {
    proto__json_stats st;
    double t0 = now_s();
    int rc = proto__json_check(body, len, v2, "", r % 2, &st, err);
    double t = now_s() - t0;
    if (rc) {
      fprintf(stderr, "bench_json: the check refused the body: %s\n", err);
      exit(1);
    }
    best[r % 2] = t < best[r % 2] ? t : best[r % 2];
  }
  char last = body[len - 1];
  body[len - 1] = ','; /* the object's '}' */
  for (int r = 0; r < reps; r++) {
    proto_request req;
    double t0 = now_s();
    int rc = v2 ? proto_v2_decode(body, len, NULL, PROTO_MODEL_ATTENTION,
                                  &req, MAX_ELEMS, err)
                : proto_v1_decode(body, len, &req, MAX_ELEMS, err);
    double t = now_s() - t0;
    if (rc != ATTND_EINVAL) {
      fprintf(stderr, "bench_json: a bad last byte was not refused\n");
      exit(1);
    }
    refused = t < refused ? t : refused;
  }
  body[len - 1] = last;
  report(what, "check", best[1] * 1e9 / (double)numbers,
         (double)len / best[1] / 1e6);
  report(what, "strict", best[0] * 1e9 / (double)numbers,
         (double)len / best[0] / 1e6);
  report(what, "refused", refused * 1e9 / (double)numbers,
         (double)len / refused / 1e6);
}

/* 256 rows of 64 numbers (about 170 KB: in L2, and too many for the
 * branch predictor to learn), read many times: the number parser alone
 * (proto__num_list_f32, as numscan's leaves use it) against cJSON parsing
 * the same rows as arrays and converting each number to float. */
#define ROWS 256
#define ROW_CAP (64 * PROTO__F32_MAX + 3)

static void bench_rows(int reps) {
  char *rows = malloc((size_t)ROWS * ROW_CAP);
  size_t len[ROWS], total = 0, sink = 0;
  float dst[64];
  for (int r = 0; r < ROWS; r++) {
    char *row = rows + (size_t)r * ROW_CAP;
    size_t o = 1;
    row[0] = '[';
    for (int i = 0; i < 64; i++) {
      if (i)
        row[o++] = ',';
      o += (size_t)proto__fmt_f32(row + o, normal());
    }
    row[o++] = ']';
    row[o] = '\0';
    len[r] = o;
    total += o;
  }
  int iters = quick ? 10 : 100;
  for (int which = 0; which < 2; which++) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
      double t0 = now_s();
      for (int k = 0; k < iters; k++)
        for (int r = 0; r < ROWS; r++) {
          const char *row = rows + (size_t)r * ROW_CAP;
          if (which) {
            if (proto__num_list_f32(row + 1, row + len[r] - 1, dst, 64))
              exit(1);
          } else {
            cJSON *a = cJSON_ParseWithLength(row, len[r]);
            int i = 0;
            for (cJSON *e = a ? a->child : NULL; e; e = e->next)
              dst[i++ & 63] = (float)e->valuedouble;
            cJSON_Delete(a);
          }
          sink += (size_t)dst[r & 63];
        }
      double t = now_s() - t0;
      if (t < best)
        best = t;
    }
    report("256 rows of 64 numbers, in L2", which ? "numscan" : "cjson",
           best * 1e9 / (64.0 * ROWS * iters),
           (double)total * iters / best / 1e6);
  }
  if (sink == 42)
    puts("");
  free(rows);
}

/* ---- encode ------------------------------------------------------------- */

static void bench_encode(int reps) {
  static const int dims[4] = {1, 16, 128, 64};
  proto_request req;
  memset(&req, 0, sizeof req);
  attn_problem *p = &req.prob;
  p->B = dims[0], p->H = p->Hkv = dims[1], p->Lq = p->Lk = dims[2];
  p->D = p->Dk = p->Dv = dims[3];
  req.qrank = 4;
  req.return_weights = 1;
  size_t no = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t nw = (size_t)p->B * p->H * p->Lq * p->Lk;
  req.out = malloc(no * sizeof(float));
  req.weights = malloc(nw * sizeof(float));
  for (size_t i = 0; i < no; i++)
    req.out[i] = normal();
  for (size_t i = 0; i < nw; i++) /* softmax-like weights in (0, 0.05) */
    req.weights[i] = (float)(uniform() * uniform() * 0.05);
  req.n_outputs = 2;
  req.outputs[0] = PROTO_OUT_OUTPUT;
  req.outputs[1] = PROTO_OUT_WEIGHTS;
  static const char *const names[3] = {
    "encode v1 nested (1,16,128,64)+w", "encode v1 flat (1,16,128,64)+w",
    "encode v2 JSON (1,16,128,64)+w"};
  for (int form = 0; form < 3; form++) {
    double best = 1e30;
    size_t len = 0;
    req.codec = form == 2 ? PROTO_CODEC_V2 : PROTO_CODEC_V1;
    req.flat = form == 1;
    for (int r = 0; r < reps; r++) {
      char *body;
      size_t jl;
      double t0 = now_s();
      int rc = proto_encode(&req, &body, &len, &jl);
      double t = now_s() - t0;
      if (rc) {
        fprintf(stderr, "bench_json: encode failed\n");
        exit(1);
      }
      free(body);
      if (t < best)
        best = t;
    }
    report(names[form], "as built", best * 1e9 / (double)(no + nw),
           (double)len / best / 1e6);
  }
  free(req.out);
  free(req.weights);
}

/* ---- one float to text ---------------------------------------------------- */

/* The midpoint printer proto__fmt_f32 used before std::to_chars (proto/
 * buf.c at commit 3b93b45), kept verbatim as the "before" of the print
 * figures. */
/* Significant digits in a %g mantissa (leading zeros do not count). */
static int sig_digits(const char *s) {
  int n = 0, started = 0;
  for (; *s && *s != 'e'; s++) {
    if (*s >= '1' && *s <= '9')
      started = 1;
    if (started && *s >= '0' && *s <= '9')
      n++;
  }
  return n;
}

/* The snprintf path: 9 significant digits always read back as the same
 * float; try fewer while they still do.  %g drops trailing zeros, so a
 * result with k < p digits means no precision between k and p can be
 * shorter.  Correct but slow (about 1.4 us a float), so it only backs up
 * the fast path below. */
static int fmt_f32_slow(char *s, float x) {
  int n = snprintf(s, PROTO__F32_MAX, "%.9g", (double)x);
  int p = sig_digits(s);
  for (p = p < 9 ? p - 1 : 8; p >= 1; p--) {
    char t[PROTO__F32_MAX];
    int m = snprintf(t, sizeof t, "%.*g", p, (double)x);
    if (strtof(t, NULL) != x)
      break;
    memcpy(s, t, (size_t)m + 1);
    n = m;
    int k = sig_digits(t);
    if (k < p)
      p = k;
  }
  return n;
}

/* x * 10^k in double; exact powers of ten up to 10^22, so one or two
 * roundings for the exponents a float needs. */
static double mul_pow10(double x, int k) {
  static const double p10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  for (; k > 22; k -= 22)
    x *= 1e22;
  for (; k < -22; k += 22)
    x /= 1e22;
  return k >= 0 ? x * p10[k] : x / p10[-k];
}

/* Writes the decimal m * 10^k (m > 0) as a JSON number: plain notation for
 * moderate exponents, d.ddde-X otherwise. */
static int put_decimal(char *s, int neg, uint64_t m, int k) {
  char dig[24];
  int n = 0, o = 0;
  while (m % 10 == 0) {
    m /= 10;
    k++;
  }
  for (; m; m /= 10)
    dig[n++] = (char)('0' + m % 10); /* reversed */
  int e = k + n - 1;                   /* exponent of the leading digit */
  if (neg)
    s[o++] = '-';
  if (e >= 0 && e < 9 && k >= 0) {     /* integer */
    while (n)
      s[o++] = dig[--n];
    for (; k > 0; k--)
      s[o++] = '0';
  } else if (e >= 0 && e < 9) {        /* ddd.ddd */
    for (int i = 0; n; i++) {
      if (i == e + 1)
        s[o++] = '.';
      s[o++] = dig[--n];
    }
  } else if (e < 0 && e >= -5) {       /* 0.000ddd */
    s[o++] = '0';
    s[o++] = '.';
    for (int i = -1; i > e; i--)
      s[o++] = '0';
    while (n)
      s[o++] = dig[--n];
  } else {                             /* d.ddde-X */
    s[o++] = dig[--n];
    if (n)
      s[o++] = '.';
    while (n)
      s[o++] = dig[--n];
    o += snprintf(s + o, PROTO__F32_MAX - (size_t)o, "e%d", e);
  }
  s[o] = '\0';
  return o;
}

/* 1 when the text s reads back as x. */
static int reads_back(const char *s, float x) {
  return strtof(s, NULL) == x;
}

static int old_fmt_f32(char *s, float x) {
  static const double p10[9] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
  static const double inv10[9] = {1e0,  1e-1, 1e-2, 1e-3, 1e-4,
                                  1e-5, 1e-6, 1e-7, 1e-8};
  if (x == 0.0f) {
    s[0] = '0';
    s[1] = '\0';
    return 1;
  }
  if (!isfinite(x)) {
    memcpy(s, "null", 5);
    return 4;
  }
  /* Fast path.  Every decimal strictly between the midpoints to x's float
   * neighbours reads back as x.  Scale x and those midpoints so that x has
   * 9 digits before the point (S, L, H); the p-digit rounding of x is then
   * round(S / 10^(9-p)) * 10^(9-p), tested against (L, H).  The scaling is
   * off by a few double roundings at most, far inside tol, so a candidate
   * clear of the bounds by tol is decided; one within tol of a bound (a
   * tie, say) is decided by strtof on its text. */
  float ax = fabsf(x);
  double a = ax, lo = nextafterf(ax, 0.0f), hi = nextafterf(ax, INFINITY);
  double mid_lo = (lo + a) / 2;
  double mid_hi = isinf(hi) ? a + (a - mid_lo) : (a + hi) / 2;
  int e10 = (int)floor(log10(a));
  double lead = mul_pow10(a, -e10);
  e10 += lead >= 10.0 ? 1 : lead < 1.0 ? -1 : 0;
  double S = mul_pow10(a, 8 - e10), L = mul_pow10(mid_lo, 8 - e10);
  double H = mul_pow10(mid_hi, 8 - e10), tol = S * 1e-12;
  for (int p = 1; p <= 9; p++) {
    /* inv10 is inexact, which only moves m in cases where any nearby
     * integer is as good; c is what gets tested */
    double m = (double)(int64_t)(S * inv10[9 - p] + 0.5), c = m * p10[9 - p];
    if (c < L - tol || c > H + tol)
      continue;
    int n = put_decimal(s, x < 0, (uint64_t)m, e10 - p + 1);
    if ((c > L + tol && c < H - tol) || reads_back(s, x))
      return n;
  }
  return fmt_f32_slow(s, x);
}

static void bench_print(int n) {
  float *x = malloc((size_t)n * sizeof *x);
  char s[64];
  size_t sink = 0;
  for (int i = 0; i < n; i++)
    x[i] = i % 2 ? normal() : (float)(uniform() * uniform() * 0.05);
  for (int which = 0; which < 3; which++) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
      double t0 = now_s();
      for (int i = 0; i < n; i++) {
        switch (which) {
        case 0: sink += (size_t)proto__fmt_f32(s, x[i]); break;
        case 1: sink += (size_t)old_fmt_f32(s, x[i]); break;
        default: sink += (size_t)snprintf(s, sizeof s, "%.9g", (double)x[i]);
        }
      }
      double t = now_s() - t0;
      if (t < best)
        best = t;
    }
    static const char *const names[3] = {
      "proto__fmt_f32 (Dragonbox)", "midpoint printer (before)",
      "snprintf %.9g"};
    report(names[which], "print", best * 1e9 / n, 0);
  }
  if (sink == 42)
    puts("");
  free(x);
}

/* A tensor row of n numbers printed by each list printer: 8 and 4 at a
 * time (AVX-512F, AVX2; where the CPU lacks one it prints one at a
 * time, so that row then repeats the last) and one at a time. */
static void bench_print_list(int n) {
  float *x = malloc((size_t)n * sizeof *x);
  char *s = malloc((size_t)n * (PROTO__F32_MAX + 1) + 1);
  size_t sink = 0;
  for (int i = 0; i < n; i++)
    x[i] = i % 2 ? normal() : (float)(uniform() * uniform() * 0.05);
  static const int widths[3] = {8, 4, 1};
  static const char *const names[3] = {
    "list, 8 at a time (AVX-512F)", "list, 4 at a time (AVX2)",
    "list, one at a time"};
  for (int w = 0; w < 3; w++) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
      double t0 = now_s();
      sink += proto__num_fmt_f32_list_width(s, x, (size_t)n, widths[w]);
      double t = now_s() - t0;
      if (t < best)
        best = t;
    }
    report(names[w], "print", best * 1e9 / n, 0);
  }
  if (sink == 42)
    puts("");
  free(s);
  free(x);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json_out = 1;
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else {
      fprintf(stderr, "usage: attnd-bench-json [--json] [--quick]\n");
      return 2;
    }
  }
  int reps = quick ? 3 : 7;
  static const int big[4] = {1, 16, 128, 64}, tiny[4] = {1, 1, 16, 32};
  size_t len, numbers;
  char *body;
  if (!json_out)
    printf("decode (best of %d; cjson = before numscan, simdjson = the "
           "library peer, same body):\n", reps);
  body = v1_body(big, &len, &numbers);
  bench_decode("v1 nested q,k,v (1,16,128,64)", body, len, numbers, 0, reps);
  bench_check("v1 nested q,k,v (1,16,128,64)", body, len, numbers, 0, reps);
  free(body);
  body = v2_body(big, &len, &numbers);
  bench_decode("v2 JSON FP32 q,k,v (1,16,128,64)", body, len, numbers, 1,
               reps);
  bench_check("v2 JSON FP32 q,k,v (1,16,128,64)", body, len, numbers, 1,
              reps);
  free(body);
  body = v1_body(tiny, &len, &numbers);
  bench_decode("v1 nested q,k,v (1,1,16,32)", body, len, numbers, 0,
               reps * 30);
  free(body);
  python_style = 1;
  body = v1_body(big, &len, &numbers);
  bench_decode("v1 nested, as Python's json.dumps", body, len, numbers, 0,
               reps);
  free(body);
  python_style = 0;
  bench_rows(reps);
  if (!json_out)
    printf("encode (best of %d):\n", reps);
  bench_encode(reps);
  if (!json_out)
    printf("print one float32 (mixed N(0,1) and small weights):\n");
  bench_print(quick ? 200000 : 1000000);
  bench_print_list(quick ? 200000 : 1000000);
  return 0;
}
