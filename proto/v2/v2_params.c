/* v2_params.c - the names a v2 inference request may use, at each level.
 *
 * The protocol lets a client put any name in "parameters", and a server
 * that ignores the ones it does not know answers a misspelt
 * {"causl": true} with non-causal weights: a wrong answer, silently.
 * attnd refuses a name it does not know instead, naming it, suggesting
 * the nearest known one and listing the ones it knows at that place.
 * The same goes for the members of the request object, of an input and
 * of an output ({"paramters": ...} would drop every parameter).
 *
 * Three kinds of name, per level:
 *   - served: v2_decode.c reads it (and checks its value);
 *   - Triton's, not served: a Triton extension attnd lacks (sequence
 *     batching, priority levels, classification, forwarded headers, the
 *     reserved triton_ prefix), refused as "not supported", since what
 *     it asks for would not happen;
 *   - anything else: unknown.
 * The shared-memory parameters (shared_memory_region, _byte_size,
 * _offset on inputs and outputs) are served names here: v2_decode.c
 * decides what to do with them.
 *
 * What Triton's clients send, all of it served: tritonclient.http (and
 * its aio client) and the C++ client behind perf_analyzer put "id",
 * "parameters", "inputs" and "outputs" in the request; timeout and
 * binary_data_output in its parameters (sequence_id, sequence_start,
 * sequence_end and priority only when the caller sets them, and then
 * they are refused); name, shape, datatype, data and parameters
 * (binary_data_size, or the shared-memory ones) in an input; name and
 * parameters (binary_data, classification when asked for, the
 * shared-memory ones) in an output.  Triton's own documents also show a
 * "model_name" member, which attnd accepts, as it does "model_version":
 * the path names the model. */
#include <stdio.h>
#include <string.h>

#include "proto/v2/v2.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define SERVES "attnd serves the binary_tensor_data, parameters, " \
               "model_configuration, statistics and system_shared_memory " \
               "extensions"

/* Served names first, then Triton's that attnd does not serve. */
static const char *const request_params[] = {
  "causal", "scale", "dropout_p", "seed", "window_left", "window_right",
  "timeout", "binary_data_output", "softcap", "window_align", "precision",
  "sequence_id", "sequence_start", "sequence_end", "priority", "headers"};
static const char *const request_why[] = {
  "Triton's sequence batching", "Triton's sequence batching",
  "Triton's sequence batching", "Triton's priority levels",
  "Triton's forwarded HTTP headers"};

static const char *const input_params[] = {
  "binary_data_size", "shared_memory_region", "shared_memory_byte_size",
  "shared_memory_offset"};

static const char *const output_params[] = {
  "binary_data", "shared_memory_region", "shared_memory_byte_size",
  "shared_memory_offset",
  "classification"};
static const char *const output_why[] = {"Triton's classification"};

static const char *const request_fields[] = {
  "id", "parameters", "inputs", "outputs", "model_name", "model_version"};
static const char *const input_fields[] = {
  "name", "shape", "datatype", "parameters", "data"};
static const char *const output_fields[] = {"name", "parameters"};

static const struct level {
  const char *const *params;
  int served, n;              /* params[0..served) served, the rest not */
  const char *const *why;     /* why[i - served]: whose extension */
  const char *params_label;
  const char *const *fields;
  int nfields;
  const char *fields_label;
} levels[3] = {
  [PROTO__V2_REQUEST] = {request_params, 11, COUNT(request_params),
                         request_why, "request parameters", request_fields,
                         COUNT(request_fields), "request fields"},
  [PROTO__V2_INPUT] = {input_params, 4, COUNT(input_params), NULL,
                       "input parameters", input_fields,
                       COUNT(input_fields), "input fields"},
  [PROTO__V2_OUTPUT] = {output_params, 4, COUNT(output_params), output_why,
                        "output parameters", output_fields,
                        COUNT(output_fields), "output fields"},
};

static int find(const char *name, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(name, names[i]))
      return i;
  return -1;
}

int proto__v2_check_params(const cJSON *params, int level, const char *where,
                           char err[PROTO_ERR_MAX]) {
  const struct level *l = &levels[level];
  char name[48], hint[PROTO__HINT_MAX];
  for (const cJSON *m = params ? params->child : NULL; m; m = m->next) {
    int i = find(m->string, l->params, l->n);
    if (i >= 0 && i < l->served)
      continue;
    proto__quote_name(m->string, name, sizeof name);
    if (i >= 0) {
      snprintf(err, PROTO_ERR_MAX, "%s.%s: not supported (%s; " SERVES ")",
               where, name, l->why[i - l->served]);
      return ATTND_EINVAL;
    }
    if (!strncmp(m->string, "triton_", 7)) {
      snprintf(err, PROTO_ERR_MAX, "%s.%s: not supported (names starting "
               "triton_ are reserved by Triton; " SERVES ")", where, name);
      return ATTND_EINVAL;
    }
    proto__hint(hint, sizeof hint, m->string, l->params, l->n,
                l->params_label, l->params, l->served);
    snprintf(err, PROTO_ERR_MAX, "%s.%s: unknown parameter (%s)", where,
             name, hint);
    return ATTND_EINVAL;
  }
  return 0;
}

int proto__v2_check_fields(const cJSON *obj, int level, const char *where,
                           char err[PROTO_ERR_MAX]) {
  const struct level *l = &levels[level];
  char name[48], hint[PROTO__HINT_MAX];
  for (const cJSON *m = obj->child; m; m = m->next) {
    if (find(m->string, l->fields, l->nfields) >= 0)
      continue;
    proto__quote_name(m->string, name, sizeof name);
    proto__hint(hint, sizeof hint, m->string, l->fields, l->nfields,
                l->fields_label, l->fields, l->nfields);
    snprintf(err, PROTO_ERR_MAX, "%s%sunknown field '%s' (%s)", where,
             where[0] ? ": " : "", name, hint);
    return ATTND_EINVAL;
  }
  return 0;
}
