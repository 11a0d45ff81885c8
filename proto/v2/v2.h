/* v2.h - the v2 codec's pieces shared across its files and with body/:
 * the member names it accepts and system shared memory in a request; not
 * a public API.  Builds on tensor/ and text/.
 */
#ifndef PROTO_V2_H
#define PROTO_V2_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/proto.h"
#include "proto/tensor/tensor.h"

/* ---- v2 names (v2_params.c) ---------------------------------------------
 *
 * Which member names a v2 inference request may use, at each level; see
 * v2_params.c for the three kinds (served, Triton's not served, unknown)
 * and what Triton's clients send. */
enum proto__v2_level {
  PROTO__V2_REQUEST,  /* the request object and its "parameters" */
  PROTO__V2_INPUT,    /* an object of "inputs" and its "parameters" */
  PROTO__V2_OUTPUT    /* an object of "outputs" and its "parameters" */
};

/* Every member of params (a "parameters" object of that level, or NULL)
 * is a name attnd serves there.  Returns 0, or ATTND_EINVAL with
 * "<where>.<name>: not supported (...)" for a Triton parameter attnd does
 * not serve, or "<where>.<name>: unknown parameter (did you mean '...'?
 * <level> parameters: ...)".  where: "parameters",
 * "inputs[2].parameters". */
int proto__v2_check_params(const cJSON *params, int level, const char *where,
                           char err[PROTO_ERR_MAX]);

/* Every member of obj (the request, an input or an output object) is a
 * field of that level.  Returns 0, or ATTND_EINVAL with "<where>: unknown
 * field '<name>' (did you mean '...'? <level> fields: ...)"; where: ""
 * for the request, "inputs[2]", "outputs[0]". */
int proto__v2_check_fields(const cJSON *obj, int level, const char *where,
                           char err[PROTO_ERR_MAX]);

/* ---- system shared memory in a v2 request (v2_shm.c) ---------------------
 *
 * The shared_memory_* parameters of one input or output, kept apart from
 * the rest of v2_decode.c's parameter handling.  Messages start with
 * `where` ("query", "outputs[1]") and then say what Triton says. */
typedef struct proto__shm_use {
  const char *name;         /* shared_memory_region (the cJSON string);
                               NULL: the tensor is not in shared memory */
  uint64_t offset;          /* shared_memory_offset, default 0 */
  uint64_t byte_size;       /* shared_memory_byte_size, default 0 */
  void *region;             /* proto_shm.find's handle, once located */
} proto__shm_use;

/* The three parameter names, for duplicate and unknown-name checks. */
extern const char *const proto__shm_param_names[3];

/* Reads the shared_memory_* members of params (an object, or NULL) into
 * *u; u->name stays NULL without shared_memory_region (the other two are
 * then not read, as Triton reads them only with a region).  0, or
 * ATTND_EINVAL for a value of the wrong JSON type. */
int proto__v2_shm_params(const cJSON *params, const char *where,
                         proto__shm_use *u, char err[PROTO_ERR_MAX]);

/* Finds u's region through shm (NULL: none registered) and checks
 * Triton's rules for it, in Triton's order: the region exists (else
 * ATTND_ENOTFOUND; ATTND_EINVAL when it cannot be held), the offset lies
 * inside it, offset + byte_size does not overflow and fits.  0 or
 * ATTND_EINVAL. */
int proto__v2_shm_locate(const proto_shm *shm, proto__shm_use *u,
                         const char *where, char err[PROTO_ERR_MAX]);

/* An input (name) whose parameters name a region: Triton's rule that an
 * input sets exactly one of data (data != 0), binary_data_size (bs != 0)
 * and shared_memory_region, with its message; then the parameters into
 * *u and the region found and checked (proto__v2_shm_locate).  0,
 * ATTND_EINVAL or ATTND_ENOTFOUND. */
int proto__v2_shm_input(const proto_shm *shm, const cJSON *params,
                        const char *name, int data, int bs,
                        proto__shm_use *u, char err[PROTO_ERR_MAX]);

/* The shared_memory_* parameters of an output (params: its parameters
 * object, or NULL): Triton's checks (not with binary_data true or with
 * classification), then the region found and checked as
 * proto__v2_shm_locate does, into *out (left alone without a region).
 * 0, ATTND_EINVAL or ATTND_ENOTFOUND. */
int proto__v2_shm_output(const proto_shm *shm, const cJSON *params,
                         const char *where, proto_shm_ref *out,
                         char err[PROTO_ERR_MAX]);

/* Once the problem's shapes are known: ATTND_EINVAL (Triton's message)
 * when an output's region byte size is smaller than the output. */
int proto__v2_shm_output_sizes(const proto_request *req,
                               char err[PROTO_ERR_MAX]);

/* Copies the n elements of datatype dt (byte size already checked) out
 * of u's region into dst, converting as fill_binary does for kind
 * (PROTO__KIND_F32 for every float datatype: float32 out;
 * PROTO__KIND_LEN: int32 lengths in [0, hi]; PROTO__KIND_BOOL: bytes 0 or
 * 1).  FP32 and BOOL are read straight into dst and checked there; other
 * datatypes go through a small buffer.  Returns 0 with *bad = the index
 * of the first element refused (n when none; *badval the refused length),
 * or what the read returned (message in err). */
int proto__v2_shm_fill(const proto_shm *shm, const proto__shm_use *u,
                       int kind, int dt, size_t n, long long hi, void *dst,
                       size_t *bad, long long *badval,
                       char err[PROTO_ERR_MAX]);

/* 1 when u's FP32 elements can be read where they lie: the server
 * offers views, the offset is aligned for float and the host is
 * little-endian; 0 when they must be copied. */
int proto__v2_shm_viewable(const proto_shm *shm, const proto__shm_use *u);

/* The n FP32 elements of u's region where they lie (proto_shm.view; u
 * viewable, above), checked finite there: 0 with *at and *bad = the
 * index of the first element that is not (n when none), or what the view
 * returned (message in err). */
int proto__v2_shm_view(const proto_shm *shm, const proto__shm_use *u,
                       size_t n, const float **at, size_t *bad,
                       char err[PROTO_ERR_MAX]);

/* An Inference-Header-Content-Length value as sent: decimal digits, with
 * blanks (space, tab) around them.  Returns 0 with the count in *v, 1
 * when the digits are past ULLONG_MAX (*v is ULLONG_MAX), or -1 when
 * they are not digits (v2_decode.c, which also says why in its
 * message). */
int proto__v2_header_count(const char *h, unsigned long long *v);

#endif /* PROTO_V2_H */
