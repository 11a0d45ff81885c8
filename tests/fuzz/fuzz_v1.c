/* fuzz_v1.c - POST /v1/attention bodies: proto_v1_decode, and
 * proto_v1_encode of every successful decode.
 *
 * Input: the request body as a client sends it. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_request req;
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode((const char *)data, size, &req, FUZZ_MAX_ELEMS,
                           err);
  fuzz_check_decode_rc(rc, err);
  if (rc != 0) {
    FUZZ_CHECK(req.n_owned == 0 && req.out == NULL,
               "failed decode left memory in the request");
    return 0;
  }
  FUZZ_CHECK(req.codec == PROTO_CODEC_V1, "codec %d", req.codec);
  fuzz_check_request(&req);
  fuzz_check_encode(&req);
  proto_request_free(&req);
  return 0;
}
