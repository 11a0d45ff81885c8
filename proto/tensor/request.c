/* request.c - the memory a proto_request owns.
 *
 * Every buffer a decoded request needs (input tensors, outputs, the echoed
 * id) is one entry of req->owned, so that freeing a request, whether its
 * decode finished or stopped half way, is one loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/tensor/tensor.h"

static void *own(proto_request *req, size_t n, int zeroed) {
  void *p = zeroed ? mem_calloc(1, n ? n : 1) : mem_malloc(n ? n : 1);
  if (p && proto__own_block(req, p)) {
    mem_free(p); /* more buffers than a request can have: a bug */
    return NULL;
  }
  return p;
}

void *proto__own(proto_request *req, size_t n) { return own(req, n, 1); }

void *proto__own_filled(proto_request *req, size_t n) {
  return own(req, n, 0);
}

void *proto__own_room(proto_request *req, size_t n, size_t room) {
  char *p = n > SIZE_MAX - room ? NULL : own(req, room + n, 0);
  return p ? p + room : NULL;
}

int proto__own_block(proto_request *req, void *p) {
  if (req->n_owned >= (int)(sizeof req->owned / sizeof req->owned[0]))
    return ATTND_ENOMEM;
  req->owned[req->n_owned++] = p;
  return 0;
}

int proto__take_block(proto_request *req, void *p) {
  for (int i = 0; i < req->n_owned; i++)
    if (req->owned[i] == p) {
      req->owned[i] = req->owned[--req->n_owned];
      return 0;
    }
  return -1;
}

void proto_request_free(proto_request *req) {
  if (!req)
    return;
  for (int i = 0; i < req->n_owned; i++)
    mem_free(req->owned[i]);
  memset(req, 0, sizeof *req);
}
