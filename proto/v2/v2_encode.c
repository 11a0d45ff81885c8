/* v2_encode.c - KServe v2 answers: model lookup, metadata, inference
 * responses (JSON and binary outputs), and the codec dispatch the worker
 * calls.
 *
 * A response lists its outputs in the order the request named them
 * (output and weights when it named none).  A JSON output carries flat "data";
 * a binary one carries parameters.binary_data_size instead, and its bytes
 * (float32, little-endian, row-major) follow the JSON part in the same
 * order, as Triton's binary tensor data extension lays them out.  One
 * written into a shared memory region carries neither (v2_shm.c). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/v2/v2.h"

/* The dot-product model's name: "attention" unless the operator chose
 * another (--model-name), set once at start before any thread reads it.
 * The additive model keeps its own name. */
static char attention_name[PROTO_MODEL_NAME_MAX + 1] = "attention";
static const char *const model_names[PROTO_MODEL_COUNT] = {
  attention_name, "additive_attention"};
static const char *const output_names[PROTO_OUT_COUNT] = {
  "output", "weights", "allowed_keys", "entropy", "max_weight",
  "jacobian_norm", "lse"};

/* The only version of every model. */
#define MODEL_VERSION "1"

/* Floats written per reserve, so a reserve never spans a large tensor. */
#define F32_CHUNK 4096

/* Triton reads a version segment as an integer ([0-9]+), so "01" is
 * version 1 as well. */
static int version_is_one(const char *v) {
  while (*v == '0')
    v++;
  return !strcmp(v, MODEL_VERSION);
}

const char *proto_v2_model_name(int model) {
  assert(model >= 0 && model < PROTO_MODEL_COUNT);
  return model_names[model];
}

/* A name is one URL path segment and one JSON string without escapes: it
 * starts with a letter or digit and goes on with letters, digits, '_',
 * '-' and '.' (Kubernetes object names, Triton's model names). */
int proto_v2_model_name_check(const char *name, char err[PROTO_ERR_MAX]) {
  size_t n = strlen(name), i;
  char got[48];
  if (n == 0 || n > PROTO_MODEL_NAME_MAX) {
    snprintf(err, PROTO_ERR_MAX, "%s (expected 1 to %d characters)",
             n ? "too long" : "empty", PROTO_MODEL_NAME_MAX);
    return ATTND_EINVAL;
  }
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '-' && c != '.'))) {
      proto__quote_name(name, got, sizeof got);
      snprintf(err, PROTO_ERR_MAX, "'%s': character %zu is not allowed "
               "(letters, digits, '_', '-' and '.', starting with a letter "
               "or digit)", got, i + 1);
      return ATTND_EINVAL;
    }
  }
  if (!strcmp(name, model_names[PROTO_MODEL_ADDITIVE])) {
    snprintf(err, PROTO_ERR_MAX, "'%s' is the additive model's name",
             name);
    return ATTND_EINVAL;
  }
  return 0;
}

int proto_v2_set_model_name(const char *name, char err[PROTO_ERR_MAX]) {
  int rc = proto_v2_model_name_check(name, err);
  if (rc == 0)
    memcpy(attention_name, name, strlen(name) + 1);
  return rc;
}

int proto_v2_model_find(const char *name, const char *version,
                        char err[PROTO_ERR_MAX]) {
  char got[48];
  for (int m = 0; m < PROTO_MODEL_COUNT; m++) {
    if (strcmp(name, model_names[m]))
      continue;
    if (!version || version_is_one(version))
      return m;
    proto__quote_name(version, got, sizeof got);
    snprintf(err, PROTO_ERR_MAX, "model '%s' has no version '%s' "
             "(versions: " MODEL_VERSION ")", model_names[m], got);
    return ATTND_ENOTFOUND;
  }
  proto__quote_name(name, got, sizeof got);
  snprintf(err, PROTO_ERR_MAX, "unknown model '%s' (models: %s, %s)", got,
           model_names[PROTO_MODEL_ATTENTION],
           model_names[PROTO_MODEL_ADDITIVE]);
  return ATTND_ENOTFOUND;
}

static int finish(proto__buf *b, char **body, size_t *len) {
  if (b->oom) {
    proto__buf_free(b);
    return ATTND_ENOMEM;
  }
  *body = b->p;
  *len = b->len;
  return 0;
}

int proto_v2_server_metadata(const char *version, char **body,
                             size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"name\":\"attnd\",\"version\":");
  proto__buf_put_json_string(&b, version);
  proto__buf_puts(&b, ",\"extensions\":[\"binary_tensor_data\","
                      "\"parameters\",\"model_configuration\","
                      "\"statistics\",\"system_shared_memory\"]}");
  return finish(&b, body, len);
}

/* The tensors of every model, as metadata and config list them.  Shapes
 * are given at rank 4, (B, H, L, D); rank 3 (B, L, D) is also accepted.
 * Float inputs take FP32, FP64, FP16 or BF16: FP32 is listed as the one
 * clients should use (the lengths INT32 of INT32 or INT64).  The
 * additive model takes all thirteen inputs, the dot-product one the
 * first ten.  alibi_slopes is listed at its (H,) rank; (B, H) is also
 * accepted. */
static const struct model_tensor {
  const char *name, *dtype;
  int rank, optional;
} model_inputs[] = {
  {"query", "FP32", 4, 0}, {"key", "FP32", 4, 0},   {"value", "FP32", 4, 0},
  {"valid_lens", "INT32", 1, 1}, {"mask", "BOOL", 4, 1},
  {"bias", "FP32", 4, 1},  {"sinks", "FP32", 1, 1},
  {"alibi_slopes", "FP32", 1, 1}, {"cu_seqlens_q", "INT32", 1, 1},
  {"cu_seqlens_k", "INT32", 1, 1}, {"w_q", "FP32", 2, 0},
  {"w_k", "FP32", 2, 0},   {"w_v", "FP32", 1, 0}};
/* The diagnostics and the lse, (B, H, Lq), are computed only when
 * named. */
static const struct model_tensor model_outputs[PROTO_OUT_COUNT] = {
  {"output", "FP32", 4, 0},        {"weights", "FP32", 4, 0},
  {"allowed_keys", "INT32", 3, 0}, {"entropy", "FP32", 3, 0},
  {"max_weight", "FP32", 3, 0},    {"jacobian_norm", "FP32", 3, 0},
  {"lse", "FP32", 3, 0}};

static int model_input_count(int model) {
  return model == PROTO_MODEL_ADDITIVE ? PROTO__IN_COUNT : PROTO__IN_W_Q;
}

/* rank axes of -1 (any size), as [-1,-1,..]. */
static void put_any_dims(proto__buf *b, int rank) {
  proto__buf_putc(b, '[');
  for (int i = 0; i < rank; i++)
    proto__buf_puts(b, i ? ",-1" : "-1");
  proto__buf_putc(b, ']');
}

/* A tensor's opening, `{"name":"<name>","<type>`<dtype>, after a comma
 * when one is due: the metadata and the config differ in what follows,
 * and in the data type's key (type is `datatype":"` or
 * `data_type":"TYPE_`). */
static void put_tensor_head(proto__buf *b, const struct model_tensor *t,
                            const char *type, int comma) {
  proto__buf_puts(b, comma ? ",{\"name\":\"" : "{\"name\":\"");
  proto__buf_puts(b, t->name);
  proto__buf_puts(b, "\",\"");
  proto__buf_puts(b, type);
  proto__buf_puts(b, t->dtype);
}

/* One $metadata_tensor. */
static void put_meta_tensor(proto__buf *b, const struct model_tensor *t,
                            int comma) {
  put_tensor_head(b, t, "datatype\":\"", comma);
  proto__buf_puts(b, "\",\"shape\":");
  put_any_dims(b, t->rank);
  proto__buf_putc(b, '}');
}

int proto_v2_model_metadata(int model, char **body, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"name\":\"");
  proto__buf_puts(&b, model_names[model]);
  proto__buf_puts(&b, "\",\"versions\":[\"" MODEL_VERSION "\"],"
                      "\"platform\":\"attnd\",\"inputs\":[");
  for (int i = 0; i < model_input_count(model); i++)
    put_meta_tensor(&b, &model_inputs[i], i > 0);
  proto__buf_puts(&b, "],\"outputs\":[");
  for (int i = 0; i < PROTO_OUT_COUNT; i++)
    put_meta_tensor(&b, &model_outputs[i], i > 0);
  proto__buf_puts(&b, "]}");
  return finish(&b, body, len);
}

/* One ModelInput or ModelOutput of a config, with the fields Triton
 * prints (its data types are the v2 names with a TYPE_ prefix). */
static void put_config_tensor(proto__buf *b, const struct model_tensor *t,
                              int input, int comma) {
  put_tensor_head(b, t, "data_type\":\"TYPE_", comma);
  proto__buf_puts(b, input ? "\",\"format\":\"FORMAT_NONE\",\"dims\":"
                           : "\",\"dims\":");
  put_any_dims(b, t->rank);
  if (input) {
    proto__buf_puts(b, ",\"is_shape_tensor\":false,"
                       "\"allow_ragged_batch\":false,\"optional\":");
    proto__buf_puts(b, t->optional ? "true}" : "false}");
  } else {
    proto__buf_puts(b, ",\"label_filename\":\"\",\"is_shape_tensor\":false}");
  }
}

int proto_v2_model_config(int model, int instances, char **body,
                          size_t *len) {
  proto__buf b = {0};
  char n[24];
  proto__buf_puts(&b, "{\"name\":\"");
  proto__buf_puts(&b, model_names[model]);
  /* max_batch_size 0: the batch axis is part of every tensor's shape
   * (attnd groups requests of one shape, but each keeps its own B). */
  proto__buf_puts(&b, "\",\"platform\":\"attnd\",\"backend\":\"attnd\","
                      "\"version_policy\":{\"latest\":{\"num_versions\":1}},"
                      "\"max_batch_size\":0,\"input\":[");
  for (int i = 0; i < model_input_count(model); i++)
    put_config_tensor(&b, &model_inputs[i], 1, i > 0);
  proto__buf_puts(&b, "],\"output\":[");
  for (int i = 0; i < PROTO_OUT_COUNT; i++)
    put_config_tensor(&b, &model_outputs[i], 0, i > 0);
  snprintf(n, sizeof n, "%d", instances);
  proto__buf_puts(&b, "],\"instance_group\":[{\"name\":\"");
  proto__buf_puts(&b, model_names[model]);
  proto__buf_puts(&b, "\",\"kind\":\"KIND_CPU\",\"count\":");
  proto__buf_puts(&b, n);
  proto__buf_puts(&b, ",\"gpus\":[],\"profile\":[]}],"
                      "\"model_transaction_policy\":{\"decoupled\":false},"
                      "\"parameters\":{\"precision\":{\"string_value\":\"");
  /* the request parameter precision's values (additive: float32 only) */
  proto__buf_puts(&b, model == PROTO_MODEL_ADDITIVE ? "fp32" : "fp32,bf16");
  proto__buf_puts(&b, "\"}}}");
  return finish(&b, body, len);
}

/* "name":{"count":c,"ns":t} */
static void put_stat(proto__buf *b, const char *name, proto_stat st,
                     int comma) {
  char n[64];
  snprintf(n, sizeof n, "\":{\"count\":%llu,\"ns\":%llu}",
           (unsigned long long)st.count, (unsigned long long)st.ns);
  proto__buf_puts(b, comma ? ",\"" : "\"");
  proto__buf_puts(b, name);
  proto__buf_puts(b, n);
}

static void put_model_stats(proto__buf *b, int model,
                            const proto_model_stats *st) {
  static const proto_stat none = {0, 0};
  char n[96];
  proto__buf_puts(b, "{\"name\":\"");
  proto__buf_puts(b, model_names[model]);
  snprintf(n, sizeof n, "\",\"version\":\"" MODEL_VERSION "\","
           "\"last_inference\":%llu,\"inference_count\":%llu,"
           "\"execution_count\":%llu,",
           (unsigned long long)st->last_inference_ms,
           (unsigned long long)st->compute_infer.count,
           (unsigned long long)st->compute_infer.count);
  proto__buf_puts(b, n);
  proto__buf_puts(b, "\"inference_stats\":{");
  put_stat(b, "success", st->success, 0);
  put_stat(b, "fail", st->fail, 1);
  put_stat(b, "queue", st->queue, 1);
  put_stat(b, "compute_input", st->compute_input, 1);
  put_stat(b, "compute_infer", st->compute_infer, 1);
  put_stat(b, "compute_output", st->compute_output, 1);
  /* attnd keeps no response cache: nothing is ever a hit or a miss */
  put_stat(b, "cache_hit", none, 1);
  put_stat(b, "cache_miss", none, 1);
  proto__buf_puts(b, "},\"batch_stats\":[");
  /* every request runs as its own execution of batch size 1 */
  if (st->compute_infer.count) {
    proto__buf_puts(b, "{\"batch_size\":1,");
    put_stat(b, "compute_input", st->compute_input, 0);
    put_stat(b, "compute_infer", st->compute_infer, 1);
    put_stat(b, "compute_output", st->compute_output, 1);
    proto__buf_putc(b, '}');
  }
  proto__buf_puts(b, "]}");
}

int proto_v2_model_stats(const int *models, const proto_model_stats *stats,
                         int n, char **body, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"model_stats\":[");
  for (int i = 0; i < n; i++) {
    if (i)
      proto__buf_putc(&b, ',');
    put_model_stats(&b, models[i], &stats[i]);
  }
  proto__buf_puts(&b, "]}");
  return finish(&b, body, len);
}

int proto_v2_model_ready(int model, int ready, char **body, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"name\":\"");
  proto__buf_puts(&b, model_names[model]);
  proto__buf_puts(&b, ready ? "\",\"ready\":true}" : "\",\"ready\":false}");
  return finish(&b, body, len);
}

/* ---- inference responses ------------------------------------------------ */

/* The output's shape at the query's rank (a diagnostic: without the last
 * axis); returns the rank. */
static int out_dims(const proto_request *req, int which, int *dims) {
  const attn_problem *p = &req->prob;
  int r = 0;
  dims[r++] = p->B;
  if (req->qrank == 4)
    dims[r++] = p->H;
  dims[r++] = p->Lq;
  if (which == PROTO_OUT_OUTPUT || which == PROTO_OUT_WEIGHTS)
    dims[r++] = which == PROTO_OUT_OUTPUT ? p->Dv : p->Lk;
  return r;
}

/* The output's elements: float32, or int32 for allowed_keys (the same
 * size, so n * 4 bytes either way). */
static const void *out_data(const proto_request *req, int which,
                            size_t *n) {
  int dims[4], r = out_dims(req, which, dims);
  *n = 1;
  for (int d = 0; d < r; d++)
    *n *= (size_t)dims[d];
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

/* The lse: -inf (nothing allowed, no sink) as null, JSON having no
 * infinity; every other value as put_f32s prints it. */
static void put_f32s_inf_null(proto__buf *b, const float *x, size_t n) {
  char num[PROTO__F32_MAX + 1];
  proto__buf_putc(b, '[');
  for (size_t i = 0; i < n && !b->oom; i++) {
    if (i)
      proto__buf_putc(b, ',');
    if (!isfinite(x[i])) {
      proto__buf_puts(b, "null");
      continue;
    }
    proto__buf_put(b, num, (size_t)proto__fmt_f32(num, x[i]));
  }
  proto__buf_putc(b, ']');
}

static void put_i32s(proto__buf *b, const int32_t *x, size_t n) {
  proto__buf_putc(b, '[');
  for (size_t i = 0; i < n && !b->oom; i++) {
    if (i)
      proto__buf_putc(b, ',');
    proto__buf_put_i64(b, x[i]);
  }
  proto__buf_putc(b, ']');
}

static void put_f32s(proto__buf *b, const float *x, size_t n) {
  proto__buf_putc(b, '[');
  for (size_t i = 0; i < n && !b->oom; i += F32_CHUNK) {
    size_t m = n - i < F32_CHUNK ? n - i : F32_CHUNK;
    if (proto__buf_reserve(b, m * (PROTO__F32_MAX + 1) + 1))
      return;
    char *s = b->p + b->len;
    if (i)
      *s++ = ',';
    s += proto__num_fmt_f32_list(s, x + i, m);
    b->len = (size_t)(s - b->p);
  }
  proto__buf_putc(b, ']');
}

static void put_output(proto__buf *b, const proto_request *req, int which) {
  int dims[4], r = out_dims(req, which, dims);
  size_t n;
  const void *x = out_data(req, which, &n);
  int i32 = which == PROTO_OUT_ALLOWED_KEYS;
  proto__buf_puts(b, "{\"name\":\"");
  proto__buf_puts(b, output_names[which]);
  proto__buf_puts(b, i32 ? "\",\"datatype\":\"INT32\",\"shape\":["
                         : "\",\"datatype\":\"FP32\",\"shape\":[");
  for (int d = 0; d < r; d++) {
    if (d)
      proto__buf_putc(b, ',');
    proto__buf_put_i64(b, dims[d]);
  }
  proto__buf_putc(b, ']');
  /* In a shared memory region: name, datatype and shape, as Triton. */
  if (req->shm_out[which].region) {
    proto__buf_putc(b, '}');
    return;
  }
  if (req->binary[which]) {
    proto__buf_puts(b, ",\"parameters\":{\"binary_data_size\":");
    proto__buf_put_i64(b, (long long)(n * sizeof(float)));
    proto__buf_puts(b, "}}");
    return;
  }
  proto__buf_puts(b, ",\"data\":");
  if (i32)
    put_i32s(b, x, n);
  else if (which == PROTO_OUT_LSE)
    put_f32s_inf_null(b, x, n);
  else
    put_f32s(b, x, n);
  proto__buf_putc(b, '}');
}

/* Appends the binary outputs' bytes: one copy, little-endian. */
static void put_binary(proto__buf *b, const proto_request *req) {
  for (int i = 0; i < req->n_outputs; i++) {
    int which = req->outputs[i];
    size_t n;
    const char *x = out_data(req, which, &n);  /* 4-byte elements */
    if (!req->binary[which])
      continue;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t j = 0; j < n; j++) {
      uint32_t v;
      memcpy(&v, x + 4 * j, 4);
      v = __builtin_bswap32(v);
      proto__buf_put(b, (const char *)&v, 4);
    }
#else
    proto__buf_put(b, (const char *)x, n * sizeof(float));
#endif
  }
}

static void put_json(proto__buf *b, const proto_request *req) {
  proto__buf_puts(b, "{\"model_name\":\"");
  proto__buf_puts(b, model_names[req->model]);
  proto__buf_puts(b, "\",\"model_version\":\"" MODEL_VERSION "\"");
  if (req->id_json) {
    proto__buf_puts(b, ",\"id\":");
    proto__buf_puts(b, req->id_json);
  }
  proto__buf_puts(b, ",\"outputs\":[");
  for (int i = 0; i < req->n_outputs; i++) {
    if (i)
      proto__buf_putc(b, ',');
    put_output(b, req, req->outputs[i]);
  }
  proto__buf_puts(b, "]}");
}

int proto_v2_encode(const proto_request *req, char **body, size_t *len,
                    size_t *json_len) {
  proto__buf b = {0};
  put_json(&b, req);
  *json_len = b.len;
  put_binary(&b, req);
  return finish(&b, body, len);
}

/* The owned block an output lies in: the diagnostics share one, which
 * starts at allowed_keys (check.c); the lse has its own. */
static void *out_block(const proto_request *req, int which) {
  return which == PROTO_OUT_OUTPUT    ? (void *)((char *)req->out -
                                                 req->out_room)
         : which == PROTO_OUT_WEIGHTS ? (void *)req->weights
         : which == PROTO_OUT_LSE     ? (void *)req->lse
                                      : (void *)req->allowed_keys;
}

/* Moves the JSON part into the room before the output when that is the
 * one binary output and the part fits, so that the answer is one buffer
 * (proto_parts.joined), which the server can send in one write. */
static void join(const proto_request *req, proto_parts *parts) {
  char *at;
  if (parts->n != 1 || parts->data[0] != req->out ||
      parts->json_len > req->out_room)
    return;
  at = (char *)req->out - parts->json_len;
  memcpy(at, parts->json, parts->json_len);
  mem_free(parts->json);
  parts->json = at;
  parts->joined = 1;
}

/* Moves the blocks the binary outputs lie in from req to parts, each
 * once.  They were all allocated by the decoder, so only a bug fails. */
static int take_blocks(proto_request *req, proto_parts *parts) {
  for (int i = 0; i < req->n_outputs; i++) {
    void *blk = out_block(req, req->outputs[i]);
    int seen = 0;
    if (!req->binary[req->outputs[i]])
      continue;
    for (int j = 0; j < parts->n_blocks; j++)
      seen |= parts->blocks[j] == blk;
    if (seen)
      continue;
    if (parts->n_blocks == (int)(sizeof parts->blocks / sizeof blk) ||
        proto__take_block(req, blk))
      return -1;
    parts->blocks[parts->n_blocks++] = blk;
  }
  return 0;
}

int proto_v2_encode_parts(proto_request *req, proto_parts *parts) {
  proto__buf b = {0};
  memset(parts, 0, sizeof *parts);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return 1;  /* the buffers are not little-endian: copy (put_binary) */
#endif
  for (int i = 0; i < req->n_outputs; i++) {
    int which = req->outputs[i];
    size_t n;
    if (!req->binary[which])
      continue;
    parts->data[parts->n] = out_data(req, which, &n);
    parts->len[parts->n++] = n * sizeof(float);
  }
  if (parts->n == 0)
    return 1;
  put_json(&b, req);
  if (finish(&b, &parts->json, &parts->json_len)) {
    memset(parts, 0, sizeof *parts);
    return ATTND_ENOMEM;
  }
  if (take_blocks(req, parts)) {
    for (int j = 0; j < parts->n_blocks; j++)  /* give them back */
      (void)proto__own_block(req, parts->blocks[j]);
    mem_free(parts->json);
    memset(parts, 0, sizeof *parts);
    return 1;
  }
  join(req, parts);
  return 0;
}

void proto_parts_free(proto_parts *parts) {
  if (!parts->joined)
    mem_free(parts->json);
  for (int j = 0; j < parts->n_blocks; j++)
    mem_free(parts->blocks[j]);
  memset(parts, 0, sizeof *parts);
}

/* The elements of output `which` of req, and how many rows of brackets
 * its nested JSON form has. */
static size_t answer_elems(const proto_request *req, int which,
                           size_t *rows) {
  int dims[4], r = out_dims(req, which, dims);
  size_t n = 1;
  for (int i = 0; i < r; i++)
    n *= (size_t)dims[i];
  *rows = (dims[r - 1] > 0 ? n / (size_t)dims[r - 1] : 0) + 1;
  return n;
}

/* Calls f for each output req's answer carries (not those written into
 * a shared memory region): its elements, bracket rows, and whether it
 * travels as a binary tensor. */
static void answer_outputs(const proto_request *req,
                           void (*f)(void *acc, size_t elems, size_t rows,
                                     int binary),
                           void *acc) {
  int printed[PROTO_OUT_COUNT], n = 0;
  if (req->codec == PROTO_CODEC_V2) {
    for (int i = 0; i < req->n_outputs; i++)
      printed[n++] = req->outputs[i];
  } else {
    printed[n++] = PROTO_OUT_OUTPUT;
    if (req->return_weights)
      printed[n++] = PROTO_OUT_WEIGHTS;
    if (req->return_lse)
      printed[n++] = PROTO_OUT_LSE;
    for (int o = PROTO_OUT_ALLOWED_KEYS; req->diagnostics &&
                                         proto_out_is_diagnostic(o); o++)
      printed[n++] = o;
  }
  for (int i = 0; i < n; i++) {
    size_t rows, elems = answer_elems(req, printed[i], &rows);
    if (req->codec == PROTO_CODEC_V2 && req->shm_out[printed[i]].region)
      continue;  /* written into its region, not into the answer */
    f(acc, elems, rows,
      req->codec == PROTO_CODEC_V2 && req->binary[printed[i]]);
  }
}

static void add_bytes(void *acc, size_t elems, size_t rows, int binary) {
  *(size_t *)acc += binary ? elems * sizeof(float) : elems * 16 + rows * 4;
}

size_t proto_answer_bytes(const proto_request *req) {
  size_t total = 1024 + (req->id_json ? strlen(req->id_json) : 0);
  answer_outputs(req, add_bytes, &total);
  return total;
}

static void add_work(void *acc, size_t elems, size_t rows, int binary) {
  size_t *w = acc;
  (void)rows;
  w[binary] += binary ? elems * sizeof(float) : elems;
}

void proto_answer_work(const proto_request *req, size_t *text_values,
                       size_t *binary_bytes) {
  size_t w[2] = {0, 0};
  answer_outputs(req, add_work, w);
  *text_values = w[0];
  *binary_bytes = w[1];
}
