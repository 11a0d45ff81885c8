/* test_v2.c - the KServe v2 codec: datatype conversions (round to nearest
 * even with ties and subnormals, exact widenings, non-finite rejection),
 * JSON inference requests and every refusal, the element budget, model
 * lookup and metadata.  Binary requests, bodies as received and the
 * content coding are in test_v2_binary.c, windows, diagnostics and the
 * attention variants in test_v2_outputs.c. */
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

#include "support_v2.h"
#include "support_suite.h"

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

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
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
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
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
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
  /* whole in the double, not in the decimal */
  static const char *const counts[] = {
      "\"seed\":9007199254740993", "\"seed\":1.00000000000000001",
      "\"timeout\":9007199254740993", "\"window_left\":9007199254740992.5",
      "\"seed\":null"};
  for (int i = 0; i < 5; i++) {
    char json[512], name[16];
    snprintf(json, sizeof json, "{\"parameters\":{%s},\"inputs\":[" IN_Q
             "," IN_K "," IN_V "]}", counts[i]);
    snprintf(name, sizeof name, "%.*s", (int)strcspn(counts[i] + 1, "\""),
             counts[i] + 1);
    body_json(&b, json);
    BAD(&b, NULL, "parameters.", name, "[0, 2^53]", strchr(counts[i], ':') + 1);
  }
  /* a length too: its decimal, not its double (INT32 and INT64 alike) */
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":"
                "\"valid_lens\",\"datatype\":\"INT64\",\"shape\":[1],"
                "\"data\":[2.00000000000000001]}]}");
  BAD(&b, NULL, "valid_lens", "integer", "2.00000000000000001");
  /* a shape's axis and a mask's 0 or 1 alike */
  body_json(&b, "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
                "\"shape\":[1,2.00000000000000001,2],\"data\":[1,0,0,2]},"
                IN_K "," IN_V "]}");
  BAD(&b, NULL, "query", "shape[1]", "integer", "2.00000000000000001");
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":"
                "\"mask\",\"datatype\":\"BOOL\",\"shape\":[3],"
                "\"data\":[1,0.99999999999999999,1]}]}");
  BAD(&b, NULL, "mask", "0.99999999999999999");
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
    ck_assert_int_eq(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err),
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
    ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0,
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
  ck_assert_msg(v2_dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
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

/* A lone surrogate escape names its place as NaN does: a parameter, an
 * input by its name (or by its index when it is the name), the id. */
START_TEST(lone_surrogate_escapes_name_their_place) {
  static const struct { const char *json, *want; } cases[] = {
    {"{\"parameters\":{\"causal\":\"\\ud800\"},\"inputs\":[" IN_Q "," IN_K
     "," IN_V "]}", "parameters.causal: \\ud800 at byte 25"},
    {"{\"id\":\"x\\udc00\",\"inputs\":[" IN_Q "," IN_K "," IN_V "]}",
     "id: \\udc00 at byte 8"},
    {"{\"inputs\":[{\"name\":\"\\udbff\",\"datatype\":\"FP32\",\"shape\":"
     "[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}",
     "inputs[0].name: \\udbff at byte 20"},
    {"{\"inputs\":[{\"datatype\":\"FP\\uDFFF\",\"name\":\"query\",\"shape\":"
     "[1,2,2],\"data\":[1,0,0,2]}," IN_K "," IN_V "]}",
     "query.datatype: \\uDFFF at byte 26"},
  };
  body b;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    body_json(&b, cases[i].json);
    BAD(&b, NULL, cases[i].want, " is a lone UTF-16 surrogate (a "
        "\\uD800-\\uDBFF escape must be followed by a \\uDC00-\\uDFFF one)");
    BAD(&b, b.hlen, cases[i].want, " of the inference header is a lone "
        "UTF-16 surrogate");
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
  ck_assert_int_eq(v2_dec(&b, NULL, PROTO_MODEL_ADDITIVE, &r, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "w_q: required input is missing"));
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V ",{\"name\":\"w_q\","
                "\"datatype\":\"FP32\",\"shape\":[3,2],\"data\":[1,2,3,4,5,6]},"
                "{\"name\":\"w_k\",\"datatype\":\"BF16\",\"shape\":[3,2],"
                "\"data\":[1,2,3,4,5,6]},{\"name\":\"w_v\",\"datatype\":"
                "\"FP64\",\"shape\":[3],\"data\":[1,2,3]}]}");
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ADDITIVE, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.scoring, ATTN_SCORING_ADDITIVE);
  ck_assert_int_eq(r.prob.Hd, 3);
  ck_assert(r.prob.w_v[2] == 3.0f);
  proto_request_free(&r);
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

/* ---- suite -------------------------------------------------------------------- */

int main(void) {
  support_case cases[] = {
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
              lone_surrogate_escapes_name_their_place,
              shm_regions_unknown_without_a_registry,
              additive_model_needs_its_weights,
              budget_applies_to_v2}},
    {"models", {models_and_metadata, model_renamed}},
  };
  return support_run("v2", cases, sizeof cases / sizeof cases[0]);
}
