/* fuzz.h - what every libFuzzer harness of attnd shares.
 *
 * A harness feeds client bytes to one proto/ entry point and then checks
 * the contract of that entry point (proto.h): the return code is one of
 * the documented ones, an error comes with a message, a successful decode
 * is a problem the core accepts, an encoded answer is JSON.  These are
 * checks on our own outputs, not on the client's bytes, so a violation is
 * a bug: FUZZ_CHECK prints what broke and aborts, and libFuzzer saves the
 * input that did it.
 *
 * Build and run: make fuzz FUZZ_SECONDS=N (tests/fuzz/run.sh). */
#ifndef ATTND_FUZZ_H
#define ATTND_FUZZ_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"

/* Element budget the harnesses decode with: large enough for every seed,
 * small enough that one execution stays well under a millisecond. */
#define FUZZ_MAX_ELEMS ((size_t)1 << 16)

#define FUZZ_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, \
              #cond);                                                      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fputc('\n', stderr);                                                 \
      abort();                                                             \
    }                                                                      \
  } while (0)

/* A decoder's return code and message: 0, or ATTND_EINVAL / ATTND_ETOOBIG
 * with a non-empty, NUL-terminated message.  (ATTND_ENOMEM cannot happen
 * under the budget above; it is the failure-injection tests' business.) */
static inline void fuzz_check_decode_rc(int rc, const char *err) {
  FUZZ_CHECK(rc == 0 || rc == ATTND_EINVAL || rc == ATTND_ETOOBIG,
             "rc %d", rc);
  FUZZ_CHECK(memchr(err, '\0', PROTO_ERR_MAX) != NULL, "unterminated err");
  if (rc != 0)
    FUZZ_CHECK(err[0] != '\0', "rc %d without a message", rc);
}

/* The same for the v2 decoders, which also answer ATTND_ENOTFOUND: a
 * shared memory region that is not registered (Triton's 404). */
static inline void fuzz_check_v2_decode_rc(int rc, const char *err) {
  fuzz_check_decode_rc(rc == ATTND_ENOTFOUND ? ATTND_EINVAL : rc, err);
}

/* What a successful decode promises (proto.h): a problem attn_check
 * accepts, with the output buffers allocated. */
static inline void fuzz_check_request(const proto_request *req) {
  FUZZ_CHECK(attn_check(&req->prob) == 0, "decoded problem fails attn_check"
             " (B %d H %d Hkv %d Lq %d Lk %d D %d Dk %d Dv %d scale %g)",
             req->prob.B, req->prob.H, req->prob.Hkv, req->prob.Lq,
             req->prob.Lk, req->prob.D, req->prob.Dk, req->prob.Dv,
             (double)req->prob.scale);
  FUZZ_CHECK(req->out != NULL, "no output buffer");
  FUZZ_CHECK(!req->return_weights || req->weights != NULL,
             "weights requested but not allocated");
  FUZZ_CHECK(!req->return_lse || req->lse != NULL,
             "lse requested but not allocated");
}

/* Parses len bytes of JSON text; aborts when it is not one JSON object.
 * Returns the tree for further checks (cJSON_Delete it). */
static inline cJSON *fuzz_parse_object(const char *s, size_t len) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  FUZZ_CHECK(j != NULL, "encoded answer is not JSON: %.200s", s);
  FUZZ_CHECK(cJSON_IsObject(j), "encoded answer is not an object");
  FUZZ_CHECK(end == s + len, "data after the JSON answer");
  return j;
}

/* Encodes a decoded request with its codec and checks the answer: JSON
 * part an object holding the outputs, binary part exactly the sizes the
 * JSON part announces; an output written into a shared memory region
 * carries only its name, datatype and shape. */
static inline void fuzz_check_encode(const proto_request *req) {
  char *body = NULL;
  size_t len = 0, json_len = 0;
  int rc = proto_encode(req, &body, &len, &json_len);
  FUZZ_CHECK(rc == 0, "proto_encode rc %d", rc);
  FUZZ_CHECK(json_len <= len, "json_len %zu > len %zu", json_len, len);
  FUZZ_CHECK(body[len] == '\0', "body not NUL-terminated");
  cJSON *j = fuzz_parse_object(body, json_len);
  if (req->codec == PROTO_CODEC_V1) {
    FUZZ_CHECK(cJSON_GetObjectItemCaseSensitive(j, "output") != NULL,
               "no output");
    FUZZ_CHECK(!req->return_weights ==
                   !cJSON_GetObjectItemCaseSensitive(j, "weights"),
               "weights present iff requested");
    FUZZ_CHECK(!req->return_lse == !cJSON_GetObjectItemCaseSensitive(j, "lse"),
               "lse present iff requested");
  } else {
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(j, "outputs"), *o;
    size_t bin = 0;
    int i = 0;
    FUZZ_CHECK(cJSON_GetArraySize(outs) == req->n_outputs, "outputs");
    cJSON_ArrayForEach(o, outs) {
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "parameters");
      const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "binary_data_size");
      if (req->shm_out[req->outputs[i++]].region)
        FUZZ_CHECK(cJSON_GetArraySize(o) == 3 && !p &&
                   cJSON_GetObjectItemCaseSensitive(o, "shape"),
                   "an output in shared memory: name, datatype, shape");
      else if (s)
        bin += (size_t)s->valuedouble;
      else
        FUZZ_CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "data")),
                   "output without data");
    }
    FUZZ_CHECK(json_len + bin == len, "binary part %zu, announced %zu",
               len - json_len, bin);
  }
  cJSON_Delete(j);
  free(body);
}

/* Splits "<header text>\n<body>" (the v2 binary harnesses' input form):
 * the Inference-Header-Content-Length value as sent, up to 40 bytes, then
 * the body.  Without a newline in the first 41 bytes the header is absent
 * and everything is body. */
static inline const char *fuzz_split_header(const uint8_t **data,
                                            size_t *size, char hdr[48]) {
  const uint8_t *nl = memchr(*data, '\n', *size < 41 ? *size : 41);
  if (!nl)
    return NULL;
  size_t n = (size_t)(nl - *data);
  memcpy(hdr, *data, n);
  hdr[n] = '\0';
  *size -= n + 1;
  *data = nl + 1;
  return hdr;
}

#endif /* ATTND_FUZZ_H */
