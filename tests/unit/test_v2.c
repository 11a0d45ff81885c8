/* test_v2.c - the KServe v2 codec: datatype conversions (round to nearest
 * even with ties and subnormals, exact widenings, non-finite rejection),
 * JSON and binary inference requests, every error path of the binary
 * layout, the answers (JSON and binary outputs), model lookup and
 * metadata, and the gzip/deflate content coding with its inflate cap. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "proto/mem.h"
#include "proto/proto.h"
#include "proto/v2/v2.h"

/* ---- helpers ------------------------------------------------------------- */

/* A body: JSON header then raw bytes; *hlen gets the header's length. */
typedef struct body {
  char buf[4096];
  size_t len;
  char hlen[32];
} body;

static void body_json(body *b, const char *json) {
  b->len = strlen(json);
  memcpy(b->buf, json, b->len);
  snprintf(b->hlen, sizeof b->hlen, "%zu", b->len);
}

static void body_add(body *b, const void *p, size_t n) {
  memcpy(b->buf + b->len, p, n);
  b->len += n;
}

static int dec(const body *b, const char *hlen, int model, proto_request *r,
               char *err) {
  return proto_v2_decode(b->buf, b->len, hlen, model, r, 0, err);
}

/* Asserts rc ATTND_EINVAL, an empty request and every phrase in err. */
#define BAD(b, hlen, ...) \
  bad_input(b, hlen, __LINE__, (const char *[]){__VA_ARGS__, NULL})
static void bad_input(const body *b, const char *hlen, int line,
                      const char **phrases) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = dec(b, hlen, PROTO_MODEL_ATTENTION, &r, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d (%s)", line, rc, err);
  ck_assert_int_eq(r.n_owned, 0);
  for (const char **p = phrases; *p; p++)
    ck_assert_msg(strstr(err, *p), "line %d: message \"%s\" lacks \"%s\"",
                  line, err, *p);
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Q (1,2,2), K and V (1,3,2) as JSON inputs, shared by several tests. */
#define IN_Q "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,2]," \
             "\"data\":[1,0,0,2]}"
#define IN_K "{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,3,2]," \
             "\"data\":[[[1,1],[2,0],[0,3]]]}"
#define IN_V "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,3,2]," \
             "\"data\":[1,0,0,1,1,1]}"

/* ---- datatypes ------------------------------------------------------------ */

START_TEST(f16_widens_exactly) {
  float f;
  ck_assert_int_eq(proto__f16_to_f32(0x3c00, &f), 0);
  ck_assert(f == 1.0f);
  ck_assert_int_eq(proto__f16_to_f32(0xc000, &f), 0);
  ck_assert(f == -2.0f);
  ck_assert_int_eq(proto__f16_to_f32(0x7bff, &f), 0);
  ck_assert(f == 65504.0f);
  ck_assert_int_eq(proto__f16_to_f32(0x0001, &f), 0); /* smallest subnormal */
  ck_assert(f == 0x1p-24f);
  ck_assert_int_eq(proto__f16_to_f32(0x03ff, &f), 0); /* largest subnormal */
  ck_assert(f == 1023 * 0x1p-24f);
  ck_assert_int_eq(proto__f16_to_f32(0x0400, &f), 0); /* smallest normal */
  ck_assert(f == 0x1p-14f);
  ck_assert_int_eq(proto__f16_to_f32(0x8000, &f), 0);
  ck_assert(f == 0.0f && signbit(f));
  ck_assert_int_eq(proto__f16_to_f32(0x3555, &f), 0);
  ck_assert(f == 0x1.554p-2f);
  /* every finite half round-trips through the double rounding */
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t back;
    if (((h >> 10) & 0x1f) == 0x1f)
      continue;
    ck_assert_int_eq(proto__f16_to_f32((uint16_t)h, &f), 0);
    ck_assert_int_eq(proto__f64_to_f16(f, &back), 0);
    ck_assert_uint_eq(back, h);
  }
}
END_TEST

START_TEST(f16_inf_and_nan_are_rejected) {
  float f = 7.0f;
  ck_assert_int_eq(proto__f16_to_f32(0x7c00, &f), -1); /* +inf */
  ck_assert_int_eq(proto__f16_to_f32(0xfc00, &f), -1); /* -inf */
  ck_assert_int_eq(proto__f16_to_f32(0x7e00, &f), -1); /* qNaN */
  ck_assert_int_eq(proto__f16_to_f32(0x7c01, &f), -1); /* sNaN */
  ck_assert(f == 7.0f);
  float out[3];
  unsigned char raw[6] = {0x00, 0x3c, 0x00, 0x7c, 0x00, 0x3c};
  ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP16, raw, 3, out), 1);
}
END_TEST

START_TEST(f64_to_f16_rounds_to_nearest_even) {
  uint16_t h;
  /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1 */
  ck_assert_int_eq(proto__f64_to_f16(1.0 + 0x1p-11, &h), 0);
  ck_assert_uint_eq(h, 0x3c00);
  /* 1 + 3*2^-11 is halfway between odd 1+2^-10 and even 1+2^-9 */
  ck_assert_int_eq(proto__f64_to_f16(1.0 + 3 * 0x1p-11, &h), 0);
  ck_assert_uint_eq(h, 0x3c02);
  /* just above the tie goes up */
  ck_assert_int_eq(proto__f64_to_f16(1.0 + 0x1p-11 + 0x1p-30, &h), 0);
  ck_assert_uint_eq(h, 0x3c01);
  /* subnormals: half of the smallest rounds to 0, 1.5 of it to 2 units */
  ck_assert_int_eq(proto__f64_to_f16(0x1p-25, &h), 0);
  ck_assert_uint_eq(h, 0x0000);
  ck_assert_int_eq(proto__f64_to_f16(3 * 0x1p-25, &h), 0);
  ck_assert_uint_eq(h, 0x0002);
  ck_assert_int_eq(proto__f64_to_f16(-0x1p-24 * 0.75, &h), 0);
  ck_assert_uint_eq(h, 0x8001);
  /* the largest subnormal rounds up into the smallest normal */
  ck_assert_int_eq(proto__f64_to_f16(0x1p-14 - 0x1p-26, &h), 0);
  ck_assert_uint_eq(h, 0x0400);
  /* overflow: 65504 + 16 is the tie to infinity (odd mantissa) */
  ck_assert_int_eq(proto__f64_to_f16(65519.99, &h), 0);
  ck_assert_uint_eq(h, 0x7bff);
  ck_assert_int_eq(proto__f64_to_f16(65520.0, &h), -1);
  ck_assert_int_eq(proto__f64_to_f16(1e6, &h), -1);
  ck_assert_int_eq(proto__f64_to_f16(NAN, &h), -1);
  ck_assert_int_eq(proto__f64_to_f16(-INFINITY, &h), -1);
}
END_TEST

START_TEST(bf16_rounds_and_widens) {
  uint16_t b;
  float f;
  ck_assert_int_eq(proto__bf16_to_f32(0x3f80, &f), 0);
  ck_assert(f == 1.0f);
  ck_assert_int_eq(proto__bf16_to_f32(0x0001, &f), 0);
  ck_assert(f == 0x1p-133f);
  ck_assert_int_eq(proto__bf16_to_f32(0x7f80, &f), -1);
  ck_assert_int_eq(proto__bf16_to_f32(0xffc0, &f), -1);
  /* ties: 1 + 2^-8 -> 1 (even); 1 + 3*2^-8 -> 1 + 2^-6 */
  ck_assert_int_eq(proto__f64_to_bf16(1.0 + 0x1p-8, &b), 0);
  ck_assert_uint_eq(b, 0x3f80);
  ck_assert_int_eq(proto__f64_to_bf16(1.0 + 3 * 0x1p-8, &b), 0);
  ck_assert_uint_eq(b, 0x3f82);
  ck_assert_int_eq(proto__f64_to_bf16(0x1p-134, &b), 0); /* tie -> 0 */
  ck_assert_uint_eq(b, 0x0000);
  ck_assert_int_eq(proto__f64_to_bf16(3 * 0x1p-134, &b), 0);
  ck_assert_uint_eq(b, 0x0002);
  /* the largest BF16 is (2 - 2^-7) * 2^127 ~ 3.3895e38; past the tie
   * with 2^128 (~3.3961e38) the rounding overflows */
  ck_assert_int_eq(proto__f64_to_bf16(3.39e38, &b), 0);
  ck_assert_uint_eq(b, 0x7f7f);
  ck_assert_int_eq(proto__f64_to_bf16(-3.4e38, &b), -1);
}
END_TEST

START_TEST(f64_to_f32_rounds_to_nearest_even) {
  float f;
  /* 1 + 2^-24 is the tie between 1 and 1 + 2^-23: even -> 1 */
  ck_assert_int_eq(proto__f64_to_f32(1.0 + 0x1p-24, &f), 0);
  ck_assert(f == 1.0f);
  ck_assert_int_eq(proto__f64_to_f32(1.0 + 3 * 0x1p-24, &f), 0);
  ck_assert(f == 1.0f + 0x1p-22f);
  /* subnormal tie: 2^-150 -> 0, 3 * 2^-150 -> 2^-148 */
  ck_assert_int_eq(proto__f64_to_f32(0x1p-150, &f), 0);
  ck_assert(f == 0.0f);
  ck_assert_int_eq(proto__f64_to_f32(3 * 0x1p-150, &f), 0);
  ck_assert(f == 0x1p-148f);
  ck_assert_int_eq(proto__f64_to_f32(FLT_MAX, &f), 0);
  ck_assert_int_eq(proto__f64_to_f32(0x1.fffffe8p127, &f), 0); /* < tie */
  ck_assert(f == FLT_MAX);
  ck_assert_int_eq(proto__f64_to_f32(0x1.ffffffp127, &f), -1); /* tie */
  ck_assert_int_eq(proto__f64_to_f32(1e300, &f), -1);
  ck_assert_int_eq(proto__f64_to_f32(NAN, &f), -1);
}
END_TEST

START_TEST(binary_converters_check_values) {
  float out[4];
  int32_t lens[3];
  uint8_t m[3];
  long long bad = 0;
  uint32_t f32[2] = {0x3f800000u, 0x7fc00000u}; /* 1, NaN */
  ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP32, f32, 2, out), 1);
  ck_assert(out[0] == 1.0f);
  double f64[2] = {0.1, -2.5};
  ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP64, f64, 2, out), 2);
  ck_assert(out[0] == 0.1f && out[1] == -2.5f);
  uint16_t bf[2] = {0x4040, 0x7f80}; /* 3, inf */
  ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_BF16, bf, 2, out), 1);
  ck_assert(out[0] == 3.0f);
  int64_t l64[3] = {0, 5, 6};
  ck_assert_uint_eq(proto__bin_to_len(PROTO__DT_INT64, l64, 3, 5, lens, &bad),
                    2);
  ck_assert_int_eq(bad, 6);
  int32_t l32[3] = {1, -1, 0};
  ck_assert_uint_eq(proto__bin_to_len(PROTO__DT_INT32, l32, 3, 5, lens, &bad),
                    1);
  ck_assert_int_eq(bad, -1);
  uint8_t b[3] = {1, 0, 2};
  ck_assert_uint_eq(proto__bin_to_bool(b, 3, m), 2);
  ck_assert_int_eq(proto__dtype_parse("BF16"), PROTO__DT_BF16);
  ck_assert_int_eq(proto__dtype_parse("fp32"), -1);
  ck_assert_uint_eq(proto__dtype_size(PROTO__DT_FP64), 8);
  ck_assert(bits_f32(0x3f800000u) == 1.0f);
}
END_TEST

/* The bulk converters work in blocks: a bad element anywhere (first,
 * block edges, the partial last block) is found at its index, and the
 * bulk FP16 path agrees with the scalar one on every finite half. */
START_TEST(bulk_converters_find_the_first_bad_element) {
  enum { N = 1000 };
  static const size_t at[] = {0, 255, 256, 511, 700, 999};
  float out[N];
  uint16_t h[N], b[N];
  uint32_t f[N];
  uint64_t d[N];
  for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
    for (size_t i = 0; i < N; i++) {
      h[i] = (uint16_t)(0x3c00 + i % 64);
      b[i] = (uint16_t)(0x3f80 + i % 64);
      f[i] = 0x3f800000u + (uint32_t)i;
      double x = 1.0 + (double)i / 1024;
      memcpy(&d[i], &x, 8);
    }
    h[at[k]] = 0x7c00;             /* FP16 +inf */
    b[at[k]] = 0xff81;             /* BF16 NaN */
    f[at[k]] = 0xff800000u;        /* FP32 -inf */
    double big = 1e39;             /* finite, past float32 */
    memcpy(&d[at[k]], &big, 8);
    ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP16, h, N, out), at[k]);
    ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_BF16, b, N, out), at[k]);
    ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP32, f, N, out), at[k]);
    ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP64, d, N, out), at[k]);
    if (at[k] > 0)
      ck_assert(out[at[k] - 1] == (float)(1.0 + (double)(at[k] - 1) / 1024));
  }
  static uint16_t all[65536];
  static float bulk[65536];
  size_t n = 0;
  for (uint32_t x = 0; x < 65536; x++)
    if (((x >> 10) & 0x1f) != 0x1f)
      all[n++] = (uint16_t)x;
  ck_assert_uint_eq(proto__bin_to_f32(PROTO__DT_FP16, all, n, bulk), n);
  for (size_t i = 0; i < n; i++) {
    float one;
    ck_assert_int_eq(proto__f16_to_f32(all[i], &one), 0);
    ck_assert_msg(!memcmp(&one, &bulk[i], 4), "half %04x", all[i]);
  }
}
END_TEST

START_TEST(word_check_finds_the_first_non_finite_word) {
  enum { N = 1000 };
  static const size_t at[] = {0, 1, 63, 64, 127, 128, 255, 256, 511, 700,
                              936, 999};
  static const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                 0x7f800001u, 0xffffffffu};
  static const int widths[] = {64, 32, 16};
  unsigned char buf[4 * N + 3];
  for (int w = 0; w < 3; w++) {
    for (size_t shift = 0; shift < 4; shift++) {
      uint32_t f[N];
      for (size_t i = 0; i < N; i++)  /* finite, exponents up to 254 */
        f[i] = (uint32_t)(i * 2654435761u) & 0xff7fffffu;
      memcpy(buf + shift, f, sizeof f);
      ck_assert_uint_eq(proto__f32_first_bad_width(buf + shift, N,
                                                   widths[w]), N);
      for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        uint32_t b = bad[k % (sizeof bad / sizeof bad[0])];
        memcpy(buf + shift + 4 * at[k], &b, 4);
        ck_assert_msg(proto__f32_first_bad_width(buf + shift, N, widths[w]) ==
                      at[0], "width %d shift %zu bad at %zu", widths[w], shift,
                      at[k]);
        /* the later ones, from just past the first */
        if (k > 0)
          ck_assert_uint_eq(proto__f32_first_bad_width(
                                buf + shift + 4 * (at[k - 1] + 1),
                                N - at[k - 1] - 1, widths[w]),
                            at[k] - at[k - 1] - 1);
      }
    }
  }
}
END_TEST

/* ---- JSON requests ---------------------------------------------------------- */

START_TEST(json_request_decodes) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  body_json(&b, "{\"id\":\"r1\",\"model_name\":\"attention\",\"parameters\":"
                "{\"causal\":\"lower_right\",\"scale\":0.5,\"timeout\":7000"
                "},\"model_version\":\"1\",\"inputs\":[" IN_Q "," IN_K "," IN_V
                ",{\"name\":\"valid_lens\",\"datatype\":\"INT64\",\"shape\":"
                "[1],\"data\":[2]}]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.codec, PROTO_CODEC_V2);
  ck_assert_int_eq(r.prob.B, 1);
  ck_assert_int_eq(r.prob.Lq, 2);
  ck_assert_int_eq(r.prob.Lk, 3);
  ck_assert_int_eq(r.prob.causal, ATTN_CAUSAL_LOWER_RIGHT);
  ck_assert(r.prob.scale == 0.5f);
  ck_assert_uint_eq(r.timeout_us, 7000);
  ck_assert_int_eq(r.prob.valid_lens[0], 2);
  ck_assert(r.prob.k[2] == 2.0f && r.prob.q[3] == 2.0f);
  ck_assert_str_eq(r.id_json, "\"r1\"");
  ck_assert_int_eq(r.n_outputs, 2);
  ck_assert_int_eq(r.return_weights, 1);
  ck_assert_int_eq(r.binary[0] | r.binary[1], 0);
  proto_request_free(&r);
}
END_TEST

START_TEST(json_fp16_values_are_rounded_to_fp16) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP16\","
                "\"shape\":[1,1,2],\"data\":[0.1,1.00048828125]}," IN_K ","
                IN_V "],\"outputs\":[{\"name\":\"output\"}]}");
  /* key has width 2: query must too */
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert(r.prob.q[0] == 0x1.998p-4f);  /* 0.1 on the FP16 grid */
  ck_assert(r.prob.q[1] == 1.0f);         /* tie to even */
  ck_assert_int_eq(r.return_weights, 0);
  ck_assert_ptr_null(r.weights);
  proto_request_free(&r);
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP16\","
                "\"shape\":[1,1,2],\"data\":[1,70000]}," IN_K "," IN_V "]}");
  BAD(&b, NULL, "query[0][0][1]", "out of FP16 range");
}
END_TEST

START_TEST(json_errors_name_the_input) {
  body b;
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "]}");
  BAD(&b, NULL, "value: required input is missing");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"w_q\","
                "\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]}]}");
  BAD(&b, NULL, "inputs[3]", "no input 'w_q'");
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP8\","
                "\"shape\":[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}");
  BAD(&b, NULL, "query: unknown datatype 'FP8'");
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"INT32\","
                "\"shape\":[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}");
  BAD(&b, NULL, "query: datatype INT32 is not supported");
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
                "\"shape\":[1,2,2],\"data\":[1,0,0]}," IN_K "," IN_V "]}");
  BAD(&b, NULL, "query: \"data\" has 3 elements, shape [1,2,2] needs 4");
  body_json(&b, "{\"parameters\":{\"causal\":\"sideways\"},\"inputs\":["
                IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.causal: unknown value \"sideways\"");
  body_json(&b, "{\"parameters\":{\"timeout\":-1},\"inputs\":[" IN_Q ","
                IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.timeout");
  body_json(&b, "{\"parameters\":{\"dropout_p\":1},\"inputs\":[" IN_Q ","
                IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.dropout_p");
  body_json(&b, "{\"outputs\":[{\"name\":\"scores\"}],\"inputs\":[" IN_Q ","
                IN_K "," IN_V "]}");
  BAD(&b, NULL, "outputs[0]: unknown output 'scores'");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "inputs[1]: input 'query' given twice");
  body_json(&b, "{\"inputs\":[" IN_Q ",{\"name\":\"key\",\"datatype\":"
                "\"FP32\",\"shape\":[1,3,3],\"data\":[1,2,3,4,5,6,7,8,9]},"
                IN_V "]}");
  BAD(&b, NULL, "key: width 3 does not match query width 2");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"mask\","
                "\"datatype\":\"BOOL\",\"shape\":[1,2,2],\"data\":[true,true,"
                "false,false]}]}");
  BAD(&b, NULL, "mask: shape [1,2,2] does not broadcast to [1,2,3]");
  body_json(&b, "{\"inputs\":[" IN_Q ",{\"name\":\"key\",\"datatype\":"
                "\"FP32\",\"shape\":[1,3,2],\"data\":[1,2,3,4,5,1e39]}," IN_V
                "]}");
  BAD(&b, NULL, "key[0][2][1]", "out of float32 range");
  body_json(&b, "{\"id\":7,\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "id: expected a string");
  body_json(&b, "[1]");
  BAD(&b, NULL, "body must be a JSON object");
}
END_TEST

/* cJSON takes the first of two equal keys, a loop over members the last:
 * every field attnd reads is refused when given twice, at every level. */
START_TEST(fields_given_twice_are_refused_at_every_level) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"inputs\":[{\"name\":\"query\",\"name\":\"key\",\"datatype\":"
     "\"FP32\",\"shape\":[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}",
     "inputs[0]: duplicate field 'name'"},
    {"{\"inputs\":[" IN_Q ",{\"name\":\"key\",\"datatype\":\"FP32\","
     "\"shape\":[1,3,2],\"shape\":[1,2,3],\"data\":[1,2,3,4,5,6]}," IN_V "]}",
     "inputs[1]: duplicate field 'shape'"},
    {"{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\",\"datatype\":"
     "\"FP32\",\"datatype\":\"FP16\",\"shape\":[1,3,2],"
     "\"data\":[1,2,3,4,5,6]}]}",
     "inputs[2]: duplicate field 'datatype'"},
    {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
     "\"shape\":[1,2,2],\"data\":[1,0,0,2],\"data\":[0,0,0,0]}," IN_K ","
     IN_V "]}",
     "inputs[0]: duplicate field 'data'"},
    {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
     "\"shape\":[1,2,2],\"data\":[1,0,0,2],\"parameters\":{},"
     "\"parameters\":{}}," IN_K "," IN_V "]}",
     "inputs[0]: duplicate field 'parameters'"},
    {"{\"parameters\":{\"scale\":0.0001,\"scale\":100},\"inputs\":["
     IN_Q "," IN_K "," IN_V "]}",
     "parameters: duplicate field 'scale'"},
    {"{\"parameters\":{\"causal\":true,\"causal\":false},\"inputs\":["
     IN_Q "," IN_K "," IN_V "]}",
     "parameters: duplicate field 'causal'"},
    {"{\"outputs\":[{\"name\":\"output\",\"name\":\"weights\"}],"
     "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}",
     "outputs[0]: duplicate field 'name'"},
    {"{\"outputs\":[{\"name\":\"output\"},{\"name\":\"weights\","
     "\"parameters\":{\"binary_data\":true,\"binary_data\":false}}],"
     "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}",
     "outputs[1].parameters: duplicate field 'binary_data'"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want);
  }
  /* a name attnd does not know is refused before it could repeat */
  body_json(&b, "{\"parameters\":{\"x-trace\":1,\"x-trace\":2},"
                "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.x-trace: unknown parameter");
}
END_TEST

/* Triton extensions attnd does not serve are refused by name, not
 * ignored: the answer would not be what was asked for. */
START_TEST(extensions_attnd_lacks_are_refused) {
  body b;
  body_json(&b, "{\"outputs\":[{\"name\":\"output\",\"parameters\":"
                "{\"classification\":2}}],\"inputs\":[" IN_Q "," IN_K ","
                IN_V "]}");
  BAD(&b, NULL, "outputs[0].parameters.classification: not supported",
      "system_shared_memory");
}
END_TEST

/* Shared memory parameters decode without any region registered (the
 * plain decoder has none): the region is unknown, 404 with Triton's
 * words, and the request holds nothing. */
START_TEST(shm_regions_unknown_without_a_registry) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"outputs\":[{\"name\":\"output\"},{\"name\":\"weights\","
     "\"parameters\":{\"shared_memory_region\":\"r\","
     "\"shared_memory_byte_size\":24}}],\"inputs\":[" IN_Q "," IN_K ","
     IN_V "]}",
     "outputs[1]: Unable to find shared memory region: 'r'"},
    {"{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\",\"datatype\":"
     "\"FP32\",\"shape\":[1,3,2],\"parameters\":{\"shared_memory_region\":"
     "\"r\",\"shared_memory_byte_size\":24}}]}",
     "value: Unable to find shared memory region: 'r'"},
  };
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    ck_assert_int_eq(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err),
                     ATTND_ENOTFOUND);
    ck_assert_int_eq(r.n_owned, 0);
    ck_assert_msg(strstr(err, cases[i].want), "%s", err);
  }
  /* the type and exclusivity rules come first, as in Triton */
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\","
                "\"datatype\":\"FP32\",\"shape\":[1,3,2],\"data\":[1,0,0,"
                "1,1,1],\"parameters\":{\"shared_memory_region\":\"r\"}}]}");
  BAD(&b, NULL, "value: Input must set only one of the following fields: "
      "'data', 'binary_data_size' in 'parameters', 'shared_memory_region' "
      "in 'parameters'. But set 'data' 'shared_memory_region'");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\","
                "\"datatype\":\"FP32\",\"shape\":[1,3,2],\"parameters\":"
                "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":"
                "-24}}]}");
  BAD(&b, NULL, "value: Unable to parse 'shared_memory_byte_size'");
  body_json(&b, "{\"outputs\":[{\"name\":\"output\",\"parameters\":"
                "{\"shared_memory_region\":\"r\",\"binary_data\":true}}],"
                "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "outputs[0]: Output can't set both 'shared_memory_region' "
      "and 'binary_data'");
}
END_TEST

/* A name attnd does not know is refused at every level, with the
 * nearest known one and the list of the names served there; an ignored
 * {"causl": true} would have answered with non-causal weights. */
START_TEST(unknown_names_are_refused_with_the_nearest_known_one) {
#define QKV "\"inputs\":[" IN_Q "," IN_K "," IN_V "]"
  static const struct { const char *json, *want; } cases[] = {
    {"{\"parameters\":{\"causl\":true}," QKV "}",
     "parameters.causl: unknown parameter (did you mean 'causal'? request "
     "parameters: causal, scale, dropout_p, seed, window_left, "
     "window_right, timeout, binary_data_output, softcap, window_align, "
     "precision)"},
    {"{\"parameters\":{\"windowleft\":1}," QKV "}",
     "parameters.windowleft: unknown parameter (did you mean "
     "'window_left'?"},
    {"{\"parameters\":{\"priorty\":1}," QKV "}",
     "parameters.priorty: unknown parameter (did you mean 'priority'?"},
    {"{\"parameters\":{\"temperature\":1}," QKV "}",
     "parameters.temperature: unknown parameter (request parameters: "
     "causal,"},
    {"{" QKV ",\"outputs\":[{\"name\":\"output\",\"parameters\":"
     "{\"binary_dat\":true}}]}",
     "outputs[0].parameters.binary_dat: unknown parameter (did you mean "
     "'binary_data'? output parameters: binary_data, shared_memory_region, "
     "shared_memory_byte_size, shared_memory_offset)"},
    {"{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\",\"datatype\":"
     "\"FP32\",\"shape\":[1,3,2],\"data\":[1,0,0,1,1,1],\"parameters\":"
     "{\"binary_data_sise\":24}}]}",
     "inputs[2].parameters.binary_data_sise: unknown parameter (did you "
     "mean 'binary_data_size'? input parameters: binary_data_size, "
     "shared_memory_region, shared_memory_byte_size, "
     "shared_memory_offset)"},
    /* fields of the request, an input and an output */
    {"{\"paramters\":{\"causal\":true}," QKV "}",
     "unknown field 'paramters' (did you mean 'parameters'? request "
     "fields: id, parameters, inputs, outputs, model_name, model_version)"},
    {"{" QKV ",\"output\":[{\"name\":\"output\"}]}",
     "unknown field 'output' (did you mean 'outputs'?"},
    {"{\"inputs\":[" IN_Q "," IN_K ",{\"name\":\"value\",\"datatype\":"
     "\"FP32\",\"shape\":[1,3,2],\"dat\":[1,0,0,1,1,1]}]}",
     "inputs[2]: unknown field 'dat' (did you mean 'data'? input fields: "
     "name, shape, datatype, parameters, data)"},
    {"{" QKV ",\"outputs\":[{\"name\":\"output\",\"paramters\":"
     "{\"binary_data\":true}}]}",
     "outputs[0]: unknown field 'paramters' (did you mean 'parameters'? "
     "output fields: name, parameters)"},
    /* datatypes: the ones the input takes */
    {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"fp32\","
     "\"shape\":[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}",
     "query: unknown datatype 'fp32' (did you mean 'FP32'? query takes: "
     "FP32, FP64, FP16, BF16)"},
    {"{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"valid_lens\","
     "\"datatype\":\"INT23\",\"shape\":[1],\"data\":[2]}]}",
     "valid_lens: unknown datatype 'INT23' (did you mean 'INT32'? "
     "valid_lens takes: INT32, INT64)"},
    {"{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"mask\","
     "\"datatype\":\"BOOLEAN\",\"shape\":[3],\"data\":[1,1,1]}]}",
     "mask: unknown datatype 'BOOLEAN' (mask takes: BOOL)"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want);
  }
}
END_TEST

/* Triton's own parameters for extensions attnd does not serve: refused
 * by name, since what they ask for would not happen. */
START_TEST(triton_parameters_attnd_lacks_are_not_supported) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"parameters\":{\"sequence_id\":7,\"sequence_start\":true,"
     "\"sequence_end\":false}," QKV "}",
     "parameters.sequence_id: not supported (Triton's sequence batching; "
     "attnd serves the binary_tensor_data, parameters, model_configuration, "
     "statistics and system_shared_memory extensions)"},
    {"{\"parameters\":{\"sequence_start\":true}," QKV "}",
     "parameters.sequence_start: not supported"},
    {"{\"parameters\":{\"sequence_end\":true}," QKV "}",
     "parameters.sequence_end: not supported"},
    {"{\"parameters\":{\"timeout\":100000000,\"priority\":1}," QKV "}",
     "parameters.priority: not supported (Triton's priority levels;"},
    {"{\"parameters\":{\"headers\":{\"x\":\"y\"}}," QKV "}",
     "parameters.headers: not supported"},
    {"{\"parameters\":{\"triton_enable_empty_final_response\":true},"
     QKV "}",
     "parameters.triton_enable_empty_final_response: not supported (names "
     "starting triton_ are reserved by Triton;"},
    {"{" QKV ",\"outputs\":[{\"name\":\"output\",\"parameters\":"
     "{\"binary_data\":true,\"classification\":3}}]}",
     "outputs[0].parameters.classification: not supported (Triton's "
     "classification;"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want);
  }
}
END_TEST

/* What tritonclient.http and Triton's C++ client (perf_analyzer) put in a
 * request decodes: the empty id the C++ client always sends, timeout and
 * binary_data_output, binary_data on every output, binary_data_size on
 * inputs, and the model_name of Triton's own examples. */
START_TEST(what_triton_clients_send_is_accepted) {
  static const char *const bodies[] = {
    "{\"id\":\"\",\"parameters\":{\"timeout\":60000000,"
    "\"binary_data_output\":true}," QKV "}",
    "{\"id\":\"7\",\"model_name\":\"attention\",\"model_version\":\"1\","
    "\"parameters\":{\"timeout\":5}," QKV ",\"outputs\":[{\"name\":"
    "\"output\",\"parameters\":{\"binary_data\":false}},{\"name\":"
    "\"weights\",\"parameters\":{\"binary_data\":true}}]}",
    "{\"inputs\":[" IN_Q "," IN_K "," IN_V "],\"outputs\":[{\"name\":"
    "\"output\",\"parameters\":{}}],\"parameters\":{}}",
  };
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    body_json(&b, bodies[i]);
    ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0,
                  "body %zu: %s", i, err);
    proto_request_free(&r);
  }
  /* binary inputs as the clients send them */
  static const float q[4] = {1, 0, 0, 2}, kv[6] = {1, 1, 2, 0, 0, 3};
  body_json(&b, "{\"id\":\"\",\"parameters\":{\"binary_data_output\":"
                "true},\"inputs\":[{\"name\":\"query\",\"datatype\":"
                "\"FP32\",\"shape\":[1,2,2],\"parameters\":{"
                "\"binary_data_size\":16}},{\"name\":\"key\",\"datatype\":"
                "\"FP32\",\"shape\":[1,3,2],\"parameters\":{"
                "\"binary_data_size\":24}},{\"name\":\"value\",\"datatype\":"
                "\"FP32\",\"shape\":[1,3,2],\"parameters\":{"
                "\"binary_data_size\":24}}]}");
  body_add(&b, q, sizeof q);
  body_add(&b, kv, sizeof kv);
  body_add(&b, kv, sizeof kv);
  ck_assert_msg(dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
                err);
  ck_assert_int_eq(r.binary[PROTO_OUT_OUTPUT], 1);
  proto_request_free(&r);
#undef QKV
}
END_TEST

/* NaN and infinities as Python's json.dumps writes them: named by input
 * (wherever its "name" is) and index, flat or nested as sent. */
START_TEST(non_finite_literals_name_the_input_and_index) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":"
     "[1,2,2],\"data\":[1,0,NaN,2]}," IN_K "," IN_V "]}",
     "query.data[2]: NaN is not a JSON number; attnd needs finite values"},
    {"{\"inputs\":[" IN_Q ",{\"datatype\":\"FP16\",\"shape\":[1,3,2],"
     "\"data\":[[[1,1],[2,-Infinity],[0,3]]],\"name\":\"key\"}," IN_V "]}",
     "key.data[0][1][1]: -Infinity is not a JSON number"},
    {"{\"inputs\":[" IN_Q "," IN_K ",{\"datatype\":\"FP32\",\"shape\":"
     "[1,3,2],\"data\":[1,0,0,1,1,Infinity]}]}",
     "inputs[2].data[5]: Infinity is not a JSON number"},
    {"{\"parameters\":{\"scale\":NaN},\"inputs\":[" IN_Q "," IN_K ","
     IN_V "]}", "parameters.scale: NaN is not a JSON number"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want);
    /* the same in the JSON part of a binary request */
    BAD(&b, b.hlen, cases[i].want);
  }
}
END_TEST

/* A body of NUL bytes is not an empty body (strchr finds the NUL of its
 * own string), and NULs after the JSON part are not blanks. */
START_TEST(nul_bytes_are_pointed_at) {
  body b;
  memset(b.buf, 0, 64);
  b.len = 64;
  BAD(&b, NULL, "body is not valid JSON: byte 0 is a NUL (0x00)");
  BAD(&b, "16", "body is not valid JSON: byte 0 of the inference header "
      "is a NUL");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  body_add(&b, "\0\0", 2);
  BAD(&b, NULL, "unexpected data after the JSON object at byte");
}
END_TEST

START_TEST(additive_model_needs_its_weights) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_int_eq(dec(&b, NULL, PROTO_MODEL_ADDITIVE, &r, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "w_q: required input is missing"));
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"w_q\","
                "\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[1,2,3,4,5,6]},"
                "{\"name\":\"w_k\",\"datatype\":\"BF16\",\"shape\":[3,2],"
                "\"data\":[1,2,3,4,5,6]},{\"name\":\"w_v\",\"datatype\":"
                "\"FP64\",\"shape\":[3],\"data\":[1,2,3]}]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ADDITIVE, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.scoring, ATTN_SCORING_ADDITIVE);
  ck_assert_int_eq(r.prob.Hd, 3);
  ck_assert(r.prob.w_v[2] == 3.0f);
  proto_request_free(&r);
}
END_TEST

/* ---- binary requests ----------------------------------------------------------- */

/* A binary request: query (1,1,2) FP16, key (1,2,2) FP32 and value
 * (1,2,1) FP64 as binary, mask (1,1,2) BOOL binary. */
#define BIN_JSON(qsz) \
  "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP16\",\"shape\":[1,1,2]," \
  "\"parameters\":{\"binary_data_size\":" qsz "}},{\"name\":\"key\"," \
  "\"datatype\":\"FP32\",\"shape\":[1,2,2],\"parameters\":{" \
  "\"binary_data_size\":16}},{\"name\":\"value\",\"datatype\":\"FP64\"," \
  "\"shape\":[1,2,1],\"parameters\":{\"binary_data_size\":16}},{\"name\":" \
  "\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,1,2],\"parameters\":{" \
  "\"binary_data_size\":2}}],\"outputs\":[{\"name\":\"weights\"," \
  "\"parameters\":{\"binary_data\":true}},{\"name\":\"output\"}]}"

static void bin_tensors(body *b) {
  uint16_t q[2] = {0x3c00, 0xc000};              /* 1, -2 */
  float k[4] = {1, 0, 0, 1};
  double v[2] = {0.25, 0.75};
  uint8_t m[2] = {1, 1};
  body_add(b, q, 4);
  body_add(b, k, 16);
  body_add(b, v, 16);
  body_add(b, m, 2);
}

START_TEST(binary_request_decodes_and_encodes) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX], *out;
  size_t len, jlen;
  body_json(&b, BIN_JSON("4"));
  bin_tensors(&b);
  ck_assert_msg(dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
                err);
  ck_assert(r.prob.q[0] == 1.0f && r.prob.q[1] == -2.0f);
  ck_assert(r.prob.v[1] == 0.75f);
  ck_assert_int_eq(r.prob.mask[1], 1);
  ck_assert_int_eq(r.n_outputs, 2);
  ck_assert_int_eq(r.outputs[0], PROTO_OUT_WEIGHTS);
  ck_assert_int_eq(r.binary[PROTO_OUT_WEIGHTS], 1);
  ck_assert_int_eq(r.binary[PROTO_OUT_OUTPUT], 0);
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.weights), 0);
  ck_assert_int_eq(proto_encode(&r, &out, &len, &jlen), 0);
  ck_assert_uint_eq(len, jlen + 2 * sizeof(float));
  cJSON *j = cJSON_ParseWithLength(out, jlen);
  ck_assert_ptr_nonnull(j);
  cJSON *o = cJSON_GetObjectItem(j, "outputs");
  ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "name")
                       ->valuestring, "weights");
  cJSON *p0 = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "parameters");
  ck_assert_int_eq(cJSON_GetObjectItem(p0, "binary_data_size")->valueint, 8);
  ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "data"));
  cJSON *d1 = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 1), "data");
  ck_assert_int_eq(cJSON_GetArraySize(d1), 1);
  ck_assert(fabs(cJSON_GetArrayItem(d1, 0)->valuedouble - r.out[0]) < 1e-6);
  float w[2];
  memcpy(w, out + jlen, sizeof w);
  ck_assert(w[0] == r.weights[0] && w[1] == r.weights[1]);
  ck_assert(fabsf(w[0] + w[1] - 1.0f) < 1e-6f);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "model_name")->valuestring,
                   "attention");
  ck_assert_str_eq(cJSON_GetObjectItem(j, "model_version")->valuestring,
                   "1");
  cJSON_Delete(j);
  free(out);
  proto_request_free(&r);
}
END_TEST

START_TEST(binary_layout_errors) {
  body b;
  char big[32];
  /* a byte count that does not match shape x datatype size */
  body_json(&b, BIN_JSON("6"));
  bin_tensors(&b);
  BAD(&b, b.hlen, "query: binary_data_size is 6 bytes, shape [1,1,2] of "
                  "FP16 needs 4");
  /* header longer than the body */
  body_json(&b, BIN_JSON("4"));
  bin_tensors(&b);
  snprintf(big, sizeof big, "%zu", b.len + 1);
  BAD(&b, big, "Inference-Header-Content-Length", "exceeds the body length");
  BAD(&b, "12x", "Inference-Header-Content-Length: '12x' is not a byte "
                 "count");
  BAD(&b, "-5", "is not a byte count");
  BAD(&b, "0", "raw binary body");
  /* a header shorter than the JSON: not JSON any more */
  snprintf(big, sizeof big, "%zu", strlen(BIN_JSON("4")) - 1);
  BAD(&b, big, "not valid JSON");
  /* body one byte short: the last input runs past the end */
  b.len--;
  BAD(&b, b.hlen, "mask: binary_data_size 2 runs past the end of the body");
  /* extra bytes after the binary inputs */
  b.len += 4;
  BAD(&b, b.hlen, "body has 3 bytes after the binary inputs");
  /* binary data without the header */
  b.len -= 3;
  BAD(&b, NULL, "unexpected data after the JSON object",
      "Inference-Header-Content-Length");
  body_json(&b, BIN_JSON("4"));
  BAD(&b, NULL, "query: binary_data_size given but the request has no "
                "Inference-Header-Content-Length");
}
END_TEST

START_TEST(binary_value_errors) {
  body b;
  /* FP16 infinity in query[0][0][1] */
  body_json(&b, BIN_JSON("4"));
  bin_tensors(&b);
  b.buf[b.len - 38 + 2] = 0x00;
  b.buf[b.len - 38 + 3] = (char)0x7c;
  BAD(&b, b.hlen, "query[0][0][1]: FP16 value is not finite");
  /* a BOOL byte of 2 */
  body_json(&b, BIN_JSON("4"));
  bin_tensors(&b);
  b.buf[b.len - 1] = 2;
  BAD(&b, b.hlen, "mask[0][0][1]: BOOL byte 2 is neither 0 nor 1");
  /* FP64 NaN in value[0][1][0] */
  body_json(&b, BIN_JSON("4"));
  bin_tensors(&b);
  double nan = NAN;
  memcpy(b.buf + b.len - 10, &nan, 8);
  BAD(&b, b.hlen, "value[0][1][0]: FP64 value is not finite");
  /* both data and binary_data_size */
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
                "\"shape\":[1,1,1],\"data\":[1],\"parameters\":{"
                "\"binary_data_size\":4}}]}");
  body_add(&b, "\0\0\0\0", 4);
  BAD(&b, b.hlen, "query: has both \"data\" and parameters.binary_data_size");
}
END_TEST

START_TEST(binary_lengths_int32_and_int64) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  int64_t vl[1] = {1};
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":"
                "\"valid_lens\",\"datatype\":\"INT64\",\"shape\":[1],"
                "\"parameters\":{\"binary_data_size\":8}}]}");
  body_add(&b, vl, 8);
  ck_assert_msg(dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
                err);
  ck_assert_int_eq(r.prob.valid_lens[0], 1);
  proto_request_free(&r);
  int32_t bad[1] = {4};
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":"
                "\"valid_lens\",\"datatype\":\"INT32\",\"shape\":[1],"
                "\"parameters\":{\"binary_data_size\":4}}]}");
  body_add(&b, bad, 4);
  BAD(&b, b.hlen, "valid_lens[0]=4 exceeds key length");
}
END_TEST

/* Random byte flips, truncations and header lengths over a valid binary
 * body: the decoder answers 0 (and then a problem the core accepts) or
 * ATTND_EINVAL with a message, never anything else, never a crash (and
 * nothing leaked under valgrind). */
START_TEST(mutated_bodies_are_refused_cleanly) {
  body good, b;
  unsigned seed = 12345;
  int accepted = 0;
  body_json(&good, BIN_JSON("4"));
  bin_tensors(&good);
  for (int it = 0; it < 3000; it++) {
    proto_request r;
    char err[PROTO_ERR_MAX], hl[32];
    b = good;
    int flips = 1 + (int)(rand_r(&seed) % 4);
    for (int f = 0; f < flips; f++)
      b.buf[rand_r(&seed) % b.len] = (char)(rand_r(&seed) & 0xff);
    if (rand_r(&seed) % 8 == 0)
      b.len = rand_r(&seed) % b.len;
    snprintf(hl, sizeof hl, "%d", (int)strlen(BIN_JSON("4")) +
             (int)(rand_r(&seed) % 5) - 2);
    int rc = dec(&b, rand_r(&seed) % 16 ? hl : NULL, PROTO_MODEL_ATTENTION,
                 &r, err);
    ck_assert_msg(rc == 0 || rc == ATTND_EINVAL, "rc %d", rc);
    if (rc == 0) {
      ck_assert_int_eq(attn_check(&r.prob), 0);
      accepted++;
    } else {
      ck_assert_msg(err[0], "an error without a message");
    }
    proto_request_free(&r);
  }
  /* flips in tensor bytes often leave a valid request: both paths ran */
  ck_assert_int_gt(accepted, 0);
}
END_TEST

START_TEST(budget_applies_to_v2) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_int_eq(proto_v2_decode(b.buf, b.len, NULL, 0, &r, 20, err),
                   ATTND_ETOOBIG);
  ck_assert_int_eq(r.n_owned, 0);
}
END_TEST

/* ---- bodies as received (proto_body) ------------------------------------------ */

/* A v2 binary body built input by input: the JSON part in json, the
 * binary part in bin (each input's bytes appended as it is listed). */
typedef struct rbody {
  char json[2048], *bytes;
  size_t jlen, blen, len;
  char bin[8192], hlen[32];
} rbody;

static void rb_start(rbody *b) {
  memset(b, 0, sizeof *b);
  b->jlen = (size_t)snprintf(b->json, sizeof b->json, "{\"inputs\":[");
}

static void rb_input(rbody *b, const char *name, const char *dtype,
                     const char *shape, const void *data, size_t bytes) {
  b->jlen += (size_t)snprintf(
      b->json + b->jlen, sizeof b->json - b->jlen,
      "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":%s,"
      "\"parameters\":{\"binary_data_size\":%zu}}",
      b->json[b->jlen - 1] == '[' ? "" : ",", name, dtype, shape, bytes);
  ck_assert_uint_le(b->blen + bytes, sizeof b->bin);
  memcpy(b->bin + b->blen, data, bytes);
  b->blen += bytes;
}

/* Closes the JSON part and joins both parts into b->bytes (malloc'd). */
static void rb_finish(rbody *b) {
  b->jlen += (size_t)snprintf(b->json + b->jlen, sizeof b->json - b->jlen,
                              "],\"outputs\":[{\"name\":\"output\"},"
                              "{\"name\":\"weights\"}]}");
  b->len = b->jlen + b->blen;
  b->bytes = malloc(b->len);
  ck_assert_ptr_nonnull(b->bytes);
  memcpy(b->bytes, b->json, b->jlen);
  memcpy(b->bytes + b->jlen, b->bin, b->blen);
  snprintf(b->hlen, sizeof b->hlen, "%zu", b->jlen);
}

/* FP32 values that are not all alike: x_i = (i * 37 mod 101 - 50) / 16. */
static void rb_floats(float *x, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((int)((i * 37 + (size_t)seed) % 101) - 50) / 16.0f;
}

/* Query (1,2,5,8), key (1,2,7,8) and value (1,2,7,3) as FP32. */
enum { RB_Q = 80, RB_K = 112, RB_V = 42 };
static float rb_q[RB_Q], rb_k[RB_K], rb_v[RB_V];

static void rb_qkv(rbody *b) {
  rb_floats(rb_q, RB_Q, 1);
  rb_floats(rb_k, RB_K, 2);
  rb_floats(rb_v, RB_V, 3);
  rb_input(b, "query", "FP32", "[1,2,5,8]", rb_q, sizeof rb_q);
  rb_input(b, "key", "FP32", "[1,2,7,8]", rb_k, sizeof rb_k);
  rb_input(b, "value", "FP32", "[1,2,7,3]", rb_v, sizeof rb_v);
}

/* Receives the body the way the server does: Content-Length `expect`
 * (0: unknown, so the buffer grows), the header value init_hlen as the
 * first call sees it, then chunks of `step` bytes. */
static void rb_receive(proto_body *pb, const rbody *b, size_t expect,
                       const char *init_hlen, size_t step) {
  ck_assert_int_eq(proto_body_init(pb, expect, init_hlen), 0);
  for (size_t i = 0; i < b->len; i += step)
    ck_assert_int_eq(proto_body_append(pb, b->bytes + i,
                                       b->len - i < step ? b->len - i : step),
                     0);
  ck_assert_uint_eq(pb->len, b->len);
  ck_assert(memcmp(pb->p, b->bytes, b->len) == 0);
}

static int rb_inside(const void *x, const char *p, size_t len) {
  return (const char *)x >= p && (const char *)x < p + len;
}

/* The request decoded from the received body computes exactly what the
 * copying decode of the same bytes computes. */
static void rb_same_answer(proto_request *a, proto_request *c) {
  const attn_problem *p = &a->prob;
  size_t nq = (size_t)p->B * p->H * p->Lq * p->D;
  size_t nk = (size_t)p->B * p->Hkv * p->Lk * p->Dk;
  size_t nv = (size_t)p->B * p->Hkv * p->Lk * p->Dv;
  size_t no = (size_t)p->B * p->H * p->Lq * p->Dv;
  size_t nw = (size_t)p->B * p->H * p->Lq * p->Lk;
  ck_assert(!memcmp(p->q, c->prob.q, nq * 4));
  ck_assert(!memcmp(p->k, c->prob.k, nk * 4));
  ck_assert(!memcmp(p->v, c->prob.v, nv * 4));
  ck_assert_int_eq(attn_forward(&a->prob, a->out, a->weights), 0);
  ck_assert_int_eq(attn_forward(&c->prob, c->out, c->weights), 0);
  ck_assert(!memcmp(a->out, c->out, no * 4));
  ck_assert(!memcmp(a->weights, c->weights, nw * 4));
}

START_TEST(received_body_lends_fp32_inputs_in_place) {
  static const size_t steps[] = {1, 3, 4, 7, 64, 1000, 1 << 20};
  rbody b;
  rb_start(&b);
  rb_qkv(&b);
  rb_finish(&b);
  long live = mem_live();
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    for (int known = 0; known < 2; known++) {
      proto_body pb;
      proto_request r, c;
      char err[PROTO_ERR_MAX];
      rb_receive(&pb, &b, known ? b.len : 0, b.hlen, steps[s]);
      const char *p = pb.p;
      if (known)  /* the binary part starts on a 64-byte boundary */
        ck_assert_uint_eq((uintptr_t)(p + b.jlen) % 64, 0);
      ck_assert_msg(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION,
                                         &r, 0, err) == 0, "%s", err);
      ck_assert_ptr_eq(r.prob.q, (const float *)(p + b.jlen));
      ck_assert_ptr_eq(r.prob.k, (const float *)(p + b.jlen + sizeof rb_q));
      ck_assert_ptr_eq(r.prob.v, (const float *)(p + b.jlen + sizeof rb_q +
                                                 sizeof rb_k));
      ck_assert_ptr_null(pb.base);  /* the request owns the body now */
      ck_assert_uint_eq(r.in_bytes, sizeof rb_q + sizeof rb_k + sizeof rb_v);
      ck_assert_int_eq(proto_v2_decode(b.bytes, b.len, b.hlen,
                                       PROTO_MODEL_ATTENTION, &c, 0, err), 0);
      ck_assert(!rb_inside(c.prob.q, b.bytes, b.len));
      rb_same_answer(&r, &c);
      proto_request_free(&r);
      proto_request_free(&c);
      proto_body_free(&pb);
      ck_assert_int_eq(mem_live(), live);
    }
  }
  free(b.bytes);
}
END_TEST

static uint16_t bf16_bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}

/* precision "bf16" with query, key and value sent as BF16: the core gets
 * their BF16 bits as sent (in the received body itself, or one BF16 copy
 * when the body is copied), no float32 copy; the same answer either way,
 * and the same as float32 inputs of the same values in BF16 mode. */
START_TEST(bf16_inputs_in_bf16_mode_are_used_as_sent) {
  static uint16_t q16[RB_Q], k16[RB_K], v16[RB_V];
  rbody b;
  rb_start(&b);
  b.jlen = (size_t)snprintf(b.json, sizeof b.json,
                            "{\"parameters\":{\"precision\":\"bf16\"},"
                            "\"inputs\":[");
  rb_floats(rb_q, RB_Q, 1);
  rb_floats(rb_k, RB_K, 2);
  rb_floats(rb_v, RB_V, 3);
  for (int i = 0; i < RB_Q; i++) q16[i] = bf16_bits_of(rb_q[i]);
  for (int i = 0; i < RB_K; i++) k16[i] = bf16_bits_of(rb_k[i]);
  for (int i = 0; i < RB_V; i++) v16[i] = bf16_bits_of(rb_v[i]);
  rb_input(&b, "query", "BF16", "[1,2,5,8]", q16, sizeof q16);
  rb_input(&b, "key", "BF16", "[1,2,7,8]", k16, sizeof k16);
  rb_input(&b, "value", "BF16", "[1,2,7,3]", v16, sizeof v16);
  rb_finish(&b);
  proto_body pb;
  proto_request r, c;
  char err[PROTO_ERR_MAX];
  rb_receive(&pb, &b, b.len, b.hlen, 100);
  const char *p = pb.p;
  ck_assert_msg(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION, &r,
                                     0, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.precision, ATTN_PRECISION_BF16);
  ck_assert_int_eq(r.prob.dtype, ATTN_DTYPE_BF16);
  ck_assert_ptr_null(r.prob.q);
  ck_assert_ptr_eq(r.prob.q16, (const uint16_t *)(p + b.jlen));
  ck_assert_ptr_eq(r.prob.v16, (const uint16_t *)(p + b.jlen + sizeof q16 +
                                                  sizeof k16));
  ck_assert_uint_eq(r.in_bytes, sizeof q16 + sizeof k16 + sizeof v16);
  ck_assert_int_eq(proto_v2_decode(b.bytes, b.len, b.hlen,
                                   PROTO_MODEL_ATTENTION, &c, 0, err), 0);
  ck_assert_int_eq(c.prob.dtype, ATTN_DTYPE_BF16);
  ck_assert(!rb_inside(c.prob.k16, b.bytes, b.len));
  ck_assert(!memcmp(c.prob.k16, k16, sizeof k16));
  size_t no = 2 * 5 * 3, nw = 2 * 5 * 7;
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.weights), 0);
  ck_assert_int_eq(attn_forward(&c.prob, c.out, c.weights), 0);
  ck_assert(!memcmp(r.out, c.out, no * 4));
  ck_assert(!memcmp(r.weights, c.weights, nw * 4));
  /* float32 inputs of the same values (rb_floats' are BF16 values) */
  attn_problem f = c.prob;
  float out[2 * 5 * 3], w[2 * 5 * 7];
  f.dtype = ATTN_DTYPE_F32;
  f.q = rb_q; f.k = rb_k; f.v = rb_v;
  ck_assert_int_eq(attn_forward(&f, out, w), 0);
  ck_assert(!memcmp(out, c.out, sizeof out) && !memcmp(w, c.weights, sizeof w));
  proto_request_free(&r);
  proto_request_free(&c);
  proto_body_free(&pb);
  free(b.bytes);
}
END_TEST

START_TEST(received_body_reports_a_bad_value_like_the_copy) {
  static const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                 0xff812345u};
  static const size_t at[] = {0, RB_Q - 1, RB_Q, RB_Q + RB_K + RB_V - 1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rbody b;
    proto_body pb;
    proto_request r, c;
    char err[PROTO_ERR_MAX], cerr[PROTO_ERR_MAX];
    rb_start(&b);
    rb_qkv(&b);
    rb_finish(&b);
    memcpy(b.bytes + b.jlen + 4 * at[i], &bad[i], 4);
    rb_receive(&pb, &b, b.len, b.hlen, 100);
    ck_assert_int_eq(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION,
                                          &r, 0, err), ATTND_EINVAL);
    ck_assert_int_eq(proto_v2_decode(b.bytes, b.len, b.hlen,
                                     PROTO_MODEL_ATTENTION, &c, 0, cerr),
                     ATTND_EINVAL);
    ck_assert_str_eq(err, cerr);
    ck_assert_ptr_nonnull(strstr(err, "FP32 value is not finite"));
    ck_assert_int_eq(r.n_owned, 0);
    ck_assert_ptr_nonnull(pb.base);  /* a failed decode leaves the body */
    proto_body_free(&pb);
    free(b.bytes);
  }
}
END_TEST

/* Inputs that cannot be read where they lie are copied, with the same
 * numbers: after a 3-byte BOOL mask (not 4-byte aligned), after an FP64
 * input whose words look non-finite as float32, when the header length
 * was unknown as the body arrived or differs from the one decoded. */
START_TEST(received_body_copies_what_it_cannot_lend) {
  uint8_t mask[7];
  double q64[RB_Q];
  for (size_t i = 0; i < sizeof mask; i++)
    mask[i] = (uint8_t)(i % 3 != 0);
  for (size_t i = 0; i < RB_Q; i++) {
    uint64_t u;
    q64[i] = (double)((int)(i % 9) - 4) / 8;
    memcpy(&u, &q64[i], 8);
    u |= 0x7f800000u;  /* low word non-finite as float32, value finite */
    memcpy(&q64[i], &u, 8);
  }
  for (int kind = 0; kind < 4; kind++) {
    rbody b;
    proto_body pb;
    proto_request r, c;
    char err[PROTO_ERR_MAX];
    rb_start(&b);
    if (kind == 0) {  /* a (1,1,1,7) mask first: 7 bytes */
      rb_input(&b, "mask", "BOOL", "[1,1,1,7]", mask, sizeof mask);
      rb_qkv(&b);
    } else if (kind == 1) {
      rb_floats(rb_k, RB_K, 2);
      rb_floats(rb_v, RB_V, 3);
      rb_input(&b, "query", "FP64", "[1,2,5,8]", q64, sizeof q64);
      rb_input(&b, "key", "FP32", "[1,2,7,8]", rb_k, sizeof rb_k);
      rb_input(&b, "value", "FP32", "[1,2,7,3]", rb_v, sizeof rb_v);
    } else {
      rb_qkv(&b);
    }
    rb_finish(&b);
    char other[32];
    snprintf(other, sizeof other, "%zu", b.jlen - 1);
    rb_receive(&pb, &b, b.len, kind == 2 ? NULL : kind == 3 ? other : b.hlen,
               333);
    const char *p = pb.p;
    ck_assert_msg(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION,
                                       &r, 0, err) == 0, "kind %d: %s", kind,
                  err);
    ck_assert_int_eq(proto_v2_decode(b.bytes, b.len, b.hlen,
                                     PROTO_MODEL_ATTENTION, &c, 0, err), 0);
    if (kind == 0 || kind == 2 || kind == 3) {
      ck_assert(!rb_inside(r.prob.q, p, b.len));
      ck_assert(!rb_inside(r.prob.k, p, b.len));
    } else {  /* FP64 converted; key and value lie after its bad words */
      ck_assert(!rb_inside(r.prob.k, p, b.len));
    }
    rb_same_answer(&r, &c);
    proto_request_free(&r);
    proto_request_free(&c);
    proto_body_free(&pb);
    free(b.bytes);
  }
}
END_TEST

/* ---- models and metadata ------------------------------------------------------ */

/* --model-name: the dot-product model answers to the chosen name only; a
 * name that is not one clean path segment, or is the additive model's, is
 * refused and changes nothing. */
START_TEST(model_renamed) {
  char err[PROTO_ERR_MAX], *out;
  size_t len;
  ck_assert_int_eq(proto_v2_set_model_name("my-isvc", err), 0);
  ck_assert_str_eq(proto_v2_model_name(PROTO_MODEL_ATTENTION), "my-isvc");
  ck_assert_int_eq(proto_v2_model_find("my-isvc", "1", err),
                   PROTO_MODEL_ATTENTION);
  ck_assert_int_eq(proto_v2_model_find("attention", NULL, err),
                   ATTND_ENOTFOUND);
  ck_assert_str_eq(err, "unknown model 'attention' (models: my-isvc, "
                   "additive_attention)");
  ck_assert_int_eq(proto_v2_model_ready(PROTO_MODEL_ATTENTION, 1, &out, &len),
                   0);
  ck_assert_str_eq(out, "{\"name\":\"my-isvc\",\"ready\":true}");
  free(out);
  ck_assert_int_eq(proto_v2_set_model_name("a/b", err), ATTND_EINVAL);
  ck_assert_int_eq(proto_v2_set_model_name("", err), ATTND_EINVAL);
  ck_assert_int_eq(proto_v2_set_model_name(".x", err), ATTND_EINVAL);
  ck_assert_int_eq(proto_v2_set_model_name("additive_attention", err),
                   ATTND_EINVAL);
  ck_assert_str_eq(proto_v2_model_name(PROTO_MODEL_ATTENTION), "my-isvc");
  ck_assert_int_eq(proto_v2_set_model_name("attention", err), 0);
  ck_assert_int_eq(proto_v2_model_find("attention", NULL, err),
                   PROTO_MODEL_ATTENTION);
}
END_TEST

START_TEST(models_and_metadata) {
  char err[PROTO_ERR_MAX], *out;
  size_t len;
  ck_assert_int_eq(proto_v2_model_find("attention", NULL, err),
                   PROTO_MODEL_ATTENTION);
  ck_assert_int_eq(proto_v2_model_find("additive_attention", "1", err),
                   PROTO_MODEL_ADDITIVE);
  ck_assert_int_eq(proto_v2_model_find("attention", "2", err),
                   ATTND_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "no version '2'"));
  /* the segment is an integer to Triton: 01 is 1; 10, 0 and 1x are not */
  ck_assert_int_eq(proto_v2_model_find("attention", "01", err),
                   PROTO_MODEL_ATTENTION);
  ck_assert_int_eq(proto_v2_model_find("attention", "10", err),
                   ATTND_ENOTFOUND);
  ck_assert_int_eq(proto_v2_model_find("attention", "0", err),
                   ATTND_ENOTFOUND);
  ck_assert_int_eq(proto_v2_model_find("attention", "1x", err),
                   ATTND_ENOTFOUND);
  ck_assert_int_eq(proto_v2_model_find("bert", NULL, err), ATTND_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(err, "unknown model 'bert'"));
  ck_assert_int_eq(proto_v2_server_metadata("9.9", &out, &len), 0);
  cJSON *j = cJSON_Parse(out);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "version")->valuestring, "9.9");
  ck_assert_ptr_nonnull(strstr(out, "\"binary_tensor_data\""));
  cJSON_Delete(j);
  free(out);
  ck_assert_int_eq(proto_v2_model_metadata(PROTO_MODEL_ADDITIVE, &out, &len),
                   0);
  j = cJSON_Parse(out);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "inputs")), 13);
  cJSON_Delete(j);
  free(out);
  ck_assert_int_eq(proto_v2_model_ready(0, 1, &out, &len), 0);
  ck_assert_str_eq(out, "{\"name\":\"attention\",\"ready\":true}");
  free(out);
}
END_TEST

/* ---- content coding ------------------------------------------------------------ */

static size_t zip(int wb, const char *in, size_t n, char *out, size_t cap) {
  z_stream z;
  memset(&z, 0, sizeof z);
  ck_assert_int_eq(deflateInit2(&z, 9, Z_DEFLATED, wb, 8,
                                Z_DEFAULT_STRATEGY), Z_OK);
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)cap;
  ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
  size_t len = z.total_out;
  deflateEnd(&z);
  return len;
}

START_TEST(inflate_gzip_zlib_and_raw) {
  static const char text[] = "{\"inputs\": [1, 2, 3, 4, 5, 6, 7, 8]}";
  char z[256], *out, err[PROTO_ERR_MAX];
  size_t n, len;
  int wbs[3] = {15 + 16, 15, -15};
  const char *codings[3] = {"gzip", "deflate", "DEFLATE"};
  for (int i = 0; i < 3; i++) {
    n = zip(wbs[i], text, sizeof text - 1, z, sizeof z);
    ck_assert_int_eq(proto_inflate(codings[i], z, n, 1000, &out, &len, err),
                     0);
    ck_assert_uint_eq(len, sizeof text - 1);
    ck_assert(!memcmp(out, text, len));
    free(out);
  }
  ck_assert_int_eq(proto_inflate("identity", text, 5, 1000, &out, &len, err),
                   0);
  ck_assert_ptr_null(out);
  ck_assert_int_eq(proto_inflate("br", text, 5, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "Content-Encoding: 'br'"));
  n = zip(15 + 16, text, sizeof text - 1, z, sizeof z);
  ck_assert_int_eq(proto_inflate("gzip", z, n - 5, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "truncated"));
  ck_assert_int_eq(proto_inflate("gzip", text, 10, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "corrupt gzip"));
  /* exactly at the cap is fine, one byte under it is too big */
  ck_assert_int_eq(proto_inflate("gzip", z, n, sizeof text - 1, &out, &len,
                                 err), 0);
  free(out);
  ck_assert_int_eq(proto_inflate("gzip", z, n, sizeof text - 2, &out, &len,
                                 err), ATTND_ETOOBIG);
}
END_TEST

START_TEST(inflate_bomb_stops_at_the_cap) {
  size_t big = 64u << 20, n;
  char *zeros = calloc(1, big), *z = malloc(big / 100), *out;
  char err[PROTO_ERR_MAX];
  size_t len;
  n = zip(15 + 16, zeros, big, z, big / 100);
  ck_assert_uint_lt(n, 100000);
  ck_assert_int_eq(proto_inflate("gzip", z, n, 1u << 20, &out, &len, err),
                   ATTND_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(err, "inflates past the limit"));
  free(zeros);
  free(z);
}
END_TEST

START_TEST(accept_encoding_and_deflate) {
  ck_assert_str_eq(proto_accept_coding("gzip, deflate"), "gzip");
  ck_assert_str_eq(proto_accept_coding("deflate"), "deflate");
  ck_assert_str_eq(proto_accept_coding("gzip;q=0.2, deflate;q=0.5"),
                   "deflate");
  ck_assert_ptr_null(proto_accept_coding("gzip;q=0"));
  ck_assert_ptr_null(proto_accept_coding("identity"));
  ck_assert_ptr_null(proto_accept_coding("br"));
  ck_assert_ptr_null(proto_accept_coding(NULL));
  ck_assert_str_eq(proto_accept_coding("*"), "gzip");
  ck_assert_ptr_null(proto_accept_coding("xgzip"));
  char *z, *back, err[PROTO_ERR_MAX];
  size_t zn, bn;
  static const char text[] = "[0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]";
  for (int i = 0; i < 2; i++) {
    const char *c = i ? "deflate" : "gzip";
    ck_assert_int_eq(proto_deflate(c, text, sizeof text - 1, &z, &zn), 0);
    ck_assert_uint_lt(zn, sizeof text - 1);
    ck_assert_int_eq(proto_inflate(c, z, zn, 100, &back, &bn, err), 0);
    ck_assert(bn == sizeof text - 1 && !memcmp(back, text, bn));
    free(z);
    free(back);
  }
}
END_TEST

/* ---- window parameters and diagnostics outputs --------------------------- */

START_TEST(window_parameters_decode) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  /* none: no window */
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.has_window, 0);
  proto_request_free(&r);
  /* one side: the other is unbounded; wider than the problem is clamped */
  body_json(&b, "{\"parameters\":{\"window_right\":99},\"inputs\":[" IN_Q
                "," IN_K "," IN_V "]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.has_window, 1);
  ck_assert_int_eq(r.prob.window_left, -1);
  ck_assert_int_eq(r.prob.window_right, 3); /* Lk */
  proto_request_free(&r);
  body_json(&b, "{\"parameters\":{\"window_left\":1,\"window_right\":null},"
                "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.has_window, 1);
  ck_assert_int_eq(r.prob.window_left, 1);
  ck_assert_int_eq(r.prob.window_right, -1);
  proto_request_free(&r);
  body_json(&b, "{\"parameters\":{\"window_left\":-1},\"inputs\":[" IN_Q
                "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.window_left", "integer in [0, 2^53]");
  body_json(&b, "{\"parameters\":{\"window_right\":0.5},\"inputs\":[" IN_Q
                "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.window_right", "integer in [0, 2^53]");
  body_json(&b, "{\"parameters\":{\"window_left\":9007199254740994},"
                "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.window_left", "integer in [0, 2^53]");
  body_json(&b, "{\"parameters\":{\"window_right\":\"1\"},\"inputs\":[" IN_Q
                "," IN_K "," IN_V "]}");
  BAD(&b, NULL, "parameters.window_right");
}
END_TEST

START_TEST(diagnostics_outputs_decode_and_encode) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX], *out;
  size_t len, jlen;
  /* no outputs named: output and weights only, no diagnostics */
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.n_outputs, 2);
  ck_assert_int_eq(r.diagnostics, 0);
  ck_assert_ptr_null(r.allowed_keys);
  proto_request_free(&r);
  /* diagnostics without weights: weights computed, not returned */
  body_json(&b, "{\"parameters\":{\"window_left\":0},\"inputs\":[" IN_Q ","
                IN_K "," IN_V "],\"outputs\":[{\"name\":\"allowed_keys\"},"
                "{\"name\":\"jacobian_norm\",\"parameters\":{\"binary_data\":"
                "true}},{\"name\":\"entropy\"},{\"name\":\"max_weight\"}]}");
  ck_assert_msg(dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
                err);
  ck_assert_int_eq(r.n_outputs, 4);
  ck_assert_int_eq(r.diagnostics, 1);
  ck_assert_int_eq(r.return_weights, 0);
  ck_assert_ptr_nonnull(r.weights);
  ck_assert_ptr_nonnull(r.allowed_keys);
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.weights), 0);
  ck_assert_int_eq(attn_diagnostics(&r.prob, r.weights, r.allowed_keys,
                                    r.entropy, r.max_weight,
                                    r.jacobian_norm), 0);
  /* window left 0: query i sees keys i .. Lk-1 */
  ck_assert_int_eq(r.allowed_keys[0], 3);
  ck_assert_int_eq(r.allowed_keys[1], 2);
  ck_assert_int_eq(proto_encode(&r, &out, &len, &jlen), 0);
  ck_assert_uint_eq(len, jlen + 2 * sizeof(float)); /* jacobian_norm (1,2) */
  cJSON *j = cJSON_ParseWithLength(out, jlen);
  ck_assert_ptr_nonnull(j);
  cJSON *o = cJSON_GetObjectItem(j, "outputs");
  ck_assert_int_eq(cJSON_GetArraySize(o), 4);
  static const char *const names[4] = {"allowed_keys", "jacobian_norm",
                                       "entropy", "max_weight"};
  for (int i = 0; i < 4; i++) {
    cJSON *t = cJSON_GetArrayItem(o, i);
    cJSON *shape = cJSON_GetObjectItem(t, "shape");
    ck_assert_str_eq(cJSON_GetObjectItem(t, "name")->valuestring, names[i]);
    ck_assert_str_eq(cJSON_GetObjectItem(t, "datatype")->valuestring,
                     i == 0 ? "INT32" : "FP32");
    ck_assert_int_eq(cJSON_GetArraySize(shape), 2);
    ck_assert_int_eq(cJSON_GetArrayItem(shape, 0)->valueint, 1);
    ck_assert_int_eq(cJSON_GetArrayItem(shape, 1)->valueint, 2);
  }
  cJSON *ak = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 0), "data");
  ck_assert_int_eq(cJSON_GetArrayItem(ak, 0)->valueint, 3);
  ck_assert_int_eq(cJSON_GetArrayItem(ak, 1)->valueint, 2);
  cJSON *en = cJSON_GetObjectItem(cJSON_GetArrayItem(o, 2), "data");
  ck_assert((float)cJSON_GetArrayItem(en, 1)->valuedouble == r.entropy[1]);
  float jn[2];
  memcpy(jn, out + jlen, sizeof jn);
  ck_assert(jn[0] == r.jacobian_norm[0] && jn[1] == r.jacobian_norm[1]);
  ck_assert(jn[0] > 0.0f);
  cJSON_Delete(j);
  free(out);
  proto_request_free(&r);
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "],\"outputs\":"
                "[{\"name\":\"entropies\"}]}");
  BAD(&b, NULL, "outputs[0]", "unknown output 'entropies'", "jacobian_norm");
}
END_TEST

/* Decodes and computes (the diagnostics too when asked). */
static void dec_run(const body *b, proto_request *r) {
  char err[PROTO_ERR_MAX];
  ck_assert_msg(dec(b, NULL, PROTO_MODEL_ATTENTION, r, err) == 0, "%s", err);
  ck_assert_int_eq(attn_forward_lse(&r->prob, r->out, r->weights, r->lse), 0);
  if (r->diagnostics)
    ck_assert_int_eq(attn_diagnostics(&r->prob, r->weights, r->allowed_keys,
                                      r->entropy, r->max_weight,
                                      r->jacobian_norm), 0);
}

START_TEST(binary_outputs_in_parts_are_the_bytes_of_the_copy) {
  static const char *const outputs[] = {
    "\"parameters\":{\"binary_data_output\":true}",
    "\"outputs\":[{\"name\":\"weights\",\"parameters\":{\"binary_data\":"
    "true}},{\"name\":\"output\"}]",
    "\"outputs\":[{\"name\":\"allowed_keys\",\"parameters\":{\"binary_data\""
    ":true}},{\"name\":\"jacobian_norm\",\"parameters\":{\"binary_data\":"
    "true}},{\"name\":\"output\",\"parameters\":{\"binary_data\":true}},"
    "{\"name\":\"entropy\"}]",
    "\"outputs\":[{\"name\":\"output\"}]",
    "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":"
    "true}}]",
    "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":"
    "true}}]",
    "\"outputs\":[{\"name\":\"lse\",\"parameters\":{\"binary_data\":"
    "true}},{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]",
    "\"parameters\":{\"binary_data_output\":true},\"outputs\":[{\"name\":"
    "\"weights\"},{\"name\":\"lse\"},{\"name\":\"entropy\"},{\"name\":"
    "\"output\"}]"};
  static const int want_parts[] = {2, 1, 3, 0, 1, 1, 2, 4};
  static const int want_blocks[] = {2, 1, 2, 0, 1, 1, 2, 4};
  static const int want_joined[] = {0, 0, 0, 0, 1, 0, 0, 0};
  /* an id whose JSON is longer than the room before the output (within
   * PROTO_ID_MAX: control bytes, six bytes each as escapes): the parts
   * stay apart */
  static const int long_id[] = {0, 0, 0, 0, 0, 1, 0, 0};
  long live = mem_live();
  for (int c = 0; c < 8; c++) {
    body b;
    char json[4096], *whole;
    size_t len, jlen;
    proto_request r1, r2;
    proto_parts parts;
    char id[700] = "";
    for (int i = 0; long_id[c] && i < 100; i++)
      memcpy(id + 6 * i, "\\u0001", 7);
    snprintf(json, sizeof json,
             "{\"inputs\":[" IN_Q "," IN_K "," IN_V "],%s%s%s%s}",
             *id ? "\"id\":\"" : "", id, *id ? "\"," : "", outputs[c]);
    body_json(&b, json);
    dec_run(&b, &r1);
    dec_run(&b, &r2);
    int owned = r2.n_owned;
    ck_assert_int_eq(proto_v2_encode(&r1, &whole, &len, &jlen), 0);
    int rc = proto_v2_encode_parts(&r2, &parts);
    ck_assert_int_eq(rc, want_parts[c] ? 0 : 1);
    ck_assert_int_eq(parts.n, want_parts[c]);
    ck_assert_int_eq(parts.n_blocks, want_blocks[c]);
    ck_assert_int_eq(parts.joined, want_joined[c]);
    if (parts.joined)  /* one buffer: the JSON part, then the output */
      ck_assert_ptr_eq(parts.json + parts.json_len, parts.data[0]);
    ck_assert_int_eq(r2.n_owned, owned - want_blocks[c]);
    proto_request_free(&r2);  /* the outputs live on in parts */
    if (rc == 0) {
      size_t at = jlen;
      ck_assert_uint_eq(parts.json_len, jlen);
      ck_assert(!memcmp(parts.json, whole, jlen));
      for (int i = 0; i < parts.n; i++) {
        ck_assert_uint_le(at + parts.len[i], len);
        ck_assert(!memcmp(parts.data[i], whole + at, parts.len[i]));
        at += parts.len[i];
      }
      ck_assert_uint_eq(at, len);
    }
    mem_free(whole);
    proto_request_free(&r1);
    proto_parts_free(&parts);
    proto_parts_free(&parts);  /* safe twice */
    ck_assert_int_eq(mem_live(), live);
  }
}
END_TEST

/* ---- sinks, softcap, ALiBi, packing, window_align, lse ------------------- */

#define IN_Q4 "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,2,2]," \
              "\"data\":[1,0,0,2,1,1,2,0]}"
#define IN_K4 "{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,1,3,2]," \
              "\"data\":[1,1,2,0,0,3]}"
#define IN_V4 "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,1,3,2]," \
              "\"data\":[1,0,0,1,1,1]}"

START_TEST(variant_inputs_and_parameters_decode) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  /* JSON: FP16 sinks (1.0001 is not an FP16: it rounds to 1), BF16
   * slopes, INT64 and INT32 offsets */
  body_json(&b, "{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ","
            "{\"name\":\"sinks\",\"datatype\":\"FP16\",\"shape\":[2],"
            "\"data\":[1.0001,-3]},"
            "{\"name\":\"alibi_slopes\",\"datatype\":\"BF16\",\"shape\":[1,2],"
            "\"data\":[0.5,0.25]},"
            "{\"name\":\"cu_seqlens_q\",\"datatype\":\"INT64\",\"shape\":[3],"
            "\"data\":[0,1,2]},"
            "{\"name\":\"cu_seqlens_k\",\"datatype\":\"INT32\",\"shape\":[3],"
            "\"data\":[0,0,3]}],"
            "\"parameters\":{\"softcap\":20,\"window_align\":\"lower_right\","
            "\"window_left\":1},"
            "\"outputs\":[{\"name\":\"lse\"},{\"name\":\"output\"}]}");
  ck_assert_msg(dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  const attn_problem *p = &r.prob;
  ck_assert_int_eq(attn_check(p), 0);
  ck_assert(p->sinks[0] == 1.0f && p->sinks[1] == -3.0f);
  ck_assert(p->alibi_slopes[1] == 0.25f);
  ck_assert_int_eq(p->alibi_per_item, 1);
  ck_assert(p->softcap == 20.0f);
  ck_assert_int_eq(p->window_align, ATTN_WINDOW_LOWER_RIGHT);
  ck_assert_int_eq(p->n_seqs, 2);
  ck_assert_int_eq(p->cu_seqlens_k[2], 3);
  ck_assert_int_eq(r.return_lse, 1);
  ck_assert_int_eq(r.return_weights, 0);
  ck_assert_ptr_null(r.weights);
  /* computed, the lse answers as JSON; query 0's sequence has no keys,
   * so its lse is its head's sink */
  ck_assert_int_eq(attn_forward_lse(p, r.out, NULL, r.lse), 0);
  ck_assert(r.lse[0] == 1.0f && r.lse[2] == -3.0f);
  r.lse[1] = -INFINITY;
  char *out;
  size_t len, jlen;
  ck_assert_int_eq(proto_v2_encode(&r, &out, &len, &jlen), 0);
  ck_assert_ptr_nonnull(strstr(out, "{\"name\":\"lse\",\"datatype\":\"FP32\","
                                    "\"shape\":[1,2,2],\"data\":[1,null,-3,"));
  free(out);
  proto_request_free(&r);

  /* binary: FP16 sinks and INT64 offsets after the JSON part; the lse
   * as a binary output carries -inf as the float */
  static const char hdr[] =
      "{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ","
      "{\"name\":\"sinks\",\"datatype\":\"FP16\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":4}},"
      "{\"name\":\"cu_seqlens_q\",\"datatype\":\"INT64\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":16}},"
      "{\"name\":\"cu_seqlens_k\",\"datatype\":\"INT64\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":16}}],"
      "\"outputs\":[{\"name\":\"lse\",\"parameters\":{\"binary_data\":true}}]}";
  uint16_t sinks[2] = {0x3c00, 0xc000};  /* 1, -2 */
  int64_t cq[2] = {0, 2}, ck[2] = {0, 3};
  body_json(&b, hdr);
  body_add(&b, sinks, sizeof sinks);
  body_add(&b, cq, sizeof cq);
  body_add(&b, ck, sizeof ck);
  ck_assert_msg(dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
                err);
  ck_assert(r.prob.sinks[1] == -2.0f);
  ck_assert_int_eq(r.prob.n_seqs, 1);
  ck_assert_int_eq(attn_forward_lse(&r.prob, r.out, NULL, r.lse), 0);
  r.lse[3] = -INFINITY;
  ck_assert_int_eq(proto_v2_encode(&r, &out, &len, &jlen), 0);
  ck_assert_uint_eq(len - jlen, 16);
  float got[4];
  memcpy(got, out + jlen, 16);
  ck_assert(isfinite(got[0]) && got[3] == -INFINITY);
  ck_assert(got[0] == r.lse[0]);
  free(out);
  proto_request_free(&r);
}
END_TEST

START_TEST(variant_errors_name_the_input_or_parameter) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"cu_seqlens_q\","
     "\"datatype\":\"FP32\",\"shape\":[2],\"data\":[0,2]}]}",
     "cu_seqlens_q: datatype FP32 is not supported for this input (expected "
     "INT32 or INT64)"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"sinks\","
     "\"datatype\":\"INT32\",\"shape\":[2],\"data\":[0,2]}]}",
     "sinks: datatype INT32 is not supported for this input (expected FP32, "
     "FP64, FP16 or BF16)"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"sinks\","
     "\"datatype\":\"FP32\",\"shape\":[3],\"data\":[0,2,1]}]}",
     "sinks: shape [3] is not (H,) = [2]"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"cu_seqlens_q\","
     "\"datatype\":\"INT32\",\"shape\":[2],\"data\":[0,2]},"
     "{\"name\":\"cu_seqlens_k\",\"datatype\":\"INT32\",\"shape\":[2],"
     "\"data\":[0,4]}]}", "cu_seqlens_k[1]=4 exceeds key length 3"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"cu_seqlens_q\","
     "\"datatype\":\"INT32\",\"shape\":[2],\"data\":[0,1]},"
     "{\"name\":\"cu_seqlens_k\",\"datatype\":\"INT32\",\"shape\":[2],"
     "\"data\":[0,3]}]}",
     "cu_seqlens_q[1]=1: the last offset must be the query length 2"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 "],\"parameters\":{\"softcap\":0}}",
     "parameters.softcap: must be a finite number > 0"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 "],\"parameters\":"
     "{\"window_align\":\"center\"}}",
     "parameters.window_align: unknown value \"center\" (allowed: "
     "\"upper_left\", \"lower_right\")"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 "],\"parameters\":"
     "{\"softcapp\":1}}", "did you mean 'softcap'?"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 ",{\"name\":\"alibi_slope\","
     "\"datatype\":\"FP32\",\"shape\":[2],\"data\":[0,2]}]}",
     "model attention has no input 'alibi_slope' (did you mean "
     "'alibi_slopes'?"},
    {"{\"inputs\":[" IN_Q4 "," IN_K4 "," IN_V4 "],\"outputs\":[{\"name\":"
     "\"lses\"}]}", "unknown output 'lses' of model attention (did you mean "
     "'lse'?"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want);
  }
}
END_TEST

static Suite *v2_suite(void) {
  Suite *s = suite_create("v2");
  struct { const char *name; const TTest *tests[16]; } cases[] = {
    {"dtype", {f16_widens_exactly, f16_inf_and_nan_are_rejected,
               f64_to_f16_rounds_to_nearest_even, bf16_rounds_and_widens,
               f64_to_f32_rounds_to_nearest_even,
               binary_converters_check_values,
               bulk_converters_find_the_first_bad_element,
               word_check_finds_the_first_non_finite_word}},
    {"json", {json_request_decodes, json_fp16_values_are_rounded_to_fp16,
              json_errors_name_the_input,
              fields_given_twice_are_refused_at_every_level,
              extensions_attnd_lacks_are_refused,
              unknown_names_are_refused_with_the_nearest_known_one,
              triton_parameters_attnd_lacks_are_not_supported,
              what_triton_clients_send_is_accepted,
              non_finite_literals_name_the_input_and_index,
              nul_bytes_are_pointed_at,
              shm_regions_unknown_without_a_registry,
              additive_model_needs_its_weights,
              budget_applies_to_v2}},
    {"binary", {binary_request_decodes_and_encodes, binary_layout_errors,
                binary_value_errors, binary_lengths_int32_and_int64,
                mutated_bodies_are_refused_cleanly}},
    {"received", {received_body_lends_fp32_inputs_in_place,
                  received_body_reports_a_bad_value_like_the_copy,
                  received_body_copies_what_it_cannot_lend,
                  bf16_inputs_in_bf16_mode_are_used_as_sent}},
    {"models", {models_and_metadata, model_renamed}},
    {"diagnostics", {window_parameters_decode,
                     diagnostics_outputs_decode_and_encode,
                     binary_outputs_in_parts_are_the_bytes_of_the_copy}},
    {"coding", {inflate_gzip_zlib_and_raw, inflate_bomb_stops_at_the_cap,
                accept_encoding_and_deflate}},
    {"variants", {variant_inputs_and_parameters_decode,
                  variant_errors_name_the_input_or_parameter}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    TCase *tc = tcase_create(cases[c].name);
    tcase_set_timeout(tc, 120);
    for (int t = 0; cases[c].tests[t]; t++)
      tcase_add_test(tc, cases[c].tests[t]);
    suite_add_tcase(s, tc);
  }
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(v2_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
