/* test_proto.c - the /v1/attention JSON codec's decoding: both tensor forms
 * and every field, broadcast strides, the options and their refusals (each
 * ATTND_EINVAL with a message naming the field and the problem), field
 * names and their suggestions, and the element budget.  Malformed bodies
 * are in test_proto_errors.c, encoding and the variants in
 * test_proto_encode.c. */
#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/mem.h"
#include "proto/proto.h"
#include "proto/tensor/tensor.h"

#include "support_v1.h"
#include "support_suite.h"

/* ---- tensor forms -------------------------------------------------------- */

START_TEST(nested_rank3_gives_shapes_and_values) {
  proto_request r;
  OK("{" QKV3 "}", &r);
  attn_problem *p = &r.prob;
  ck_assert_int_eq(r.qrank, 3);
  ck_assert_int_eq(r.flat, 0);
  ck_assert_int_eq(p->B, 2);
  ck_assert_int_eq(p->H, 1);
  ck_assert_int_eq(p->Hkv, 1);
  ck_assert_int_eq(p->Lq, 2);
  ck_assert_int_eq(p->Lk, 3);
  ck_assert_int_eq(p->D, 2);
  ck_assert_int_eq(p->Dk, 2);
  ck_assert_int_eq(p->Dv, 1);
  for (int i = 0; i < 8; i++)
    ck_assert_float_eq(p->q[i], (float)(i + 1));
  ck_assert_float_eq(p->k[6], 2.0f);
  ck_assert_float_eq(p->v[5], 6.0f);
  proto_request_free(&r);
}
END_TEST

START_TEST(flat_rank4_gives_shapes_and_values) {
  proto_request r;
  OK("{\"query\":{\"shape\":[1,2,1,3],\"data\":[1,2,3,4,5,6]},"
     "\"key\":{\"data\":[1,0,0,0,1,0],\"shape\":[1,1,2,3]},"
     "\"value\":{\"shape\":[1,1,2,2],\"data\":[1,2,3,4.5]}}", &r);
  attn_problem *p = &r.prob;
  ck_assert_int_eq(r.qrank, 4);
  ck_assert_int_eq(r.flat, 1);
  ck_assert_int_eq(p->B, 1);
  ck_assert_int_eq(p->H, 2);
  ck_assert_int_eq(p->Hkv, 1);
  ck_assert_int_eq(p->Lq, 1);
  ck_assert_int_eq(p->Lk, 2);
  ck_assert_int_eq(p->D, 3);
  ck_assert_int_eq(p->Dv, 2);
  ck_assert_float_eq(p->q[5], 6.0f);
  ck_assert_float_eq(p->v[3], 4.5f);
  proto_request_free(&r);
}
END_TEST

/* A shape's axes are whole as written: 2.0 and 0.2e1 are 2, while
 * 2.00000000000000001, whose double is 2, is refused by name. */
START_TEST(flat_shape_axes_are_whole_as_written) {
  proto_request r;
  OK("{\"query\":{\"shape\":[1.0,1,0.2e1],\"data\":[1,2]},"
     "\"key\":{\"shape\":[1,1,2],\"data\":[3,4]},\"value\":[[[5]]]}", &r);
  ck_assert_int_eq(r.prob.D, 2);
  proto_request_free(&r);
  BAD("{\"query\":{\"shape\":[1,1,2.00000000000000001],\"data\":[1,2]},"
      "\"key\":[[[3,4]]],\"value\":[[[5]]]}", "query", "shape[2] must be an "
      "integer", "2.00000000000000001");
}
END_TEST

START_TEST(forms_mix_and_response_follows_query) {
  proto_request r;
  OK("{\"query\":[[[1,2]]],\"key\":{\"shape\":[1,1,2],\"data\":[3,4]},"
     "\"value\":[[[5]]]}", &r);
  ck_assert_int_eq(r.flat, 0);
  ck_assert_float_eq(r.prob.k[1], 4.0f);
  proto_request_free(&r);
}
END_TEST

START_TEST(grouped_heads_are_accepted) {
  proto_request r;
  OK("{\"query\":[[[[1]],[[2]],[[3]],[[4]]]],"
     "\"key\":[[[[1]],[[2]]]],\"value\":[[[[1]],[[2]]]]}", &r);
  ck_assert_int_eq(r.prob.H, 4);
  ck_assert_int_eq(r.prob.Hkv, 2);
  proto_request_free(&r);
}
END_TEST

START_TEST(defaults_and_buffers) {
  proto_request r;
  OK("{" QKV3 "}", &r);
  attn_problem *p = &r.prob;
  ck_assert_float_eq_tol(p->scale, 1.0f / sqrtf(2.0f), 1e-7f);
  ck_assert_int_eq(r.return_weights, 1);
  ck_assert_int_eq(p->causal, ATTN_CAUSAL_NONE);
  ck_assert_int_eq(p->scoring, ATTN_SCORING_DOT);
  ck_assert_ptr_null(p->mask);
  ck_assert_ptr_null(p->bias);
  ck_assert_ptr_null(p->valid_lens);
  ck_assert_int_eq(p->has_window, 0);
  ck_assert_float_eq(p->dropout_p, 0.0f);
  ck_assert_ptr_null(r.id_json);
  ck_assert_ptr_nonnull(r.out);
  ck_assert_ptr_nonnull(r.weights);
  /* q 8 + k 12 + v 6 floats in; out 4 + weights 12 floats out */
  ck_assert_uint_eq(r.in_bytes, 26 * 4);
  ck_assert_uint_eq(r.out_bytes, 16 * 4);
  proto_request_free(&r);
  ck_assert_int_eq(r.n_owned, 0);
  ck_assert_ptr_null(r.out);
}
END_TEST

START_TEST(return_weights_false_skips_weights_buffer) {
  proto_request r;
  OK("{" QKV3 ",\"return_weights\":false}", &r);
  ck_assert_int_eq(r.return_weights, 0);
  ck_assert_ptr_null(r.weights);
  ck_assert_uint_eq(r.out_bytes, 4 * 4);
  proto_request_free(&r);
}
END_TEST

START_TEST(null_optional_fields_are_absent) {
  proto_request r;
  OK("{" QKV3 ",\"valid_lens\":null,\"mask\":null,\"bias\":null,"
     "\"causal\":null,\"scale\":null,\"id\":null,\"dropout\":null,"
     "\"window\":null,\"scoring\":null,\"return_weights\":null}", &r);
  ck_assert_ptr_null(r.prob.mask);
  ck_assert_ptr_null(r.prob.valid_lens);
  ck_assert_ptr_null(r.id_json);
  ck_assert_int_eq(r.return_weights, 1);
  ck_assert_float_eq_tol(r.prob.scale, 1.0f / sqrtf(2.0f), 1e-7f);
  proto_request_free(&r);
}
END_TEST

/* ---- valid_lens ------------------------------------------------------------ */

START_TEST(valid_lens_per_item) {
  proto_request r;
  OK("{" QKV3 ",\"valid_lens\":[2,0]}", &r);
  ck_assert_int_eq(r.prob.valid_lens_per_query, 0);
  ck_assert_int_eq(r.prob.valid_lens[0], 2);
  ck_assert_int_eq(r.prob.valid_lens[1], 0);
  proto_request_free(&r);
  /* whole numbers however written */
  OK("{" QKV3 ",\"valid_lens\":[0.2e1,-0]}", &r);
  ck_assert_int_eq(r.prob.valid_lens[0], 2);
  ck_assert_int_eq(r.prob.valid_lens[1], 0);
  proto_request_free(&r);
}
END_TEST

START_TEST(valid_lens_per_query_and_flat) {
  proto_request r;
  OK("{" QKV3 ",\"valid_lens\":{\"shape\":[2,2],\"data\":[1,2,3,0]}}", &r);
  ck_assert_int_eq(r.prob.valid_lens_per_query, 1);
  ck_assert_int_eq(r.prob.valid_lens[2], 3);
  ck_assert_int_eq(r.prob.valid_lens[3], 0);
  proto_request_free(&r);
}
END_TEST

START_TEST(valid_lens_rejects_non_integers) {
  BAD("{" QKV3 ",\"valid_lens\":[1.5,1]}", "valid_lens", "integer", "[0]",
      "1.5");
  BAD("{" QKV3 ",\"valid_lens\":[1,true]}", "valid_lens", "integer", "[1]",
      "true");
  BAD("{" QKV3 ",\"valid_lens\":[\"2\",1]}", "valid_lens", "integer",
      "a string");
  /* whole in the double, not in the decimal as written */
  BAD("{" QKV3 ",\"valid_lens\":[1.00000000000000001,1]}", "valid_lens",
      "integer", "[0]", "1.00000000000000001");
  BAD("{" QKV3 ",\"valid_lens\":[1,0.99999999999999999]}", "valid_lens",
      "integer", "[1]", "0.99999999999999999");
  BAD("{" QKV3 ",\"valid_lens\":[1e-400,1]}", "valid_lens", "integer",
      "[0]");
}
END_TEST

START_TEST(valid_lens_rejects_out_of_range) {
  BAD("{" QKV3 ",\"valid_lens\":[1,9]}", "valid_lens[1]=9 exceeds key "
      "length 3");
  BAD("{" QKV3 ",\"valid_lens\":[-2,1]}", "valid_lens[0]=-2 is negative");
  BAD("{" QKV3 ",\"valid_lens\":[[1,1],[1,4]]}",
      "valid_lens[1][1]=4 exceeds key length 3");
  BAD("{" QKV3 ",\"valid_lens\":[1e20,1]}", "valid_lens[0]=", "exceeds");
}
END_TEST

START_TEST(valid_lens_rejects_wrong_shape) {
  BAD("{" QKV3 ",\"valid_lens\":[1,1,1]}", "valid_lens", "shape [3]",
      "(B,) = [2]", "(B, Lq) = [2,2]");
  BAD("{" QKV3 ",\"valid_lens\":[[1,1,1],[1,1,1]]}", "valid_lens",
      "shape [2,3]");
}
END_TEST

/* ---- mask and bias -------------------------------------------------------- */

static void expect_strides(const int64_t *s, int64_t b, int64_t h, int64_t i,
                           int64_t j) {
  ck_assert_int_eq(s[0], b);
  ck_assert_int_eq(s[1], h);
  ck_assert_int_eq(s[2], i);
  ck_assert_int_eq(s[3], j);
}

START_TEST(mask_full_shape_has_contiguous_strides) {
  proto_request r;
  OK("{" QKV3 ",\"mask\":[[[true,false,true],[1,0,1]],"
     "[[false,false,true],[true,true,true]]]}", &r);
  expect_strides(r.prob.mask_stride, 6, 0, 3, 1);
  const uint8_t want[12] = {1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1};
  ck_assert_mem_eq(r.prob.mask, want, 12);
  proto_request_free(&r);
}
END_TEST

START_TEST(mask_missing_and_unit_axes_broadcast) {
  proto_request r;
  OK("{" QKV3 ",\"mask\":[[true,false,true],[true,true,false]]}", &r);
  expect_strides(r.prob.mask_stride, 0, 0, 3, 1);
  proto_request_free(&r);
  OK("{" QKV3 ",\"mask\":[[[true,false,true]],[[true,true,false]]]}", &r);
  expect_strides(r.prob.mask_stride, 3, 0, 0, 1);
  proto_request_free(&r);
  OK("{" QKV3 ",\"mask\":[[true],[false]]}", &r);
  expect_strides(r.prob.mask_stride, 0, 0, 1, 0);
  proto_request_free(&r);
  OK("{" QKV3 ",\"mask\":{\"shape\":[3],\"data\":[1,0,1]}}", &r);
  expect_strides(r.prob.mask_stride, 0, 0, 0, 1);
  proto_request_free(&r);
}
END_TEST

START_TEST(mask_rank4_head_axis_strides) {
  proto_request r;
  /* B=1, H=2, Lq=1, Lk=2; mask (H, 1, Lk) */
  OK("{\"query\":[[[[1]],[[2]]]],\"key\":[[[[1],[2]]]],"
     "\"value\":[[[[1],[2]]]],\"mask\":[[[true,false]],[[false,true]]]}",
     &r);
  expect_strides(r.prob.mask_stride, 0, 2, 0, 1);
  proto_request_free(&r);
}
END_TEST

START_TEST(mask_that_does_not_broadcast_is_named) {
  BAD("{" QKV3 ",\"mask\":[[true,false],[true,true]]}", "mask: shape [2,2] "
      "does not broadcast to [2,2,3]", "axis 2: 2 vs 3");
  BAD("{" QKV3 ",\"mask\":[[[[true,false,true]]]]}", "mask", "rank 4 > 3");
}
END_TEST

START_TEST(mask_rejects_non_booleans) {
  BAD("{" QKV3 ",\"mask\":[true,2,false]}", "mask", "expected true, false, "
      "0 or 1 at [1]", "got 2");
  BAD("{" QKV3 ",\"mask\":[true,\"yes\",false]}", "mask", "a string");
  /* 0 and 1 as written, not only in the double */
  BAD("{" QKV3 ",\"mask\":[true,1.00000000000000001,false]}", "mask",
      "at [1]", "1.00000000000000001");
  BAD("{" QKV3 ",\"mask\":[1e-400,1,0]}", "mask", "at [0]", "1e-400");
  BAD("{" QKV3 ",\"mask\":[1,0,1.00000000000000001]}", "mask", "at [2]",
      "1.00000000000000001");
  proto_request r;
  OK("{" QKV3 ",\"mask\":[1.0,0e5,0.00000000000000000001e20]}", &r);
  ck_assert(r.prob.mask[0] == 1 && r.prob.mask[1] == 0 && r.prob.mask[2] == 1);
  proto_request_free(&r);
}
END_TEST

START_TEST(mask_and_causal_compose) {
  proto_request r;
  OK("{" QKV3 ",\"mask\":[true,true,false],\"causal\":true}", &r);
  ck_assert_ptr_nonnull(r.prob.mask);
  ck_assert_int_eq(r.prob.causal, ATTN_CAUSAL_UPPER_LEFT);
  proto_request_free(&r);
}
END_TEST

START_TEST(bias_broadcasts_with_float_values) {
  proto_request r;
  OK("{" QKV3 ",\"bias\":[[0.5,-1,2],[0,0,-3.25]]}", &r);
  expect_strides(r.prob.bias_stride, 0, 0, 3, 1);
  ck_assert_float_eq(r.prob.bias[5], -3.25f);
  proto_request_free(&r);
  BAD("{" QKV3 ",\"bias\":[[0.5,-1],[0,0]]}", "bias: shape [2,2] does not "
      "broadcast");
  BAD("{" QKV3 ",\"bias\":[0.5,true,1]}", "bias: expected a number at [1], "
      "got true");
}
END_TEST

/* ---- scalar options -------------------------------------------------------- */

START_TEST(causal_values) {
  static const struct { const char *text; int want; } cases[] = {
    {"false", ATTN_CAUSAL_NONE}, {"true", ATTN_CAUSAL_UPPER_LEFT},
    {"\"upper_left\"", ATTN_CAUSAL_UPPER_LEFT},
    {"\"lower_right\"", ATTN_CAUSAL_LOWER_RIGHT}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[512];
    proto_request r;
    snprintf(json, sizeof json, "{" QKV3 ",\"causal\":%s}", cases[i].text);
    OK(json, &r);
    ck_assert_int_eq(r.prob.causal, cases[i].want);
    proto_request_free(&r);
  }
}
END_TEST

START_TEST(causal_unknown_value_names_allowed_values) {
  BAD("{" QKV3 ",\"causal\":\"lower-right\"}", "causal", "\"lower-right\"",
      "\"upper_left\"", "\"lower_right\"");
  BAD("{" QKV3 ",\"causal\":1}", "causal", "allowed");
}
END_TEST

START_TEST(scale_explicit_and_negative) {
  proto_request r;
  OK("{" QKV3 ",\"scale\":0.25}", &r);
  ck_assert_float_eq(r.prob.scale, 0.25f);
  proto_request_free(&r);
  OK("{" QKV3 ",\"scale\":-2}", &r);
  ck_assert_float_eq(r.prob.scale, -2.0f);
  proto_request_free(&r);
}
END_TEST

START_TEST(scale_rejects_zero_and_non_numbers) {
  BAD("{" QKV3 ",\"scale\":0}", "scale: must be non-zero");
  BAD("{" QKV3 ",\"scale\":1e-60}", "scale: must be non-zero");
  BAD("{" QKV3 ",\"scale\":\"0.5\"}", "scale: expected a number");
  BAD("{" QKV3 ",\"scale\":true}", "scale: expected a number", "true");
  BAD("{" QKV3 ",\"scale\":1e39}", "scale", "out of float32 range");
}
END_TEST

START_TEST(return_weights_rejects_non_booleans) {
  BAD("{" QKV3 ",\"return_weights\":1}", "return_weights", "true or false");
}
END_TEST

START_TEST(id_string_and_number_are_echoed_as_json) {
  proto_request r;
  OK("{" QKV3 ",\"id\":\"a\\\"b\\\\c\\n\"}", &r);
  ck_assert_str_eq(r.id_json, "\"a\\\"b\\\\c\\n\"");
  proto_request_free(&r);
  OK("{" QKV3 ",\"id\":12345678901}", &r);
  ck_assert_str_eq(r.id_json, "12345678901");
  proto_request_free(&r);
  OK("{" QKV3 ",\"id\":0.1}", &r);
  ck_assert_str_eq(r.id_json, "0.1");
  proto_request_free(&r);
}
END_TEST

/* A number id is echoed as written, not as its double prints: past 2^53
 * the double is another integer, and 1.0 or 1e2 are the client's. */
START_TEST(id_number_is_echoed_as_written) {
  static const char *const ids[] = {"9007199254740993", "1.0", "1e2", "-0",
                                     "12345678901234567890123", "1.5E+300"};
  proto_request r;
  char body[256];
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    snprintf(body, sizeof body, "{\"id\" : %s ," QKV3 "}", ids[i]);
    OK(body, &r);
    ck_assert_str_eq(r.id_json, ids[i]);
    proto_request_free(&r);
  }
  /* the member found by its name with escapes resolved, after a tensor */
  OK("{" QKV3 ",\"i\\u0064\":9007199254740993}", &r);
  ck_assert_str_eq(r.id_json, "9007199254740993");
  proto_request_free(&r);
  char big[600];
  snprintf(big, sizeof big, "{" QKV3 ",\"id\":1%0300d}", 0);
  BAD(big, "id: a number of 301 characters; the limit is 256");
}
END_TEST

START_TEST(id_rejects_other_types) {
  BAD("{" QKV3 ",\"id\":true}", "id: expected a string or", "true");
  BAD("{" QKV3 ",\"id\":[1]}", "id:", "an array");
}
END_TEST

/* ---- additive scoring ------------------------------------------------------ */

#define ADD3 "\"query\":[[[1,2]]],\"key\":[[[1,2,3],[4,5,6]]]," \
             "\"value\":[[[1],[2]]]"

START_TEST(additive_decodes_weights_and_allows_other_key_width) {
  proto_request r;
  OK("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0],[0,1],[1,1],[2,2]],"
     "\"w_k\":[[1,0,0],[0,1,0],[0,0,1],[1,1,1]],\"w_v\":[1,-1,0.5,2]}", &r);
  ck_assert_int_eq(r.prob.scoring, ATTN_SCORING_ADDITIVE);
  ck_assert_int_eq(r.prob.Hd, 4);
  ck_assert_int_eq(r.prob.Dk, 3);
  ck_assert_float_eq(r.prob.w_v[2], 0.5f);
  ck_assert_float_eq(r.prob.w_k[11], 1.0f);
  proto_request_free(&r);
}
END_TEST

START_TEST(additive_requires_matching_weights) {
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],\"w_v\":[1]}",
      "w_k: required with scoring \"additive\"");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0,0]],"
      "\"w_k\":[[1,0,0]],\"w_v\":[1]}", "w_q: width 3 does not match query "
      "width 2");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],"
      "\"w_k\":[[1,0]],\"w_v\":[1]}", "w_k: width 2 does not match key "
      "width 3");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],"
      "\"w_k\":[[1,0,0],[0,1,0]],\"w_v\":[1]}", "w_k: 2 rows", "w_q");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],"
      "\"w_k\":[[1,0,0]],\"w_v\":[1,2]}", "w_v: length 2");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],"
      "\"w_k\":[[1,0,0]],\"w_v\":[[1]]}", "w_v: expected rank 1, got 2");
  BAD("{" ADD3 ",\"scoring\":\"additive\",\"w_q\":[[1,0]],"
      "\"w_k\":[[1,0,0]],\"w_v\":[1],\"scale\":2}", "scale",
      "only valid with scoring \"dot\"");
}
END_TEST

START_TEST(dot_scoring_rejects_additive_weights) {
  BAD("{" QKV3 ",\"w_q\":[[1,0]]}",
      "w_q: only valid with scoring \"additive\"");
  BAD("{" QKV3 ",\"scoring\":\"dot\",\"w_v\":[1]}",
      "w_v: only valid with scoring \"additive\"");
  BAD("{" QKV3 ",\"scoring\":\"bahdanau\"}", "scoring", "\"dot\"",
      "\"additive\"");
}
END_TEST

/* ---- dropout and window ---------------------------------------------------- */

START_TEST(dropout_p_and_seed) {
  proto_request r;
  OK("{" QKV3 ",\"dropout\":{\"p\":0.25,\"seed\":9007199254740992}}", &r);
  ck_assert_float_eq(r.prob.dropout_p, 0.25f);
  ck_assert_uint_eq(r.prob.seed, 9007199254740992ull);
  proto_request_free(&r);
  OK("{" QKV3 ",\"dropout\":{\"seed\":7,\"p\":0}}", &r);
  ck_assert_float_eq(r.prob.dropout_p, 0.0f);
  ck_assert_uint_eq(r.prob.seed, 7);
  proto_request_free(&r);
  /* whole numbers however written, exactly */
  static const char *const seeds[] = {"2.0", "0.2e1", "200e-2", "-0",
                                      "90071992547409920e-1"};
  static const uint64_t want[] = {2, 2, 2, 0, 9007199254740992ull};
  char body[256];
  for (int i = 0; i < 5; i++) {
    snprintf(body, sizeof body, "{" QKV3 ",\"dropout\":{\"p\":0.1,"
             "\"seed\":%s}}", seeds[i]);
    OK(body, &r);
    ck_assert_uint_eq(r.prob.seed, want[i]);
    proto_request_free(&r);
  }
}
END_TEST

START_TEST(dropout_rejects_bad_values) {
  BAD("{" QKV3 ",\"dropout\":{\"p\":1,\"seed\":1}}", "dropout.p", "[0, 1)");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.99999999999}}", "dropout.p");
  BAD("{" QKV3 ",\"dropout\":{\"p\":-0.1}}", "dropout.p");
  BAD("{" QKV3 ",\"dropout\":{\"p\":true}}", "dropout.p");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":1.5}}", "dropout.seed");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":-1}}", "dropout.seed");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":9007199254740994}}",
      "dropout.seed", "2^53");
  /* decimals whose double is a whole number in range, but not they */
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":9007199254740993}}",
      "dropout.seed: must be an integer in [0, 2^53], got 9007199254740993");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":9007199254740992.5}}",
      "dropout.seed", "2^53");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":1.00000000000000001}}",
      "dropout.seed", "1.00000000000000001");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"seed\":null}}",
      "dropout.seed: must be an integer in [0, 2^53], got null");
  BAD("{" QKV3 ",\"window\":[9007199254740993,0]}", "window");
  BAD("{" QKV3 ",\"dropout\":{\"seed\":1}}", "dropout", "\"p\" is required");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"sead\":1}}", "dropout",
      "unknown field 'sead'");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"p\":0.2}}", "dropout",
      "duplicate field 'p'");
  BAD("{" QKV3 ",\"dropout\":0.1}", "dropout", "expected");
}
END_TEST

START_TEST(window_sides_and_unbounded) {
  proto_request r;
  OK("{" QKV3 ",\"window\":[1,null]}", &r);
  ck_assert_int_eq(r.prob.has_window, 1);
  ck_assert_int_eq(r.prob.window_left, 1);
  ck_assert_int_eq(r.prob.window_right, -1);
  proto_request_free(&r);
  /* wider than the problem: same window, clamped so i + right cannot wrap */
  OK("{" QKV3 ",\"window\":[0,1e15]}", &r);
  ck_assert_int_eq(r.prob.window_left, 0);
  ck_assert_int_eq(r.prob.window_right, 3);
  proto_request_free(&r);
}
END_TEST

START_TEST(window_rejects_bad_values) {
  BAD("{" QKV3 ",\"window\":[-1,0]}", "window[0]", "integer in [0, 2^53]");
  /* a non-negative integer, but past what a double holds exactly */
  BAD("{" QKV3 ",\"window\":[9007199254740994,0]}", "window[0]",
      "integer in [0, 2^53]");
  BAD("{" QKV3 ",\"window\":[1,0.5]}", "window[1]");
  BAD("{" QKV3 ",\"window\":[1]}", "window: expected [left, right]");
  BAD("{" QKV3 ",\"window\":{\"left\":1}}", "window: expected");
}
END_TEST

/* A misspelt field is refused with the nearest name and the list. */
START_TEST(unknown_field_suggests_the_nearest_and_lists_the_fields) {
  BAD("{\"querry\":[[[1]]],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "unknown field 'querry' (did you mean 'query'? fields: query, key, "
      "value, valid_lens, mask, bias, causal, scale, return_weights, id, "
      "scoring, w_q, w_k, w_v, dropout, window, diagnostics, sinks, "
      "softcap, alibi_slopes, cu_seqlens_q, cu_seqlens_k, return_lse, "
      "window_align, precision)");
  BAD("{" QKV3 ",\"vaild_lens\":[1,1]}", "did you mean 'valid_lens'?");
  BAD("{" QKV3 ",\"Query\":1}", "did you mean 'query'?");
  BAD("{" QKV3 ",\"causl\":true}", "unknown field 'causl' (did you mean "
      "'causal'?");
  BAD("{" QKV3 ",\"return_weight\":false}", "did you mean "
      "'return_weights'?");
  /* nothing near: the list alone */
  BAD("{" QKV3 ",\"temperature\":2}", "unknown field 'temperature' "
      "(fields: query,");
  BAD("{" QKV3 ",\"dropout\":{\"p\":0.1,\"sead\":3}}",
      "dropout: unknown field 'sead' (did you mean 'seed'? allowed: p, "
      "seed)");
  BAD("{\"query\":{\"shap\":[1,1,1],\"data\":[1]},\"key\":[[[1]]],"
      "\"value\":[[[1]]]}", "query: unknown field 'shap' (did you mean "
      "'shape'? a tensor object has: shape, data)");
}
END_TEST

START_TEST(edit_distance_counts_edits_and_swaps) {
  ck_assert_int_eq(proto__edit_distance("causal", "causal"), 0);
  ck_assert_int_eq(proto__edit_distance("causl", "causal"), 1);
  ck_assert_int_eq(proto__edit_distance("casual", "causal"), 1); /* swap */
  ck_assert_int_eq(proto__edit_distance("vaild_lens", "valid_lens"), 1);
  ck_assert_int_eq(proto__edit_distance("QUERY", "query"), 0); /* case */
  ck_assert_int_eq(proto__edit_distance("", "seed"), 4);
  ck_assert_int_eq(proto__edit_distance("seed", ""), 4);
  ck_assert_int_eq(proto__edit_distance("kitten", "sitting"), 3);
  ck_assert_int_eq(proto__edit_distance("ca", "abc"), 3); /* restricted */
  char long_name[80];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  ck_assert_int_eq(proto__edit_distance(long_name, "a"), -1);
}
END_TEST

START_TEST(suggestion_is_the_nearest_within_a_third_of_its_length) {
  static const char *const names[] = {"causal", "scale", "seed",
                                      "timeout", "binary_data_output"};
  ck_assert_int_eq(proto__suggest("causl", names, 5), 0);
  ck_assert_int_eq(proto__suggest("cale", names, 5), 1);
  ck_assert_int_eq(proto__suggest("seeed", names, 5), 2);
  ck_assert_int_eq(proto__suggest("timeout_us", names, 5), -1);
  ck_assert_int_eq(proto__suggest("binary_output", names, 5), -1);
  ck_assert_int_eq(proto__suggest("binary_data_outptu", names, 5), 4);
  ck_assert_int_eq(proto__suggest("x", names, 5), -1);
  ck_assert_int_eq(proto__suggest("", names, 5), -1);
  char s[PROTO__HINT_MAX];
  proto__hint(s, sizeof s, "sed", names, 5, "names", names, 3);
  ck_assert_str_eq(s, "did you mean 'seed'? names: causal, scale, seed");
  proto__hint(s, sizeof s, "zzz", names, 5, "names", names, 2);
  ck_assert_str_eq(s, "names: causal, scale");
  /* a small buffer is cut, not overrun */
  proto__hint(s, 12, "sed", names, 5, "names", names, 5);
  ck_assert_uint_eq(strlen(s), 11);
  ck_assert_uint_eq(proto__names_join(s, 8, names, 5), 7);
  ck_assert_str_eq(s, "causal,");
}
END_TEST

/* ---- element budget --------------------------------------------------------- */

START_TEST(element_budget_counts_inputs_and_outputs) {
  const char *json = "{" QKV3 "}"; /* 26 inputs + 16 outputs = 42 */
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &r, 42, err), 0);
  proto_request_free(&r);
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &r, 41, err),
                   ATTND_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(err, "limit"));
  ck_assert_int_eq(r.n_owned, 0);
}
END_TEST

START_TEST(element_budget_bounds_weights_of_small_inputs) {
  /* Lq = Lk = 3000 with D = 1: 9,000 inputs but 9,000,000 weights */
  proto_request r;
  char err[PROTO_ERR_MAX];
  const char *json = "{\"query\":{\"shape\":[1,3000,1],\"data\":[%s]},"
                     "\"key\":{\"shape\":[1,3000,1],\"data\":[%s]},"
                     "\"value\":{\"shape\":[1,3000,1],\"data\":[%s]}}";
  char *ones = malloc(6000);
  for (int i = 0; i < 3000; i++)
    ones[2 * i] = '1', ones[2 * i + 1] = ',';
  ones[5999] = '\0';
  size_t cap = strlen(json) + 3 * 6000;
  char *body = malloc(cap);
  int n = snprintf(body, cap, json, ones, ones, ones);
  ck_assert_int_eq(proto_v1_decode(body, (size_t)n, &r, 1000000, err),
                   ATTND_ETOOBIG);
  ck_assert_ptr_nonnull(strstr(err, "limit"));
  free(body);
  free(ones);
}
END_TEST

START_TEST(element_budget_rejects_huge_bodies_before_parsing) {
  size_t count = 200000, len = 2 * count + 16;
  char *body = malloc(len);
  size_t n = (size_t)sprintf(body, "{\"query\":[");
  for (size_t i = 0; i < count; i++)
    body[n++] = '0', body[n++] = ',';
  proto_request r;
  char err[PROTO_ERR_MAX];
  /* truncated on purpose: the comma count alone must answer ETOOBIG */
  ck_assert_int_eq(proto_v1_decode(body, n, &r, 1000, err), ATTND_ETOOBIG);
  free(body);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

int main(void) {
  support_case cases[] = {
    {"forms", {nested_rank3_gives_shapes_and_values,
               flat_rank4_gives_shapes_and_values,
               flat_shape_axes_are_whole_as_written,
               forms_mix_and_response_follows_query,
               grouped_heads_are_accepted, defaults_and_buffers,
               return_weights_false_skips_weights_buffer,
               null_optional_fields_are_absent}},
    {"valid_lens", {valid_lens_per_item, valid_lens_per_query_and_flat,
                    valid_lens_rejects_non_integers,
                    valid_lens_rejects_out_of_range,
                    valid_lens_rejects_wrong_shape}},
    {"mask_bias", {mask_full_shape_has_contiguous_strides,
                   mask_missing_and_unit_axes_broadcast,
                   mask_rank4_head_axis_strides,
                   mask_that_does_not_broadcast_is_named,
                   mask_rejects_non_booleans, mask_and_causal_compose,
                   bias_broadcasts_with_float_values}},
    {"options", {causal_values, causal_unknown_value_names_allowed_values,
                 scale_explicit_and_negative,
                 scale_rejects_zero_and_non_numbers,
                 return_weights_rejects_non_booleans,
                 id_string_and_number_are_echoed_as_json,
                 id_number_is_echoed_as_written,
                 id_rejects_other_types,
                 additive_decodes_weights_and_allows_other_key_width,
                 additive_requires_matching_weights,
                 dot_scoring_rejects_additive_weights, dropout_p_and_seed,
                 dropout_rejects_bad_values, window_sides_and_unbounded,
                 window_rejects_bad_values}},
    {"names", {unknown_field_suggests_the_nearest_and_lists_the_fields,
               edit_distance_counts_edits_and_swaps,
               suggestion_is_the_nearest_within_a_third_of_its_length}},
    {"budget", {element_budget_counts_inputs_and_outputs,
                element_budget_bounds_weights_of_small_inputs,
                element_budget_rejects_huge_bodies_before_parsing}},
  };
  return support_run("proto", cases, sizeof cases / sizeof cases[0]);
}
