/* test_v2_binary.c - the KServe v2 codec's binary tensors: binary requests
 * and answers, every error path of the binary layout, mutated bodies,
 * bodies as received (FP32 and BF16 inputs lent in place, or copied), and
 * the gzip/deflate content coding with its inflate cap. */
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
  ck_assert_msg(v2_dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
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
  BAD(&b, "18446744073709551616", "Inference-Header-Content-Length: "
      "'18446744073709551616' is too large to be a byte count");
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
  ck_assert_msg(v2_dec(&b, b.hlen, PROTO_MODEL_ATTENTION, &r, err) == 0, "%s",
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
    int rc = v2_dec(&b, rand_r(&seed) % 16 ? hl : NULL, PROTO_MODEL_ATTENTION,
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
      size_t kept = (size_t)(pb.p - pb.base) + pb.cap;
      if (known)  /* the binary part starts on a 64-byte boundary */
        ck_assert_uint_eq((uintptr_t)(p + b.jlen) % 64, 0);
      ck_assert_msg(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION,
                                         &r, 0, err) == 0, "%s", err);
      ck_assert_ptr_eq(r.prob.q, (const float *)(p + b.jlen));
      ck_assert_ptr_eq(r.prob.k, (const float *)(p + b.jlen + sizeof rb_q));
      ck_assert_ptr_eq(r.prob.v, (const float *)(p + b.jlen + sizeof rb_q +
                                                 sizeof rb_k));
      ck_assert_ptr_null(pb.base);  /* the request owns the body now */
      /* the body it keeps counts, not the tensors read in it again */
      ck_assert_uint_eq(r.in_bytes, kept);
      ck_assert_uint_ge(kept, b.len);
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
  size_t kept = (size_t)(pb.p - pb.base) + pb.cap;
  ck_assert_msg(proto_v2_decode_body(&pb, b.hlen, PROTO_MODEL_ATTENTION, &r,
                                     0, err) == 0, "%s", err);
  ck_assert_int_eq(r.prob.precision, ATTN_PRECISION_BF16);
  ck_assert_int_eq(r.prob.dtype, ATTN_DTYPE_BF16);
  ck_assert_ptr_null(r.prob.q);
  ck_assert_ptr_eq(r.prob.q16, (const uint16_t *)(p + b.jlen));
  ck_assert_ptr_eq(r.prob.v16, (const uint16_t *)(p + b.jlen + sizeof q16 +
                                                  sizeof k16));
  ck_assert_uint_eq(r.in_bytes, kept);
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

/* RFC 1952: a gzip file may hold several members, which inflate one
 * after another; the cap is over them all, and bytes after the last that
 * start no member are refused. */
START_TEST(inflate_gzip_members) {
  static const char a[] = "{\"inputs\": [1, 2, ", b[] = "3, 4]}";
  char z[512], *out, err[PROTO_ERR_MAX];
  size_t na = zip(15 + 16, a, sizeof a - 1, z, sizeof z), n, len;
  size_t whole = sizeof a - 1 + sizeof b - 1;
  n = na + zip(15 + 16, b, sizeof b - 1, z + na, sizeof z - na);
  n += zip(15 + 16, "", 0, z + n, sizeof z - n); /* an empty member */
  ck_assert_int_eq(proto_inflate("gzip", z, n, whole, &out, &len, err), 0);
  ck_assert_uint_eq(len, whole);
  ck_assert(!memcmp(out, a, sizeof a - 1));
  ck_assert(!memcmp(out + sizeof a - 1, b, sizeof b - 1));
  free(out);
  /* each member under the cap, together one byte over */
  ck_assert_int_eq(proto_inflate("gzip", z, n, whole - 1, &out, &len, err),
                   ATTND_ETOOBIG);
  /* a second member cut short, and bytes that start none */
  ck_assert_int_eq(proto_inflate("gzip", z, n - 25, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "truncated"));
  memcpy(z + na, "\x1f", 1);
  ck_assert_int_eq(proto_inflate("gzip", z, na + 1, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body: 1 bytes after the end of the compressed "
                   "stream");
  memcpy(z + na, "xyz\0", 4);
  ck_assert_int_eq(proto_inflate("gzip", z, na + 4, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body: 4 bytes after the end of the compressed "
                   "stream");
  memcpy(z + na, "\x1f\x8bxyz", 5);
  ck_assert_int_eq(proto_inflate("gzip", z, na + 5, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "gzip stream"));
  /* deflate has one stream: what follows it is refused */
  n = zip(15, a, sizeof a - 1, z, sizeof z);
  n += zip(15, b, sizeof b - 1, z + n, sizeof z - n);
  ck_assert_int_eq(proto_inflate("deflate", z, n, 1000, &out, &len, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "after the end of the compressed"));
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

/* ---- suite -------------------------------------------------------------------- */

int main(void) {
  support_case cases[] = {
    {"binary", {binary_request_decodes_and_encodes, binary_layout_errors,
                binary_value_errors, binary_lengths_int32_and_int64,
                mutated_bodies_are_refused_cleanly}},
    {"received", {received_body_lends_fp32_inputs_in_place,
                  received_body_reports_a_bad_value_like_the_copy,
                  received_body_copies_what_it_cannot_lend,
                  bf16_inputs_in_bf16_mode_are_used_as_sent}},
    {"coding", {inflate_gzip_zlib_and_raw, inflate_gzip_members,
                inflate_bomb_stops_at_the_cap,
                accept_encoding_and_deflate}},
  };
  return support_run("v2_binary", cases, sizeof cases / sizeof cases[0]);
}
