/* fuzz_v2_binary.c - the Triton binary tensor data extension: a JSON
 * inference header of Inference-Header-Content-Length bytes followed by
 * binary inputs.  proto_v2_decode with the header value as sent, then
 * proto_encode (binary outputs included) of every successful decode, in
 * one piece and in parts (which must be the same bytes).
 * The same bytes received as the server receives them (proto_body, in
 * chunks) must decode to the same answer: the same return value and
 * message, the same tensors.
 *
 * Input: one byte choosing the model (low bit) and the chunk size (the
 * other bits), the header's value as text and a newline (no newline in
 * the first 41 bytes: no header), then the body. */
#include "fuzz.h"

static int same_floats(const float *a, const float *b, size_t n) {
  return (!a && !b) || (a && b && !memcmp(a, b, n * sizeof(float)));
}

/* The response in parts (proto_v2_encode_parts) is byte for byte the
 * response in one piece, and joined parts lie in one buffer.  Last use
 * of req: the parts take its outputs. */
static void check_parts(proto_request *req) {
  char *body;
  size_t len, json_len;
  proto_parts parts;
  FUZZ_CHECK(proto_v2_encode(req, &body, &len, &json_len) == 0, "encode");
  int rc = proto_v2_encode_parts(req, &parts);
  FUZZ_CHECK(rc == 0 || rc == 1, "proto_v2_encode_parts rc %d", rc);
  FUZZ_CHECK((rc == 1) == (json_len == len), "parts iff binary outputs");
  if (rc == 0) {
    size_t at = parts.json_len;
    FUZZ_CHECK(!parts.joined ||
               (parts.n == 1 && parts.json + at == parts.data[0]),
               "joined parts are one buffer");
    FUZZ_CHECK(at == json_len && !memcmp(parts.json, body, at), "JSON part");
    for (int i = 0; i < parts.n; i++) {
      FUZZ_CHECK(at + parts.len[i] <= len &&
                 !memcmp(parts.data[i], body + at, parts.len[i]),
                 "binary part %d", i);
      at += parts.len[i];
    }
    FUZZ_CHECK(at == len, "parts hold %zu bytes of %zu", at, len);
  }
  proto_parts_free(&parts);
  free(body);
}

/* Decodes body as received in chunks of `step` bytes; compares with the
 * decode of the whole buffer (rc, err, req). */
static void check_received(const char *body, size_t size, const char *hdr,
                           int model, size_t step, int rc,
                           const char *err, const proto_request *req) {
  proto_body pb;
  proto_request got;
  char gerr[PROTO_ERR_MAX];
  if (proto_body_init(&pb, size, hdr))
    return;
  for (size_t i = 0; i < size; i += step)
    if (proto_body_append(&pb, body + i, size - i < step ? size - i : step)) {
      proto_body_free(&pb);
      return;
    }
  int grc = proto_v2_decode_body(&pb, hdr, model, &got, FUZZ_MAX_ELEMS, gerr);
  FUZZ_CHECK(grc == rc, "received body: rc %d, as sent %d", grc, rc);
  if (rc) {
    FUZZ_CHECK(!strcmp(gerr, err), "received body: \"%s\" vs \"%s\"", gerr,
               err);
    FUZZ_CHECK(got.n_owned == 0, "failed decode left memory in the request");
  } else {
    const attn_problem *p = &req->prob, *g = &got.prob;
    FUZZ_CHECK(!memcmp(&p->B, &g->B, sizeof(int) * 8), "received: shapes");
    FUZZ_CHECK(same_floats(p->q, g->q, (size_t)p->B * p->H * p->Lq * p->D) &&
               same_floats(p->k, g->k, (size_t)p->B * p->Hkv * p->Lk * p->Dk) &&
               same_floats(p->v, g->v, (size_t)p->B * p->Hkv * p->Lk * p->Dv),
               "received body: tensors differ");
    proto_request_free(&got);
  }
  proto_body_free(&pb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_request req;
  char err[PROTO_ERR_MAX], hbuf[48];
  if (size < 1)
    return 0;
  int model = data[0] & 1;
  size_t step = (size_t)(data[0] >> 1) + 1;
  data++;
  size--;
  const char *hdr = fuzz_split_header(&data, &size, hbuf);
  /* The body in its own allocation, so that ASan sees a read past its
   * end rather than into the header bytes before it. */
  char *body = malloc(size ? size : 1);
  if (!body)
    return 0;
  memcpy(body, data, size);
  int rc = proto_v2_decode(body, size, hdr, model, &req, FUZZ_MAX_ELEMS,
                           err);
  fuzz_check_v2_decode_rc(rc, err);
  if (rc != ATTND_ENOMEM)
    check_received(body, size, hdr, model, step, rc, err, &req);
  if (rc != 0) {
    FUZZ_CHECK(req.n_owned == 0 && req.out == NULL,
               "failed decode left memory in the request");
  } else {
    FUZZ_CHECK(req.codec == PROTO_CODEC_V2 && req.model == model, "codec");
    fuzz_check_request(&req);
    fuzz_check_encode(&req);
    check_parts(&req);
    proto_request_free(&req);
  }
  free(body);
  return 0;
}
