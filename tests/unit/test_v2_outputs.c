/* test_v2_outputs.c - the KServe v2 codec's window parameters and
 * diagnostics outputs (binary outputs in parts the bytes of the copy),
 * and the attention variants' inputs, parameters and refusals (sinks,
 * softcap, ALiBi, packing, window_align, lse). */
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

/* ---- window parameters and diagnostics outputs --------------------------- */

START_TEST(window_parameters_decode) {
  body b;
  proto_request r;
  char err[PROTO_ERR_MAX];
  /* none: no window */
  body_json(&b, "{\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.has_window, 0);
  proto_request_free(&r);
  /* one side: the other is unbounded; wider than the problem is clamped */
  body_json(&b, "{\"parameters\":{\"window_right\":99},\"inputs\":[" IN_Q
                "," IN_K "," IN_V "]}");
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.has_window, 1);
  ck_assert_int_eq(r.prob.window_left, -1);
  ck_assert_int_eq(r.prob.window_right, 3); /* Lk */
  proto_request_free(&r);
  body_json(&b, "{\"parameters\":{\"window_left\":1,\"window_right\":null},"
                "\"inputs\":[" IN_Q "," IN_K "," IN_V "]}");
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
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
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
  ck_assert_int_eq(r.n_outputs, 2);
  ck_assert_int_eq(r.diagnostics, 0);
  ck_assert_ptr_null(r.allowed_keys);
  proto_request_free(&r);
  /* diagnostics without weights: weights computed, not returned */
  body_json(&b, "{\"parameters\":{\"window_left\":0},\"inputs\":[" IN_Q ","
                IN_K "," IN_V "],\"outputs\":[{\"name\":\"allowed_keys\"},"
                "{\"name\":\"jacobian_norm\",\"parameters\":{\"binary_data\":"
                "true}},{\"name\":\"entropy\"},{\"name\":\"max_weight\"}]}");
  ck_assert_msg(v2_dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
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
  ck_assert_msg(v2_dec(b, NULL, PROTO_MODEL_ATTENTION, r, err) == 0, "%s", err);
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
  ck_assert_msg(v2_dec(&b, NULL, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s", err);
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
  ck_assert_msg(v2_dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
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

/* ---- suite -------------------------------------------------------------------- */

int main(void) {
  support_case cases[] = {
    {"diagnostics", {window_parameters_decode,
                     diagnostics_outputs_decode_and_encode,
                     binary_outputs_in_parts_are_the_bytes_of_the_copy}},
    {"variants", {variant_inputs_and_parameters_decode,
                  variant_errors_name_the_input_or_parameter}},
  };
  return support_run("v2_outputs", cases, sizeof cases / sizeof cases[0]);
}
