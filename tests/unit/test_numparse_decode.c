/* test_numparse_decode.c - the JSON number path through the decoders:
 *  - The decoders: tensor numbers come out correctly rounded (a decimal
 *    that double rounding would get wrong proves numscan read it), in
 *    every form (v1 nested and flat, v2 data, FP16, BF16, BOOL, INT32).
 *  - The decoders against themselves on the cJSON path: a body goes
 *    through numscan, and the same body through cJSON alone (the test
 *    hook proto__test_cjson_path).
 *    Thousands of mutated bodies must give the same code, the same message
 *    and the same tensors both ways.
 *  - FP16 and BF16 values a hair above, below and on their midpoints
 *    (normal and subnormal, both signs, long tokens in every form) are
 *    the decimal rounded once, on the leaf path, as numbers of numscan's
 *    copy and on the cJSON path.
 *  - The tops of the float ranges (FLT_MAX, FP16, BF16) accepted, past
 *    the midpoint refused with the value; errors inside leaves keep their
 *    messages; the comma count against a bytewise one.  The reader and the
 *    printer alone are in test_numparse.c. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/tensor/tensor.h"

#include "support_num.h"
#include "support_suite.h"

/* ---- through the decoders ----------------------------------------------- */

/* 1 + 2^-24 is the midpoint between 1 and its upper neighbour; this
 * decimal is just above it, so strtof rounds up, while strtod gives the
 * midpoint itself, which (float) then rounds to even: 1. */
#define ABOVE_MID "1.0000000596046447753906250001"

static void decode_v1(const char *json, proto_request *r) {
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode(json, strlen(json), r, 0, err);
  ck_assert_msg(rc == 0, "%s", err);
}

START_TEST(decoders_round_correctly) {
  float up = strtof(ABOVE_MID, NULL);
  ck_assert(up > 1.0f && (float)strtod(ABOVE_MID, NULL) == 1.0f);
  proto_request r;
  decode_v1("{\"query\":[[[" ABOVE_MID ",2]]],\"key\":[[[1,2]]],"
            "\"value\":[[[" ABOVE_MID "]]]}", &r);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 2.0f && r.prob.v[0] == up);
  proto_request_free(&r);
  decode_v1("{\"query\":{\"shape\":[1,1,2],\"data\":[" ABOVE_MID ",-0]},"
            "\"key\":[[[1,2]]],\"value\":[[[1]]],\"bias\":[" ABOVE_MID "]}",
            &r);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 0 && signbit(r.prob.q[1]));
  ck_assert(r.prob.bias[0] == up);
  proto_request_free(&r);
  char err[PROTO_ERR_MAX];
  const char *v2 =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,"
      "1,2],\"data\":[[" ABOVE_MID "],[3]]},{\"name\":\"key\",\"datatype\":"
      "\"FP64\",\"shape\":[1,1,2],\"data\":[" ABOVE_MID ",1]},{\"name\":"
      "\"value\",\"datatype\":\"FP16\",\"shape\":[1,1,2],\"data\":[1.0009765625,"
      "1.00048828125]},{\"name\":\"bias\",\"datatype\":\"BF16\",\"shape\":"
      "[1],\"data\":[1.01171875]},{\"name\":\"mask\",\"datatype\":\"BOOL\","
      "\"shape\":[1,1,1],\"data\":[true]},{\"name\":\"valid_lens\","
      "\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]}]}";
  ck_assert_int_eq(proto_v2_decode(v2, strlen(v2), NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err), 0);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 3.0f);
  ck_assert(r.prob.k[0] == up);
  /* FP16: 1 + 2^-10 is on the grid; 1 + 2^-11 is a tie, to even: 1 */
  ck_assert(r.prob.v[0] == 1.0009765625f && r.prob.v[1] == 1.0f);
  /* BF16: 1.01171875 = 1 + 3 * 2^-8 is a tie between 1 + 2^-7 and
   * 1 + 2^-6... to even: 1 + 2^-6 */
  uint16_t h;
  float want;
  ck_assert_int_eq(proto__f64_to_bf16(1.01171875, &h), 0);
  proto__bf16_to_f32(h, &want);
  ck_assert(r.prob.bias[0] == want);
  ck_assert_int_eq(r.prob.mask[0], 1);
  ck_assert_int_eq(r.prob.valid_lens[0], 1);
  proto_request_free(&r);
}
END_TEST

/* Many random numbers, in every tensor form, read as strtof reads them. */
START_TEST(decoded_tensors_equal_strtof) {
  enum { N = 4 * 3 * 5 };
  char texts[N][48];
  float want[N];
  proto__buf b = {0};
  for (int i = 0; i < N; i++) {
    float f = num_rnd_float() * (num_rnd() % 2 ? 1.0f : 1e-30f);
    int p = 1 + (int)(num_rnd() % 12);
    snprintf(texts[i], sizeof texts[i], "%.*g", p, (double)f);
    if (!isfinite(strtof(texts[i], NULL)))
      snprintf(texts[i], sizeof texts[i], "%d", i);
    want[i] = strtof(texts[i], NULL);
  }
  /* query (4, 3, 5) nested with odd spacing; key flat; value v2 below */
  proto__buf_puts(&b, "{\"query\":[");
  for (int i = 0; i < N; i++) {
    if (i % 15 == 0)
      proto__buf_puts(&b, i ? "]], [[" : "[[");
    else if (i % 5 == 0)
      proto__buf_puts(&b, "] ,\n[");
    else
      proto__buf_puts(&b, " , ");
    proto__buf_puts(&b, texts[i]);
  }
  proto__buf_puts(&b, "]]],\"key\":{\"data\":[");
  for (int i = 0; i < N; i++) {
    proto__buf_puts(&b, i ? ",\t" : "");
    proto__buf_puts(&b, texts[i]);
  }
  proto__buf_puts(&b, "],\"shape\":[4,3,5]},\"value\":[[[1],[2],[3]],"
                      "[[1],[2],[3]],[[1],[2],[3]],[[1],[2],[3]]]}");
  ck_assert(!b.oom);
  proto_request r;
  decode_v1(b.p, &r);
  for (int i = 0; i < N; i++) {
    ck_assert_msg(num_f32_bits(r.prob.q[i]) == num_f32_bits(want[i]), "q %s",
                  texts[i]);
    ck_assert_msg(num_f32_bits(r.prob.k[i]) == num_f32_bits(want[i]), "k %s",
                  texts[i]);
  }
  proto_request_free(&r);
  proto__buf_free(&b);
}
END_TEST

/* ---- numscan against the cJSON path -------------------------------------- */

typedef struct outcome {
  int rc;
  char err[PROTO_ERR_MAX];
  proto_request r;
} outcome;

/* Decodes body (its first byte a space): path ' ' through numscan,
 * '\x01' through the cJSON path alone. */
static void run(char *body, size_t len, int v2, char path, outcome *o) {
  body[0] = ' ';
  proto__test_cjson_path(path == '\x01');
  o->rc = v2 ? proto_v2_decode(body, len, NULL, PROTO_MODEL_ATTENTION,
                               &o->r, 0, o->err)
             : proto_v1_decode(body, len, &o->r, 0, o->err);
  proto__test_cjson_path(0);
}

static void same_buffer(const void *a, const void *b, size_t bytes,
                        const char *what, const char *body) {
  ck_assert_msg((a == NULL) == (b == NULL), "%s present one way only: %s",
                what, body);
  if (a)
    ck_assert_msg(!memcmp(a, b, bytes), "%s differs: %s", what, body);
}

/* Elements of a mask or bias from its strides over (b, h, i, j). */
static size_t broadcast_elems(const attn_problem *p, const int64_t *st) {
  return 1 + (size_t)((p->B - 1) * st[0] + (p->H - 1) * st[1] +
                      (p->Lq - 1) * st[2] + (p->Lk - 1) * st[3]);
}

static void same_problem(const outcome *x, const outcome *y,
                         const char *body) {
  const attn_problem *p = &x->r.prob, *q = &y->r.prob;
  ck_assert_msg(p->B == q->B && p->H == q->H && p->Hkv == q->Hkv &&
                    p->Lq == q->Lq && p->Lk == q->Lk && p->D == q->D &&
                    p->Dk == q->Dk && p->Dv == q->Dv && p->Hd == q->Hd,
                "shapes differ: %s", body);
  ck_assert_msg(p->scale == q->scale && p->causal == q->causal &&
                    p->valid_lens_per_query == q->valid_lens_per_query &&
                    x->r.in_bytes == y->r.in_bytes &&
                    x->r.return_weights == y->r.return_weights &&
                    x->r.flat == y->r.flat && x->r.qrank == y->r.qrank,
                "options differ: %s", body);
  size_t bh = (size_t)p->B * p->H, bkv = (size_t)p->B * p->Hkv, f = 4;
  same_buffer(p->q, q->q, bh * p->Lq * p->D * f, "query", body);
  same_buffer(p->k, q->k, bkv * p->Lk * p->Dk * f, "key", body);
  same_buffer(p->v, q->v, bkv * p->Lk * p->Dv * f, "value", body);
  same_buffer(p->w_q, q->w_q, (size_t)p->Hd * p->D * f, "w_q", body);
  same_buffer(p->w_k, q->w_k, (size_t)p->Hd * p->Dk * f, "w_k", body);
  same_buffer(p->w_v, q->w_v, (size_t)p->Hd * f, "w_v", body);
  same_buffer(p->valid_lens, q->valid_lens,
              (size_t)p->B * (p->valid_lens_per_query ? p->Lq : 1) * 4,
              "valid_lens", body);
  same_buffer(p->mask, q->mask, broadcast_elems(p, p->mask_stride), "mask",
              body);
  same_buffer(p->bias, q->bias, broadcast_elems(p, p->bias_stride) * f,
              "bias", body);
}

static const char *const seeds[] = {
  " {\"query\":[[[0.5,-1.25,2],[1,1e-3,0]]],\"key\":[[[1,0,0],[0,1,0],"
  "[0,0,1]]],\"value\":[[[1,2],[3,4],[5,6]]],\"valid_lens\":[2],\"mask\":"
  "[[true,false,true],[1,1,0]],\"bias\":[[0.5,0.25,-1]],\"causal\":false,"
  "\"scale\":0.5,\"id\":\"q[1,2]\"}",
  " {\"query\":{\"shape\":[1,2,2,2],\"data\":[1,2,3,4,5,6,7,8]},\"key\":"
  "{\"data\":[1,2,3,4,5,6,7,8],\"shape\":[1,1,2,2]},\"value\":[[[[1],[2]]]],"
  "\"valid_lens\":[[1,2]],\"return_weights\":false,\"window\":[1,null]}",
  " {\"scoring\":\"additive\",\"query\":[[[1,2]]],\"key\":[[[1,2,3],"
  "[4,5,6]]],\"value\":[[[1],[2]]],\"w_q\":[[0.5,1],[1,0]],\"w_k\":[[1,0,1],"
  "[0,1,0]],\"w_v\":[1,-1],\"dropout\":{\"p\":0.25,\"seed\":7}}",
};

static const char *const seeds_v2[] = {
  " {\"id\":\"r1\",\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
  "\"shape\":[1,2,2],\"data\":[[1.5,2],[3,4e-2]]},{\"name\":\"key\","
  "\"datatype\":\"FP16\",\"shape\":[1,3,2],\"data\":[1,0,0,1,0.5,0.25]},"
  "{\"name\":\"value\",\"datatype\":\"BF16\",\"shape\":[1,3,2],\"data\":"
  "[[1,2],[3,4],[5,6]]},{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":"
  "[2,3],\"data\":[true,false,true,1,1,0]},{\"name\":\"valid_lens\","
  "\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]},{\"name\":\"bias\","
  "\"datatype\":\"FP64\",\"shape\":[3],\"data\":[0.1,0.2,0.3]}],"
  "\"outputs\":[{\"name\":\"output\"}],\"parameters\":{\"causal\":true}}",
};

/* Bytes mutations write: number, structure and whitespace characters,
 * and a control byte JSON does not allow between tokens. */
static const char alphabet[] = "0123456789-+.eE,[]{}\": tfnrulas\x01\t";

static size_t mutate(char *b, size_t len, size_t cap) {
  int ops = 1 + (int)(num_rnd() % 3);
  for (int k = 0; k < ops && len > 2; k++) {
    size_t at = 1 + num_rnd() % (len - 1);
    char ch = alphabet[num_rnd() % (sizeof alphabet - 1)];
    switch (num_rnd() % 4) {
    case 0:
      b[at] = ch;
      break;
    case 1: { /* delete 1..3 bytes */
      size_t n = 1 + num_rnd() % 3;
      if (at + n > len)
        n = len - at;
      memmove(b + at, b + at + n, len - at - n);
      len -= n;
      break;
    }
    case 2:
      if (len + 1 < cap) {
        memmove(b + at + 1, b + at, len - at);
        b[at] = ch;
        len++;
      }
      break;
    default: { /* copy a short segment over another place */
      size_t from = 1 + num_rnd() % (len - 1), n = 1 + num_rnd() % 12;
      if (from + n > len)
        n = len - from;
      if (len + n < cap) {
        memmove(b + at + n, b + at, len - at);
        memmove(b + at, b + (from >= at ? from + n : from), n);
        len += n;
      }
    }
    }
  }
  return len;
}

/* 1 when b[0, len) holds only JSON's blanks. */
static int blank(const char *b, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!strchr(" \t\r\n", b[i]) || !b[i])
      return 0;
  return 1;
}

static void compare_paths(char *b, size_t len, int v2) {
  outcome x, y;
  char shown[600], why[PROTO_ERR_MAX];
  proto__json_stats st;
  run(b, len, v2, ' ', &x);
  run(b, len, v2, '\x01', &y);
  b[0] = ' ';
  snprintf(shown, sizeof shown, "%.*s", (int)(len < 500 ? len : 500), b);
  /* a body the full check refuses gets its message, whichever path */
  if (!blank(b, len) &&
      proto__json_check(b, len, v2 ? PROTO_CODEC_V2 : PROTO_CODEC_V1, "", 0,
                        &st, why))
    ck_assert_msg(x.rc == ATTND_EINVAL && !strcmp(x.err, why),
                  "rc %d '%s', the check says '%s': %s", x.rc, x.err, why,
                  shown);
  ck_assert_msg(x.rc == y.rc, "rc %d vs %d (%s | %s): %s", x.rc, y.rc,
                x.err, y.err, shown);
  ck_assert_msg(!strcmp(x.err, y.err), "'%s' vs '%s': %s", x.err, y.err,
                shown);
  if (x.rc == 0)
    same_problem(&x, &y, shown);
  proto_request_free(&x.r);
  proto_request_free(&y.r);
}

START_TEST(mutated_bodies_decode_as_on_the_cjson_path) {
  char b[1024];
  int accepted = 0;
  for (int i = 0; i < 12000; i++) {
    int v2 = i % 4 == 3;
    const char *seed = v2 ? seeds_v2[0] : seeds[i % 3];
    size_t len = strlen(seed);
    memcpy(b, seed, len);
    if (i >= 8) /* the seeds themselves first, then mutants */
      len = mutate(b, len, sizeof b);
    outcome x;
    run(b, len, v2, ' ', &x);
    accepted += x.rc == 0;
    proto_request_free(&x.r);
    compare_paths(b, len, v2);
  }
  /* the mutants must exercise both outcomes */
  ck_assert_int_gt(accepted, 150);
  ck_assert_int_lt(accepted, 11000);
}
END_TEST

/* Leaves long enough for the scan's 64-byte steps (AVX-512BW where the
 * CPU has it), with a stop byte ([ ] { } ") or a comma written over each
 * of their bytes in turn: the same answer as the cJSON path. */
START_TEST(long_leaves_with_a_stop_byte_anywhere) {
  static const char stops[] = "[]{}\",";
  char b[2048];
  for (int n = 40; n <= 200; n += 53) { /* 161 to 804 bytes of numbers */
    size_t o = 0;
    o += (size_t)snprintf(b + o, sizeof b - o,
                          " {\"query\":{\"shape\":[1,1,1,%d],\"data\":[", n);
    size_t first = o;
    for (int i = 0; i < n; i++)
      o += (size_t)snprintf(b + o, sizeof b - o, "%s%d.%d", i ? "," : "",
                            i % 7, i);
    size_t last = o;
    o += (size_t)snprintf(b + o, sizeof b - o,
                          "]},\"key\":[[[1]]],\"value\":[[[1]]]}");
    compare_paths(b, o, 0);
    for (size_t k = first; k < last; k++) {
      char was = b[k];
      b[k] = stops[k % (sizeof stops - 1)];
      compare_paths(b, o, 0);
      b[k] = was;
    }
  }
}
END_TEST

/* Numbers JSON does not allow, which cJSON reads (and numscan's reader
 * refuses): 400 naming the token, on both paths and in every place a
 * number goes - a tensor element, the v1 envelope, a v2 shape. */
START_TEST(numbers_json_forbids_are_refused_on_both_paths) {
  static const char *const tokens[] = {"01", "-01", "00", "1.", "-1.", "0.",
                                       "1.e5", "00.5", "-.5", "1.E+2"};
  static const char *const v1[] = {
    " {\"query\":[[[%s,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
    " {\"query\":{\"shape\":[1,1,2],\"data\":[1,%s]},\"key\":[[[1,2]]],"
    "\"value\":[[[1]]]}",
    " {\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
    "\"scale\":%s}",
  };
  static const char v2[] =
      " {\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,1,%s],"
      "\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"key\",\"shape\":"
      "[1,1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"value\","
      "\"shape\":[1,1,1,1],\"datatype\":\"FP32\",\"data\":[1]}]}";
  char b[512], want[64];
  for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) {
    snprintf(want, sizeof want, "%s is not a JSON number", tokens[t]);
    for (size_t i = 0; i <= sizeof v1 / sizeof *v1; i++) {
      int is_v2 = i == sizeof v1 / sizeof *v1;
      /* the v2 shape holds integers: "1.e5" and "-.5" fail there as such */
      if (is_v2 && strpbrk(tokens[t], ".eE-"))
        continue;
      int len = snprintf(b, sizeof b, is_v2 ? v2 : v1[i], tokens[t]);
      outcome x;
      run(b, (size_t)len, is_v2, ' ', &x);
      ck_assert_msg(x.rc == ATTND_EINVAL, "%s: accepted", b);
      ck_assert_msg(strstr(x.err, want) && strstr(x.err, "at byte"),
                    "%s: %s", b, x.err);
      proto_request_free(&x.r);
      compare_paths(b, (size_t)len, is_v2);
    }
  }
}
END_TEST

/* The decimal a hair above (dir > 0) or below the midpoint between f and
 * the float above it, into s: the midpoint's exact expansion (a double,
 * so %.80e is exact) with a 1 appended, or with 1 taken off its 85th
 * digit.  Its double is the midpoint itself, which rounds to the even
 * float; the decimal rounds to the float on its side. */
static void near_midpoint_text(float f, int dir, char *s, size_t cap) {
  double m = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
  char e[16];
  snprintf(s, cap, "%.84e", m);
  char *x = strchr(s, 'e');
  snprintf(e, sizeof e, "%s", x);
  if (dir > 0) {
    x[0] = '1';
  } else {
    char *d = x - 1; /* borrow from the last digit */
    while (*d == '0')
      *d-- = '9';
    (*d)--;
    x[0] = '\0';
  }
  snprintf(x + (dir > 0), cap - (size_t)(x - s) - 1, "%s", e);
}

/* Bodies the cJSON path decodes (\x01 in front, or an escaped member
 * name) read every float32 as its decimal rounds, not as its double: the
 * same floats as numscan's exact reader, next to midpoints too. */
START_TEST(cjson_path_rounds_long_decimals_once) {
  enum { N = 256 };
  static char b[N * 100 + 256], tok[128];
  static float want[N];
  size_t len = (size_t)snprintf(b, sizeof b, " {\"query\":[[[0]]],"
                                "\"key\":[[[0]]],\"\\u0076alue\":[[[");
  for (int i = 0; i < N; i++) {
    /* 2^-10 to 2, where %.84e is the midpoint's whole expansion; every
     * other one negative */
    uint64_t r = num_rnd();
    float f = num_bits_f32((uint32_t)(r & 0x7fffffu) |
                       (uint32_t)(117 + (r >> 32) % 11) << 23);
    int neg = i % 4 >= 2;
    tok[0] = '-';
    near_midpoint_text(f, i % 2 ? 1 : -1, tok + neg, sizeof tok - 1);
    want[i] = i % 2 ? nextafterf(f, INFINITY) : f;
    if (neg)
      want[i] = -want[i];
    ck_assert_msg(strtof(tok, NULL) == want[i], "%s", tok);
    len += (size_t)snprintf(b + len, sizeof b - len, "%s%s", i ? "," : "",
                            tok);
  }
  len += (size_t)snprintf(b + len, sizeof b - len,
                          "]]],\"return_weights\":false}");
  outcome x;
  run(b, len, 0, ' ', &x);
  ck_assert_msg(x.rc == 0, "%s", x.err);
  const float *v = x.r.prob.v;
  int wrong = 0;
  for (int i = 0; i < N; i++)
    wrong += num_f32_bits(v[i]) != num_f32_bits(want[i]);
  ck_assert_msg(wrong == 0, "%d of %d values not rounded once", wrong, N);
  proto_request_free(&x.r);
  compare_paths(b, len, 0);
}
END_TEST

/* Bodies in which numscan finds no leaf (the member names escaped, which
 * only cJSON reads), of lengths around the steps by which its copy of the
 * body grows (blanks make up the length): the copy is the whole body, and
 * the body decodes. */
START_TEST(bodies_without_a_leaf_decode_at_any_length) {
  static char b[20000];
  for (size_t want = 4000; want < sizeof b - 100;
       want += want < 4200 ? 1 : want < 9000 ? 91 : 997) {
    size_t o = (size_t)snprintf(b, sizeof b, " {\"inputs\":[{\"name\":"
                                "\"query\",\"datatype\":\"FP32\",\"shape\":"
                                "[1,1,1],\"d\\u0061ta\":[1]},{\"name\":\"key\","
                                "\"datatype\":\"FP32\",\"shape\":[1,1,1],"
                                "\"d\\u0061ta\":[1]},{\"name\":\"value\","
                                "\"datatype\":\"FP32\",\"shape\":[1,1,1],"
                                "\"d\\u0061ta\":[2]}]");
    while (o < want - 1)
      b[o++] = ' ';
    o += (size_t)snprintf(b + o, sizeof b - o, "}");
    outcome x;
    run(b, o, 1, ' ', &x);
    ck_assert_msg(x.rc == 0 && x.r.prob.v[0] == 2.0f, "%zu bytes: %s", o,
                  x.err);
    proto_request_free(&x.r);
  }
}
END_TEST

/* Bodies numscan leaves to cJSON, which accepts them: the same answer. */
START_TEST(what_only_cjson_accepts_still_decodes) {
  static const char *const bodies[] = {
    " {\"\\u0071uery\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
  };
  char b[256];
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    size_t len = strlen(bodies[i]);
    memcpy(b, bodies[i], len);
    outcome x;
    run(b, len, 0, ' ', &x);
    ck_assert_msg(x.rc == 0, "%s: %s", bodies[i], x.err);
    proto_request_free(&x.r);
    compare_paths(b, len, 0);
  }
}
END_TEST

/* ---- FP16 and BF16 midpoints -------------------------------------------
 *
 * A decimal a hair above or below an FP16 or BF16 midpoint has the
 * midpoint for its double; the decimal, not the double's tie to even,
 * decides which neighbour it becomes.  Each token is built from a
 * midpoint's exact expansion (printf's) and its two neighbours computed
 * from the formats' definitions, not by the code under test. */

#define HALF_TOK 320
#define HALF_N 240

/* A decimal on (dir 0), above (1) or below (-1) the midpoint above the
 * FP16 (bf 0) or BF16 value with bits h, with a sign when neg, in form
 * (num_decimal); the value it rounds to (the even one on the midpoint). */
static double half_token(int bf, unsigned h, int dir, int neg, int form,
                         char *tok) {
  double a = bf ? num_bf16_value(h) : num_f16_value(h);
  double b = bf ? num_bf16_value(h + 1) : num_f16_value(h + 1);
  char d[1024];
  long e;
  num_exact_digits((a + b) / 2, d, sizeof d, &e);
  size_t n = strlen(d);
  if (dir > 0) {
    snprintf(d + n, sizeof d - n, "00000000000000000000000000001");
  } else if (dir < 0) {
    d[n - 1]--; /* the last digit of an expansion is not 0 */
    snprintf(d + n, sizeof d - n, "99999999999999999999999999999");
  }
  num_decimal(tok, HALF_TOK, neg, d, e, form);
  double want = dir > 0 ? b : dir < 0 ? a : h % 2 ? b : a;
  return neg ? -want : want;
}

/* v2 attention with the tokens as its FP16 or BF16 value (1, 1, n): as
 * one leaf (nested 0), or with [0] after them (nested 1), which makes
 * them numbers of numscan's copy, read by cJSON. */
static size_t half_body(char *b, size_t cap, int bf, int nested,
                        char (*tok)[HALF_TOK], int n) {
  size_t o = (size_t)snprintf(
      b, cap, " {\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
      "\"shape\":[1,1,1],\"data\":[1]},{\"name\":\"key\",\"datatype\":"
      "\"FP32\",\"shape\":[1,1,1],\"data\":[1]},{\"name\":\"value\","
      "\"datatype\":\"%s\",\"shape\":[1,1,%d],\"data\":[", bf ? "BF16" :
      "FP16", n + nested);
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(b + o, cap - o, "%s%s", i ? "," : "", tok[i]);
  o += (size_t)snprintf(b + o, cap - o, "%s]}]}", nested ? ",[0]" : "");
  return o;
}

START_TEST(half_midpoints_round_as_their_decimals) {
  static char tok[HALF_N][HALF_TOK], b[HALF_N * HALF_TOK + 512];
  static double want[HALF_N];
  for (int bf = 0; bf < 2; bf++) {
    unsigned top = bf ? 0x7f7f : 0x7bff, sub = bf ? 0x80 : 0x400;
    for (int i = 0; i < HALF_N; i++) {
      /* a third subnormal; the largest value with a decimal just under
       * the top midpoint (65519.999...) now and then */
      unsigned h = (unsigned)(num_rnd() % (i % 3 ? top : sub));
      int dir = (int)(num_rnd() % 3) - 1;
      if (i % 40 == 39)
        h = top, dir = -1;
      want[i] = half_token(bf, h, dir, (int)(num_rnd() % 2),
                           (int)(num_rnd() % 4), tok[i]);
    }
    for (int way = 0; way < 3; way++) {
      size_t len = half_body(b, sizeof b, bf, way == 1, tok, HALF_N);
      outcome x;
      run(b, len, 1, way == 2 ? '\x01' : ' ', &x);
      ck_assert_msg(x.rc == 0, "%s", x.err);
      int wrong = 0, first = -1;
      for (int i = 0; i < HALF_N; i++)
        if (num_f32_bits(x.r.prob.v[i]) != num_f32_bits((float)want[i])) {
          wrong++;
          first = first < 0 ? i : first;
        }
      ck_assert_msg(!wrong, "%s %s: %d of %d wrong, first %s: %a, want %a",
                    bf ? "BF16" : "FP16", way == 0 ? "leaf" : way == 1 ?
                    "numscan's copy" : "cJSON", wrong, HALF_N,
                    tok[first], (double)x.r.prob.v[first], want[first]);
      proto_request_free(&x.r);
      if (way < 2)
        compare_paths(b, len, 1);
    }
  }
}
END_TEST

/* ---- the top of each float range --------------------------------------
 *
 * A decimal is in range exactly when it rounds (to nearest) to a finite
 * value: below FLT_MAX + half an ulp (2^128 - 2^103), 65504 + 16 for FP16,
 * BF16's largest + half its ulp.  FLT_MAX prints as 3.4028235e38, whose
 * double is past FLT_MAX, and 3.4028235677973366e38, whose double is the
 * midpoint itself; both are under it.  Every text goes into every float
 * field of both codecs, through numscan (' ') and cJSON alone ('\x01'). */

/* 2^128 - 2^103 and BF16's 2^128 - 2^119 - 2^120, exactly. */
#define F32_MID "340282356779733661637539395458142568448"
#define BF16_MID "339617752923046005526922703901628039168"

/* v1 with t in query (nested), key (flat), bias and scale; v2 with t in
 * an FP32 and an FP64 input's data, the bias and parameters.scale, and h
 * in an FP16 value and b in a BF16 mask-free bias of their own. */
static size_t top_body(char *o, size_t cap, int v2, const char *t,
                       const char *h, const char *b) {
  if (!v2)
    return (size_t)snprintf(o, cap, " {\"query\":[[[%s,1]]],\"key\":"
                            "{\"shape\":[1,1,2],\"data\":[1,%s]},\"value\":"
                            "[[[%s]]],\"bias\":[[%s]],\"scale\":%s}", t, t,
                            h ? h : "1", t, t);
  return (size_t)snprintf(
      o, cap, " {\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
      "\"shape\":[1,1,2],\"data\":[%s,1]},{\"name\":\"key\",\"datatype\":"
      "\"FP64\",\"shape\":[1,1,2],\"data\":[1,%s]},{\"name\":\"value\","
      "\"datatype\":\"FP16\",\"shape\":[1,1,1],\"data\":[%s]},{\"name\":"
      "\"bias\",\"datatype\":\"%s\",\"shape\":[1,1],\"data\":[%s]}],"
      "\"parameters\":{\"scale\":%s}}", t, t, h ? h : "1", b ? "BF16" : "FP32",
      b ? b : t, t);
}

static void top_accepted(int v2, const char *t, float want, const char *h,
                         float hwant, const char *b, float bwant) {
  char body[1024];
  for (int path = 0; path < 2; path++) {
    size_t len = top_body(body, sizeof body, v2, t, h, b);
    outcome x;
    run(body, len, v2, path ? '\x01' : ' ', &x);
    ck_assert_msg(x.rc == 0, "%s (v%d, %s): %s", t, v2 + 1,
                  path ? "cJSON" : "numscan", x.err);
    const attn_problem *p = &x.r.prob;
    ck_assert_msg(p->q[0] == want && p->k[1] == want && p->scale == want &&
                      p->bias[0] == (b ? bwant : want) &&
                      p->v[0] == (h ? hwant : 1.0f),
                  "%s (v%d, %s): %a %a %a %a %a", t, v2 + 1,
                  path ? "cJSON" : "numscan", (double)p->q[0],
                  (double)p->k[1], (double)p->scale, (double)p->bias[0],
                  (double)p->v[0]);
    proto_request_free(&x.r);
  }
}

START_TEST(flt_max_text_is_accepted_everywhere) {
  static const char *const under[] = {
    "3.4028235e38", "3.4028235E+38", "34028235e31", "3.4028235677973366e38",
    "340282356779733661637539395458142568447",
    "3.40282356779733661637539395458142568447999e38",
    "340282356779733661637539395458142568447.9999", "3.4028234663852886e38"};
  char neg[64];
  for (size_t i = 0; i < sizeof under / sizeof *under; i++) {
    for (int v2 = 0; v2 < 2; v2++) {
      top_accepted(v2, under[i], FLT_MAX, NULL, 0, NULL, 0);
      snprintf(neg, sizeof neg, "-%s", under[i]);
      top_accepted(v2, neg, -FLT_MAX, NULL, 0, NULL, 0);
    }
  }
}
END_TEST

START_TEST(fp16_and_bf16_tops_are_accepted) {
  static const char *const h16[] = {"65504", "65519.99", "65519.999999999999999999",
                                    "6.5519999999999999999999e4"};
  float bmax;
  proto__bf16_to_f32(0x7f7f, &bmax);
  static const char *const b16[] = {"3.3895314e38", "3.3961775e38",
                                    "3.39617752923046e38",
                                    "3.396177529230460055269227039016280391679e38", "339617752923046005526922703901628039167"};
  char neg[64], nb[64];
  for (size_t i = 0; i < sizeof h16 / sizeof *h16; i++) {
    snprintf(neg, sizeof neg, "-%s", h16[i]);
    snprintf(nb, sizeof nb, "-%s", b16[i]);
    top_accepted(1, "1", 1, h16[i], 65504, b16[i], bmax);
    top_accepted(1, "1", 1, neg, -65504, nb, -bmax);
    top_accepted(0, "1", 1, NULL, 0, NULL, 0);
  }
  top_accepted(1, "1", 1, "1", 1, b16[4], bmax);
}
END_TEST

/* text refused in every field of kind (0: float32, 1: FP16, 2: BF16),
 * on both paths, with a message holding want. */
static void top_refused(const char *t, int kind, const char *want) {
  char body[1024];
  static const char *const fields[2][4] = {
    {"query[0][0][0]", "key[0][0][1]", "bias[0][0]", "scale"},
    {"query[0][0][0]", "key[0][0][1]", "bias[0][0]", "parameters.scale"}};
  for (int v2 = 0; v2 < (kind ? 1 : 2); v2++) {
    for (int f = 0; f < (kind ? 1 : 4); f++) {
      const char *q = f == 0 ? t : "1", *k = f == 1 ? t : "1";
      const char *bi = f == 2 ? t : "1", *sc = f == 3 ? t : "1";
      size_t len;
      if (kind)
        len = top_body(body, sizeof body, 1, "1", kind == 1 ? t : NULL,
                       kind == 2 ? t : NULL);
      else if (!v2)
        len = (size_t)snprintf(body, sizeof body, " {\"query\":[[[%s,1]]],"
                               "\"key\":{\"shape\":[1,1,2],\"data\":[1,%s]},"
                               "\"value\":[[[1]]],\"bias\":[[%s]],\"scale\":"
                               "%s}", q, k, bi, sc);
      else
        len = (size_t)snprintf(
            body, sizeof body, " {\"inputs\":[{\"name\":\"query\","
            "\"datatype\":\"FP32\",\"shape\":[1,1,2],\"data\":[%s,1]},"
            "{\"name\":\"key\",\"datatype\":\"FP64\",\"shape\":[1,1,2],"
            "\"data\":[1,%s]},{\"name\":\"value\",\"datatype\":\"FP32\","
            "\"shape\":[1,1,1],\"data\":[1]},{\"name\":\"bias\",\"datatype\":"
            "\"FP32\",\"shape\":[1,1],\"data\":[%s]}],\"parameters\":"
            "{\"scale\":%s}}", q, k, bi, sc);
      const char *name = kind == 1 ? "value[0][0][0]"
                         : kind == 2 ? "bias[0][0]" : fields[v2][f];
      char full[384];
      snprintf(full, sizeof full, "%s: %s", name, want);
      for (int path = 0; path < 2; path++) {
        outcome x;
        run(body, len, kind ? 1 : v2, path ? '\x01' : ' ', &x);
        ck_assert_msg(x.rc == ATTND_EINVAL && strstr(x.err, full),
                      "%s as %s (%s): rc %d '%s'", t, name,
                      path ? "cJSON" : "numscan", x.rc, x.err);
        if (x.rc == 0)
          proto_request_free(&x.r);
      }
    }
  }
}

START_TEST(past_the_midpoint_is_refused_with_the_value) {
  static const char *const f32_tie =
      " is out of float32 range (decimals from "
      "3.40282356779733661637539395458142568448e38 on round to infinity; "
      "the largest is 3.4028235e38)";
  static const char *const f32_max = " is out of float32 range (the "
                                     "largest is 3.4028235e38)";
  /* each number as it was written, then why */
  static const struct { const char *t; int kind; const char *why; } c[] = {
    {F32_MID, 0, NULL},
    {"3.40282356779733661637539395458142568448e38", 0, NULL},
    {"3.4028235677973367e38", 0, NULL},
    {"3.402823567797336616375393954581425684480000001e+38", 0, NULL},
    {"-" F32_MID, 0, NULL},
    {"3.4028236e38", 0, ""},
    {"1e39", 0, ""},
    {"-1e39", 0, ""},
    {"65520", 1, " is out of FP16 range (decimals from 65520 on round to "
                 "infinity; the largest is 65504)"},
    {"-65520.0000000000000001", 1, " is out of FP16 range (decimals from "
                                   "65520 on round to infinity; the "
                                   "largest is 65504)"},
    {"6552000000000000000000000000001e-26", 1, " is out of FP16 range "
                                   "(decimals from 65520 on round to "
                                   "infinity; the largest is 65504)"},
    {"65536", 1, " is out of FP16 range (the largest is 65504)"},
    {BF16_MID, 2, " is out of BF16 range (decimals from "
                  "3.39617752923046005526922703901628039168e38 on round "
                  "to infinity; the largest is 3.3895314e38)"},
    {"3.3961776e38", 2, " is out of BF16 range (the largest is "
                        "3.3895314e38)"},
    {BF16_MID ".0000000000000000000001", 2, " is out of BF16 range "
                  "(decimals from 3.39617752923046005526922703901628039168e38"
                  " on round to infinity; the largest is 3.3895314e38)"},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    char m[300];
    snprintf(m, sizeof m, "%s%s", c[i].t,
             !c[i].why ? f32_tie : c[i].why[0] ? c[i].why : f32_max);
    top_refused(c[i].t, c[i].kind, m);
  }
}
END_TEST

/* Errors inside numscan's leaves carry the cJSON path's messages. */
START_TEST(errors_in_leaves_keep_their_messages) {
  static const struct { const char *body, *msg; } cases[] = {
    {"{\"query\":[[[1,1e39]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query[0][0][1]: 1e39 is out of float32 range (the largest is "
     "3.4028235e38)"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,true]]],\"value\":[[[1]]]}",
     "key: expected a number at [0][0][1], got true"},
    {"{\"query\":[[[1,2],[3]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query: ragged array at [0][1] (length 1, expected 2)"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2 3]]],\"value\":[[[1]]]}",
     "body is not valid JSON at byte 32: expected ',' or ']', got '3'"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
     "\"mask\":[[2]]}", "mask: expected true, false, 0 or 1 at [0][0], "
     "got 2"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
     "\"valid_lens\":[1.5]}", "valid_lens: expected an integer at [0], "
     "got 1.5"},
    {"{\"query\":[[[]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query: axis 2 is empty"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    proto_request r;
    char err[PROTO_ERR_MAX];
    int rc = proto_v1_decode(cases[i].body, strlen(cases[i].body), &r, 0,
                             err);
    ck_assert_int_eq(rc, ATTND_EINVAL);
    ck_assert_msg(!strcmp(err, cases[i].msg), "'%s', want '%s'", err,
                  cases[i].msg);
  }
  /* v2: a second "data" that is not JSON is still found */
  const char *v2 =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,"
      "2],\"data\":[1,2],\"data\":[1,2 3]},{\"name\":\"key\",\"datatype\":"
      "\"FP32\",\"shape\":[1,1,2],\"data\":[1,2]},{\"name\":\"value\","
      "\"datatype\":\"FP32\",\"shape\":[1,1,1],\"data\":[1]}]}";
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v2_decode(v2, strlen(v2), NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_msg(strstr(err, "not valid JSON"), "%s", err);
}
END_TEST

/* The byte-at-a-time count proto__count_commas replaced. */
static size_t commas_ref(const char *s, size_t n) {
  size_t commas = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ',') {
      commas++;
    } else if (s[i] == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
          i++;
    }
  }
  return commas;
}

START_TEST(comma_count_matches_the_bytewise_one) {
  static const char pick[] = ",,,\"\\ab1[]{}";
  char s[300];
  for (int i = 0; i < 100000; i++) {
    size_t n = num_rnd() % sizeof s;
    for (size_t k = 0; k < n; k++)
      s[k] = num_rnd() % 4 ? pick[num_rnd() % (sizeof pick - 1)] : 'x';
    ck_assert_uint_eq(proto__count_commas(s, n), commas_ref(s, n));
  }
}
END_TEST

int main(void) {
  support_case cases[] = {
    {"decode", {decoders_round_correctly, decoded_tensors_equal_strtof,
                mutated_bodies_decode_as_on_the_cjson_path,
                what_only_cjson_accepts_still_decodes,
                bodies_without_a_leaf_decode_at_any_length,
                numbers_json_forbids_are_refused_on_both_paths,
                cjson_path_rounds_long_decimals_once,
                half_midpoints_round_as_their_decimals,
                long_leaves_with_a_stop_byte_anywhere,
                errors_in_leaves_keep_their_messages,
                flt_max_text_is_accepted_everywhere,
                fp16_and_bf16_tops_are_accepted,
                past_the_midpoint_is_refused_with_the_value,
                comma_count_matches_the_bytewise_one}},
  };
  return support_run("numparse_decode", cases, sizeof cases / sizeof cases[0]);
}
