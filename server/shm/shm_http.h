/* shm_http.h - the HTTP side of Triton's system shared memory extension:
 * its routes, and what an inference request needs of the registry
 * (shm.h) while it is decoded, computed and answered.
 *
 * Routes (Triton's, bodies and answers included; protocol.md):
 *   GET  /v2/systemsharedmemory[/region/{name}]/status
 *   POST /v2/systemsharedmemory/region/{name}/register
 *        {"key": "/shm_name", "offset": N, "byte_size": N}
 *   POST /v2/systemsharedmemory[/region/{name}]/unregister
 * Register and unregister answer 501 unless the server allows client
 * shared memory (--allow-client-shm 1); status is always served.
 *
 * Threads: the route functions run on HTTP threads.  A struct shm_http_req
 * belongs to one request: its HTTP thread fills and empties it, and the
 * thread that computes the request (a worker, or the HTTP thread itself)
 * writes the outputs through it in between; the batcher's hand-off orders
 * those accesses.
 */
#ifndef ATTND_SHM_HTTP_H
#define ATTND_SHM_HTTP_H

#include <stddef.h>

#include "proto/proto.h"
#include "server/shm/shm.h"

enum shm_http_action {
  SHM_HTTP_STATUS = 0,      /* GET */
  SHM_HTTP_REGISTER = 1,    /* POST */
  SHM_HTTP_UNREGISTER = 2   /* POST */
};

/* The action of a /v2/systemsharedmemory path (whole path: optional
 * /region/{name}, where name is one or more bytes other than '/', then
 * /status, /register or /unregister), or -1 when url is not one. */
int shm_http_action(const char *url);

/* GET .../status: 200 with *body (malloc'd, free()), or ATTND_ENOTFOUND
 * or ATTND_ENOMEM with a message in err. */
int shm_http_status(struct shm_registry *reg, const char *url, char **body,
                    size_t *len, char err[PROTO_ERR_MAX]);

/* POST .../register or .../unregister with its body: 0 (200, empty
 * body), ATTND_EDISABLED (501) when !allowed, ATTND_EINVAL (400),
 * ATTND_ENOMEM or ATTND_EINTERNAL (500: no SIGBUS handler, see
 * shm_register), with a message in err. */
int shm_http_post(struct shm_registry *reg, int allowed, const char *url,
                  const char *body, size_t len, char err[PROTO_ERR_MAX]);

/* The regions one inference request holds: every region its decode finds
 * (each once), held until shm_http_req_end.  A decode names at most
 * PROTO_TENSORS_MAX regions and runs at most twice (the second time for
 * a message), and a region registered again between the two is another
 * region: so no request reaches this. */
#define SHM_HTTP_HOLDS (2 * PROTO_TENSORS_MAX)

struct shm_http_req {
  struct shm_registry *reg; /* NULL: none registered (no lookups) */
  struct shm_region *held[SHM_HTTP_HOLDS];
  int n;
  char msg[PROTO_ERR_MAX];  /* why the outputs could not be written */
};

/* Starts s for a request (s zeroed or ended) and sets *p so that the
 * decoder finds and reads regions through s. */
void shm_http_req_begin(struct shm_http_req *s, struct shm_registry *reg,
                        proto_shm *p);

/* Writes the outputs of computed request req that go to regions: checks
 * that every one still fits its object (fstat), then writes them all, so
 * that an object already too short writes none.  One truncated between
 * the check and the write stops the writing at its lost page, and the
 * request still fails.  0, or ATTND_EINVAL with s->msg set. */
int shm_http_write_outputs(struct shm_http_req *s, proto_request *req);

/* Runs fn(arg) on this thread with a SIGBUS at any byte req reads in
 * place from a region (req->shared) caught (fault_run): fn's value, or
 * ATTND_EINVAL when a page of them was lost.  A batcher job's guarded. */
int shm_http_guarded(const proto_request *req, int (*fn)(void *),
                     void *arg);

/* Ends every hold of s; safe on a zeroed or ended s. */
void shm_http_req_end(struct shm_http_req *s);

#endif /* ATTND_SHM_HTTP_H */
