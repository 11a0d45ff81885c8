/* proto.h - client bytes to validated attention requests, results to bytes.
 *
 * proto/ is the only layer that reads client-supplied bytes.  Every
 * dimension, type, length and number is checked here, so that core/ may
 * assume a valid attn_problem.  All functions are reentrant: no globals, no
 * cJSON_GetErrorPtr (it is a static), safe to call from any thread.
 *
 * Ownership: a proto_request owns every buffer its problem points at, plus
 * the output buffers the core writes into.  proto_request_free() releases
 * all of it; it is safe on a zeroed or partially decoded request.
 */
#ifndef PROTO_H
#define PROTO_H

#include <stddef.h>

#include "../core/attn.h"

/* Longest error message a decoder writes (including the NUL). */
#define PROTO_ERR_MAX 256

typedef struct proto_request {
  attn_problem prob;        /* points into the buffers below */

  int qrank;                /* 3: (B, L, D) or 4: (B, H, L, D); the output
                               and weights take the same rank */
  int flat;                 /* 1: the query came as {"shape","data"}, so the
                               response uses that form too; 0: nested */
  int return_weights;       /* 1: compute and return the weights */
  char *id_json;            /* the request's "id" printed as JSON (a string
                               or number), or NULL when absent */

  float *out;               /* (B, H, Lq, Dv), allocated by the decoder */
  float *weights;           /* (B, H, Lq, Lk) or NULL when not requested */

  size_t in_bytes;          /* bytes of decoded input tensors */
  size_t out_bytes;         /* bytes of out + weights */

  void *owned[16];          /* every allocation of this request */
  int n_owned;
} proto_request;

/* Decodes a POST /v1/attention body (JSON, not NUL-terminated).
 *
 * On success returns 0 and fills req (the caller then calls
 * proto_request_free).  On bad input returns ATTND_EINVAL and writes a
 * message into err that names the field and the problem, e.g.
 *   "key: width 31 does not match query width 32"
 *   "valid_lens[1]=9 exceeds key length 7"
 *   "query: ragged array at [0][3]"
 * On allocation failure returns ATTND_ENOMEM.  On any error req holds
 * nothing that needs freeing beyond what proto_request_free releases.
 * max_elems bounds the total number of tensor elements one request may
 * decode into (a memory bound independent of the body size); 0 = no bound. */
int proto_v1_decode(const char *body, size_t len, proto_request *req,
                    size_t max_elems, char err[PROTO_ERR_MAX]);

/* Encodes the response for a computed request: {"id": .., "output": ..,
 * "weights": ..} in the form of the query (nested or flat).  *body is
 * malloc'd and NUL-terminated, *len excludes the NUL; the caller frees it
 * with free().  Returns 0 or ATTND_ENOMEM. */
int proto_v1_encode(const proto_request *req, char **body, size_t *len);

/* Encodes {"error": "<msg>"} with msg JSON-escaped.  *body is malloc'd and
 * freed by the caller with free().  Returns 0 or ATTND_ENOMEM. */
int proto_error_body(const char *msg, char **body, size_t *len);

/* Releases everything the request owns and zeroes it.  Safe on a zeroed
 * request and on one whose decode failed. */
void proto_request_free(proto_request *req);

#endif /* PROTO_H */
