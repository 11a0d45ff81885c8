/* fuzz_v2.c - POST /v2/models/{m}/infer JSON bodies (no
 * Inference-Header-Content-Length): proto_v2_decode, then proto_encode of
 * every successful decode.
 *
 * Input: one byte choosing the model (low bit: 0 attention, 1
 * additive_attention), then the body. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_request req;
  char err[PROTO_ERR_MAX];
  if (size < 1)
    return 0;
  int model = data[0] & 1;
  int rc = proto_v2_decode((const char *)data + 1, size - 1, NULL, model,
                           &req, FUZZ_MAX_ELEMS, err);
  fuzz_check_decode_rc(rc, err);
  if (rc != 0) {
    FUZZ_CHECK(req.n_owned == 0 && req.out == NULL,
               "failed decode left memory in the request");
    return 0;
  }
  FUZZ_CHECK(req.codec == PROTO_CODEC_V2 && req.model == model, "codec");
  fuzz_check_request(&req);
  fuzz_check_encode(&req);
  proto_request_free(&req);
  return 0;
}
