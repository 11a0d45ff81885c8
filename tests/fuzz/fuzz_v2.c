/* fuzz_v2.c - POST /v2/models/{m}/infer JSON bodies (no
 * Inference-Header-Content-Length): proto_v2_decode, then proto_encode of
 * every successful decode.
 *
 * Tensors may name shared memory regions.  Without the harness's regions
 * (the plain decoder) every region is unknown; with them, the decoder
 * reads inputs out of real regions of the real registry (server/shm/shm.c)
 * and lists the outputs to write there, which must lie within their
 * regions.  The regions, made once and never written afterwards, over one
 * 8 KiB POSIX object that is unlinked at once (the registry keeps its
 * descriptor):
 *   "r"  bytes 0..4095: float32 words (i % 64 - 32) / 4, whose 16-bit
 *        halves are finite FP16 and BF16 values too;
 *   "t"  bytes 4096..8191: the bytes i * 37, mostly not valid tensors;
 *   "s"  bytes 0..15.
 *
 * Input: one byte (bit 0: the model, 0 attention, 1 additive_attention;
 * bit 1: with the regions), then the body. */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "server/shm/shm.h"
#include "server/shm/shm_http.h"

static struct shm_registry *regions(void) {
  static struct shm_registry *reg;
  char key[64], err[PROTO_ERR_MAX];
  unsigned char bytes[8192];
  if (reg)
    return reg;
  for (int i = 0; i < 1024; i++) {
    float x = (float)(i % 64 - 32) / 4.0f;
    memcpy(bytes + 4 * i, &x, 4);
  }
  for (int i = 4096; i < 8192; i++)
    bytes[i] = (unsigned char)(i * 37);
  snprintf(key, sizeof key, "/attnd-fuzz-%d", (int)getpid());
  int fd = shm_open(key, O_RDWR | O_CREAT | O_TRUNC, 0600);
  FUZZ_CHECK(fd >= 0 && pwrite(fd, bytes, sizeof bytes, 0) == sizeof bytes,
             "cannot make the shared memory object");
  close(fd);
  reg = shm_new(8, 1 << 20);
  FUZZ_CHECK(reg && !shm_register(reg, "r", key, 0, 4096, err) &&
                 !shm_register(reg, "t", key, 4096, 4096, err) &&
                 !shm_register(reg, "s", key, 0, 16, err),
             "cannot register the regions: %s", err);
  shm_unlink(key);
  return reg;
}

/* The outputs to write lie within their regions and byte sizes. */
static void check_shm_outputs(proto_request *req) {
  proto_shm_write w[PROTO_OUT_COUNT];
  int n = proto_v2_shm_outputs(req, w);
  for (int i = 0; i < n; i++) {
    const proto_shm_ref *ref = NULL;
    for (int k = 0; k < PROTO_OUT_COUNT; k++)
      if (req->shm_out[k].region == w[i].region &&
          req->shm_out[k].offset == w[i].offset)
        ref = &req->shm_out[k];
    FUZZ_CHECK(ref && w[i].len <= ref->byte_size, "output %d: %zu bytes "
               "into a byte size of %llu", i, w[i].len,
               ref ? (unsigned long long)ref->byte_size : 0ull);
    FUZZ_CHECK(w[i].offset + w[i].len <= shm_region_size(w[i].region),
               "output %d past its region", i);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_request req;
  char err[PROTO_ERR_MAX];
  struct shm_http_req holds;
  proto_shm shm;
  if (size < 1)
    return 0;
  int model = data[0] & 1;
  memset(&holds, 0, sizeof holds);
  shm_http_req_begin(&holds, data[0] & 2 ? regions() : NULL, &shm);
  int rc = proto_v2_decode_shm((const char *)data + 1, size - 1, NULL, model,
                               &shm, &req, FUZZ_MAX_ELEMS, err);
  fuzz_check_v2_decode_rc(rc, err);
  if (getenv("FUZZ_VERBOSE"))  /* to see what the seeds decode to */
    fprintf(stderr, "decode rc %d %s\n", rc, err);
  if (rc != 0) {
    FUZZ_CHECK(req.n_owned == 0 && req.out == NULL,
               "failed decode left memory in the request");
  } else {
    FUZZ_CHECK(req.codec == PROTO_CODEC_V2 && req.model == model, "codec");
    fuzz_check_request(&req);
    fuzz_check_encode(&req);
    check_shm_outputs(&req);
    proto_request_free(&req);
  }
  shm_http_req_end(&holds);
  if (data[0] & 2)
    FUZZ_CHECK(shm_count(regions()) == 3, "a region went away");
  return 0;
}
