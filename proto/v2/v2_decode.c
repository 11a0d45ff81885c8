/* v2_decode.c - POST /v2/models/{m}/infer body -> validated proto_request.
 *
 * The body is a JSON inference request (KServe v2 / Open Inference
 * Protocol), optionally followed by binary tensors as in Triton's binary
 * tensor data extension: Inference-Header-Content-Length gives the JSON
 * part's length, and each binary input carries parameters.binary_data_size;
 * their bytes follow the JSON in the order the inputs are listed.
 *
 * The decode runs in the same phases as json_v1.c, and shares its shape
 * relations and element budget (check.c), so a request means the same and
 * fails with the same message whichever codec carried it:
 *   1. the header length and the JSON part (one object);
 *   2. top-level fields, parameters and the requested outputs;
 *   3. each input: name, datatype, shape, and where its data is;
 *   4. shapes and how they relate (check.c), the binary layout (every
 *      byte count against shape x datatype size, and against the body),
 *      JSON element counts, the element budget;
 *   5. allocation and one conversion pass per tensor, straight from the
 *      body (binary) or the cJSON tree into the buffer the core reads;
 *      or, for an FP32 binary input of a body received as a proto_body,
 *      its words where they lie, checked on arrival (body.c): v2_fill.c.
 * Every message starts with the input, parameter or header concerned.
 * The decoder's state, shared with v2_fill.c: v2_decode_impl.h. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/v2/v2.h"

#include "v2_decode_impl.h"

static const char *const output_names[PROTO_OUT_COUNT] = {
  "output", "weights", "allowed_keys", "entropy", "max_weight",
  "jacobian_norm", "lse"};

/* Outputs returned when a request names none: the diagnostics cost a
 * weights pass even when the weights are not wanted, so they are returned
 * only when named. */
#define DEFAULT_OUTPUTS 2

/* msg into c->err, cut at PROTO_ERR_MAX: for messages whose list of
 * names may be long. */
static int err_cut(v2_ctx *c, const char *msg) {
  size_t n = strlen(msg);
  if (n > PROTO_ERR_MAX - 1)
    n = PROTO_ERR_MAX - 1;
  memcpy(c->err, msg, n);
  c->err[n] = '\0';
  return ATTND_EINVAL;
}

static void describe(const cJSON *j, char *s, size_t cap) {
  if (cJSON_IsString(j)) {
    char name[44];
    proto__quote_name(j->valuestring, name, sizeof name);
    snprintf(s, cap, "\"%s\"", name);
  } else {
    proto__describe(j, s, cap);
  }
}

/* ---- phase 1: header length and the JSON part --------------------------- */

int proto__v2_header_count(const char *h, unsigned long long *v) {
  char *end;
  while (*h == ' ' || *h == '\t')
    h++;
  errno = 0;
  *v = strtoull(h, &end, 10);
  while (*end == ' ' || *end == '\t')
    end++;
  if (*h < '0' || *h > '9' || *end)
    return -1;
  return errno == ERANGE;
}

static int header_len(v2_ctx *c, const char *h) {
  unsigned long long v;
  char got[48];
  int rc;
  if (!h) {
    c->hlen = c->len;
    return 0;
  }
  while (*h == ' ' || *h == '\t')
    h++;
  rc = proto__v2_header_count(h, &v);
  if (rc)
    proto__quote_name(h, got, sizeof got);
  if (rc < 0)
    return ERR("Inference-Header-Content-Length: '%s' is not a byte count",
               got);
  /* the value as sent: ULLONG_MAX would pass for a count it was not */
  if (rc > 0)
    return ERR("Inference-Header-Content-Length: '%s' is too large to be a "
               "byte count (the body is %zu bytes)", got, c->len);
  if (v > c->len)
    return ERR("Inference-Header-Content-Length: %llu exceeds the body "
               "length %zu", v, c->len);
  if (v == 0)
    return ERR("Inference-Header-Content-Length: 0 (a raw binary body) is "
               "only for models with one input; %s takes query, key and "
               "value", proto_v2_model_name(c->model));
  c->hlen = (size_t)v;
  c->has_header = 1;
  return 0;
}

/* The JSON part after its value (st->end): blanks only. */
static int check_after(v2_ctx *c) {
  for (size_t j = c->st->end; j < c->hlen; j++)
    if (!proto__json_blank(c->body[j]))
      return proto__json_strict(c->st, c->err) ? ATTND_EINVAL
             : ERR("body has unexpected data after the JSON object at byte "
                   "%zu%s", j, c->has_header ? " (binary data must start "
                   "at Inference-Header-Content-Length)" : " (binary inputs "
                   "need an Inference-Header-Content-Length header)");
  return proto__json_want_object(c->st, c->err);
}

/* leaves: check the syntax (jsoncheck.c), then parse with numscan
 * (tensor arrays as leaves); 0: cJSON on the whole JSON part, which
 * passed the check, with its tree held in the budget first. */
static int parse_json(v2_ctx *c, size_t max_elems, int leaves,
                      cJSON **root) {
  const char *end = NULL;
  const char *where = c->has_header ? " of the inference header" : "";
  size_t i = 0;
  int rc;
  while (i < c->hlen && proto__json_blank(c->body[i]))
    i++;
  if (i == c->hlen)
    return ERR("empty body: expected a JSON inference request with "
               "\"inputs\"");
  if ((rc = proto__over_element_budget(c->body, c->hlen, max_elems,
                                       c->err)))
    return rc;
  if (leaves) {
    if ((rc = proto__json_check(c->body, c->hlen, PROTO_CODEC_V2, where, 1,
                                c->st, c->err)) ||
        (rc = check_after(c)))
      return rc;
    return proto__json_parse_leaves(c->body, c->hlen, PROTO_CODEC_V2, root,
                                    c->err);
  }
  if ((rc = proto__hold(proto__json_tree_bytes(c->st),
                        "the cJSON tree of the body", c->err)))
    return rc;
  unsigned long failed = mem_thread_failures();
  *root = cJSON_ParseWithLengthOpts(c->body, c->hlen, &end, 0);
  /* cJSON returns NULL for bad JSON and for a failed allocation alike */
  if (!*root && mem_thread_failures() != failed)
    return ATTND_ENOMEM;
  if (!*root) {
    size_t at = end && end >= c->body && end <= c->body + c->hlen
                    ? (size_t)(end - c->body) : 0;
    return proto__json_syntax_err(c->body, c->hlen, at, PROTO_CODEC_V2,
                                  where, c->err);
  }
  if (proto__json_refuse_bad_number(c->body, end, where, c->err))
    return ATTND_EINVAL;
  /* what follows the value, and the value's type: checked before */
  proto__json_mark_ties(*root, c->body, end, 1);
  return 0;
}

/* ---- phase 2: top-level fields, parameters, outputs --------------------- */

static int top_fields(v2_ctx *c, const cJSON *root) {
  static const char *const names[4] = {"id", "parameters", "inputs",
                                       "outputs"};
  const cJSON **slots[4] = {&c->id, &c->params, &c->inputs, &c->outputs};
  int rc = proto__v2_check_fields(root, PROTO__V2_REQUEST, "", c->err);
  if (rc)
    return rc;
  for (const cJSON *m = root->child; m; m = m->next) {
    int i = 0;
    while (i < 4 && strcmp(m->string, names[i]))
      i++;
    if (i == 4)
      continue; /* model_name, model_version: the path names the model */
    if (*slots[i])
      return ERR("duplicate field '%s'", names[i]);
    *slots[i] = m;
  }
  if (!c->inputs)
    return ERR("inputs: required field is missing");
  if (!cJSON_IsArray(c->inputs))
    return ERR("inputs: expected an array of input tensors");
  if (c->outputs && !cJSON_IsArray(c->outputs))
    return ERR("outputs: expected an array of {\"name\": ..}");
  if (c->params && !cJSON_IsObject(c->params))
    return ERR("parameters: expected an object");
  if (c->id && !cJSON_IsString(c->id))
    return ERR("id: expected a string");
  if (c->id)
    return proto__check_id(c->id->valuestring, c->err);
  return 0;
}

/* ERR when object obj holds one of names[0..n) twice.  cJSON's lookups
 * take the first of two, a loop over the members the last, so a
 * duplicate would mean whichever the code happens to read.  Only the
 * names attnd reads are checked, in O(members x n); others are ignored
 * anyway.  where prefixes the message ("inputs[2]", "parameters"). */
static int no_duplicate(v2_ctx *c, const cJSON *obj,
                        const char *const *names, int n, const char *where,
                        int pos) {
  unsigned seen = 0;
  char at[48];
  for (const cJSON *m = obj->child; m; m = m->next)
    for (int i = 0; i < n; i++) {
      if (strcmp(m->string, names[i]))
        continue;
      if (seen & (1u << i)) {
        snprintf(at, sizeof at, where, pos);
        return ERR("%s: duplicate field '%s'", at, names[i]);
      }
      seen |= 1u << i;
    }
  return 0;
}

/* ERR when params (an input's or output's parameters, or NULL) asks for
 * a Triton extension attnd does not serve: silently ignoring it would
 * answer something other than what was asked (a plain tensor instead of
 * the top-N classes).  GET /v2 lists what is served. */
static int unsupported_param(v2_ctx *c, const cJSON *params,
                             const char *where, int pos) {
  char at[48];
  if (params && cJSON_GetObjectItemCaseSensitive(params, "classification")) {
    snprintf(at, sizeof at, where, pos);
    return ERR("%s.classification: not supported (attnd serves the "
               "binary_tensor_data, parameters, model_configuration, "
               "statistics and system_shared_memory extensions)", at);
  }
  return 0;
}

static const char *const param_names[] = {
  "causal", "scale", "binary_data_output", "dropout_p", "seed",
  "window_left", "window_right", "timeout", "softcap", "window_align",
  "precision"};
static const char *const input_fields[] = {"name", "shape", "datatype",
                                           "data", "parameters"};
static const char *const output_fields[] = {"name", "parameters"};
/* The parameters of an input and of an output that attnd reads. */
static const char *const input_params[] = {
  "binary_data_size", "shared_memory_region", "shared_memory_byte_size",
  "shared_memory_offset"};
static const char *const output_params[] = {
  "binary_data", "shared_memory_region", "shared_memory_byte_size",
  "shared_memory_offset"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int param_causal(v2_ctx *c, const cJSON *j) {
  char what[48];
  if (cJSON_IsBool(j))
    c->p->causal = cJSON_IsTrue(j) ? ATTN_CAUSAL_UPPER_LEFT
                                   : ATTN_CAUSAL_NONE;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "upper_left"))
    c->p->causal = ATTN_CAUSAL_UPPER_LEFT;
  else if (cJSON_IsString(j) && !strcmp(j->valuestring, "lower_right"))
    c->p->causal = ATTN_CAUSAL_LOWER_RIGHT;
  else {
    describe(j, what, sizeof what);
    return ERR("parameters.causal: unknown value %s (allowed: false, true, "
               "\"upper_left\", \"lower_right\")", what);
  }
  return 0;
}

static int param_scale(v2_ctx *c, const cJSON *j) {
  char what[48];
  if (c->model == PROTO_MODEL_ADDITIVE)
    return ERR("parameters.scale: not valid for model additive_attention "
               "(additive scores are not scaled)");
  if (!cJSON_IsNumber(j)) {
    describe(j, what, sizeof what);
    return ERR("parameters.scale: expected a number, got %s", what);
  }
  return proto__json_scale(j, "parameters.scale", &c->p->scale, c->err);
}

static int param_bool(v2_ctx *c, const cJSON *j, const char *name, int *out) {
  char what[48];
  if (!cJSON_IsBool(j)) {
    describe(j, what, sizeof what);
    return ERR("parameters.%s: expected true or false, got %s", name, what);
  }
  *out = cJSON_IsTrue(j);
  return 0;
}

/* "fp32" (the default) or "bf16"; additive attention has no BF16 mode. */
static int param_precision(v2_ctx *c, const cJSON *j) {
  char what[48];
  if (cJSON_IsString(j) && !strcmp(j->valuestring, "fp32"))
    return 0;
  if (!cJSON_IsString(j) || strcmp(j->valuestring, "bf16")) {
    describe(j, what, sizeof what);
    return ERR("parameters.precision: unknown value %s (allowed: \"fp32\", "
               "\"bf16\")", what);
  }
  if (c->model == PROTO_MODEL_ADDITIVE)
    return ERR("parameters.precision: \"bf16\" is not served for model "
               "additive_attention (it runs in float32 only; leave "
               "precision out or send \"fp32\")");
  c->p->precision = ATTN_PRECISION_BF16;
  return 0;
}

/* One request parameter, of a name proto__v2_check_params let through. */
static int param_one(v2_ctx *c, const cJSON *j, int *bin_all) {
  const char *n = j->string;
  double x;
  char got[48]; /* what was sent, for the messages below */
  describe(j, got, sizeof got);
  if (!strcmp(n, "causal"))
    return param_causal(c, j);
  if (!strcmp(n, "scale"))
    return param_scale(c, j);
  if (!strcmp(n, "binary_data_output"))
    return param_bool(c, j, n, bin_all);
  if (!strcmp(n, "dropout_p")) {
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0) ||
        !((float)j->valuedouble < 1.0f))
      return ERR("parameters.dropout_p: must be a number in [0, 1), got %s",
                 got);
    c->p->dropout_p = (float)j->valuedouble;
  } else if (!strcmp(n, "seed")) {
    if (proto__json_count(j, &x))
      return ERR("parameters.seed: must be an integer in [0, 2^53], got %s",
                 got);
    c->p->seed = (uint64_t)x;
  } else if (!strcmp(n, "window_left") || !strcmp(n, "window_right")) {
    if (!cJSON_IsNull(j) && proto__json_count(j, &x))
      return ERR("parameters.%s: must be an integer in [0, 2^53] (or null: "
                 "unbounded), got %s", n, got);
    c->window[n[7] == 'r'] = j;
  } else if (!strcmp(n, "softcap")) {
    float cap;
    if (!cJSON_IsNumber(j) || proto__json_f32(j, &cap) || !(cap >= FLT_MIN))
      return ERR("parameters.softcap: must be a finite number > 0 that "
                 "float32 holds as a normal number (1.17549435e-38 to "
                 "3.40282347e+38), got %s", got);
    c->p->softcap = cap;
  } else if (!strcmp(n, "window_align")) {
    char what[48];
    if (cJSON_IsString(j) && !strcmp(j->valuestring, "upper_left"))
      c->p->window_align = ATTN_WINDOW_UPPER_LEFT;
    else if (cJSON_IsString(j) && !strcmp(j->valuestring, "lower_right"))
      c->p->window_align = ATTN_WINDOW_LOWER_RIGHT;
    else {
      describe(j, what, sizeof what);
      return ERR("parameters.window_align: unknown value %s (allowed: "
                 "\"upper_left\", \"lower_right\")", what);
    }
  } else if (!strcmp(n, "precision")) {
    return param_precision(c, j);
  } else if (!strcmp(n, "timeout")) {
    if (proto__json_count(j, &x))
      return ERR("parameters.timeout: must be a whole number of "
                 "microseconds in [0, 2^53], got %s", got);
    c->req->timeout_us = (uint64_t)x;
  }
  return 0;
}

/* One entry of "outputs"; fills req->outputs in the order given. */
static int output_one(v2_ctx *c, const cJSON *o, int i, int bin_all) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "parameters");
  const cJSON *bd = params ? cJSON_GetObjectItemCaseSensitive(params,
                                                              "binary_data")
                           : NULL;
  char got[48], at[48], where[32];
  int k, rc;
  if (!cJSON_IsObject(o) || !cJSON_IsString(name))
    return ERR("outputs[%d]: expected {\"name\": \"output\", \"weights\", "
               "\"lse\", \"allowed_keys\", \"entropy\", \"max_weight\" or "
               "\"jacobian_norm\"}", i);
  snprintf(at, sizeof at, "outputs[%d]", i);
  if ((rc = proto__v2_check_fields(o, PROTO__V2_OUTPUT, at, c->err)))
    return rc;
  if ((rc = no_duplicate(c, o, output_fields, COUNT(output_fields),
                         "outputs[%d]", i)) ||
      (cJSON_IsObject(params) &&
       (rc = no_duplicate(c, params, output_params, COUNT(output_params),
                          "outputs[%d].parameters", i))))
    return rc;
  for (k = 0; k < PROTO_OUT_COUNT; k++)
    if (!strcmp(name->valuestring, output_names[k]))
      break;
  proto__quote_name(name->valuestring, got, sizeof got);
  if (k == PROTO_OUT_COUNT) {
    char hint[PROTO__HINT_MAX], msg[2 * PROTO_ERR_MAX];
    proto__hint(hint, sizeof hint, name->valuestring, output_names,
                PROTO_OUT_COUNT, "outputs", output_names, PROTO_OUT_COUNT);
    snprintf(msg, sizeof msg, "outputs[%d]: unknown output '%s' of model "
             "%s (%s)", i, got, proto_v2_model_name(c->model), hint);
    return err_cut(c, msg);
  }
  for (int m = 0; m < c->req->n_outputs; m++)
    if (c->req->outputs[m] == k)
      return ERR("outputs[%d]: output '%s' requested twice", i, got);
  if (params && !cJSON_IsObject(params))
    return ERR("outputs[%d].parameters: expected an object", i);
  /* The shared memory parameters first: a region with classification
   * gets Triton's own message, then every other name is checked. */
  snprintf(where, sizeof where, "outputs[%d]", i);
  if ((rc = proto__v2_shm_output(c->shm, params, where,
                                 &c->req->shm_out[k], c->err)))
    return rc;
  snprintf(at, sizeof at, "outputs[%d].parameters", i);
  if ((rc = proto__v2_check_params(params, PROTO__V2_OUTPUT, at, c->err)) ||
      (rc = unsupported_param(c, params, "outputs[%d].parameters", i)))
    return rc;
  if (bd && !cJSON_IsBool(bd))
    return ERR("outputs[%d].parameters.binary_data: expected true or "
               "false", i);
  /* an output written into a region is not in the answer at all */
  c->req->binary[k] = c->req->shm_out[k].region ? 0
                      : bd ? cJSON_IsTrue(bd) : bin_all;
  c->req->outputs[c->req->n_outputs++] = k;
  return 0;
}

static int params_outputs(v2_ctx *c) {
  int bin_all = 0, rc, i = 0;
  if (c->params &&
      ((rc = proto__v2_check_params(c->params, PROTO__V2_REQUEST,
                                    "parameters", c->err)) ||
       (rc = no_duplicate(c, c->params, param_names, COUNT(param_names),
                          "parameters", 0))))
    return rc;
  if (c->params)
    for (const cJSON *j = c->params->child; j; j = j->next)
      if ((rc = param_one(c, j, &bin_all)))
        return rc;
  if (!c->outputs || !c->outputs->child) {
    /* none listed: output and weights, with the request-wide binary
     * setting (the diagnostics only when named: DEFAULT_OUTPUTS) */
    for (int k = 0; k < DEFAULT_OUTPUTS; k++) {
      c->req->outputs[k] = k;
      c->req->binary[k] = bin_all;
    }
    c->req->n_outputs = DEFAULT_OUTPUTS;
  } else {
    for (const cJSON *o = c->outputs->child; o; o = o->next, i++)
      if ((rc = output_one(c, o, i, bin_all)))
        return rc;
  }
  c->req->return_weights = 0;
  c->req->diagnostics = 0;
  c->req->return_lse = 0;
  for (int m = 0; m < c->req->n_outputs; m++) {
    if (c->req->outputs[m] == PROTO_OUT_WEIGHTS)
      c->req->return_weights = 1;
    if (c->req->outputs[m] == PROTO_OUT_LSE)
      c->req->return_lse = 1;
    if (proto_out_is_diagnostic(c->req->outputs[m]))
      c->req->diagnostics = 1;
  }
  return 0;
}

/* ---- phase 3: inputs ---------------------------------------------------- */

/* The datatypes an input accepts, by name: *names, and their count. */
static int dtype_names(int in, const char *const **names) {
  static const char *const floats[] = {"FP32", "FP64", "FP16", "BF16"};
  static const char *const lens[] = {"INT32", "INT64"};
  static const char *const bools[] = {"BOOL"};
  if (proto__input_kind(in) == PROTO__KIND_LEN)
    return *names = lens, COUNT(lens);
  if (in == PROTO__IN_MASK)
    return *names = bools, COUNT(bools);
  return *names = floats, COUNT(floats);
}

/* The datatypes an input accepts, as a message fragment; 1 if dt is one. */
static int dtype_ok(int in, int dt, const char **allowed) {
  if (proto__input_kind(in) == PROTO__KIND_LEN) {
    *allowed = "INT32 or INT64";
    return dt == PROTO__DT_INT32 || dt == PROTO__DT_INT64;
  }
  if (in == PROTO__IN_MASK) {
    *allowed = "BOOL";
    return dt == PROTO__DT_BOOL;
  }
  *allowed = "FP32, FP64, FP16 or BF16";
  return dt == PROTO__DT_FP32 || dt == PROTO__DT_FP64 ||
         dt == PROTO__DT_FP16 || dt == PROTO__DT_BF16;
}

/* Which input (enum proto__input) a name is, for this model. */
static int input_index(v2_ctx *c, const cJSON *name, int pos, int *out) {
  int n = c->model == PROTO_MODEL_ADDITIVE ? PROTO__IN_COUNT
                                           : PROTO__IN_W_Q;
  char got[48], hint[PROTO__HINT_MAX], msg[2 * PROTO_ERR_MAX];
  if (!cJSON_IsString(name))
    return ERR("inputs[%d]: \"name\" must be a string", pos);
  for (int i = 0; i < n; i++)
    if (!strcmp(name->valuestring, proto__input_names[i]))
      return *out = i, 0;
  proto__quote_name(name->valuestring, got, sizeof got);
  proto__hint(hint, sizeof hint, name->valuestring, proto__input_names, n,
              "inputs", proto__input_names, n);
  snprintf(msg, sizeof msg, "inputs[%d]: model %s has no input '%s' (%s)",
           pos, proto_v2_model_name(c->model), got, hint);
  return err_cut(c, msg);
}

static int input_dtype(v2_ctx *c, int in, const cJSON *dt) {
  const char *name = proto__input_names[in], *allowed;
  char got[48];
  if (!cJSON_IsString(dt))
    return ERR("%s: \"datatype\" must be a string such as \"FP32\"", name);
  int d = proto__dtype_parse(dt->valuestring);
  proto__quote_name(dt->valuestring, got, sizeof got);
  if (d < 0) {
    const char *const *names;
    char hint[PROTO__HINT_MAX], label[32];
    int n = dtype_names(in, &names);
    snprintf(label, sizeof label, "%s takes", name);
    proto__hint(hint, sizeof hint, dt->valuestring, names, n, label, names,
                n);
    return ERR("%s: unknown datatype '%s' (%s)", name, got, hint);
  }
  if (!dtype_ok(in, d, &allowed))
    return ERR("%s: datatype %s is not supported for this input (expected "
               "%s)", name, got, allowed);
  c->in[in].dtype = d;
  return 0;
}

/* Exactly one of "data", parameters.binary_data_size and
 * parameters.shared_memory_region. */
static int input_data(v2_ctx *c, int in, const cJSON *obj) {
  const char *name = proto__input_names[in];
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(obj, "data");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(obj, "parameters");
  const cJSON *bs = NULL;
  char at[48];
  double x;
  if (params && !cJSON_IsObject(params))
    return ERR("%s: \"parameters\" must be an object", name);
  snprintf(at, sizeof at, "inputs[%d].parameters", c->in[in].pos);
  if (proto__v2_check_params(params, PROTO__V2_INPUT, at, c->err))
    return ATTND_EINVAL;
  if (params && (no_duplicate(c, params, input_params, COUNT(input_params),
                              "inputs[%d].parameters", c->in[in].pos) ||
                 unsupported_param(c, params, "inputs[%d].parameters",
                                   c->in[in].pos)))
    return ATTND_EINVAL;
  if (params)
    bs = cJSON_GetObjectItemCaseSensitive(params, "binary_data_size");
  if (params &&
      cJSON_GetObjectItemCaseSensitive(params, "shared_memory_region"))
    return proto__v2_shm_input(c->shm, params, name, data != NULL,
                               bs != NULL, &c->in[in].shm, c->err);
  if (data && bs)
    return ERR("%s: has both \"data\" and parameters.binary_data_size",
               name);
  if (!data && !bs)
    return ERR("%s: needs \"data\", parameters.binary_data_size or "
               "parameters.shared_memory_region", name);
  if (data) {
    if (!cJSON_IsArray(data))
      return ERR("%s: \"data\" must be an array", name);
    c->ck.t[in].data = data;
    c->ck.t[in].flat = PROTO__FORM_ANY;
    return 0;
  }
  if (proto__json_count(bs, &x))
    return ERR("%s: parameters.binary_data_size must be a non-negative "
               "integer", name);
  if (!c->has_header)
    return ERR("%s: binary_data_size given but the request has no "
               "Inference-Header-Content-Length header", name);
  c->in[in].binary = 1;
  c->in[in].bin_size = (size_t)x;
  return 0;
}

static int input_one(v2_ctx *c, const cJSON *obj, int pos) {
  int in, rc;
  char at[32];
  if (!cJSON_IsObject(obj))
    return ERR("inputs[%d]: expected an object with name, datatype, shape "
               "and data", pos);
  snprintf(at, sizeof at, "inputs[%d]", pos);
  if ((rc = proto__v2_check_fields(obj, PROTO__V2_INPUT, at, c->err)))
    return rc;
  if ((rc = no_duplicate(c, obj, input_fields, COUNT(input_fields),
                         "inputs[%d]", pos)))
    return rc;
  if ((rc = input_index(c, cJSON_GetObjectItemCaseSensitive(obj, "name"),
                        pos, &in)))
    return rc;
  proto__tensor *t = &c->ck.t[in];
  if (t->json)
    return ERR("inputs[%d]: input '%s' given twice", pos,
               proto__input_names[in]);
  t->name = proto__input_names[in];
  t->json = obj;
  c->in[in].pos = pos;
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(obj, "shape");
  if (!shape)
    return ERR("%s: \"shape\" is missing", t->name);
  if ((rc = input_dtype(c, in, cJSON_GetObjectItemCaseSensitive(
                                   obj, "datatype"))) ||
      (rc = proto__tensor_dims(shape, t, c->err)))
    return rc;
  return input_data(c, in, obj);
}

static int inputs_all(v2_ctx *c) {
  int pos = 0, rc;
  for (const cJSON *o = c->inputs->child; o; o = o->next, pos++)
    if ((rc = input_one(c, o, pos)))
      return rc;
  static const int required[6] = {PROTO__IN_QUERY, PROTO__IN_KEY,
                                  PROTO__IN_VALUE, PROTO__IN_W_Q,
                                  PROTO__IN_W_K, PROTO__IN_W_V};
  int n = c->model == PROTO_MODEL_ADDITIVE ? 6 : 3;
  for (int i = 0; i < n; i++)
    if (!c->ck.t[required[i]].json)
      return ERR("%s: required input is missing%s",
                 proto__input_names[required[i]],
                 i >= 3 ? " (model additive_attention)" : "");
  return 0;
}

/* ---- phase 4: relations, layout, counts --------------------------------- */

/* parameters window_left / window_right, once Lq and Lk are known: either
 * turns the window on; an absent or null side is unbounded; a side wider
 * than the problem is clamped, as /v1 does, so that the core's i - left
 * and i + right cannot overflow. */
static void window(v2_ctx *c) {
  int side[2];
  if (!c->window[0] && !c->window[1])
    return;
  for (int s = 0; s < 2; s++) {
    const cJSON *j = c->window[s];
    side[s] = !j || cJSON_IsNull(j) ? -1
                                    : proto__window_side(c->p, j->valuedouble);
  }
  c->p->has_window = 1;
  c->p->window_left = side[0];
  c->p->window_right = side[1];
}

static int shapes(v2_ctx *c) {
  int rc;
  if ((rc = proto__check_qkv(&c->ck)) ||
      (rc = proto__check_valid_lens(&c->ck)) ||
      (rc = proto__check_mask_bias(&c->ck)) ||
      (rc = proto__check_variants(&c->ck)))
    return rc;
  window(c);
  if (c->model == PROTO_MODEL_ADDITIVE)
    return proto__check_additive(&c->ck);
  return 0;
}

/* The bytes of t's elements in datatype dtype, in *n and printed into s
 * ("4096"); or, when they pass what a 64-bit byte count holds, "more
 * than 18446744073709551615" (the shape alone is not refused for that
 * earlier), and -1. */
static int need_str(const proto__tensor *t, int dtype, uint64_t *n,
                    char *s, size_t cap) {
  if (__builtin_mul_overflow((uint64_t)t->n,
                             (uint64_t)proto__dtype_size(dtype), n)) {
    snprintf(s, cap, "more than %llu", (unsigned long long)UINT64_MAX);
    return -1;
  }
  snprintf(s, cap, "%llu", (unsigned long long)*n);
  return 0;
}

/* Binary inputs take consecutive byte ranges after the JSON part, in the
 * order they are listed; together they must fill the body exactly. */
static int layout(v2_ctx *c) {
  size_t off = c->hlen, rest = c->len - c->hlen;
  char shp[64], need[48];
  for (int pos = 0;; pos++) {
    int in = 0;
    while (in < PROTO__IN_COUNT &&
           !(c->ck.t[in].json && c->in[in].pos == pos))
      in++;
    if (in == PROTO__IN_COUNT)
      break;
    const proto__tensor *t = &c->ck.t[in];
    v2_in *v = &c->in[in];
    size_t es = proto__dtype_size(v->dtype);
    if (!v->binary)
      continue;
    proto__shape_str(t->shape, t->rank, shp, sizeof shp);
    if (v->bin_size / es != t->n || v->bin_size % es) {
      uint64_t n;
      (void)need_str(t, v->dtype, &n, need, sizeof need);
      return ERR("%s: binary_data_size is %zu bytes, shape %s of %s needs "
                 "%s", t->name, v->bin_size, shp,
                 proto__dtype_name(v->dtype), need);
    }
    if (v->bin_size > c->len - off)
      return ERR("%s: binary_data_size %zu runs past the end of the body "
                 "(%zu bytes left after the inference header and earlier "
                 "inputs)", t->name, v->bin_size, c->len - off);
    v->bin_off = off;
    off += v->bin_size;
    rest -= v->bin_size;
  }
  if (rest)
    return ERR("body has %zu bytes after the binary inputs (their "
               "binary_data_size values sum to %zu)", rest,
               off - c->hlen);
  return 0;
}

/* The byte sizes of the tensors in shared memory, once the shapes are
 * known: an input's shared_memory_byte_size is exactly its shape times
 * its datatype's size, as Triton's core requires (message and all); an
 * output's is at least what the output takes (v2_shm.c). */
static int shm_sizes(v2_ctx *c) {
  char id[48] = "<id_unknown>", need[48];
  if (c->id)
    proto__quote_name(c->id->valuestring, id, sizeof id);
  for (int in = 0; in < PROTO__IN_COUNT; in++) {
    const proto__tensor *t = &c->ck.t[in];
    const v2_in *v = &c->in[in];
    if (!t->json || !v->shm.name)
      continue;
    uint64_t want;
    if (need_str(t, v->dtype, &want, need, sizeof need) ||
        v->shm.byte_size != want)
      return ERR("[request id: %s] input byte size mismatch for input '%s' "
                 "for model '%s'. Expected %s, got %llu", id, t->name,
                 proto_v2_model_name(c->model), need,
                 (unsigned long long)v->shm.byte_size);
  }
  return proto__v2_shm_output_sizes(c->req, c->err);
}

static int json_counts(v2_ctx *c) {
  for (int in = 0; in < PROTO__IN_COUNT; in++) {
    const proto__tensor *t = &c->ck.t[in];
    size_t n;
    char shp[64];
    if (!t->json || c->in[in].binary || c->in[in].shm.name)
      continue;
    int rc = proto__count_any(t->data, t->name, &n, c->err);
    if (rc)
      return rc;
    if (n != t->n) {
      proto__shape_str(t->shape, t->rank, shp, sizeof shp);
      return ERR("%s: \"data\" has %zu elements, shape %s needs %zu",
                 t->name, n, shp, t->n);
    }
  }
  return 0;
}

static int copy_id(v2_ctx *c) {
  proto__buf b = {0};
  if (!c->id)
    return 0;
  proto__buf_put_json_string(&b, c->id->valuestring);
  char *id = b.oom ? NULL : proto__own(c->req, b.len + 1);
  if (id)
    memcpy(id, b.p, b.len + 1);
  proto__buf_free(&b);
  c->req->id_json = id;
  return id ? 0 : ATTND_ENOMEM;
}

/* ---- the decoder -------------------------------------------------------- */

static int decode_root(v2_ctx *c, const cJSON *root) {
  int rc;
  if ((rc = top_fields(c, root)) || (rc = params_outputs(c)) ||
      (rc = inputs_all(c)) || (rc = shapes(c)))
    return rc;
  if (c->shapes_only)
    return 0;
  if ((rc = layout(c)) || (rc = shm_sizes(c)) || (rc = json_counts(c)))
    return rc;
  c->ck.borrowed = proto__v2_borrowed(c);
  c->ck.mapped = proto__v2_mapped(c);
  if ((rc = proto__check_budget(&c->ck)) ||
      (rc = copy_id(c)) || (rc = proto__v2_fill_all(c)))
    return rc;
  c->req->qrank = c->ck.t[PROTO__IN_QUERY].rank;
  c->req->flat = 1;
  return 0;
}

static int decode(const char *body, size_t len, const char *hdr, int model,
                  const proto_shm *shm, proto_request *req, size_t max_elems,
                  char *err, int leaves, proto_body *src, int shapes_only,
                  proto__json_stats *st) {
  v2_ctx c = {.body = body, .len = len, .src = src, .shm = shm,
              .model = model, .req = req, .p = &req->prob, .err = err,
              .shapes_only = shapes_only, .st = st};
  cJSON *root = NULL;
  memset(req, 0, sizeof *req);
  attn_problem_init(&req->prob);
  req->codec = PROTO_CODEC_V2;
  req->model = model;
  req->prob.scoring = model == PROTO_MODEL_ADDITIVE ? ATTN_SCORING_ADDITIVE
                                                    : ATTN_SCORING_DOT;
  req->prob.scale = 0; /* 1/sqrt(D) once D is known, unless given */
  c.ck.req = req;
  c.ck.p = &req->prob;
  c.ck.max_elems = max_elems;
  c.ck.err = err;
  err[0] = '\0';
  mem_json_arena_begin(); /* the tree lives until the delete below */
  int rc = header_len(&c, hdr);
  if (!rc)
    rc = parse_json(&c, max_elems, leaves, &root);
  if (!rc)
    rc = decode_root(&c, root);
  if (!rc && leaves && !shapes_only &&
      !proto__json_leaves_read(root, PROTO_CODEC_V2))
    rc = ATTND_EINVAL;
  cJSON_Delete(root);
  mem_json_arena_end();
  /* Last: only a request that will be used keeps the body, which its
   * inputs' bytes then count whole, header and copied parts too. */
  if (!rc && c.in_place && !(rc = proto__own_block(req, src->base))) {
    req->in_bytes += (size_t)(src->p - src->base) + src->cap;
    src->base = src->p = NULL;
    src->len = src->cap = 0;
  }
  if (!rc && req->prob.scale == 0)
    req->prob.scale = (float)(1.0 / sqrt((double)req->prob.D));
  if (rc) {
    if (rc == ATTND_ENOMEM && !err[0])
      snprintf(err, PROTO_ERR_MAX, "out of memory decoding the request");
    proto_request_free(req);
  }
  return rc;
}

/* As proto_v1_decode: the syntax checked, numscan, and on a refusal of
 * the request's own the cJSON path again for its message, when the
 * budget holds its tree. */
static int decode_twice(const char *body, size_t len, const char *hdr,
                        int model, const proto_shm *shm, proto_request *req,
                        size_t max_elems, char *err, proto_body *src) {
  proto__json_stats st = {0};
  char first[PROTO_ERR_MAX];
  int rc = decode(body, len, hdr, model, shm, req, max_elems, err, 1, src, 0,
                  &st);
  if (!proto__json_retry(&rc, &st, err))
    return rc;
  memcpy(first, err, PROTO_ERR_MAX);
  return proto__json_retried(rc, first,
                             decode(body, len, hdr, model, shm, req,
                                    max_elems, err, 0, src, 0, &st),
                             err);
}

int proto_v2_decode_shm(const char *body, size_t len, const char *hdr,
                        int model, const proto_shm *shm, proto_request *req,
                        size_t max_elems, char err[PROTO_ERR_MAX]) {
  return decode_twice(body, len, hdr, model, shm, req, max_elems, err, NULL);
}

int proto_v2_decode_body_shm(proto_body *b, const char *hdr, int model,
                             const proto_shm *shm, proto_request *req,
                             size_t max_elems, char err[PROTO_ERR_MAX]) {
  return decode_twice(b->p ? b->p : "", b->len, hdr, model, shm, req,
                      max_elems, err, b);
}

int proto_v2_decode(const char *body, size_t len, const char *hdr,
                    int model, proto_request *req, size_t max_elems,
                    char err[PROTO_ERR_MAX]) {
  return proto_v2_decode_shm(body, len, hdr, model, NULL, req, max_elems,
                             err);
}

int proto_v2_decode_body(proto_body *b, const char *hdr, int model,
                         proto_request *req, size_t max_elems,
                         char err[PROTO_ERR_MAX]) {
  return proto_v2_decode_body_shm(b, hdr, model, NULL, req, max_elems, err);
}

int proto_v2_decode_shapes(const char *json, size_t len, int model,
                           proto_request *req, size_t max_elems,
                           char err[PROTO_ERR_MAX]) {
  char hdr[24];
  snprintf(hdr, sizeof hdr, "%zu", len);
  proto__json_stats st = {0};
  return decode(json, len, hdr, model, NULL, req, max_elems, err, 1, NULL, 1,
                &st);
}
