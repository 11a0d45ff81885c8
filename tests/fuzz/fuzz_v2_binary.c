/* fuzz_v2_binary.c - the Triton binary tensor data extension: a JSON
 * inference header of Inference-Header-Content-Length bytes followed by
 * binary inputs.  proto_v2_decode with the header value as sent, then
 * proto_encode (binary outputs included) of every successful decode.
 *
 * Input: one byte choosing the model (low bit), the header's value as
 * text and a newline (no newline in the first 41 bytes: no header), then
 * the body. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_request req;
  char err[PROTO_ERR_MAX], hbuf[48];
  if (size < 1)
    return 0;
  int model = data[0] & 1;
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
  fuzz_check_decode_rc(rc, err);
  if (rc != 0) {
    FUZZ_CHECK(req.n_owned == 0 && req.out == NULL,
               "failed decode left memory in the request");
  } else {
    FUZZ_CHECK(req.codec == PROTO_CODEC_V2 && req.model == model, "codec");
    fuzz_check_request(&req);
    fuzz_check_encode(&req);
    proto_request_free(&req);
  }
  free(body);
  return 0;
}
