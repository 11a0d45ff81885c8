/* v2_shm.c - Triton's system shared memory extension, proto's part: the
 * register body, the status body, and the shared_memory_* parameters of a
 * v2 inference request (reading inputs out of their regions, listing the
 * outputs to write into theirs).
 *
 * The regions themselves are the server's (server/shm/shm.h); proto sees a
 * region only as an opaque handle and a proto_shm to find and read it.
 * Every rule and message follows Triton's HTTP server and shared memory
 * manager (protocol.md, "System shared memory extension"), except that a
 * client mistake Triton answers 500 is a 400 here: its message then says
 * what Triton's does, in words a client can act on.
 *
 * Numbers: Triton reads offsets and sizes as unsigned 64-bit JSON
 * integers.  cJSON keeps a double, so an integer above 2^53 is read as
 * its nearest double, and the double 2^64 (what 2^64 - 1 written out
 * rounds to) as 2^64 - 1: every size a real object can have is exact, and
 * the overflow check below still sees the sums that overflow. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/v2/v2.h"

#define ERR(...) (snprintf(err, PROTO_ERR_MAX, __VA_ARGS__), ATTND_EINVAL)

const char *const proto__shm_param_names[3] = {
  "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"};

/* Triton reserves keys that start with this (after leading '/') for its
 * Python backend; it refuses them, and so does attnd, so that a client
 * that works here works there. */
static const char reserved_prefix[] = "triton_python_backend_shm_region_";

/* Bytes read per step when a tensor is converted on its way out of a
 * region (every datatype but FP32 and BOOL): small enough to stay in L1/L2
 * between the read and the conversion. */
#define BOUNCE_BYTES 32768

/* A JSON unsigned 64-bit integer (see the top of the file), whole as the
 * client wrote it (proto__json_whole): 0 or -1. */
static int json_u64(const cJSON *j, uint64_t *out) {
  const double two64 = 18446744073709551616.0;
  double x;
  if (!proto__json_whole(j))
    return -1;
  x = j->valuedouble;
  if (!(x >= 0 && x <= two64))
    return -1;
  *out = x == two64 ? UINT64_MAX : (uint64_t)x;
  return 0;
}

/* ---- inference parameters ---------------------------------------------- */

int proto__v2_shm_params(const cJSON *params, const char *where,
                         proto__shm_use *u, char err[PROTO_ERR_MAX]) {
  const cJSON *region, *size, *off;
  memset(u, 0, sizeof *u);
  if (!params)
    return 0;
  region = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_region");
  if (!region)
    return 0;
  size = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_byte_size");
  off = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_offset");
  if (!cJSON_IsString(region))
    return ERR("%s: Unable to parse 'shared_memory_region': attempt to "
               "access JSON non-string as string", where);
  /* A missing byte size is 0, as in Triton: it fails later, by name. */
  if (size && json_u64(size, &u->byte_size))
    return ERR("%s: Unable to parse 'shared_memory_byte_size': attempt to "
               "access JSON non-unsigned-integer as unsigned-integer",
               where);
  if (off && json_u64(off, &u->offset))
    return ERR("%s: Unable to parse 'shared_memory_offset': attempt to "
               "access JSON non-unsigned-integer as unsigned-integer",
               where);
  u->name = region->valuestring;
  return 0;
}

int proto__v2_shm_locate(const proto_shm *shm, proto__shm_use *u,
                         const char *where, char err[PROTO_ERR_MAX]) {
  uint64_t size = 0;
  char name[48];
  proto__quote_name(u->name, name, sizeof name);
  err[0] = '\0';
  u->region = shm ? shm->find(shm->ctx, u->name, &size, err) : NULL;
  if (!u->region && err[0]) {
    char why[96]; /* find's message is short */
    snprintf(why, sizeof why, "%s", err);
    return ERR("%s: region '%s': %s", where, name, why);
  }
  if (!u->region) {
    snprintf(err, PROTO_ERR_MAX, "%s: Unable to find shared memory region: "
             "'%s'", where, name);
    return ATTND_ENOTFOUND;
  }
  if (u->offset >= size)
    return ERR("%s: Invalid offset for shared memory region: '%s' (offset "
               "%llu, the region holds %llu bytes)", where, name,
               (unsigned long long)u->offset, (unsigned long long)size);
  if (u->byte_size > UINT64_MAX - u->offset)
    return ERR("%s: Integer overflow detected: byte_size (%llu) + offset "
               "(%llu) exceeds maximum value (18446744073709551615) for "
               "region '%s'", where, (unsigned long long)u->byte_size,
               (unsigned long long)u->offset, name);
  if (u->offset + u->byte_size > size)
    return ERR("%s: Invalid offset + byte size for shared memory region: "
               "'%s' (%llu + %llu bytes, the region holds %llu)", where,
               name, (unsigned long long)u->offset,
               (unsigned long long)u->byte_size, (unsigned long long)size);
  return 0;
}

int proto__v2_shm_input(const proto_shm *shm, const cJSON *params,
                        const char *name, int data, int bs,
                        proto__shm_use *u, char err[PROTO_ERR_MAX]) {
  int rc;
  if (data || bs)
    return ERR("%s: Input must set only one of the following fields: "
               "'data', 'binary_data_size' in 'parameters', "
               "'shared_memory_region' in 'parameters'. But set%s%s "
               "'shared_memory_region'", name, data ? " 'data'" : "",
               bs ? " 'binary_data_size'" : "");
  if ((rc = proto__v2_shm_params(params, name, u, err)))
    return rc;
  return proto__v2_shm_locate(shm, u, name, err);
}

int proto__v2_shm_output(const proto_shm *shm, const cJSON *params,
                         const char *where, proto_shm_ref *out,
                         char err[PROTO_ERR_MAX]) {
  proto__shm_use u;
  int rc;
  if ((rc = proto__v2_shm_params(params, where, &u, err)) || !u.name)
    return rc;
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(params, "binary_data")))
    return ERR("%s: Output can't set both 'shared_memory_region' and "
               "'binary_data'", where);
  if (cJSON_GetObjectItemCaseSensitive(params, "classification"))
    return ERR("%s: Output can't set both 'shared_memory_region' and "
               "'classification'", where);
  if ((rc = proto__v2_shm_locate(shm, &u, where, err)))
    return rc;
  *out = (proto_shm_ref){u.region, u.offset, u.byte_size};
  return 0;
}

static size_t out_count(const proto_request *req, int which);

int proto__v2_shm_output_sizes(const proto_request *req,
                               char err[PROTO_ERR_MAX]) {
  static const char *const names[PROTO_OUT_COUNT] = {
    "output", "weights", "allowed_keys", "entropy", "max_weight",
    "jacobian_norm", "lse"};
  for (int i = 0; i < req->n_outputs; i++) {
    int k = req->outputs[i];
    const proto_shm_ref *ref = &req->shm_out[k];
    uint64_t need = (uint64_t)out_count(req, k) * sizeof(float);
    if (ref->region && ref->byte_size < need)
      return ERR("shared memory size specified with the request for output "
                 "'%s' (%llu bytes) should be at least %llu bytes to hold "
                 "the results", names[k], (unsigned long long)ref->byte_size,
                 (unsigned long long)need);
  }
  return 0;
}

/* n bytes at off of u's region, past u's offset, into dst. */
static int shm_read(const proto_shm *shm, const proto__shm_use *u,
                    size_t off, void *dst, size_t n, char *err) {
  return shm->read(shm->ctx, u->region, u->offset + off, dst, n, err);
}

static size_t first_not_bool(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i] > 1)
      return i;
  return n;
}

/* Every datatype but FP32 and BOOL: BOUNCE_BYTES at a time into a buffer
 * on the stack, converted from there into dst, and the converted values
 * checked: the region itself is read only by the copy. */
static int fill_bounced(const proto_shm *shm, const proto__shm_use *u,
                        int kind, int dt, size_t n, long long hi, void *dst,
                        size_t *bad, long long *badval, char *err) {
  _Alignas(64) unsigned char bounce[BOUNCE_BYTES];
  size_t es = proto__dtype_size(dt), per = BOUNCE_BYTES / es;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per, j;
    int rc = shm_read(shm, u, i * es, bounce, m * es, err);
    if (rc)
      return rc;
    if (kind == PROTO__KIND_LEN)
      j = proto__bin_to_len(dt, bounce, m, hi, (int32_t *)dst + i, badval);
    else
      j = proto__bin_to_f32(dt, bounce, m, (float *)dst + i);
    if (j < m) {
      *bad = i + j;
      return 0;
    }
  }
  *bad = n;
  return 0;
}

int proto__v2_shm_fill(const proto_shm *shm, const proto__shm_use *u,
                       int kind, int dt, size_t n, long long hi, void *dst,
                       size_t *bad, long long *badval,
                       char err[PROTO_ERR_MAX]) {
  int rc;
  *badval = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* The one copy: the region's words land where the core reads them,
   * and are checked there, after the copy.  Never before it, nor in the
   * region: the client can write the region at any moment, even during
   * the copy, and the core must compute with exactly what was checked. */
  if (kind == PROTO__KIND_F32 && dt == PROTO__DT_FP32) {
    if ((rc = shm_read(shm, u, 0, dst, n * sizeof(float), err)))
      return rc;
    *bad = proto__f32_first_bad(dst, n);
    return 0;
  }
#endif
  if (kind == PROTO__KIND_BOOL) {  /* the same: copied, then checked */
    if ((rc = shm_read(shm, u, 0, dst, n, err)))
      return rc;
    *bad = first_not_bool(dst, n);
    return 0;
  }
  return fill_bounced(shm, u, kind, dt, n, hi, dst, bad, badval, err);
}

int proto__v2_shm_viewable(const proto_shm *shm, const proto__shm_use *u) {
  return shm && shm->view && u->offset % _Alignof(float) == 0 &&
         __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
}

int proto__v2_shm_view(const proto_shm *shm, const proto__shm_use *u,
                       size_t n, const float **at, size_t *bad,
                       char err[PROTO_ERR_MAX]) {
  const void *p;
  int rc;
  assert(proto__v2_shm_viewable(shm, u));
  rc = shm->view(shm->ctx, u->region, u->offset, n * sizeof(float),
                 proto__f32_first_bad, &p, bad, err);
  *at = p;
  return rc;
}

/* ---- outputs ------------------------------------------------------------ */

/* The output's float32 (or int32) buffer and its element count. */
static void *out_buffer(proto_request *req, int which) {
  switch (which) {
  case PROTO_OUT_OUTPUT: return req->out;
  case PROTO_OUT_WEIGHTS: return req->weights;
  case PROTO_OUT_ALLOWED_KEYS: return req->allowed_keys;
  case PROTO_OUT_ENTROPY: return req->entropy;
  case PROTO_OUT_MAX_WEIGHT: return req->max_weight;
  case PROTO_OUT_LSE: return req->lse;
  default: return req->jacobian_norm;
  }
}

static size_t out_count(const proto_request *req, int which) {
  const attn_problem *p = &req->prob;
  size_t n = (size_t)p->B * (size_t)p->H * (size_t)p->Lq;
  if (which == PROTO_OUT_OUTPUT)
    n *= (size_t)p->Dv;
  else if (which == PROTO_OUT_WEIGHTS)
    n *= (size_t)p->Lk;
  return n;
}

int proto_v2_shm_outputs(proto_request *req,
                         proto_shm_write w[PROTO_OUT_COUNT]) {
  int n = 0;
  for (int i = 0; i < req->n_outputs; i++) {
    int which = req->outputs[i];
    const proto_shm_ref *ref = &req->shm_out[which];
    uint32_t *x = out_buffer(req, which);  /* 4-byte elements */
    size_t count = out_count(req, which);
    if (!ref->region)
      continue;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t j = 0; j < count; j++)   /* used once, after encoding */
      x[j] = __builtin_bswap32(x[j]);
#endif
    w[n++] = (proto_shm_write){ref->region, ref->offset, x,
                               count * sizeof(float)};
  }
  return n;
}

/* ---- register and status bodies ---------------------------------------- */

/* Triton's words for a member of the wrong type, after attnd's. */
static int bad_member(const char *field, int string, char *err) {
  return ERR("Shared memory register request: '%s' must be %s (attempt "
             "to access JSON non-%s as %s)", field,
             string ? "a string" : "an unsigned integer",
             string ? "string" : "unsigned-integer",
             string ? "string" : "unsigned-integer");
}

/* The members attnd reads, each at most once, and no other: Triton's
 * clients send these three, and a misspelt one ("byte_sise") would
 * otherwise pass for one left out. */
static int register_members(const cJSON *root, const cJSON *m[3],
                            char *err) {
  static const char *const names[3] = {"key", "offset", "byte_size"};
  memset(m, 0, 3 * sizeof *m);
  for (const cJSON *c = root->child; c; c = c->next) {
    int i = 0;
    while (i < 3 && strcmp(c->string, names[i]))
      i++;
    if (i == 3) {
      char name[48], hint[96]; /* the hint of three short names */
      proto__quote_name(c->string, name, sizeof name);
      proto__hint(hint, sizeof hint, c->string, names, 3, "fields", names,
                  3);
      return ERR("Shared memory register request: unknown field '%s' (%s)",
                 name, hint);
    }
    if (m[i])
      return ERR("Shared memory register request: duplicate field '%s'",
                 names[i]);
    m[i] = c;
  }
  return 0;
}

static int register_key(const cJSON *key, const char *name,
                        proto_shm_register *out, char *err) {
  const char *k = key->valuestring, *s = k;
  char n[48], kq[48];
  proto__quote_name(name, n, sizeof n);
  proto__quote_name(k, kq, sizeof kq);
  while (*s == '/')
    s++;
  if (!*s)
    return ERR("cannot register shared memory region '%s' - invalid shm "
               "key '%s'", n, kq);
  if (!strncmp(s, reserved_prefix, sizeof reserved_prefix - 1))
    return ERR("cannot register shared memory region '%s' with key '%s' as "
               "the key contains the reserved prefix '%s'", n, kq,
               reserved_prefix);
  if (strlen(k) > PROTO_SHM_NAME_MAX)
    return ERR("cannot register shared memory region '%s': key '%s' is "
               "longer than %d bytes", n, kq, PROTO_SHM_NAME_MAX);
  strcpy(out->key, k);
  return 0;
}

static int register_fields(const cJSON *root, const char *name,
                           proto_shm_register *out, char *err) {
  const cJSON *m[3];
  int rc;
  if (!cJSON_IsObject(root))
    return ERR("failed to parse the request JSON buffer: expected a JSON "
               "object {\"key\", \"offset\", \"byte_size\"}");
  if ((rc = register_members(root, m, err)))
    return rc;
  if (!m[0])
    return ERR("Shared memory register request has no 'key' field");
  if (!cJSON_IsString(m[0]))
    return bad_member("key", 1, err);
  out->offset = 0;
  if (m[1] && json_u64(m[1], &out->offset))
    return bad_member("offset", 0, err);
  if (!m[2])
    return ERR("Shared memory register request has no 'byte_size' field");
  if (json_u64(m[2], &out->byte_size))
    return bad_member("byte_size", 0, err);
  return register_key(m[0], name, out, err);
}

int proto_shm_register_decode(const char *body, size_t len, const char *name,
                              proto_shm_register *out,
                              char err[PROTO_ERR_MAX]) {
  const char *end = NULL;
  unsigned long failed = mem_thread_failures();
  cJSON *root;
  int rc;
  proto__json_stats st;
  char why[PROTO_ERR_MAX];
  memset(out, 0, sizeof *out);
  err[0] = '\0';
  /* the syntax first, then the tree held in the budget (jsoncheck.c) */
  if (len && proto__json_check(body, len, PROTO_CODEC_V2, "", 0, &st, why))
    return ERR("failed to parse the request JSON buffer: %.200s", why);
  if (len && (rc = proto__hold(proto__json_tree_bytes(&st),
                               "the cJSON tree of the body", err)))
    return rc;
  root = cJSON_ParseWithLengthOpts(body ? body : "", len, &end, 0);
  if (!root && mem_thread_failures() != failed)
    return ATTND_ENOMEM;
  if (!root) {
    size_t at = end && body && end >= body && end <= body + len
                    ? (size_t)(end - body) : 0;
    return ERR("failed to parse the request JSON buffer: %s at byte %zu",
               len ? "not valid JSON" : "the body is empty", at);
  }
  for (const char *p = end; p < body + len; p++)
    if (!proto__json_blank(*p)) {
      cJSON_Delete(root);
      return ERR("failed to parse the request JSON buffer: unexpected data "
                 "after the JSON object at byte %zu", (size_t)(p - body));
    }
  rc = proto__json_refuse_bad_number(body, end, "", err);
  proto__json_mark_ties(root, body, end, 0); /* the exact integers */
  if (!rc)
    rc = register_fields(root, name, out, err);
  cJSON_Delete(root);
  return rc;
}

static void put_u64(proto__buf *b, uint64_t v) {
  char s[24];
  int n = snprintf(s, sizeof s, "%llu", (unsigned long long)v);
  proto__buf_put(b, s, (size_t)n);
}

int proto_shm_status_encode(const proto_shm_status *r, size_t n,
                            char **body, size_t *len) {
  proto__buf b = {0};
  proto__buf_putc(&b, '[');
  for (size_t i = 0; i < n; i++) {
    proto__buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
    proto__buf_put_json_string(&b, r[i].name);
    proto__buf_puts(&b, ",\"key\":");
    proto__buf_put_json_string(&b, r[i].key);
    proto__buf_puts(&b, ",\"offset\":");
    put_u64(&b, r[i].offset);
    proto__buf_puts(&b, ",\"byte_size\":");
    put_u64(&b, r[i].byte_size);
    proto__buf_putc(&b, '}');
  }
  proto__buf_putc(&b, ']');
  if (b.oom) {
    proto__buf_free(&b);
    return ATTND_ENOMEM;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}
