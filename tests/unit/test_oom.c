/* test_oom.c - out-of-memory paths of proto/, the SQLite way: for every N,
 * make the N-th allocation of an operation fail (proto/mem.h), once
 * (transient) and from then on (persistent), and check that the operation
 * returns ATTND_ENOMEM - never a wrong answer, never "invalid input" for
 * a valid request, never a crash - and releases every block it took.
 * The loop ends at the first N the operation gets through without the
 * fault firing; that run must give the same answer as a run without
 * injection.  Covers decode (v1, v2 JSON, v2 binary as sent and as
 * received in chunks, v2 with tensors in shared memory regions), encode
 * (v1, v2 with binary outputs, in one piece and in parts), gzip/deflate
 * both ways, error bodies, metadata, and the shared memory registry
 * (register body, register, status).
 * Leaks are checked through mem_live() here, and by valgrind (make
 * valgrind) or LeakSanitizer (make SANITIZE=address test). */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cjson/cJSON.h>

#include "proto/mem.h"
#include "proto/proto.h"
#include "server/shm/shm.h"
#include "server/shm/shm_http.h"

/* ---- requests ------------------------------------------------------------ */

/* Every v1 field that allocates: tensors of each kind, mask, bias, id. */
static const char v1_body[] =
    "{\"query\":[[[0.5,-1,2],[1,1,0]],[[1,2,3],[-1,0.5,0]]],"
    "\"key\":[[[1,0,0],[0,1,0],[0,0,1]],[[2,0,1],[0,-1,1],[1,1,0]]],"
    "\"value\":[[[1,2],[3,4],[5,6]],[[-1,0],[0,-1],[2,2]]],"
    "\"valid_lens\":[2,3],\"causal\":true,\"id\":\"req-7\","
    "\"mask\":[[true,true,false],[true,true,true]],"
    "\"bias\":{\"shape\":[1,3],\"data\":[0.5,0,-0.5]}}";

static const char v1_additive[] =
    "{\"scoring\":\"additive\",\"query\":{\"shape\":[1,2,2],"
    "\"data\":[1,2,3,4]},\"key\":{\"shape\":[1,2,2],\"data\":[0,1,1,0]},"
    "\"value\":{\"shape\":[1,2,1],\"data\":[5,6]},"
    "\"w_q\":[[1,0],[0,1]],\"w_k\":[[1,1],[0,1]],\"w_v\":[1,-1],"
    "\"return_weights\":false,\"id\":3}";

static const char v2_json[] =
    "{\"id\":\"v2-json\",\"parameters\":{\"causal\":\"lower_right\"},"
    "\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP16\",\"shape\":[1,2,2],"
    "\"data\":[1,0,0,1]},{\"name\":\"key\",\"datatype\":\"FP32\","
    "\"shape\":[1,3,2],\"data\":[[1,1],[2,0],[0,3]]},{\"name\":\"value\","
    "\"datatype\":\"BF16\",\"shape\":[1,3,2],\"data\":[1,0,0,1,1,1]},"
    "{\"name\":\"valid_lens\",\"datatype\":\"INT32\",\"shape\":[1],"
    "\"data\":[2]}],\"outputs\":[{\"name\":\"weights\"},{\"name\":\"output\"}]}";

/* A v2 binary request: JSON header, then query, key, value FP32 and a BOOL
 * mask; asks for binary outputs, all of them or (output_alone) only the
 * output, whose answer is then one buffer (proto_parts.joined). */
typedef struct bin_req {
  char body[1024];
  size_t len;
  char hlen[32];
} bin_req;

static void make_v2_binary(bin_req *r, int output_alone) {
  char hdr[768];
  snprintf(hdr, sizeof hdr, "%s%s}",
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
      "\"shape\":[1,2,2],\"parameters\":{\"binary_data_size\":16}},"
      "{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,3,2],"
      "\"parameters\":{\"binary_data_size\":24}},"
      "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,3,2],"
      "\"parameters\":{\"binary_data_size\":24}},"
      "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[2,3],"
      "\"parameters\":{\"binary_data_size\":6}}],",
      output_alone ? "\"outputs\":[{\"name\":\"output\",\"parameters\":"
                     "{\"binary_data\":true}}]"
                   : "\"parameters\":{\"binary_data_output\":true}");
  static const float q[4] = {1, 0, 0, 2}, k[6] = {1, 1, 2, 0, 0, 3},
                     v[6] = {1, 0, 0, 1, 1, 1};
  static const unsigned char m[6] = {1, 1, 0, 1, 0, 1};
  size_t n = strlen(hdr);
  memcpy(r->body, hdr, n);
  memcpy(r->body + n, q, sizeof q);
  memcpy(r->body + n + 16, k, sizeof k);
  memcpy(r->body + n + 40, v, sizeof v);
  memcpy(r->body + n + 64, m, sizeof m);
  r->len = n + 70;
  snprintf(r->hlen, sizeof r->hlen, "%zu", n);
}

/* ---- the loop -------------------------------------------------------------- */

/* One operation under test: runs, returns 0 or an ATTND_E* code, and on
 * success leaves its result in *out (malloc'd through mem_, *out_len
 * bytes) for comparison with the reference run. */
typedef int (*op_fn)(const void *arg, char **out, size_t *out_len);

/* Runs op with the N-th allocation failing for N = 1, 2, ... until a run
 * does not reach the N-th allocation; returns how many runs failed. */
static int sweep(const char *name, op_fn op, const void *arg,
                 int persistent) {
  char *ref = NULL, *got = NULL;
  size_t ref_len = 0, got_len = 0;
  long live0 = mem_live();
  int rc = op(arg, &ref, &ref_len);
  ck_assert_msg(rc == 0, "%s: reference run rc %d", name, rc);
  for (long n = 1;; n++) {
    unsigned long inj0 = mem_injected();
    long live = mem_live();
    mem_fail_at(n, persistent);
    got = NULL;
    rc = op(arg, &got, &got_len);
    mem_fail_at(0, 0);
    int fired = mem_injected() != inj0;
    if (!fired) {
      ck_assert_msg(rc == 0, "%s: rc %d without a failure", name, rc);
      ck_assert_msg(got_len == ref_len && !memcmp(got, ref, ref_len),
                    "%s: answer differs from the reference run", name);
      mem_free(got);
      mem_free(ref);
      ck_assert_msg(mem_live() == live0, "%s: %ld blocks leaked", name,
                    mem_live() - live0);
      return (int)(n - 1);
    }
    /* A failed allocation must surface as ENOMEM, and nothing may be
     * left allocated; or, where the failure is benign, as the same answer
     * as without it. */
    if (rc == 0) {
      ck_assert_msg(got_len == ref_len && !memcmp(got, ref, ref_len),
                    "%s: allocation %ld failed and the answer changed",
                    name, n);
      mem_free(got);
    } else {
      ck_assert_msg(rc == ATTND_ENOMEM, "%s: allocation %ld failed, rc %d "
                    "(%s), expected ATTND_ENOMEM", name, n, rc,
                    attnd_strerror(rc));
    }
    ck_assert_msg(mem_live() == live, "%s: allocation %ld failed and %ld "
                  "blocks leaked", name, n, mem_live() - live);
  }
}

/* ---- operations ------------------------------------------------------------- */

/* Copies a decoded request's problem as bytes (shape fields and tensors)
 * so that two decodes can be compared. */
static int describe(const proto_request *r, char **out, size_t *len) {
  const attn_problem *p = &r->prob;
  size_t nq = (size_t)p->B * p->H * p->Lq * p->D;
  size_t nk = (size_t)p->B * p->Hkv * p->Lk * p->Dk;
  size_t nv = (size_t)p->B * p->Hkv * p->Lk * p->Dv;
  size_t n = sizeof(int) * 8 + (nq + nk + nv) * sizeof(float) + 64;
  char *s = mem_malloc(n), *o = s;
  if (!s)
    return ATTND_ENOMEM;  /* counted like the operation's own */
  memcpy(o, &p->B, sizeof(int) * 8);  /* B, H, Hkv, Lq, Lk, D, Dk, Dv */
  o += sizeof(int) * 8;
  memcpy(o, p->q, nq * sizeof(float));
  o += nq * sizeof(float);
  memcpy(o, p->k, nk * sizeof(float));
  o += nk * sizeof(float);
  memcpy(o, p->v, nv * sizeof(float));
  o += nv * sizeof(float);
  o += snprintf(o, 64, "%.20s|%d|%d|%g", r->id_json ? r->id_json : "-",
                r->return_weights, p->causal, (double)p->scale);
  *out = s;
  *len = (size_t)(o - s);
  return 0;
}

static int op_v1_decode(const void *arg, char **out, size_t *len) {
  const char *body = arg;
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode(body, strlen(body), &r, 0, err);
  if (rc) {
    ck_assert_int_eq(r.n_owned, 0);
    ck_assert_msg(err[0], "error %d without a message", rc);
    return rc;
  }
  rc = describe(&r, out, len);
  proto_request_free(&r);
  return rc;
}

static int op_v2_json_decode(const void *arg, char **out, size_t *len) {
  const char *body = arg;
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_v2_decode(body, strlen(body), NULL, PROTO_MODEL_ATTENTION,
                           &r, 0, err);
  if (rc) {
    ck_assert_int_eq(r.n_owned, 0);
    return rc;
  }
  rc = describe(&r, out, len);
  proto_request_free(&r);
  return rc;
}

static int op_v2_binary_decode(const void *arg, char **out, size_t *len) {
  const bin_req *b = arg;
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_v2_decode(b->body, b->len, b->hlen, PROTO_MODEL_ATTENTION,
                           &r, 0, err);
  if (rc) {
    ck_assert_int_eq(r.n_owned, 0);
    return rc;
  }
  rc = describe(&r, out, len);
  proto_request_free(&r);
  return rc;
}

/* The same body received the way the server receives it (proto_body):
 * in 7-byte chunks with no Content-Length, so that its buffer grows. */
static int op_v2_received_decode(const void *arg, char **out, size_t *len) {
  const bin_req *b = arg;
  proto_body pb;
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_body_init(&pb, 0, b->hlen);
  for (size_t i = 0; rc == 0 && i < b->len; i += 7)
    rc = proto_body_append(&pb, b->body + i, b->len - i < 7 ? b->len - i : 7);
  if (rc == 0) {
    rc = proto_v2_decode_body(&pb, b->hlen, PROTO_MODEL_ATTENTION, &r, 0,
                              err);
    if (rc)
      ck_assert_int_eq(r.n_owned, 0);
    else
      rc = describe(&r, out, len);
    proto_request_free(&r);
  }
  proto_body_free(&pb);
  return rc;
}

/* Decode, compute and encode in parts (the buffers move out of the
 * request, so every run decodes anew); the answer is the parts joined. */
static int op_v2_parts(const void *arg, char **out, size_t *len) {
  const bin_req *b = arg;
  proto_request r;
  proto_parts parts;
  char err[PROTO_ERR_MAX];
  int rc = proto_v2_decode(b->body, b->len, b->hlen, PROTO_MODEL_ATTENTION,
                           &r, 0, err);
  if (rc)
    return rc;
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.weights), 0);
  rc = proto_v2_encode_parts(&r, &parts);
  proto_request_free(&r);
  if (rc)
    return rc;
  ck_assert_int_gt(parts.n, 0);
  ck_assert_int_eq(parts.joined, parts.n == 1);  /* its JSON part is short */
  size_t n = parts.json_len;
  for (int i = 0; i < parts.n; i++)
    n += parts.len[i];
  char *s = mem_malloc(n);
  if (s) {
    memcpy(s, parts.json, parts.json_len);
    n = parts.json_len;
    for (int i = 0; i < parts.n; i++) {
      memcpy(s + n, parts.data[i], parts.len[i]);
      n += parts.len[i];
    }
    *out = s;
    *len = n;
  }
  proto_parts_free(&parts);
  return s ? 0 : ATTND_ENOMEM;
}

/* Encoding only: the request is decoded and computed beforehand. */
static int op_encode(const void *arg, char **out, size_t *len) {
  size_t json_len;
  return proto_encode(arg, out, len, &json_len);
}

static int op_error_body(const void *arg, char **out, size_t *len) {
  return proto_error_body(arg, out, len);
}

static int op_metadata(const void *arg, char **out, size_t *len) {
  (void)arg;
  char *a, *b;
  size_t na, nb;
  int rc = proto_v2_model_metadata(PROTO_MODEL_ADDITIVE, &a, &na);
  if (rc)
    return rc;
  rc = proto_v2_server_metadata("1.0", &b, &nb);
  if (rc) {
    mem_free(a);
    return rc;
  }
  mem_free(b);
  *out = a;
  *len = na;
  return 0;
}

/* Compresses arg with the coding, inflates it back. */
typedef struct coding_arg {
  const char *coding;
  const char *text;
} coding_arg;

static int op_deflate_inflate(const void *arg, char **out, size_t *len) {
  const coding_arg *c = arg;
  char *z, err[PROTO_ERR_MAX];
  size_t zlen;
  int rc = proto_deflate(c->coding, c->text, strlen(c->text), &z, &zlen);
  if (rc)
    return rc;
  rc = proto_inflate(c->coding, z, zlen, 1 << 20, out, len, err);
  mem_free(z);
  return rc;
}

/* ---- shared memory ------------------------------------------------------------- */

/* A real object: query FP32 at 0, key FP16 at 64, value FP32 at 128,
 * valid_lens INT64 at 192, mask BOOL at 256; the output goes to 1024. */
typedef struct shm_arg {
  char key[64];
  struct shm_registry *reg;   /* with region "r" over the whole object */
} shm_arg;

static const char v2_shm[] =
    "{\"id\":\"shm\",\"inputs\":["
    "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,2],"
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_byte_size\":16}},"
    "{\"name\":\"key\",\"datatype\":\"FP16\",\"shape\":[1,3,2],"
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_offset\":64,\"shared_memory_byte_size\":12}},"
    "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,3,2],"
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_offset\":128,\"shared_memory_byte_size\":24}},"
    "{\"name\":\"valid_lens\",\"datatype\":\"INT64\",\"shape\":[1],"
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_offset\":192,\"shared_memory_byte_size\":8}},"
    "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[2,3],"
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_offset\":256,\"shared_memory_byte_size\":6}}],"
    "\"outputs\":[{\"name\":\"weights\"},{\"name\":\"output\","
    "\"parameters\":{\"shared_memory_region\":\"r\","
    "\"shared_memory_offset\":1024,\"shared_memory_byte_size\":16}}]}";

static void shm_arg_init(shm_arg *a) {
  static const float q[4] = {1, 0, 0, 2}, v[6] = {1, 0, 0, 1, 1, 1};
  static const uint16_t k[6] = {0x3c00, 0x3c00, 0x4000, 0, 0, 0x4200};
  static const int64_t lens[1] = {3};
  static const unsigned char m[6] = {1, 1, 0, 1, 0, 1};
  char err[PROTO_ERR_MAX];
  snprintf(a->key, sizeof a->key, "/attnd-oom-%d", (int)getpid());
  int fd = shm_open(a->key, O_RDWR | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 8192), 0);
  ck_assert_int_eq(pwrite(fd, q, 16, 0), 16);
  ck_assert_int_eq(pwrite(fd, k, 12, 64), 12);
  ck_assert_int_eq(pwrite(fd, v, 24, 128), 24);
  ck_assert_int_eq(pwrite(fd, lens, 8, 192), 8);
  ck_assert_int_eq(pwrite(fd, m, 6, 256), 6);
  close(fd);
  a->reg = shm_new(8, 1 << 20);
  ck_assert_int_eq(shm_register(a->reg, "r", a->key, 0, 8192, err), 0);
}

static void shm_arg_free(shm_arg *a) {
  shm_free(a->reg);
  shm_unlink(a->key);
}

/* A v2 request whose tensors are in region r, decoded through a
 * request's holds, which are given back whatever happened. */
static int op_v2_shm_decode(const void *arg, char **out, size_t *len) {
  const shm_arg *a = arg;
  struct shm_http_req s;
  proto_shm p;
  proto_request r;
  proto_shm_write w[PROTO_OUT_COUNT];
  char err[PROTO_ERR_MAX];
  memset(&s, 0, sizeof s);
  shm_http_req_begin(&s, a->reg, &p);
  int rc = proto_v2_decode_shm(v2_shm, strlen(v2_shm), NULL,
                               PROTO_MODEL_ATTENTION, &p, &r, 0, err);
  if (rc) {
    ck_assert_int_eq(r.n_owned, 0);
  } else {
    ck_assert_int_eq(proto_v2_shm_outputs(&r, w), 1);
    rc = describe(&r, out, len);
    proto_request_free(&r);
  }
  shm_http_req_end(&s);
  ck_assert_uint_eq(shm_count(a->reg), 1);
  return rc;
}

/* The register route's work on a fresh registry: the body, two regions,
 * the status of both, unregister. */
static int op_shm_registry(const void *arg, char **out, size_t *len) {
  const shm_arg *a = arg;
  char body[128], err[PROTO_ERR_MAX];
  proto_shm_register reg_body;
  struct shm_registry *reg = shm_new(8, 1 << 20);
  int rc;
  ck_assert_ptr_nonnull(reg);
  snprintf(body, sizeof body, "{\"key\":\"%s\",\"offset\":4096,"
           "\"byte_size\":4096}", a->key);
  rc = proto_shm_register_decode(body, strlen(body), "first", &reg_body,
                                 err);
  if (!rc)
    rc = shm_register(reg, "first", reg_body.key, reg_body.offset,
                      reg_body.byte_size, err);
  if (!rc)
    rc = shm_register(reg, "second", a->key, 0, 4096, err);
  if (!rc)
    rc = shm_status(reg, NULL, out, len, err);
  shm_unregister(reg, NULL);
  ck_assert_uint_eq(shm_count(reg), 0);
  shm_free(reg);
  return rc;
}

/* ---- tests --------------------------------------------------------------------- */

static void decode_compute(proto_request *r, const char *body,
                           const bin_req *b) {
  char err[PROTO_ERR_MAX];
  int rc = b ? proto_v2_decode(b->body, b->len, b->hlen,
                               PROTO_MODEL_ATTENTION, r, 0, err)
             : proto_v1_decode(body, strlen(body), r, 0, err);
  ck_assert_msg(rc == 0, "decode: %s", err);
  ck_assert_int_eq(attn_forward(&r->prob, r->out,
                                r->return_weights ? r->weights : NULL), 0);
}

START_TEST(v1_decode_every_allocation) {
  for (int persistent = 0; persistent < 2; persistent++) {
    int n = sweep("v1 decode", op_v1_decode, v1_body, persistent);
    ck_assert_msg(n >= 20, "only %d allocations: is cJSON hooked?", n);
    ck_assert_int_gt(sweep("v1 additive decode", op_v1_decode, v1_additive,
                           persistent), 10);
  }
}
END_TEST

START_TEST(v2_decode_every_allocation) {
  bin_req b;
  make_v2_binary(&b, 0);
  for (int persistent = 0; persistent < 2; persistent++) {
    ck_assert_int_gt(sweep("v2 json decode", op_v2_json_decode, v2_json,
                           persistent), 20);
    ck_assert_int_gt(sweep("v2 binary decode", op_v2_binary_decode, &b,
                           persistent), 10);
    ck_assert_int_gt(sweep("v2 received decode", op_v2_received_decode, &b,
                           persistent), 10);
  }
}
END_TEST

START_TEST(encode_every_allocation) {
  proto_request r1, r2, r3;
  bin_req b, alone;
  make_v2_binary(&b, 0);
  make_v2_binary(&alone, 1);
  decode_compute(&r1, v1_body, NULL);
  decode_compute(&r2, v1_additive, NULL);
  decode_compute(&r3, NULL, &b);
  for (int persistent = 0; persistent < 2; persistent++) {
    ck_assert_int_ge(sweep("v1 encode", op_encode, &r1, persistent), 1);
    ck_assert_int_ge(sweep("v1 flat encode", op_encode, &r2, persistent), 1);
    ck_assert_int_ge(sweep("v2 binary encode", op_encode, &r3, persistent),
                     1);
    ck_assert_int_ge(sweep("v2 encode in parts", op_v2_parts, &b,
                           persistent), 10);
    ck_assert_int_ge(sweep("v2 encode in parts, output alone",
                           op_v2_parts, &alone, persistent), 10);
    ck_assert_int_ge(sweep("error body", op_error_body,
                           "key: width 3 \"bad\"", persistent), 1);
    ck_assert_int_ge(sweep("metadata", op_metadata, NULL, persistent), 2);
  }
  proto_request_free(&r1);
  proto_request_free(&r2);
  proto_request_free(&r3);
}
END_TEST

START_TEST(shared_memory_every_allocation) {
  shm_arg a;
  shm_arg_init(&a);
  for (int persistent = 0; persistent < 2; persistent++) {
    ck_assert_int_gt(sweep("v2 shared memory decode", op_v2_shm_decode, &a,
                           persistent), 10);
    ck_assert_int_gt(sweep("shared memory registry", op_shm_registry, &a,
                           persistent), 5);
  }
  shm_arg_free(&a);
}
END_TEST

START_TEST(content_coding_every_allocation) {
  coding_arg gz = {"gzip", v1_body}, df = {"deflate", v2_json};
  for (int persistent = 0; persistent < 2; persistent++) {
    ck_assert_int_ge(sweep("gzip", op_deflate_inflate, &gz, persistent), 4);
    ck_assert_int_ge(sweep("deflate", op_deflate_inflate, &df, persistent),
                     4);
  }
}
END_TEST

/* The wrapper itself: the countdown, persistence, the counters, and the
 * environment variable attnd reads. */
START_TEST(wrapper_counts_and_fails_the_nth) {
  long live = mem_live();
  unsigned long inj = mem_injected(), thr = mem_thread_failures();
  void *a, *b, *c;
  mem_fail_at(2, 0);
  a = mem_malloc(8);
  b = mem_calloc(2, 8);
  c = mem_strdup("x");
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(b);
  ck_assert_ptr_nonnull(c);  /* transient: only the 2nd fails */
  ck_assert_uint_eq(mem_injected(), inj + 1);
  ck_assert_uint_eq(mem_thread_failures(), thr + 1);
  ck_assert_int_eq(mem_live(), live + 2);
  mem_fail_at(1, 1);
  ck_assert_ptr_null(mem_realloc(a, 64));  /* old block intact */
  ck_assert_ptr_null(mem_aligned_alloc(64, 100));
  ck_assert_ptr_null(mem_zalloc(NULL, 4, 4));
  mem_fail_at(0, 0);
  a = mem_realloc(a, 64);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(((uintptr_t)(b = mem_aligned_alloc(64, 100))) % 64, 0);
  mem_free(a);
  mem_free(b);
  mem_free(c);
  mem_free(NULL);
  ck_assert_int_eq(mem_live(), live);

  setenv("ATTND_FAIL_ALLOC_AT", "3", 1);
  ck_assert_int_eq(mem_fail_from_env(), 3);
  setenv("ATTND_FAIL_ALLOC_AT", "2+", 1);
  ck_assert_int_eq(mem_fail_from_env(), 2);
  setenv("ATTND_FAIL_ALLOC_AT", "x", 1);
  ck_assert_int_eq(mem_fail_from_env(), -1);
  setenv("ATTND_FAIL_ALLOC_AT", "0", 1);
  ck_assert_int_eq(mem_fail_from_env(), -1);
  unsetenv("ATTND_FAIL_ALLOC_AT");
  ck_assert_int_eq(mem_fail_from_env(), 0);
  mem_fail_at(0, 0);
}
END_TEST

/* The parse arena: cJSON's nodes come from it inside the bracket (mem_live
 * does not move), a tree too big for it spills to malloc and still
 * deletes cleanly, brackets nest, injection reaches arena allocations, and
 * the decoders leave the bracket closed. */
START_TEST(json_arena_takes_parse_trees_inside_the_bracket) {
  long live = mem_live();
  mem_json_arena_begin();
  cJSON *t = cJSON_Parse("{\"a\":[1,2,3],\"b\":{\"c\":\"x\"}}");
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(mem_live(), live);  /* all from the arena */
  ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(t, "a"), 2)
                       ->valueint, 3);
  cJSON_Delete(t);
  mem_json_arena_end();

  /* bigger than the arena: the spill is malloc'd, then freed */
  size_t n = 4000, len = 0;
  char *doc = malloc(n * 2 + 2);
  doc[len++] = '[';
  for (size_t i = 0; i < n; i++)
    doc[len++] = '7', doc[len++] = i + 1 < n ? ',' : ']';
  doc[len] = '\0';
  mem_json_arena_begin();
  t = cJSON_Parse(doc);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_gt(mem_live(), live);
  ck_assert_int_eq(cJSON_GetArraySize(t), (int)n);
  ck_assert_int_eq(cJSON_GetArrayItem(t, (int)n - 1)->valueint, 7);
  cJSON_Delete(t);
  ck_assert_int_eq(mem_live(), live);
  mem_json_arena_end();
  free(doc);

  /* nested: the inner end keeps the outer tree's memory */
  mem_json_arena_begin();
  t = cJSON_Parse("[\"kept\"]");
  mem_json_arena_begin();
  cJSON *u = cJSON_Parse("[\"inner\"]");
  cJSON_Delete(u);
  mem_json_arena_end();
  cJSON *w = cJSON_Parse("[\"after\"]");
  ck_assert_str_eq(cJSON_GetArrayItem(t, 0)->valuestring, "kept");
  ck_assert_str_eq(cJSON_GetArrayItem(w, 0)->valuestring, "after");
  cJSON_Delete(w);
  cJSON_Delete(t);
  mem_json_arena_end();
  ck_assert_int_eq(mem_live(), live);

  /* injection fails an arena allocation and counts it */
  unsigned long thr = mem_thread_failures();
  mem_fail_at(1, 0);
  mem_json_arena_begin();
  ck_assert_ptr_null(cJSON_Parse("[1]"));
  mem_json_arena_end();
  mem_fail_at(0, 0);
  ck_assert_uint_eq(mem_thread_failures(), thr + 1);

  /* after a decode, cJSON outside a bracket is malloc'd again */
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v1_decode(v1_body, strlen(v1_body), &r, 0, err), 0);
  proto_request_free(&r);
  ck_assert_int_eq(proto_v2_decode(v2_json, strlen(v2_json), NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err), 0);
  proto_request_free(&r);
  ck_assert_int_eq(mem_live(), live);
  t = cJSON_Parse("[1]");
  ck_assert_int_gt(mem_live(), live);  /* counted: malloc, not the arena */
  cJSON_Delete(t);
  ck_assert_int_eq(mem_live(), live);
}
END_TEST

static Suite *oom_suite(void) {
  Suite *s = suite_create("oom");
  TCase *tc = tcase_create("oom");
  tcase_add_test(tc, wrapper_counts_and_fails_the_nth);
  tcase_add_test(tc, json_arena_takes_parse_trees_inside_the_bracket);
  tcase_add_test(tc, v1_decode_every_allocation);
  tcase_add_test(tc, v2_decode_every_allocation);
  tcase_add_test(tc, encode_every_allocation);
  tcase_add_test(tc, content_coding_every_allocation);
  tcase_add_test(tc, shared_memory_every_allocation);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  mem_init();  /* cJSON through the wrapper, as attnd does at startup */
  SRunner *sr = srunner_create(oom_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
