/* test_shm.c - the shared memory registry (server/shm/shm.c) and a request's
 * view of it (server/shm/shm_http.c), on real POSIX shared memory objects:
 * registering with Triton's checks and messages, the limits, status in name
 * order, holds that defer an unregister and the mapping's lifetime, reads
 * and writes through the mapping, objects truncated or removed after
 * registration (a caught SIGBUS, an error), the v2 decoder reading inputs
 * out of regions and listing outputs for them, and many threads at once,
 * faulting and not.  The guarded copies' faults alone are in
 * test_shm_faults.c. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_skip.h"
#include "proto/mem.h"
#include "proto/proto.h"
#include "server/shm/fault.h"
#include "server/shm/shm.h"
#include "server/shm/shm_http.h"
#include "support_shm.h"
#include "support_suite.h"

/* ---- helpers ------------------------------------------------------------- */

static void write_object(const char *key, size_t off, const void *p,
                         size_t n) {
  int fd = shm_open(key, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
  close(fd);
}

static off_t object_size(const char *key) {
  struct stat st;
  int fd = shm_open(key, O_RDONLY, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fstat(fd, &st), 0);
  close(fd);
  return st.st_size;
}

static void truncate_object(const char *key, off_t size) {
  int fd = shm_open(key, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, size), 0);
  close(fd);
}

/* Mappings of object key in this process (lines of /proc/self/maps). */
static int mappings_of(const char *key) {
  char line[512], path[80];
  int n = 0;
  FILE *f = fopen("/proc/self/maps", "r");
  ck_assert_ptr_nonnull(f);
  snprintf(path, sizeof path, "/dev/shm%s", key);
  while (fgets(line, sizeof line, f))
    if (strstr(line, path))
      n++;
  fclose(f);
  return n;
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

static char *status(struct shm_registry *reg, const char *name, int *rc) {
  char *body = NULL, err[PROTO_ERR_MAX];
  size_t len;
  *rc = shm_status(reg, name, &body, &len, err);
  if (*rc) {
    static char copy[PROTO_ERR_MAX];
    strcpy(copy, err);
    return copy;
  }
  ck_assert_uint_eq(strlen(body), len);
  return body;
}

#define STATUS_IS(reg, name, want)                                          \
  do {                                                                      \
    int rc_;                                                                \
    char *s_ = status(reg, name, &rc_);                                     \
    ck_assert_int_eq(rc_, 0);                                               \
    ck_assert_str_eq(s_, want);                                             \
    free(s_);                                                               \
  } while (0)

/* Asserts that registering fails with ATTND_EINVAL and a message
 * containing want. */
static void refused(struct shm_registry *reg, const char *name,
                    const char *key, uint64_t off, uint64_t size,
                    const char *want) {
  char err[PROTO_ERR_MAX] = "";
  ck_assert_int_eq(reg_rc(reg, name, key, off, size, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, want), "message \"%s\" lacks \"%s\"", err, want);
}

/* ---- registering ------------------------------------------------------- */

START_TEST(register_status_unregister) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k1 = make_object(8192), *k2 = make_object(4096);
  char err[PROTO_ERR_MAX], want[512];
  STATUS_IS(reg, NULL, "[]");
  ck_assert_int_eq(reg_rc(reg, "zeta", k1, 4096, 4096, err), 0);
  ck_assert_int_eq(reg_rc(reg, "alpha", k2, 0, 100, err), 0);
  /* sorted by name, keys as registered, offset as given */
  snprintf(want, sizeof want,
           "[{\"name\":\"alpha\",\"key\":\"%s\",\"offset\":0,"
           "\"byte_size\":100},{\"name\":\"zeta\",\"key\":\"%s\","
           "\"offset\":4096,\"byte_size\":4096}]", k2, k1);
  STATUS_IS(reg, NULL, want);
  snprintf(want, sizeof want, "[{\"name\":\"zeta\",\"key\":\"%s\","
           "\"offset\":4096,\"byte_size\":4096}]", k1);
  STATUS_IS(reg, "zeta", want);
  int rc;
  char *msg = status(reg, "beta", &rc);
  ck_assert_int_eq(rc, ATTND_ENOTFOUND);
  ck_assert_str_eq(msg, "Unable to find system shared memory region: "
                        "'beta'");
  shm_unregister(reg, "nobody");  /* unknown: nothing happens */
  shm_unregister(reg, "alpha");
  ck_assert_uint_eq(shm_count(reg), 1);
  shm_unregister(reg, NULL);
  STATUS_IS(reg, NULL, "[]");
  shm_free(reg);
  unlink_objects();
}
END_TEST

START_TEST(register_refusals_say_what_triton_says) {
  struct shm_registry *reg = shm_new(8, UINT64_MAX);
  const char *k = make_object(8192);
  char err[PROTO_ERR_MAX], missing[64];
  int fds = open_fds();
  snprintf(missing, sizeof missing, "/attnd-test-%d-none", (int)getpid());
  ck_assert_int_eq(reg_rc(reg, "a", k, 0, 8192, err), 0);
  refused(reg, "a", k, 0, 16, "shared memory region 'a' already in manager");
  refused(reg, "b", missing, 0, 16, "Unable to open shared memory region: "
          "'/attnd-test-");
  refused(reg, "b", k, 0, 8193, "failed to register shared memory region "
          "'b': invalid args");
  refused(reg, "b", k, 8192, 1, "invalid args");
  /* offset + byte_size wraps around: still past the end */
  refused(reg, "b", k, 4096, UINT64_MAX - 8192, "invalid args");
  refused(reg, "b", k, 100, 16, "unable to process address space");
  refused(reg, "b", k, 0, 0, "unable to process address space");
  /* a FIFO in /dev/shm is not a shared memory object */
  char fifo[64];
  snprintf(fifo, sizeof fifo, "/dev/shm/attnd-test-%d-fifo", (int)getpid());
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  refused(reg, "b", fifo + 8, 0, 1, "Invalid shared memory region");
  unlink(fifo);
  /* 128 TiB (a sparse object) is more than the address space mmap
   * hands out: Triton's words, then the system's (ENOMEM; valgrind's
   * mmap says EINVAL) */
  const char *huge = make_object(0);
  truncate_object(huge, (off_t)1 << 47);
  refused(reg, "b", huge, 0, (uint64_t)1 << 47, "failed to register shared "
          "memory region 'b': unable to process address space: ");
  /* every refusal closed what it opened: one descriptor and one mapping,
   * region a's */
  ck_assert_int_eq(open_fds(), fds + 1);
  ck_assert_int_eq(mappings_of(k), 1);
  ck_assert_int_eq(mappings_of(huge), 0);
  shm_free(reg);
  ck_assert_int_eq(open_fds(), fds);
  ck_assert_int_eq(mappings_of(k), 0);
  unlink_objects();
}
END_TEST

START_TEST(limits_count_every_region) {
  struct shm_registry *reg = shm_new(2, 12288);
  const char *k = make_object(16384);
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(reg_rc(reg, "a", k, 0, 4096, err), 0);
  refused(reg, "big", k, 0, 12288, "--shm-max-mb");
  ck_assert_int_eq(reg_rc(reg, "b", k, 4096, 8192, err), 0);
  refused(reg, "c", k, 0, 1, "2 regions are registered, the server's limit "
          "(--shm-max-regions)");
  /* a held region counts until it is gone */
  struct shm_region *r = shm_acquire(reg, "b");
  shm_unregister(reg, "b");
  refused(reg, "c", k, 0, 1, "--shm-max-regions");
  shm_release(r);
  ck_assert_int_eq(reg_rc(reg, "c", k, 0, 8192, err), 0);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* ---- holds --------------------------------------------------------------- */

START_TEST(unregister_waits_for_the_last_hold) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k = make_object(4096);
  char err[PROTO_ERR_MAX];
  int fds = open_fds();
  ck_assert_int_eq(reg_rc(reg, "r", k, 0, 4096, err), 0);
  ck_assert_int_eq(mappings_of(k), 1);
  struct shm_region *h1 = shm_acquire(reg, "r");
  ck_assert_ptr_nonnull(h1);
  ck_assert_ptr_null(shm_acquire(reg, "other"));
  shm_unregister(reg, "r");
  /* as Triton: still listed, the name still taken, still usable */
  ck_assert_uint_eq(shm_count(reg), 1);
  refused(reg, "r", k, 0, 16, "already in manager");
  struct shm_region *h2 = shm_acquire(reg, "r");
  ck_assert_ptr_eq(h1, h2);
  shm_unregister(reg, NULL);  /* unregistering twice changes nothing */
  shm_release(h1);
  ck_assert_uint_eq(shm_count(reg), 1);
  unsigned char b;
  ck_assert_int_eq(shm_region_read(h2, 3, &b, 1, err), 0);
  ck_assert_uint_eq(b, 21);
  ck_assert_int_eq(mappings_of(k), 1);
  shm_release(h2);
  ck_assert_uint_eq(shm_count(reg), 0);
  ck_assert_int_eq(open_fds(), fds);  /* the descriptor is closed */
  ck_assert_int_eq(mappings_of(k), 0);  /* and the mapping gone */
  ck_assert_int_eq(reg_rc(reg, "r", k, 0, 16, err), 0);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* ---- reading and writing --------------------------------------------- */

START_TEST(reads_and_writes_go_through_the_region_offset) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k = make_object(3 * 4096);
  char err[PROTO_ERR_MAX];
  unsigned char got[8], back[8];
  ck_assert_int_eq(reg_rc(reg, "r", k, 4096, 8192, err), 0);
  struct shm_region *r = shm_acquire(reg, "r");
  ck_assert_uint_eq(shm_region_size(r), 8192);
  ck_assert_int_eq(shm_region_read(r, 10, got, 8, err), 0);
  for (int i = 0; i < 8; i++)
    ck_assert_uint_eq(got[i], (unsigned char)((4096 + 10 + i) * 7));
  /* the mapping is shared: what the client writes later is read */
  write_object(k, 4096 + 10, "ABCDEFGH", 8);
  ck_assert_int_eq(shm_region_read(r, 10, got, 8, err), 0);
  ck_assert(!memcmp(got, "ABCDEFGH", 8));
  ck_assert_int_eq(shm_region_write(r, 8184, "abcdefgh", 8, err), 0);
  int fd = shm_open(k, O_RDONLY, 0);
  ck_assert_int_eq(pread(fd, back, 8, 4096 + 8184), 8);
  close(fd);
  ck_assert(!memcmp(back, "abcdefgh", 8));
  shm_release(r);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* The refusals below come from a SIGBUS the guard caught in the copy
 * itself (fault_caught counts them), not from a check before it. */
START_TEST(truncated_or_removed_objects_fail_cleanly) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k = make_object(3 * 4096);
  char err[PROTO_ERR_MAX];
  unsigned char buf[64];
  unsigned long caught = fault_caught();
  ck_assert_int_eq(reg_rc(reg, "r", k, 4096, 8192, err), 0);
  struct shm_region *r = shm_acquire(reg, "r");
  /* shorter than the region: what is still there reads, the rest not */
  truncate_object(k, 2 * 4096);
  ck_assert_int_eq(shm_region_read(r, 4000, buf, 64, err), 0);
  ck_assert_uint_eq(fault_caught(), caught);
  ck_assert_int_eq(shm_region_read(r, 4090, buf, 64, err), ATTND_EINVAL);
  ck_assert_uint_eq(fault_caught(), caught + 1);
  ck_assert_msg(strstr(err, "shared memory region 'r'") &&
                    strstr(err, "truncated"), "%s", err);
  ck_assert_msg(strstr(err, k), "%s", err);
  /* the check sees what is left; a write past it faults and stops there,
   * and the object keeps its size */
  ck_assert_int_eq(shm_region_check(r, 4000, 96, err), 0);
  ck_assert_int_eq(shm_region_check(r, 4050, 64, err), ATTND_EINVAL);
  ck_assert_int_eq(shm_region_write(r, 4050, buf, 64, err), ATTND_EINVAL);
  ck_assert_uint_eq(fault_caught(), caught + 2);
  ck_assert_msg(strstr(err, "too short for the output"), "%s", err);
  ck_assert_int_eq(object_size(k), 2 * 4096);
  ck_assert_int_eq(shm_region_write(r, 4000, buf, 64, err), 0);
  /* removed, then emptied through another descriptor */
  int fd = shm_open(k, O_RDWR, 0);
  ck_assert_int_eq(shm_unlink(k), 0);
  ck_assert_int_eq(ftruncate(fd, 0), 0);
  close(fd);
  ck_assert_int_eq(shm_region_read(r, 0, buf, 1, err), ATTND_EINVAL);
  ck_assert_int_eq(shm_region_write(r, 0, buf, 1, err), ATTND_EINVAL);
  ck_assert_uint_eq(fault_caught(), caught + 4);
  shm_release(r);
  shm_unregister(reg, "r");
  shm_free(reg);
  forget_objects();
}
END_TEST

/* ---- the decoder through a request's holds -------------------------- */

/* FP32 query (1,2,2) at 0 and key (1,3,2) at 16, FP16 value (1,3,2) at
 * 40 and INT64 valid_lens (1,) at 56, all in region "r". */
#define DECODER_INPUTS                                                      \
  "{\"inputs\":["                                                           \
  "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,2],"             \
  "\"parameters\":{\"shared_memory_region\":\"r\","                        \
  "\"shared_memory_byte_size\":16}},"                                       \
  "{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,3,2],"               \
  "\"parameters\":{\"shared_memory_region\":\"r\","                        \
  "\"shared_memory_offset\":16,\"shared_memory_byte_size\":24}},"           \
  "{\"name\":\"value\",\"datatype\":\"FP16\",\"shape\":[1,3,2],"             \
  "\"parameters\":{\"shared_memory_region\":\"r\","                        \
  "\"shared_memory_offset\":40,\"shared_memory_byte_size\":12}},"           \
  "{\"name\":\"valid_lens\",\"datatype\":\"INT64\",\"shape\":[1],"           \
  "\"parameters\":{\"shared_memory_region\":\"r\","                        \
  "\"shared_memory_offset\":56,\"shared_memory_byte_size\":8}}],"

/* A new object holding DECODER_INPUTS' tensors: q = [[1, 0], [0, 2]],
 * k = [[1, 1], [2, 0], [0, 3]], v = [[1, 0], [0, 1], [1, 1]], lens 2. */
static const char *decoder_object(void) {
  static const float q[4] = {1, 0, 0, 2}, kv[6] = {1, 1, 2, 0, 0, 3};
  static const uint16_t v16[6] = {0x3c00, 0, 0, 0x3c00, 0x3c00, 0x3c00};
  static const int64_t lens[1] = {2};
  const char *k = make_object(4096);
  write_object(k, 0, q, 16);
  write_object(k, 16, kv, 24);
  write_object(k, 40, v16, 12);
  write_object(k, 56, lens, 8);
  return k;
}

/* A registry with a decoder_object registered as region "r" (its key in
 * *key), and DECODER_INPUTS followed by outputs (the rest of the body)
 * decoded through a request's holds s. */
static struct shm_registry *decoder_decode(const char *outputs,
                                           const char **key,
                                           struct shm_http_req *s,
                                           proto_shm *p, proto_request *req) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  char err[PROTO_ERR_MAX], json[2048];
  *key = decoder_object();
  snprintf(json, sizeof json, "%s%s", DECODER_INPUTS, outputs);
  ck_assert_int_eq(reg_rc(reg, "r", *key, 0, 4096, err), 0);
  memset(s, 0, sizeof *s);
  shm_http_req_begin(s, reg, p);
  ck_assert_msg(proto_v2_decode_shm(json, strlen(json), NULL,
                                    PROTO_MODEL_ATTENTION, p, req, 0,
                                    err) == 0, "%s", err);
  ck_assert(req->prob.q[3] == 2.0f && req->prob.k[5] == 3.0f);
  ck_assert(req->prob.v[3] == 1.0f && req->prob.valid_lens[0] == 2);
  return reg;
}

START_TEST(decoder_reads_inputs_and_lists_outputs) {
  const char *k;
  char *body;
  size_t len, jlen;
  struct shm_http_req s;
  proto_shm p;
  proto_request req;
  proto_shm_write w[PROTO_OUT_COUNT];
  struct shm_registry *reg = decoder_decode(
      "\"outputs\":[{\"name\":\"weights\"},{\"name\":\"output\","
      "\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_offset\":1024,\"shared_memory_byte_size\":64,"
      "\"binary_data\":false}}]}", &k, &s, &p, &req);
  ck_assert_int_eq(s.n, 1);  /* one region, held once */
  ck_assert_uint_eq(req.in_bytes, 17 * sizeof(float)); /* all 4 copied */
  ck_assert_int_eq(proto_v2_shm_outputs(&req, w), 1);
  ck_assert_uint_eq(w[0].offset, 1024);
  ck_assert_uint_eq(w[0].len, 2 * 2 * sizeof(float));
  ck_assert_ptr_eq(w[0].data, req.out);
  /* the answer names the output without data or parameters (the core
   * has not run: its buffers are given values here) */
  memset(req.out, 0, 4 * sizeof(float));
  memset(req.weights, 0, 6 * sizeof(float));
  ck_assert_int_eq(proto_v2_encode(&req, &body, &len, &jlen), 0);
  ck_assert_msg(strstr(body, "{\"name\":\"output\",\"datatype\":\"FP32\","
                             "\"shape\":[1,2,2]}"), "%s", body);
  free(body);
  /* the held region goes away only with the hold */
  shm_unregister(reg, NULL);
  ck_assert_uint_eq(shm_count(reg), 1);
  req.out[0] = 0.25f;
  ck_assert_int_eq(shm_http_write_outputs(&s, &req), 0);
  float back;
  int fd = shm_open(k, O_RDONLY, 0);
  ck_assert_int_eq(pread(fd, &back, 4, 1024), 4);
  close(fd);
  ck_assert(back == 0.25f);
  proto_request_free(&req);
  shm_http_req_end(&s);
  ck_assert_uint_eq(shm_count(reg), 0);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* With every output into a region, FP32 query and key are read where
 * they lie (the core then reads the mapping: proto_request.shared); the
 * FP16 value and the INT64 lengths are copied.  A JSON output, as in the
 * test above, keeps every input copied. */
START_TEST(decoder_reads_fp32_in_place_when_nothing_prints) {
  const char *k;
  struct shm_http_req s;
  proto_shm p;
  proto_request req;
  struct shm_registry *reg = decoder_decode(
      "\"outputs\":[{\"name\":\"output\","
      "\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_offset\":1024,\"shared_memory_byte_size\":64}}]}",
      &k, &s, &p, &req);
  ck_assert_int_eq(req.n_shared, 2);
  ck_assert_ptr_eq(req.shared[0].p, req.prob.q);
  ck_assert_uint_eq(req.shared[0].n, 16);
  ck_assert_ptr_eq(req.shared[1].p, req.prob.k);
  ck_assert_uint_eq(req.shared[1].n, 24);
  /* the budget's bytes are the copies': the region's are the client's */
  ck_assert_uint_eq(req.in_bytes, 7 * sizeof(float));
  /* the region's words are what the core reads: the client's writes show */
  static const float three = 3.0f;
  write_object(k, 12, &three, 4);
  ck_assert(req.prob.q[3] == 3.0f);
  proto_request_free(&req);
  shm_http_req_end(&s);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* The copy that is checked is the copy computed from: a NaN in the
 * region is refused by name; a truncated region is a clean error. */
START_TEST(decoder_checks_what_it_copied) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k = make_object(4096);
  static const char json[] =
      "{\"inputs\":["
      "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,2],"
      "\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_byte_size\":8}},"
      "{\"name\":\"key\",\"datatype\":\"BF16\",\"shape\":[1,2,2],"
      "\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_offset\":8,\"shared_memory_byte_size\":8}},"
      "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,2,1],"
      "\"data\":[1,2]},"
      "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[1,2],"
      "\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_offset\":16,\"shared_memory_byte_size\":2}}]}";
  const float good[2] = {1, 2}, nan2[2] = {1, NAN};
  const uint16_t bf[4] = {0x3f80, 0, 0x7f80, 0}; /* 1, 0, inf, 0 */
  const unsigned char mask[2] = {1, 2};
  char err[PROTO_ERR_MAX];
  struct shm_http_req s;
  proto_shm p;
  proto_request req;
  ck_assert_int_eq(reg_rc(reg, "r", k, 0, 4096, err), 0);
  write_object(k, 0, nan2, 8);
  memset(&s, 0, sizeof s);
  shm_http_req_begin(&s, reg, &p);
  ck_assert_int_eq(proto_v2_decode_shm(json, strlen(json), NULL, 0, &p, &req,
                                       0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "query[0][0][1]: FP32 value is not finite"),
                "%s", err);
  write_object(k, 0, good, 8);
  write_object(k, 8, bf, 8);
  ck_assert_int_eq(proto_v2_decode_shm(json, strlen(json), NULL, 0, &p, &req,
                                       0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "key[0][1][0]: BF16 value is not finite"), "%s",
                err);
  ck_assert_int_eq(req.n_owned, 0);
  const uint16_t bf_ok[4] = {0x3f80, 0, 0x4000, 0};
  write_object(k, 8, bf_ok, 8);
  write_object(k, 16, mask, 2);
  ck_assert_int_eq(proto_v2_decode_shm(json, strlen(json), NULL, 0, &p, &req,
                                       0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "mask[0][1]: BOOL byte 2"), "%s", err);
  /* (emptied: a tail of the object's last page would read as zeros) */
  truncate_object(k, 0);
  ck_assert_int_eq(proto_v2_decode_shm(json, strlen(json), NULL, 0, &p, &req,
                                       0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "truncated"), "%s", err);
  shm_http_req_end(&s);
  shm_free(reg);
  unlink_objects();
}
END_TEST

/* ---- threads -------------------------------------------------------------- */

struct worker_arg {
  struct shm_registry *reg;
  int failures;
};

/* Acquires, reads and releases region "r" over and over while the main
 * thread registers and unregisters it. */
static void *reader(void *p) {
  struct worker_arg *a = p;
  char err[PROTO_ERR_MAX];
  unsigned char b;
  for (int i = 0; i < 20000; i++) {
    struct shm_region *r = shm_acquire(a->reg, "r");
    if (!r)
      continue;
    if (shm_region_read(r, 5, &b, 1, err) != 0 || b != 35)
      a->failures++;
    shm_release(r);
  }
  return NULL;
}

struct copier_arg {
  struct shm_region *r;
  int faulting;            /* the region's object is gone */
  pthread_barrier_t *start;
  _Atomic int *done;       /* the faulting thread has finished */
  int rounds, wrong;       /* rounds run; results not as expected */
  unsigned long caught;    /* faults the guard caught on this thread */
};

/* Reads and writes its region, big copies and small (byte i of the
 * objects is i * 7, and page 1 repeats page 0: the writes put the same
 * bytes back): the faulting thread 2000 times, the other at least as
 * often and until the faulting one is done, so that their copies overlap
 * all along. */
static void *copier(void *p) {
  struct copier_arg *a = p;
  static _Thread_local unsigned char buf[3 * 4096];
  char err[PROTO_ERR_MAX];
  unsigned long before = fault_caught();
  int want = a->faulting ? ATTND_EINVAL : 0;
  pthread_barrier_wait(a->start);
  for (int i = 0; a->faulting ? i < 2000 : (i < 2000 || !*a->done); i++) {
    size_t n = i % 4 ? 1 + (size_t)i % 64 : sizeof buf;
    if (shm_region_read(a->r, 0, buf, n, err) != want ||
        (!a->faulting && buf[n - 1] != (unsigned char)((n - 1) * 7)) ||
        shm_region_write(a->r, 4096, buf, n, err) != want)
      a->wrong++;
    a->rounds++;
  }
  if (a->faulting)
    *a->done = 1;
  a->caught = fault_caught() - before;
  return NULL;
}

/* Two threads copy at once, one from a region whose object is gone and
 * one from a healthy region: the faulting one gets an error every time,
 * the other every byte right and never an error; each thread's guard
 * caught its own faults only. */
START_TEST(a_fault_on_one_thread_leaves_the_other_alone) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *good = make_object(4 * 4096), *bad = make_object(4 * 4096);
  char err[PROTO_ERR_MAX];
  pthread_barrier_t start;
  _Atomic int done = 0;
  pthread_t t[2];
  struct copier_arg a[2];
  ck_assert_int_eq(reg_rc(reg, "good", good, 0, 4 * 4096, err), 0);
  ck_assert_int_eq(reg_rc(reg, "bad", bad, 0, 4 * 4096, err), 0);
  truncate_object(bad, 0);
  pthread_barrier_init(&start, NULL, 2);
  a[0] = (struct copier_arg){shm_acquire(reg, "good"), 0, &start, &done,
                             0, 0, 0};
  a[1] = (struct copier_arg){shm_acquire(reg, "bad"), 1, &start, &done,
                             0, 0, 0};
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, copier, &a[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  ck_assert_msg(a[0].wrong == 0, "healthy: %d of %d rounds wrong",
                a[0].wrong, a[0].rounds);
  ck_assert_msg(a[1].wrong == 0, "faulting: %d of %d rounds wrong",
                a[1].wrong, a[1].rounds);
  ck_assert_uint_eq(a[0].caught, 0);
  ck_assert_uint_eq(a[1].caught, 2 * 2000);
  for (int i = 0; i < 2; i++)
    shm_release(a[i].r);
  pthread_barrier_destroy(&start);
  shm_free(reg);
  unlink_objects();
}
END_TEST

START_TEST(many_threads_hold_while_one_unregisters) {
  struct shm_registry *reg = shm_new(8, 1 << 20);
  const char *k = make_object(4096);
  struct worker_arg a[4];
  pthread_t t[4];
  char err[PROTO_ERR_MAX];
  int fds = open_fds();
  for (int i = 0; i < 4; i++) {
    a[i] = (struct worker_arg){reg, 0};
    ck_assert_int_eq(pthread_create(&t[i], NULL, reader, &a[i]), 0);
  }
  for (int i = 0; i < 2000; i++) {
    int rc = reg_rc(reg, "r", k, 0, 4096, err);
    ck_assert_msg(rc == 0 || strstr(err, "already in manager"), "%s", err);
    shm_unregister(reg, "r");
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    ck_assert_int_eq(a[i].failures, 0);
  }
  ck_assert_uint_eq(shm_count(reg), 0);
  ck_assert_int_eq(open_fds(), fds);
  shm_free(reg);
  unlink_objects();
}
END_TEST

int main(void) {
  mem_init();
  support_case cases[] = {
    {"registry", {register_status_unregister,
                  register_refusals_say_what_triton_says,
                  limits_count_every_region,
                  unregister_waits_for_the_last_hold,
                  reads_and_writes_go_through_the_region_offset,
                  truncated_or_removed_objects_fail_cleanly,
                  decoder_reads_inputs_and_lists_outputs,
                  decoder_reads_fp32_in_place_when_nothing_prints,
                  decoder_checks_what_it_copied,
                  a_fault_on_one_thread_leaves_the_other_alone,
                  many_threads_hold_while_one_unregisters}},
  };
  return support_run("shm", cases, sizeof cases / sizeof cases[0]);
}
