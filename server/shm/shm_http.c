/* shm_http.c - the system shared memory routes and a request's holds on
 * regions (see shm_http.h; the registry is shm.c).
 *
 * Every path of the extension is matched here as Triton's router does:
 * /v2/systemsharedmemory, then optionally /region/{name}, then /status,
 * /register or /unregister; anything else under the prefix is 404.
 * Triton's messages are kept word for word where a client might look
 * for them; what it answers 500 for a client's mistake is 400 here. */
#include "server/shm/shm_http.h"

#include <stdio.h>
#include <string.h>

#include "server/shm/fault.h"

#define PREFIX "/v2/systemsharedmemory"

static const char *const shm_http_actions[3] = {"status", "register",
                                                "unregister"};

/* Splits url into the region name (NULL, 0 when absent) and the action;
 * returns the action or -1. */
static int shm_http_split(const char *url, const char **name, size_t *nlen) {
  const char *p = url + sizeof PREFIX - 1;
  *name = NULL;
  *nlen = 0;
  if (strncmp(url, PREFIX "/", sizeof PREFIX))
    return -1;
  if (!strncmp(p, "/region/", 8)) {
    const char *end = strchr(p + 8, '/');
    if (!end || end == p + 8)
      return -1;
    *name = p + 8;
    *nlen = (size_t)(end - *name);
    p = end;
  }
  for (int a = 0; a < 3; a++)
    if (!strcmp(p + 1, shm_http_actions[a]))
      return a;
  return -1;
}

int shm_http_action(const char *url) {
  const char *name;
  size_t n;
  return shm_http_split(url, &name, &n);
}

/* The region name of url into buf (NUL-terminated), "" when the path
 * names none.  0, or ATTND_EINVAL when it is longer than attnd keeps. */
static int shm_http_name(const char *url, char *buf, char *err) {
  const char *name;
  size_t n;
  (void)shm_http_split(url, &name, &n);
  if (n > PROTO_SHM_NAME_MAX) {
    snprintf(err, PROTO_ERR_MAX, "shared memory region name is %zu bytes "
             "long; at most %d are allowed", n, PROTO_SHM_NAME_MAX);
    return ATTND_EINVAL;
  }
  memcpy(buf, name ? name : "", n);
  buf[n] = '\0';
  return 0;
}

int shm_http_status(struct shm_registry *reg, const char *url, char **body,
                    size_t *len, char err[PROTO_ERR_MAX]) {
  char name[PROTO_SHM_NAME_MAX + 1];
  int rc = shm_http_name(url, name, err);
  if (rc)
    return rc;
  return shm_status(reg, name[0] ? name : NULL, body, len, err);
}

static int shm_http_register(struct shm_registry *reg, const char *name,
                             const char *body, size_t len, char *err) {
  proto_shm_register r;
  int rc;
  if (!name[0]) {
    snprintf(err, PROTO_ERR_MAX, "'region name' is necessary to register "
             "system shared memory region");
    return ATTND_EINVAL;
  }
  if ((rc = proto_shm_register_decode(body, len, name, &r, err)))
    return rc;
  return shm_register(reg, name, r.key, r.offset, r.byte_size, err);
}

int shm_http_post(struct shm_registry *reg, int allowed, const char *url,
                  const char *body, size_t len, char err[PROTO_ERR_MAX]) {
  char name[PROTO_SHM_NAME_MAX + 1];
  int action = shm_http_action(url), rc;
  if (!allowed) {
    snprintf(err, PROTO_ERR_MAX, "Client shared memory is disabled. Start "
             "the server with '--allow-client-shm 1' "
             "(ATTND_ALLOW_CLIENT_SHM=1) to enable.");
    return ATTND_EDISABLED;
  }
  if ((rc = shm_http_name(url, name, err)))
    return rc;
  if (action == SHM_HTTP_REGISTER)
    return shm_http_register(reg, name, body, len, err);
  shm_unregister(reg, name[0] ? name : NULL);
  return 0;
}

/* ---- a request's holds ------------------------------------------------- */

/* proto_shm.find: holds the region once per request. */
static void *shm_http_find(void *ctx, const char *name, uint64_t *size,
                           char err[PROTO_ERR_MAX]) {
  struct shm_http_req *s = ctx;
  struct shm_region *r;
  if (!s->reg || !(r = shm_acquire(s->reg, name)))
    return NULL;
  *size = shm_region_size(r);
  for (int i = 0; i < s->n; i++)
    if (s->held[i] == r) {
      shm_release(r);  /* held already (an input and an output, or the
                          decoder's second pass) */
      return r;
    }
  if (s->n == SHM_HTTP_HOLDS) {  /* more than a request can name */
    shm_release(r);
    snprintf(err, PROTO_ERR_MAX, "a request holds at most %d shared "
             "memory regions", SHM_HTTP_HOLDS);
    return NULL;
  }
  s->held[s->n++] = r;
  return r;
}

static int shm_http_read(void *ctx, void *region, uint64_t off, void *dst,
                         size_t n, char err[PROTO_ERR_MAX]) {
  (void)ctx;
  return shm_region_read(region, off, dst, n, err);
}

/* proto_shm.view: the scan over the bytes where they lie, guarded. */
struct shm_http_scan {
  size_t (*scan)(const void *, size_t);
  size_t words, bad;
  const void *at;
};

static int shm_http_scan_at(const void *at, void *arg) {
  struct shm_http_scan *s = arg;
  s->at = at;
  s->bad = s->scan(at, s->words);
  return 0;
}

static int shm_http_view(void *ctx, void *region, uint64_t off, size_t n,
                         size_t (*scan)(const void *, size_t),
                         const void **at, size_t *bad,
                         char err[PROTO_ERR_MAX]) {
  struct shm_http_scan s = {scan, n / 4, 0, NULL};
  int rc = shm_region_run(region, off, n, shm_http_scan_at, &s, err);
  (void)ctx;
  if (rc)
    return rc;
  *at = s.at;
  *bad = s.bad;
  return 0;
}

void shm_http_req_begin(struct shm_http_req *s, struct shm_registry *reg,
                        proto_shm *p) {
  s->reg = reg;
  s->n = 0;
  s->msg[0] = '\0';
  *p = (proto_shm){s, shm_http_find, shm_http_read, shm_http_view};
}

int shm_http_write_outputs(struct shm_http_req *s, proto_request *req) {
  proto_shm_write w[PROTO_OUT_COUNT];
  int n = proto_v2_shm_outputs(req, w), rc = 0;
  for (int i = 0; i < n && !rc; i++)
    rc = shm_region_check(w[i].region, w[i].offset, w[i].len, s->msg);
  for (int i = 0; i < n && !rc; i++)
    rc = shm_region_write(w[i].region, w[i].offset, w[i].data, w[i].len,
                          s->msg);
  return rc;
}

_Static_assert(PROTO_SHARED_MAX <= FAULT_RANGES,
               "every range a request reads in place fits one guard");

int shm_http_guarded(const proto_request *req, int (*fn)(void *),
                     void *arg) {
  struct fault_range r[PROTO_SHARED_MAX];
  for (int i = 0; i < req->n_shared; i++)
    r[i] = (struct fault_range){req->shared[i].p, req->shared[i].n};
  return fault_run(r, req->n_shared, fn, arg);
}

void shm_http_req_end(struct shm_http_req *s) {
  for (int i = 0; i < s->n; i++)
    shm_release(s->held[i]);
  s->n = 0;
}
