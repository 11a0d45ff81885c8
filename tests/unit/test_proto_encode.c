/* test_proto_encode.c - the /v1/attention JSON codec's answers: encoding
 * parsed back with cJSON, the float and integer printers, error-body
 * escaping, a round trip through the core checked against a float64
 * reference computed from the request's own JSON, the diagnostics field
 * and the attention variants (sinks, softcap, ALiBi, packing, the lse). */
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
  ck_assert_int_eq(v1_dec(j, &r, err), ATTND_EINVAL);
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
/* "precision" echoes a value it does not know, as the other choices do:
 * quoted, cut at 40 bytes, anything but printable ASCII as '?'. */
START_TEST(precision_echoes_an_unknown_value) {
  BAD("{" QKV4 ",\"precision\":\"fp16\"}",
      "precision: unknown value \"fp16\" (allowed: \"fp32\", \"bf16\")");
  BAD("{" QKV4 ",\"precision\":\"BF16\"}",
      "precision: unknown value \"BF16\" (allowed:");
  BAD("{" QKV4 ",\"precision\":\"b\\\"f\\u0001\"}",
      "precision: unknown value \"b\"f?\" (allowed:");
  BAD("{" QKV4 ",\"precision\":\"0123456789012345678901234567890123456789"
      "0123456789\"}",
      "precision: unknown value \"0123456789012345678901234567890123456789"
      "...\" (allowed:");
  BAD("{" QKV4 ",\"precision\":16}", "precision: unknown value 16 (allowed:");
  BAD("{" QKV4 ",\"precision\":true}", "precision: unknown value true");
}
END_TEST

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

int main(void) {
  support_case cases[] = {
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
                  precision_echoes_an_unknown_value,
                  window_sides_clamp_at_the_longer_length,
                  encode_lse_nested_and_flat_with_null_for_minus_inf}},
  };
  return support_run("proto_encode", cases, sizeof cases / sizeof cases[0]);
}
