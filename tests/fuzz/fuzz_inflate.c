/* fuzz_inflate.c - request bodies with a Content-Encoding: proto_inflate
 * with its output cap, and proto_deflate -> proto_inflate round trips.
 *
 * Input: one byte choosing the Content-Encoding value (low 3 bits), one
 * choosing the cap (2^(b % 20) bytes), then the compressed body.
 *
 * Checks: the return code is a documented one; success never returns more
 * than the cap; identity hands the input back untouched; the body, when
 * compressed with either coding, inflates back to itself exactly, and is
 * refused with ATTND_ETOOBIG when the cap is one byte short. */
#include "fuzz.h"

static const char *const codings[8] = {
  "gzip", "x-gzip", "deflate", "identity", "GZIP", "Deflate", NULL, "br"};

static void round_trip(const char *coding, const uint8_t *data,
                       size_t size) {
  char *z = NULL, *back = NULL, err[PROTO_ERR_MAX];
  size_t zlen = 0, blen = 0;
  int rc = proto_deflate(coding, (const char *)data, size, &z, &zlen);
  FUZZ_CHECK(rc == 0, "proto_deflate %s rc %d", coding, rc);
  rc = proto_inflate(coding, z, zlen, size, &back, &blen, err);
  FUZZ_CHECK(rc == 0, "%s round trip rc %d: %s", coding, rc, err);
  FUZZ_CHECK(blen == size && (size == 0 || !memcmp(back, data, size)),
             "%s round trip changed the bytes (%zu -> %zu)", coding, size,
             blen);
  free(back);
  back = NULL;
  if (size > 0) {
    rc = proto_inflate(coding, z, zlen, size - 1, &back, &blen, err);
    FUZZ_CHECK(rc == ATTND_ETOOBIG, "%s: cap %zu - 1 gave rc %d", coding,
               size, rc);
    FUZZ_CHECK(back == NULL, "output left after ETOOBIG");
  }
  free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *out = NULL, err[PROTO_ERR_MAX];
  size_t out_len = 0;
  if (size < 2)
    return 0;
  const char *coding = codings[data[0] & 7];
  size_t cap = (size_t)1 << (data[1] % 20);
  data += 2;
  size -= 2;
  err[0] = '\0';
  int rc = proto_inflate(coding, (const char *)data, size, cap, &out,
                         &out_len, err);
  FUZZ_CHECK(rc == 0 || rc == ATTND_EINVAL || rc == ATTND_ETOOBIG,
             "rc %d", rc);
  if (rc != 0) {
    FUZZ_CHECK(out == NULL, "output left after an error");
    FUZZ_CHECK(err[0] && memchr(err, '\0', PROTO_ERR_MAX), "message");
  } else if (out == NULL) {
    FUZZ_CHECK(!coding || !strcmp(coding, "identity"),
               "%s gave no output", coding);
    FUZZ_CHECK(out_len == size, "identity changed the length");
  } else {
    FUZZ_CHECK(out_len <= cap, "inflated %zu past the cap %zu", out_len,
               cap);
    free(out);
  }
  round_trip("gzip", data, size);
  round_trip("deflate", data, size);
  return 0;
}
