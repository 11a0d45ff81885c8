/* test_proto.c - the /v1/attention JSON codec: decoding both tensor forms
 * and every field, broadcast strides, every malformed input (ATTND_EINVAL
 * and a message naming the field and the problem), the element budget,
 * encoding parsed back with cJSON, error-body escaping, and a round trip
 * through the core checked against a float64 reference computed from the
 * request's own JSON. */
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

/* ---- helpers ------------------------------------------------------------- */

static int dec(const char *json, proto_request *r, char *err) {
  return proto_v1_decode(json, strlen(json), r, 0, err);
}

/* Asserts that json is rejected with ATTND_EINVAL, that the request holds
 * nothing afterwards, and that the message contains every phrase given. */
#define BAD(json, ...) bad_input(json, __LINE__, (const char *[]){__VA_ARGS__, NULL})
static void bad_input(const char *json, int line, const char **phrases) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = dec(json, &r, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d for %s", line, rc, json);
  ck_assert_int_eq(r.n_owned, 0);
  ck_assert_ptr_null(r.out);
  for (const char **p = phrases; *p; p++)
    ck_assert_msg(strstr(err, *p), "line %d: message \"%s\" lacks \"%s\"",
                  line, err, *p);
  proto_request_free(&r);
}

#define OK(json, r)                                                        \
  do {                                                                     \
    char err_[PROTO_ERR_MAX];                                              \
    int rc_ = dec(json, r, err_);                                          \
    ck_assert_msg(rc_ == 0, "rc %d: %s", rc_, err_);                       \
  } while (0)

/* A valid rank-3 request: B=2, Lq=2, Lk=3, D=2, Dv=1, with extra fields. */
#define QKV3 "\"query\":[[[1,2],[3,4]],[[5,6],[7,8]]]," \
             "\"key\":[[[1,0],[0,1],[1,1]],[[2,0],[0,2],[1,0]]]," \
             "\"value\":[[[1],[2],[3]],[[4],[5],[6]]]"

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

/* ---- fields and body ------------------------------------------------------- */

START_TEST(unknown_field_is_named) {
  BAD("{" QKV3 ",\"vaild_lens\":[1,1]}", "unknown field 'vaild_lens'");
  BAD("{" QKV3 ",\"Query\":1}", "unknown field 'Query'");
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

START_TEST(duplicate_fields_at_every_level) {
  BAD("{" QKV3 ",\"query\":[[[1,2]]]}", "duplicate field 'query'");
  BAD("{" QKV3 ",\"mask\":null,\"mask\":null}", "duplicate field 'mask'");
  BAD("{\"query\":{\"shape\":[1,1,1],\"shape\":[1,1,1],\"data\":[1]},"
      "\"key\":[[[1]]],\"value\":[[[1]]]}", "query: duplicate field 'shape'");
}
END_TEST

START_TEST(missing_required_tensors) {
  BAD("{\"key\":[[[1]]],\"value\":[[[1]]]}", "query: required field is "
      "missing");
  BAD("{\"query\":[[[1]]],\"value\":[[[1]]]}", "key: required");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":null}", "value: "
      "required field is null");
}
END_TEST

START_TEST(body_errors_are_clear) {
  BAD("", "empty body");
  BAD(" \n\t ", "empty body");
  BAD("{\"query\":", "not valid JSON");
  BAD("query=1", "not valid JSON");
  BAD("[1,2,3]", "must be a JSON object", "an array");
  BAD("42", "must be a JSON object");
  BAD("{" QKV3 "} x", "unexpected data after the JSON object");
  BAD("{" QKV3 "}{}", "unexpected data after the JSON object");
}
END_TEST

START_TEST(body_is_read_by_length_not_nul) {
  const char *json = "{" QKV3 "}  \n";
  size_t len = strlen(json);
  char *buf = malloc(len + 8);
  memcpy(buf, json, len);
  memcpy(buf + len, "garbage!", 8); /* no NUL anywhere after the body */
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v1_decode(buf, len, &r, 0, err), 0);
  proto_request_free(&r);
  ck_assert_int_eq(proto_v1_decode(buf, len + 8, &r, 0, err), ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "unexpected data"));
  proto_request_free(&r);
  free(buf);
}
END_TEST

/* Python's json.dumps writes NaN, Infinity and -Infinity for a float that
 * is not finite: the message names the value's place and says why, on
 * attnd's own number reader (tensor arrays) and on cJSON's (elsewhere)
 * alike; a NaN deep in a long row (the vector scans) is named as well. */
START_TEST(non_finite_literals_name_their_place) {
  BAD("{\"query\":[[[1,2],[3,NaN]]],\"key\":[[[1,0]]],\"value\":[[[1]]]}",
      "query[0][1][1]: NaN is not a JSON number; attnd needs finite values");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[Infinity,0]]],\"value\":[[[1]]]}",
      "key[0][0][0]: Infinity is not a JSON number; attnd needs finite "
      "values");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,0]]],\"value\":{\"shape\":"
      "[1,1,1],\"data\":[-Infinity]}}",
      "value.data[0]: -Infinity is not a JSON number");
  BAD("{" QKV3 ",\"scale\":NaN}", "scale: NaN is not a JSON number");
  BAD("{" QKV3 ",\"bias\":[0,NaN,1]}", "bias[1]: NaN is not");
  BAD("{" QKV3 ",\"valid_lens\":[1,NaN]}", "valid_lens[1]: NaN is not");
  BAD("{" QKV3 ",\"dropout\":{\"p\":NaN}}", "dropout.p: NaN is not");
  BAD("[1,[NaN]]", "body[1][0]: NaN is not a JSON number");
  BAD("NaN", "body: NaN is not a JSON number");
  /* a name where a member name belongs is not a value */
  BAD("{NaN:1}", "body is not valid JSON at byte 1: expected a member "
      "name");
  /* row 0 of 200 numbers, the NaN at 137 */
  char json[4096];
  size_t o = (size_t)snprintf(json, sizeof json, "{\"query\":[[[");
  for (int i = 0; i < 200; i++)
    o += (size_t)snprintf(json + o, sizeof json - o, "%s%s", i ? "," : "",
                          i == 137 ? "NaN" : "0.125");
  snprintf(json + o, sizeof json - o, "]]],\"key\":[[[1]]],\"value\":"
           "[[[1]]]}");
  BAD(json, "query[0][0][137]: NaN is not a JSON number");
}
END_TEST

/* Exactly the message for a syntax error: the byte and the reason. */
static void syntax_err(const char *json, size_t len, const char *want,
                       int line) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode(json, len, &r, 0, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d", line, rc);
  ck_assert_msg(!strcmp(err, want), "line %d: \"%s\", want \"%s\"", line,
                err, want);
}
#define SYNTAX(json, want) syntax_err(json, strlen(json), want, __LINE__)

/* Every kind of syntax error is refused by the one-pass check with its
 * byte and its reason, inside the numbers of a tensor too (which the
 * check reads lazily, then token by token once the decode fails). */
START_TEST(syntax_errors_name_the_byte_and_the_reason) {
  const char *pre = "body is not valid JSON at byte ";
  char want[PROTO_ERR_MAX];
  static const struct { const char *json; int at; const char *why; } cases[] = {
    {"{\"query\":[[[1]]],\"id\": }", 23, "expected a value, got '}'"},
    {"{\"query\":[[[1]]],}", 17,
     "expected a member name (a string in double quotes), got '}'"},
    {"{\"query\" [[[1]]]}", 9, "expected ':' after the member name, got '['"},
    {"{\"query\":[[[1]]]", 16, "expected ',' or '}', got the end of the body"},
    {"{\"query\":[[[1]]}", 15, "expected ',' or ']', got '}'"},
    {"{\"query\":[[[1,2 3]]]}", 16, "expected ',' or ']', got '3'"},
    {"{\"query\":[[[1,]]]}", 14, "expected a value, got ']'"},
    {"{\"query\":[[[1,,2]]]}", 14, "expected a value, got ','"},
    {"{\"query\":[[[1,\x01 2]]]}", 14, "expected a value, got byte 0x01"},
    {"{\"query\":[[[1,01]]]}", 14, "01 is not a JSON number"},
    {"{\"query\":[[[1.]]]}", 12, "1. is not a JSON number"},
    {"{\"query\":[[[-.5]]]}", 12, "-.5 is not a JSON number"},
    {"{\"query\":[[[1e+]]]}", 12, "1e+ is not a JSON number"},
    {"{\"query\":[[[+1]]]}", 12, "expected a value, got '+'"},
    {"{\"query\":[[[tru]]]}", 12, "expected true, got 't'"},
    {"{\"causal\":nul}", 10, "expected null, got 'n'"},
    {"{\"id\":\"abc}", 6,
     "the string that starts there has no closing '\"'"},
    {"{\"id\":\"a\tb\"}", 8,
     "control byte 0x09 in a string (write it as an escape, \\u0009)"},
    {"{\"id\":\"a\\qb\"}", 8, "not a JSON escape (\\\" \\\\ \\/ \\b \\f "
     "\\n \\r \\t or \\u and four hex digits)"},
    {"{\"id\":\"\\u12g4\"}", 7, "not a JSON escape (\\\" \\\\ \\/ \\b "
     "\\f \\n \\r \\t or \\u and four hex digits)"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snprintf(want, sizeof want, "%s%d: %s", pre, cases[k].at, cases[k].why);
    SYNTAX(cases[k].json, want);
  }
  SYNTAX("", "empty body: expected a JSON object with query, key and value");
  SYNTAX("{} x", "body has unexpected data after the JSON object at byte 3");
  SYNTAX("[1,2]", "body must be a JSON object, got an array");
  /* a syntax error inside a long list of numbers, behind a field the
   * decode would refuse first: the syntax error is the answer */
  char json[8192];
  size_t o = (size_t)snprintf(json, sizeof json, "{\"nope\":1,\"query\":[[[");
  for (int i = 0; i < 1000; i++)
    o += (size_t)snprintf(json + o, sizeof json - o, "%s%s", i ? "," : "",
                          i == 900 ? "1 2" : "0.5");
  snprintf(json + o, sizeof json - o, "]]]}");
  size_t at = (size_t)(strstr(json, "1 2") - json) + 2;
  snprintf(want, sizeof want, "%s%zu: expected ',' or ']', got '2'", pre, at);
  syntax_err(json, strlen(json), want, __LINE__);
  /* the same on the v2 codec, with where it is */
  static const char v2[] = "{\"inputs\":[{\"name\":\"query\",\"datatype\":"
                           "\"FP32\",\"shape\":[2],\"data\":[1,2 3]}]}";
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v2_decode(v2, sizeof v2 - 1, NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON at byte 69: expected ',' or "
                   "']', got '3'");
}
END_TEST

/* A holder of a budget of hold_cap bytes, for mem_hold. */
static size_t held_bytes, hold_cap;
static int hold_some(void *arg, size_t n) {
  (void)arg;
  if (n > hold_cap - held_bytes)
    return MEM_HOLD_BUSY;
  held_bytes += n;
  return 0;
}

/* A body of 2000 rows of 64 numbers (key and value), its tail as given. */
static char *rows_body(const char *tail, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"query\":[[[");
  for (int i = 0; i < 64; i++)
    proto__buf_puts(&b, i ? ",0.5" : "0.5");
  proto__buf_puts(&b, "]]]");
  for (int t = 0; t < 2; t++) {
    proto__buf_puts(&b, t ? ",\"value\":[[" : ",\"key\":[[");
    for (int r = 0; r < 2000; r++) {
      proto__buf_puts(&b, r ? ",[" : "[");
      for (int i = 0; i < 64; i++)
        proto__buf_puts(&b, i ? ",1" : "1");
      proto__buf_puts(&b, "]");
    }
    proto__buf_puts(&b, "]]");
  }
  proto__buf_puts(&b, tail);
  ck_assert(!b.oom);
  *len = b.len;
  return b.p;
}

/* What the decode allocates is held first (mem_hold): at least its
 * tensors; a holder that refuses gets a 503's message naming the flag; a
 * body that is not JSON holds nothing. */
START_TEST(decoding_holds_what_it_allocates) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  size_t len;
  char *ok = rows_body(",\"id\":\"x\"}", &len);
  mem_hold_begin(hold_some, NULL);
  held_bytes = 0;
  hold_cap = SIZE_MAX;
  ck_assert_int_eq(proto_v1_decode(ok, len, &r, 0, err), 0);
  size_t need = held_bytes;
  ck_assert_msg(need >= r.in_bytes + r.out_bytes, "held %zu of %zu", need,
                r.in_bytes + r.out_bytes);
  proto_request_free(&r);
  held_bytes = 0;
  hold_cap = need / 2;
  ck_assert_int_eq(proto_v1_decode(ok, len, &r, 0, err), ATTND_EBUSY);
  ck_assert_msg(strstr(err, "decoding the request needs") &&
                strstr(err, "--max-inflight-mb"), "%s", err);
  ck_assert_int_eq(r.n_owned, 0);
  mem_free(ok);
  char *bad = rows_body(",\"id\": }", &len);
  held_bytes = 0;
  hold_cap = SIZE_MAX;
  ck_assert_int_eq(proto_v1_decode(bad, len, &r, 0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "expected a value, got '}'"), "%s", err);
  ck_assert_int_eq(held_bytes, 0);
  mem_hold_end();
  mem_free(bad);
}
END_TEST

/* Nesting deeper than the reader's limit says so, with the limit; at the
 * limit the body is read (and refused for what it holds). */
START_TEST(nesting_deeper_than_the_limit_names_it) {
  static char json[2 * PROTO_JSON_MAX_DEPTH + 64];
  proto_request r;
  char err[PROTO_ERR_MAX], want[PROTO_ERR_MAX];
  for (int depth = PROTO_JSON_MAX_DEPTH; depth <= PROTO_JSON_MAX_DEPTH + 1;
       depth++) {
    size_t o = (size_t)snprintf(json, sizeof json, "{\"id\":");
    for (int i = 1; i < depth; i++)
      json[o++] = '[';
    for (int i = 1; i < depth; i++)
      json[o++] = ']';
    json[o++] = '}';
    int rc = proto_v1_decode(json, o, &r, 0, err);
    ck_assert_int_eq(rc, ATTND_EINVAL);
    if (depth == PROTO_JSON_MAX_DEPTH) {
      ck_assert_msg(!strstr(err, "deeper") && !strstr(err, "not valid"),
                    "%s", err);
    } else {
      snprintf(want, sizeof want, "body is nested %d levels deep at byte "
               "%d; the limit is %d levels", PROTO_JSON_MAX_DEPTH + 1,
               6 + PROTO_JSON_MAX_DEPTH - 1, PROTO_JSON_MAX_DEPTH);
      ck_assert_str_eq(err, want);
    }
  }
}
END_TEST

/* cJSON skips every byte up to 0x20 as a blank, NUL too; the message
 * points at the first NUL, not where cJSON gave up. */
START_TEST(nul_bytes_are_pointed_at) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  static const char nuls[16] = {0};
  ck_assert_int_eq(proto_v1_decode(nuls, sizeof nuls, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON: byte 0 is a NUL (0x00); "
                   "JSON allows only spaces, tabs and line breaks between "
                   "tokens");
  static const char mid[] = "{\"query\": \0[[[1]]], \"key\"";
  ck_assert_int_eq(proto_v1_decode(mid, sizeof mid - 1, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "byte 10 is a NUL (0x00)"));
  /* a float32 1.0 sent as it is */
  static const char raw[4] = {0, 0, (char)0x80, 0x3f};
  ck_assert_int_eq(proto_v1_decode(raw, 4, &r, 0, err), ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "byte 0 is a NUL"));
  /* a NUL after the first bad byte is not the error */
  static const char late[] = "{\"query\" [[[1]]]\0";
  ck_assert_int_eq(proto_v1_decode(late, sizeof late - 1, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON at byte 9: expected ':' "
                   "after the member name, got '['");
}
END_TEST

/* ---- numbers and shapes ---------------------------------------------------- */
/* ---- numbers and shapes ---------------------------------------------------- */

START_TEST(booleans_strings_and_nulls_are_not_numbers) {
  BAD("{\"query\":[[[1,2,3],[1,2,true]]],\"key\":[[[1,2,3]]],"
      "\"value\":[[[1]]]}", "query: expected a number at [0][1][2], got true");
  BAD("{\"query\":[[[1]]],\"key\":[[[\"1\"]]],\"value\":[[[1]]]}",
      "key: expected a number at [0][0][0], got a string");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[[null]]]}",
      "value: expected a number at [0][0][0], got null");
  BAD("{\"query\":{\"shape\":[1,1,2],\"data\":[1,false]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: expected a number at [0][0][1], got "
      "false");
  BAD("{\"query\":[[[1,[2]]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
      "query: expected a number at [0][0][1], got an array");
}
END_TEST

START_TEST(numbers_beyond_float_range_are_rejected) {
  BAD("{\"query\":[[[1,1e39]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
      "query[0][0][1]: 1e39 is out of float32 range");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,-4e38]]],\"value\":[[[1]]]}",
      "key[0][0][1]", "out of float32 range");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1e999]]]}",
      "value[0][0][0]", "out of float32 range");
}
END_TEST

START_TEST(ragged_arrays_name_the_position) {
  BAD("{\"query\":[[[1,2],[1,2],[1,2],[1]]],\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: ragged array at [0][3]");
  BAD("{\"query\":[[[1,2]],[[1,2],[3,4]]],\"key\":[[[1,2]],[[1,2]]],"
      "\"value\":[[[1]],[[1]]]}", "query: ragged array at [1]");
  BAD("{\"query\":[[[1,2]],3],\"key\":[[[1,2]],[[1,2]]],"
      "\"value\":[[[1]],[[1]]]}",
      "query: ragged array at [1]", "got 3");
}
END_TEST

START_TEST(wrong_ranks_are_named) {
  BAD("{\"query\":[[1,2]],\"key\":[[1,2]],\"value\":[[1]]}",
      "query: expected rank 3 or 4, got 2");
  BAD("{\"query\":[[[[[1]]]]],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: expected rank", "got 5");
  BAD("{\"query\":[[[1]]],\"key\":[[[[1]]]],\"value\":[[[1]]]}",
      "key: expected rank 3 like query, got 4");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[1]]}",
      "value: expected rank 3 like query, got 2");
  BAD("{\"query\":1,\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: expected a tensor", "got 1");
}
END_TEST

START_TEST(shape_mismatches_are_named) {
  BAD("{\"query\":{\"shape\":[1,1,32],\"data\":[" 
      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},"
      "\"key\":{\"shape\":[1,1,31],\"data\":["
      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},"
      "\"value\":[[[1]]]}", "key: width 31 does not match query width 32");
  BAD("{\"query\":[[[1]],[[1]]],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "key: batch 1 does not match query batch 2");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[[1]],[[1]]]}",
      "value: batch 2 does not match query batch 1");
  BAD("{\"query\":[[[1]]],\"key\":[[[1],[2]]],\"value\":[[[1]]]}",
      "value: length 1 does not match key length 2");
  BAD("{\"query\":[[[[1]],[[1]],[[1]]]],\"key\":[[[[1]],[[1]]]],"
      "\"value\":[[[[1]],[[1]]]]}", "key: 2 heads", "query heads 3");
  BAD("{\"query\":[[[[1]],[[1]]]],\"key\":[[[[1]],[[1]]]],"
      "\"value\":[[[[1]]]]}", "value: 1 heads do not match key heads 2");
}
END_TEST

START_TEST(empty_tensors_name_field_and_axis) {
  BAD("{\"query\":[],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: axis 0 is empty");
  BAD("{\"query\":[[[1]]],\"key\":[[[]]],\"value\":[[[1]]]}",
      "key: axis 2 is empty");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":{\"shape\":[1,0,1],"
      "\"data\":[]}}", "value: axis 1 is empty");
  BAD("{" QKV3 ",\"mask\":[]}", "mask: axis 0 is empty");
}
END_TEST

START_TEST(flat_form_errors) {
  BAD("{\"query\":{\"shape\":[1,2,2],\"data\":[1,2,3]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query", "\"data\" has 3 elements", "[1,2,2]",
      "needs 4");
  BAD("{\"query\":{\"shape\":[1,-2,2],\"data\":[1]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: shape[1]=-2 is negative");
  BAD("{\"query\":{\"shape\":[1,1.5,2],\"data\":[1]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: shape[1] must be an integer");
  BAD("{\"query\":{\"shape\":[1,1,1]},\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query", "needs both \"shape\" and \"data\"");
  BAD("{\"query\":{\"shape\":[1,1,1],\"data\":[1],\"dtype\":\"f32\"},"
      "\"key\":[[[1]]],\"value\":[[[1]]]}", "query: unknown field 'dtype'");
  BAD("{\"query\":{\"shape\":[1,1,1],\"data\":1},\"key\":[[[1]]],"
      "\"value\":[[[1]]]}", "query", "\"data\" must be an array");
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

/* ---- failure paths leak nothing ---------------------------------------------- */

START_TEST(late_failures_free_earlier_buffers) {
  /* each fails after q, k and v were allocated and filled */
  BAD("{" QKV3 ",\"valid_lens\":[1,4]}", "valid_lens[1]=4");
  BAD("{" QKV3 ",\"mask\":[true,false,7]}", "mask");
  BAD("{" QKV3 ",\"bias\":[1,2,1e40]}", "bias[2]");
  BAD("{" QKV3 ",\"id\":{}}", "id");
  /* a partially decoded request is freed by the decoder and stays safe to
   * free again */
  proto_request r;
  char err[PROTO_ERR_MAX];
  const char *j = "{" QKV3 ",\"valid_lens\":[1,4]}";
  ck_assert_int_eq(proto_v1_decode(j, strlen(j), &r, 0, err), ATTND_EINVAL);
  proto_request_free(&r);
  proto_request_free(&r);
}
END_TEST

/* ---- encoder ----------------------------------------------------------------- */

static cJSON *encode_parse(const proto_request *r) {
  char *body;
  size_t len;
  ck_assert_int_eq(proto_v1_encode(r, &body, &len), 0);
  ck_assert_uint_eq(strlen(body), len);
  cJSON *j = cJSON_ParseWithLength(body, len);
  ck_assert_msg(j != NULL, "not JSON: %s", body);
  free(body);
  return j;
}

/* Fills out and weights with distinct values so that order is visible. */
static void fill_outputs(proto_request *r) {
  const attn_problem *p = &r->prob;
  size_t rows = (size_t)p->B * p->H * p->Lq;
  for (size_t i = 0; i < rows * (size_t)p->Dv; i++)
    r->out[i] = (float)i * 0.5f - 1.0f;
  if (r->weights)
    for (size_t i = 0; i < rows * (size_t)p->Lk; i++)
      r->weights[i] = 1.0f / (float)(i + 3);
}

static double nested_at(const cJSON *j, const int *idx, int rank) {
  for (int d = 0; d < rank; d++) {
    ck_assert(cJSON_IsArray(j));
    j = cJSON_GetArrayItem(j, idx[d]);
    ck_assert_ptr_nonnull(j);
  }
  ck_assert(cJSON_IsNumber(j));
  return j->valuedouble;
}

/* Checks a nested tensor against x with the given dims, element by
 * element, including the array lengths at every level. */
static void check_nested(const cJSON *j, const float *x, const int *dims,
                         int rank) {
  size_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= (size_t)dims[d];
  const cJSON *a = j;
  for (int d = 0; d < rank; d++, a = a->child)
    ck_assert_int_eq(cJSON_GetArraySize(a), dims[d]);
  int idx[4] = {0};
  for (size_t i = 0; i < n; i++) {
    size_t rest = i;
    for (int d = rank - 1; d >= 0; d--) {
      idx[d] = (int)(rest % (size_t)dims[d]);
      rest /= (size_t)dims[d];
    }
    ck_assert((float)nested_at(j, idx, rank) == x[i]);
  }
}

START_TEST(encode_nested_rank3) {
  proto_request r;
  OK("{" QKV3 ",\"id\":\"req-7\"}", &r);
  fill_outputs(&r);
  cJSON *j = encode_parse(&r);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "id")->valuestring, "req-7");
  check_nested(cJSON_GetObjectItem(j, "output"), r.out, (int[]){2, 2, 1}, 3);
  check_nested(cJSON_GetObjectItem(j, "weights"), r.weights,
               (int[]){2, 2, 3}, 3);
  cJSON_Delete(j);
  proto_request_free(&r);
}
END_TEST

START_TEST(encode_nested_rank4) {
  proto_request r;
  OK("{\"query\":[[[[1],[2]],[[3],[4]],[[5],[6]]]],"
     "\"key\":[[[[1],[2],[3]]]],\"value\":[[[[1,2],[3,4],[5,6]]]],"
     "\"id\":17}", &r);
  fill_outputs(&r);
  cJSON *j = encode_parse(&r);
  ck_assert(cJSON_GetObjectItem(j, "id")->valuedouble == 17);
  check_nested(cJSON_GetObjectItem(j, "output"), r.out, (int[]){1, 3, 2, 2},
               4);
  check_nested(cJSON_GetObjectItem(j, "weights"), r.weights,
               (int[]){1, 3, 2, 3}, 4);
  cJSON_Delete(j);
  proto_request_free(&r);
}
END_TEST

static void check_flat(const cJSON *t, const float *x, const int *dims,
                       int rank) {
  const cJSON *shape = cJSON_GetObjectItem(t, "shape");
  const cJSON *data = cJSON_GetObjectItem(t, "data");
  ck_assert_int_eq(cJSON_GetArraySize(t), 2);
  ck_assert_int_eq(cJSON_GetArraySize(shape), rank);
  size_t n = 1;
  for (int d = 0; d < rank; d++) {
    ck_assert(cJSON_GetArrayItem(shape, d)->valuedouble == dims[d]);
    n *= (size_t)dims[d];
  }
  ck_assert_int_eq(cJSON_GetArraySize(data), (int)n);
  size_t i = 0;
  for (const cJSON *e = data->child; e; e = e->next, i++)
    ck_assert((float)e->valuedouble == x[i]);
}

START_TEST(encode_flat_and_omits_absent_parts) {
  proto_request r;
  OK("{\"query\":{\"shape\":[2,1,3],\"data\":[1,2,3,4,5,6]},"
     "\"key\":[[[1,2,3],[4,5,6]],[[1,1,1],[2,2,2]]],"
     "\"value\":[[[1],[2]],[[3],[4]]],\"return_weights\":false}", &r);
  fill_outputs(&r);
  cJSON *j = encode_parse(&r);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "id"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "weights"));
  check_flat(cJSON_GetObjectItem(j, "output"), r.out, (int[]){2, 1, 1}, 3);
  cJSON_Delete(j);
  proto_request_free(&r);
}
END_TEST

START_TEST(encode_flat_rank4_with_weights) {
  proto_request r;
  OK("{\"query\":{\"shape\":[1,2,2,1],\"data\":[1,2,3,4]},"
     "\"key\":[[[[1],[2],[3]],[[4],[5],[6]]]],"
     "\"value\":[[[[1],[2],[3]],[[4],[5],[6]]]]}", &r);
  fill_outputs(&r);
  cJSON *j = encode_parse(&r);
  check_flat(cJSON_GetObjectItem(j, "output"), r.out, (int[]){1, 2, 2, 1}, 4);
  check_flat(cJSON_GetObjectItem(j, "weights"), r.weights,
             (int[]){1, 2, 2, 3}, 4);
  cJSON_Delete(j);
  proto_request_free(&r);
}
END_TEST

START_TEST(floats_print_shortest_round_trip) {
  char s[PROTO__F32_MAX];
  proto__fmt_f32(s, 0.0f);
  ck_assert_str_eq(s, "0");
  proto__fmt_f32(s, -0.0f);
  ck_assert_str_eq(s, "0");
  proto__fmt_f32(s, 0.1f);
  ck_assert_str_eq(s, "0.1");
  proto__fmt_f32(s, 1.0f / 3.0f);
  ck_assert_str_eq(s, "0.33333334");
  proto__fmt_f32(s, 0.25f);
  ck_assert_str_eq(s, "0.25");
  proto__fmt_f32(s, 16777216.0f);
  ck_assert_str_eq(s, "16777216");
  proto__fmt_f32(s, FLT_MAX);
  ck_assert_float_eq(strtof(s, NULL), FLT_MAX);
  proto__fmt_f32(s, NAN);
  ck_assert_str_eq(s, "null");
  /* a sweep over the bit patterns of all finite floats, denormals and the
   * largest included: each text reads back as the same float */
  for (uint64_t bits = 1; bits < 0x100000000ull; bits += 65537) {
    uint32_t b32 = (uint32_t)bits;
    float f;
    memcpy(&f, &b32, sizeof f);
    if (!isfinite(f))
      continue;
    int n = proto__fmt_f32(s, f);
    ck_assert_int_eq(n, (int)strlen(s));
    ck_assert_msg(strtof(s, NULL) == f, "%s != %.9g", s, (double)f);
  }
  proto__fmt_f32(s, 1e-45f);
  ck_assert_str_eq(s, "1e-45");
  proto__fmt_f32(s, -1e38f);
  ck_assert_str_eq(s, "-1e38");
}
END_TEST

START_TEST(floats_are_not_longer_than_needed) {
  /* compared with a brute-force shortest search */
  unsigned x = 777;
  for (int i = 0; i < 5000; i++) {
    x = x * 1103515245u + 12345u;
    float f = (float)(x % 1000000) / 7919.0f - 50.0f;
    if (i % 2)
      f = f * 1e-7f; /* small magnitudes, like most attention weights */
    if (f == 0.0f)
      continue;
    char s[PROTO__F32_MAX], t[PROTO__F32_MAX];
    proto__fmt_f32(s, f);
    int p = 1;
    for (; p <= 9; p++) {
      snprintf(t, sizeof t, "%.*g", p, (double)f);
      if (strtof(t, NULL) == f)
        break;
    }
    ck_assert_msg(strlen(s) <= strlen(t), "%s longer than %s", s, t);
  }
}
END_TEST

START_TEST(integers_print_as_printf_does) {
  static const long long v[] = {0, 1, -1, 9, 10, -10, 99, 100, 2147483647LL,
                                -2147483648LL, 999999999999LL, LLONG_MAX,
                                LLONG_MIN, LLONG_MIN + 1};
  proto__buf b = {0};
  char want[2048] = "";
  size_t n = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    proto__buf_put_i64(&b, v[i]);
    proto__buf_putc(&b, ',');
    n += (size_t)snprintf(want + n, sizeof want - n, "%lld,", v[i]);
  }
  for (long long x = 1; x < LLONG_MAX / 10; x *= 10) /* every digit count */
    for (long long d = -1; d <= 1; d++) {
      proto__buf_put_i64(&b, x + d);
      proto__buf_putc(&b, ',');
      n += (size_t)snprintf(want + n, sizeof want - n, "%lld,", x + d);
    }
  ck_assert(!b.oom && n < sizeof want);
  ck_assert_str_eq(b.p, want);
  proto__buf_free(&b);
}
END_TEST

/* ---- error bodies ------------------------------------------------------------ */

static void check_error_body(const char *msg, const char *want) {
  char *body;
  size_t len;
  ck_assert_int_eq(proto_error_body(msg, &body, &len), 0);
  ck_assert_uint_eq(strlen(body), len);
  cJSON *j = cJSON_ParseWithLength(body, len);
  ck_assert_msg(j != NULL, "not JSON: %s", body);
  ck_assert_int_eq(cJSON_GetArraySize(j), 1);
  ck_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, want);
  cJSON_Delete(j);
  free(body);
}

START_TEST(error_body_escapes_quotes_backslashes_and_controls) {
  check_error_body("unknown field 'a\"b'", "unknown field 'a\"b'");
  check_error_body("path C:\\x", "path C:\\x");
  check_error_body("line\nbreak\ttab\x01", "line\nbreak\ttab\x01");
  check_error_body("caf\xc3\xa9", "caf\xc3\xa9");
  check_error_body("", "");
}
END_TEST

START_TEST(error_body_replaces_invalid_utf8) {
  check_error_body("bad \xff byte", "bad \xef\xbf\xbd byte");
  check_error_body("cut \xc3", "cut \xef\xbf\xbd");
  check_error_body("overlong \xc0\xaf", "overlong \xef\xbf\xbd\xef\xbf\xbd");
}
END_TEST

START_TEST(field_names_in_messages_are_sanitised) {
  char *body;
  size_t len;
  proto_request r;
  char err[PROTO_ERR_MAX];
  const char *j = "{\"bad\\u0001\\\"name\":1}";
  ck_assert_int_eq(dec(j, &r, err), ATTND_EINVAL);
#define FIELDS "(fields: query, key, value, valid_lens, mask, bias, causal, " \
               "scale, return_weights, id, scoring, w_q, w_k, w_v, dropout, " \
               "window, diagnostics, sinks, softcap, alibi_slopes, " \
               "cu_seqlens_q, cu_seqlens_k, return_lse, window_align, "      \
               "precision)"
  ck_assert_str_eq(err, "unknown field 'bad?\"name' " FIELDS);
  ck_assert_int_eq(proto_error_body(err, &body, &len), 0);
  ck_assert_str_eq(body,
                   "{\"error\":\"unknown field 'bad?\\\"name' " FIELDS "\"}");
#undef FIELDS
  free(body);
}
END_TEST

/* ---- round trip through the core -------------------------------------------------- */

/* float64 reference computed straight from the request's JSON values, so
 * that a wrong stride or a misplaced element in the decoder shows up. */
static void reference(const cJSON *req, double *out, double *w) {
  const cJSON *q = cJSON_GetObjectItem(req, "query");
  const cJSON *k = cJSON_GetObjectItem(req, "key");
  const cJSON *v = cJSON_GetObjectItem(req, "value");
  const cJSON *vl = cJSON_GetObjectItem(req, "valid_lens");
  const cJSON *mask = cJSON_GetObjectItem(req, "mask"); /* (Lq, Lk) */
  const cJSON *causal = cJSON_GetObjectItem(req, "causal");
  int B = cJSON_GetArraySize(q), Lq = cJSON_GetArraySize(q->child);
  int D = cJSON_GetArraySize(q->child->child);
  int Lk = cJSON_GetArraySize(k->child);
  int Dv = cJSON_GetArraySize(v->child->child);
  double scale = 1.0 / sqrt(D);
  for (int b = 0; b < B; b++)
    for (int i = 0; i < Lq; i++) {
      double s[16], mx = -INFINITY, sum = 0;
      int allowed[16], any = 0;
      for (int j = 0; j < Lk; j++) {
        double dot = 0;
        for (int d = 0; d < D; d++)
          dot += nested_at(q, (int[]){b, i, d}, 3) *
                 nested_at(k, (int[]){b, j, d}, 3);
        s[j] = dot * scale;
        allowed[j] = j < (int)cJSON_GetArrayItem(vl, b)->valuedouble &&
                     cJSON_IsTrue(cJSON_GetArrayItem(
                         cJSON_GetArrayItem(mask, i), j)) &&
                     (!cJSON_IsTrue(causal) || j <= i);
        if (allowed[j] && s[j] > mx)
          mx = s[j];
        any |= allowed[j];
      }
      for (int j = 0; j < Lk; j++)
        sum += allowed[j] ? exp(s[j] - mx) : 0;
      for (int j = 0; j < Lk; j++)
        w[(b * Lq + i) * Lk + j] = allowed[j] ? exp(s[j] - mx) / sum : 0;
      for (int e = 0; e < Dv; e++) {
        double o = 0;
        for (int j = 0; j < Lk && any; j++)
          o += w[(b * Lq + i) * Lk + j] * nested_at(v, (int[]){b, j, e}, 3);
        out[(b * Lq + i) * Dv + e] = o;
      }
    }
}

START_TEST(round_trip_through_core_matches_float64_reference) {
  const char *json =
      "{\"query\":[[[0.5,-1,2],[1,1,0],[0,-2,0.25],[3,0,1]],"
      "[[1,2,3],[-1,0.5,0],[2,2,-2],[0.1,0.2,0.3]]],"
      "\"key\":[[[1,0,0],[0,1,0],[0,0,1],[1,1,1],[-1,2,0.5]],"
      "[[2,0,1],[0,-1,1],[1,1,0],[0.5,0.5,0.5],[3,-1,2]]],"
      "\"value\":[[[1,2],[3,4],[5,6],[7,8],[9,10]],"
      "[[-1,0],[0,-1],[2,2],[1,-3],[0.5,0.25]]],"
      "\"valid_lens\":[4,5],\"causal\":true,"
      "\"mask\":[[true,true,false,true,true],[true,true,true,true,true],"
      "[false,true,true,true,true],[false,false,false,false,true]]}";
  proto_request r;
  OK(json, &r);
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.weights), 0);
  cJSON *req = cJSON_Parse(json);
  double out[2 * 4 * 2], w[2 * 4 * 5];
  reference(req, out, w);
  cJSON *resp = encode_parse(&r);
  const cJSON *jo = cJSON_GetObjectItem(resp, "output");
  const cJSON *jw = cJSON_GetObjectItem(resp, "weights");
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 4; i++) {
      for (int j = 0; j < 5; j++) {
        double ref = w[(b * 4 + i) * 5 + j];
        double got = nested_at(jw, (int[]){b, i, j}, 3);
        if (ref == 0)
          ck_assert_msg(got == 0, "weight [%d][%d][%d] = %g, not 0", b, i, j,
                        got);
        ck_assert_msg(fabs(got - ref) <= 1e-5, "w[%d][%d][%d] %g vs %g", b,
                      i, j, got, ref);
      }
      for (int e = 0; e < 2; e++) {
        double ref = out[(b * 4 + i) * 2 + e];
        double got = nested_at(jo, (int[]){b, i, e}, 3);
        ck_assert_msg(fabs(got - ref) <= 1e-5 + 1e-5 * fabs(ref),
                      "out[%d][%d][%d] %g vs %g", b, i, e, got, ref);
      }
    }
  /* query 3 of item 0 may see key 0..3 by causality and valid_lens, but
   * the mask allows only key 4: an empty row, exactly zero */
  for (int e = 0; e < 2; e++)
    ck_assert(nested_at(jo, (int[]){0, 3, e}, 3) == 0.0);
  cJSON_Delete(resp);
  cJSON_Delete(req);
  proto_request_free(&r);
}
END_TEST

/* ---- diagnostics ------------------------------------------------------------ */

START_TEST(diagnostics_field_decodes_and_allocates) {
  proto_request r;
  OK("{" QKV3 ",\"diagnostics\":true,\"return_weights\":false}", &r);
  ck_assert_int_eq(r.diagnostics, 1);
  ck_assert_int_eq(r.return_weights, 0);
  ck_assert_ptr_nonnull(r.weights);   /* computed for the diagnostics */
  ck_assert_ptr_nonnull(r.allowed_keys);
  ck_assert_ptr_nonnull(r.entropy);
  ck_assert_ptr_nonnull(r.max_weight);
  ck_assert_ptr_nonnull(r.jacobian_norm);
  /* out 4 + weights 12 + diagnostics 4 x 4 floats */
  ck_assert_uint_eq(r.out_bytes, (4 + 12 + 16) * sizeof(float));
  proto_request_free(&r);
  OK("{" QKV3 ",\"diagnostics\":false}", &r);
  ck_assert_int_eq(r.diagnostics, 0);
  ck_assert_ptr_null(r.allowed_keys);
  proto_request_free(&r);
  OK("{" QKV3 ",\"diagnostics\":null}", &r);
  ck_assert_int_eq(r.diagnostics, 0);
  proto_request_free(&r);
  BAD("{" QKV3 ",\"diagnostics\":1}", "diagnostics", "true or false");
  BAD("{" QKV3 ",\"diagnostics\":\"yes\"}", "diagnostics", "true or false");
}
END_TEST

START_TEST(diagnostics_count_in_the_element_budget) {
  const char *json = "{" QKV3 ",\"diagnostics\":true,"
                     "\"return_weights\":false}";
  proto_request r;
  char err[PROTO_ERR_MAX];
  /* inputs 8 + 12 + 6, output 4, weights 12, diagnostics 16: 58 */
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &r, 57, err),
                   ATTND_ETOOBIG);
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &r, 58, err), 0);
  proto_request_free(&r);
}
END_TEST

/* Distinct values in the diagnostics, so that order is visible. */
static void fill_diagnostics(proto_request *r) {
  size_t rows = (size_t)r->prob.B * r->prob.H * r->prob.Lq;
  for (size_t i = 0; i < rows; i++) {
    r->allowed_keys[i] = (int32_t)(1000000 + i); /* an integer, not 1e+06 */
    r->entropy[i] = 0.25f + (float)i;
    r->max_weight[i] = 1.0f / (float)(i + 2);
    r->jacobian_norm[i] = 0.125f * (float)i;
  }
}

static void check_ints(const cJSON *a, const int32_t *x, size_t n) {
  ck_assert_int_eq(cJSON_GetArraySize(a), (int)n);
  size_t i = 0;
  for (const cJSON *e = a->child; e; e = e->next, i++) {
    ck_assert(cJSON_IsNumber(e));
    ck_assert(e->valuedouble == (double)x[i]);
  }
}

START_TEST(encode_diagnostics_nested_and_flat) {
  proto_request r;
  char *body;
  size_t len;
  /* nested rank 3: each (B, Lq) = (2, 2); weights left out */
  OK("{" QKV3 ",\"diagnostics\":true,\"return_weights\":false}", &r);
  fill_outputs(&r);
  fill_diagnostics(&r);
  ck_assert_int_eq(proto_v1_encode(&r, &body, &len), 0);
  ck_assert_ptr_nonnull(strstr(body, "\"allowed_keys\":[[1000000,1000001],"
                                     "[1000002,1000003]]"));
  free(body);
  cJSON *j = encode_parse(&r);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "weights"));
  cJSON *d = cJSON_GetObjectItem(j, "diagnostics");
  ck_assert_int_eq(cJSON_GetArraySize(d), 4);
  check_nested(cJSON_GetObjectItem(d, "entropy"), r.entropy, (int[]){2, 2}, 2);
  check_nested(cJSON_GetObjectItem(d, "max_weight"), r.max_weight,
               (int[]){2, 2}, 2);
  check_nested(cJSON_GetObjectItem(d, "jacobian_norm"), r.jacobian_norm,
               (int[]){2, 2}, 2);
  cJSON *ak = cJSON_GetObjectItem(d, "allowed_keys");
  check_ints(cJSON_GetArrayItem(ak, 1), r.allowed_keys + 2, 2);
  cJSON_Delete(j);
  proto_request_free(&r);
  /* flat rank 4: each {"shape": [1, 2, 2], "data": [4 values]} */
  OK("{\"query\":{\"shape\":[1,2,2,1],\"data\":[1,2,3,4]},"
     "\"key\":[[[[1],[2],[3]],[[4],[5],[6]]]],"
     "\"value\":[[[[1],[2],[3]],[[4],[5],[6]]]],\"diagnostics\":true}", &r);
  fill_outputs(&r);
  fill_diagnostics(&r);
  j = encode_parse(&r);
  check_flat(cJSON_GetObjectItem(j, "weights"), r.weights,
             (int[]){1, 2, 2, 3}, 4);
  d = cJSON_GetObjectItem(j, "diagnostics");
  check_flat(cJSON_GetObjectItem(d, "entropy"), r.entropy, (int[]){1, 2, 2},
             3);
  check_flat(cJSON_GetObjectItem(d, "jacobian_norm"), r.jacobian_norm,
             (int[]){1, 2, 2}, 3);
  ak = cJSON_GetObjectItem(d, "allowed_keys");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(ak, "shape")), 3);
  check_ints(cJSON_GetObjectItem(ak, "data"), r.allowed_keys, 4);
  cJSON_Delete(j);
  proto_request_free(&r);
}
END_TEST

/* A flat-form body of zeros: query (B, H, L, D), key and value
 * (B, H, L, D), with the given extra fields. */
static char *zeros_body(int B, int H, int L, int D, const char *extra) {
  size_t n = (size_t)B * H * L * D, cap = n * 6 + 512, len = 0;
  char *s = malloc(cap);
  ck_assert_ptr_nonnull(s);
  len += (size_t)snprintf(s + len, cap - len, "{");
  for (int t = 0; t < 3; t++) {
    len += (size_t)snprintf(s + len, cap - len,
                            "\"%s\":{\"shape\":[%d,%d,%d,%d],\"data\":[",
                            t == 0 ? "query" : t == 1 ? "key" : "value", B,
                            H, L, D);
    for (size_t i = 0; i < n; i++)
      len += (size_t)snprintf(s + len, cap - len, i ? ",0" : "0");
    len += (size_t)snprintf(s + len, cap - len, "]},");
  }
  snprintf(s + len, cap - len, "%s}", extra);
  return s;
}

/* The in-flight budget admits a request by proto_answer_bytes, so it
 * must bound the real answer even when every number prints at its
 * longest (sign, nine digits, a two-digit negative exponent), with
 * enough numbers that the envelope's allowance cannot hide a shortfall. */
START_TEST(answer_bytes_bound_the_longest_answer) {
  static const char *const extras[] = {
    "\"id\":\"a-rather-long-request-id\"",
    "\"diagnostics\":true",
    "\"diagnostics\":true,\"return_weights\":false",
    "\"return_lse\":true,\"diagnostics\":true"};
  for (size_t f = 0; f < 2 * sizeof extras / sizeof extras[0]; f++) {
    proto_request r;
    char *body, *json = zeros_body(2, 3, 40, 2, extras[f / 2]);
    size_t len, bound;
    OK(json, &r);
    free(json);
    r.flat = (int)(f % 2);  /* answered flat and nested */
    const attn_problem *p = &r.prob;
    size_t rows = (size_t)p->B * p->H * p->Lq;
    for (size_t i = 0; i < rows * (size_t)p->Dv; i++)
      r.out[i] = -1.00000005e-38f;
    for (size_t i = 0; r.return_weights && i < rows * (size_t)p->Lk; i++)
      r.weights[i] = -1.17549435e-38f;
    for (size_t i = 0; r.diagnostics && i < rows; i++) {
      r.allowed_keys[i] = INT32_MIN;
      r.entropy[i] = r.max_weight[i] = r.jacobian_norm[i] = -1.00000005e-38f;
    }
    ck_assert_int_eq(proto_v1_encode(&r, &body, &len), 0);
    bound = proto_answer_bytes(&r);
    ck_assert_msg(len <= bound && bound - len < len,
                  "form %zu: %zu bytes against a bound of %zu", f, len, bound);
    free(body);
    proto_request_free(&r);
  }
}
END_TEST

/* ---- sinks, softcap, ALiBi, packing, window_align, lse ------------------- */

/* A rank-4 request: B=1, H=2, Hkv=1, Lq=3, Lk=4, D=2, Dv=1. */
#define QKV4 "\"query\":[[[[1,2],[3,4],[5,6]],[[7,8],[9,1],[2,3]]]]," \
             "\"key\":[[[[1,0],[0,1],[1,1],[2,2]]]]," \
             "\"value\":[[[[1],[2],[3],[4]]]]"

START_TEST(variant_fields_decode_into_the_problem) {
  proto_request r;
  OK("{" QKV4 ",\"sinks\":[0.5,-2],\"softcap\":30,"
     "\"alibi_slopes\":[[0.25,0.125]],\"cu_seqlens_q\":[0,1,3],"
     "\"cu_seqlens_k\":[0,0,4],\"window\":[1,0],"
     "\"window_align\":\"lower_right\",\"return_lse\":true}", &r);
  const attn_problem *p = &r.prob;
  ck_assert_int_eq(attn_check(p), 0);
  ck_assert_float_eq(p->sinks[0], 0.5f);
  ck_assert_float_eq(p->sinks[1], -2.0f);
  ck_assert_float_eq(p->softcap, 30.0f);
  ck_assert_int_eq(p->alibi_per_item, 1);
  ck_assert_float_eq(p->alibi_slopes[1], 0.125f);
  ck_assert_int_eq(p->n_seqs, 2);
  ck_assert_int_eq(p->cu_seqlens_q[1], 1);
  ck_assert_int_eq(p->cu_seqlens_k[2], 4);
  ck_assert_int_eq(p->window_align, ATTN_WINDOW_LOWER_RIGHT);
  ck_assert_int_eq(r.return_lse, 1);
  ck_assert_ptr_nonnull(r.lse);
  proto_request_free(&r);
  /* (H,) slopes, defaults, and no lse buffer unless asked */
  OK("{" QKV4 ",\"alibi_slopes\":[1,2],\"window_align\":\"upper_left\"}",
     &r);
  ck_assert_int_eq(r.prob.alibi_per_item, 0);
  ck_assert_int_eq(r.prob.window_align, ATTN_WINDOW_UPPER_LEFT);
  ck_assert_ptr_null(r.prob.sinks);
  ck_assert_float_eq(r.prob.softcap, 0.0f);
  ck_assert_ptr_null(r.lse);
  proto_request_free(&r);
  /* rank 3: H = 1 */
  OK("{" QKV3 ",\"sinks\":[1],\"return_lse\":false}", &r);
  ck_assert_float_eq(r.prob.sinks[0], 1.0f);
  ck_assert_ptr_null(r.lse);
  proto_request_free(&r);
}
END_TEST

START_TEST(variant_bad_values_are_named) {
  BAD("{" QKV4 ",\"sinks\":[1]}", "sinks: shape [1] is not (H,) = [2]");
  BAD("{" QKV4 ",\"sinks\":[[1,2]]}", "sinks: shape [1,2]");
  BAD("{" QKV4 ",\"sinks\":[1,3.5e38]}", "sinks[1]: 3.5e38 is out of float32");
  BAD("{" QKV4 ",\"alibi_slopes\":[[1,2],[3,4]]}",
      "alibi_slopes: shape [2,2] is neither (H,) = [2] nor (B, H) = [1,2]");
  BAD("{" QKV4 ",\"softcap\":0}", "softcap: 0 is not a finite number > 0");
  BAD("{" QKV4 ",\"softcap\":-1}", "softcap: -1 is not");
  BAD("{" QKV4 ",\"softcap\":1e-46}", "softcap: 1e-46 is not");
  BAD("{" QKV4 ",\"softcap\":true}", "softcap: expected a number > 0");
  BAD("{" QKV4 ",\"window_align\":\"lower\"}",
      "window_align: unknown value \"lower\" (allowed: \"upper_left\", "
      "\"lower_right\")");
  BAD("{" QKV4 ",\"window_align\":true}", "window_align: unknown value");
  BAD("{" QKV4 ",\"return_lse\":1}", "return_lse: expected true or false");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,3]}",
      "cu_seqlens_q: given without cu_seqlens_k");
  BAD("{" QKV4 ",\"cu_seqlens_k\":[0,4]}",
      "cu_seqlens_k: given without cu_seqlens_q");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,3],\"cu_seqlens_k\":[0,2,4]}",
      "cu_seqlens_k: 3 entries do not match cu_seqlens_q's 2");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[[0,3]],\"cu_seqlens_k\":[[0,4]]}",
      "cu_seqlens_q: expected shape (N + 1,)");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[3],\"cu_seqlens_k\":[4]}",
      "cu_seqlens_q: expected shape (N + 1,) with N >= 1 sequences, got rank 1"
      " of length 1");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[1,3],\"cu_seqlens_k\":[0,4]}",
      "cu_seqlens_q[0]=1: must be 0");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,2,1,3],\"cu_seqlens_k\":[0,1,2,4]}",
      "cu_seqlens_q[2]=1 is less than cu_seqlens_q[1]=2");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,3],\"cu_seqlens_k\":[0,3]}",
      "cu_seqlens_k[1]=3: the last offset must be the key length 4");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,4],\"cu_seqlens_k\":[0,4]}",
      "cu_seqlens_q[1]=4 exceeds query length 3");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,-1,3],\"cu_seqlens_k\":[0,1,4]}",
      "cu_seqlens_q[1]");
  BAD("{" QKV3 ",\"cu_seqlens_q\":[0,2],\"cu_seqlens_k\":[0,3]}",
      "cu_seqlens_q: packed sequences need batch 1, got 2");
  BAD("{" QKV4 ",\"cu_seqlens_q\":[0,3],\"cu_seqlens_k\":[0,4],"
      "\"valid_lens\":[2]}", "valid_lens: not allowed with cu_seqlens_q");
  BAD("{" QKV4 ",\"sink\":[1,2]}", "did you mean 'sinks'?");
  BAD("{" QKV4 ",\"cu_seqlen_k\":[0,4]}", "did you mean 'cu_seqlens_k'?");
}
END_TEST

/* Window sides wider than max(Lq, Lk) are unbounded under either
 * alignment; they are clamped there, not at Lq, which would cut a
 * lower-right window. */
START_TEST(window_sides_clamp_at_the_longer_length) {
  proto_request r;
  OK("{\"query\":[[[1,0]]],\"key\":[[[1,0],[0,1],[1,1],[2,2],[3,3]]],"
     "\"value\":[[[1],[2],[3],[4],[5]]],\"window\":[4,1e15],"
     "\"window_align\":\"lower_right\"}", &r);
  ck_assert_int_eq(r.prob.window_left, 4);
  ck_assert_int_eq(r.prob.window_right, 5);
  proto_request_free(&r);
}
END_TEST

/* The lse is shaped like a diagnostic, in the query's form; -inf (and
 * any non-finite value) prints as null. */
START_TEST(encode_lse_nested_and_flat_with_null_for_minus_inf) {
  proto_request r;
  char *body;
  size_t len;
  OK("{" QKV4 ",\"return_lse\":true,\"return_weights\":false}", &r);
  fill_outputs(&r);
  for (int i = 0; i < 6; i++) r.lse[i] = 0.5f * (float)i;
  r.lse[2] = -INFINITY;
  ck_assert_int_eq(proto_v1_encode(&r, &body, &len), 0);
  ck_assert_ptr_nonnull(strstr(body, ",\"lse\":[[[0,0.5,null],[1.5,2,2.5]]]}"));
  ck_assert_ptr_null(strstr(body, "weights"));
  free(body);
  r.flat = 1;
  ck_assert_int_eq(proto_v1_encode(&r, &body, &len), 0);
  ck_assert_ptr_nonnull(strstr(body, "\"lse\":{\"shape\":[1,2,3],"
                                     "\"data\":[0,0.5,null,1.5,2,2.5]}"));
  free(body);
  /* the answer's bound counts the lse */
  ck_assert_uint_ge(proto_answer_bytes(&r), len);
  proto_request_free(&r);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

static Suite *proto_suite(void) {
  Suite *s = suite_create("proto");
  struct { const char *name; const TTest *tests[24]; } cases[] = {
    {"forms", {nested_rank3_gives_shapes_and_values,
               flat_rank4_gives_shapes_and_values,
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
                 id_rejects_other_types,
                 additive_decodes_weights_and_allows_other_key_width,
                 additive_requires_matching_weights,
                 dot_scoring_rejects_additive_weights, dropout_p_and_seed,
                 dropout_rejects_bad_values, window_sides_and_unbounded,
                 window_rejects_bad_values}},
    {"names", {unknown_field_suggests_the_nearest_and_lists_the_fields,
               edit_distance_counts_edits_and_swaps,
               suggestion_is_the_nearest_within_a_third_of_its_length}},
    {"malformed", {unknown_field_is_named, duplicate_fields_at_every_level,
                   missing_required_tensors, body_errors_are_clear,
                   body_is_read_by_length_not_nul,
                   non_finite_literals_name_their_place,
                   nul_bytes_are_pointed_at,
                   syntax_errors_name_the_byte_and_the_reason,
                   nesting_deeper_than_the_limit_names_it,
                   decoding_holds_what_it_allocates,
                   booleans_strings_and_nulls_are_not_numbers,
                   numbers_beyond_float_range_are_rejected,
                   ragged_arrays_name_the_position, wrong_ranks_are_named,
                   shape_mismatches_are_named,
                   empty_tensors_name_field_and_axis, flat_form_errors,
                   late_failures_free_earlier_buffers}},
    {"budget", {element_budget_counts_inputs_and_outputs,
                element_budget_bounds_weights_of_small_inputs,
                element_budget_rejects_huge_bodies_before_parsing}},
    {"encode", {encode_nested_rank3, encode_nested_rank4,
                encode_flat_and_omits_absent_parts,
                encode_flat_rank4_with_weights,
                floats_print_shortest_round_trip,
                floats_are_not_longer_than_needed,
                integers_print_as_printf_does,
                error_body_escapes_quotes_backslashes_and_controls,
                error_body_replaces_invalid_utf8,
                field_names_in_messages_are_sanitised}},
    {"diagnostics", {diagnostics_field_decodes_and_allocates,
                     diagnostics_count_in_the_element_budget,
                     encode_diagnostics_nested_and_flat,
                     answer_bytes_bound_the_longest_answer}},
    {"core", {round_trip_through_core_matches_float64_reference}},
    {"variants", {variant_fields_decode_into_the_problem,
                  variant_bad_values_are_named,
                  window_sides_clamp_at_the_longer_length,
                  encode_lse_nested_and_flat_with_null_for_minus_inf}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    TCase *tc = tcase_create(cases[c].name);
    tcase_set_timeout(tc, 120); /* the float sweep, under valgrind too */
    for (int t = 0; cases[c].tests[t]; t++)
      tcase_add_test(tc, cases[c].tests[t]);
    suite_add_tcase(s, tc);
  }
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(proto_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
