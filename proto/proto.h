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
#include <stdint.h>

#include "../core/attn.h"

/* Longest error message a decoder writes (including the NUL). */
#define PROTO_ERR_MAX 384

/* The longest request "id" (/v1 and v2) attnd takes, in bytes of UTF-8
 * as decoded from the JSON string; a longer one, or one that is not
 * valid UTF-8, is refused (400) rather than echoed. */
#define PROTO_ID_MAX 256

/* Which codec decoded a request, and so which one encodes its answer. */
enum proto_codec {
  PROTO_CODEC_V1 = 0,       /* POST /v1/attention */
  PROTO_CODEC_V2 = 1        /* POST /v2/models/{m}/infer */
};

/* The KServe v2 models attnd serves.  The dot-product model's name is
 * "attention" unless proto_v2_set_model_name chose another. */
enum proto_model {
  PROTO_MODEL_ATTENTION = 0,   /* "attention": dot-product scoring */
  PROTO_MODEL_ADDITIVE = 1,    /* "additive_attention": adds w_q, w_k, w_v */
  PROTO_MODEL_COUNT
};

/* The v2 outputs.  The diagnostics (design.md) are shaped like the output
 * without its last axis and are computed only when named in "outputs". */
enum proto_output {
  PROTO_OUT_OUTPUT = 0,     /* "output"  (B, [H,] Lq, Dv) FP32 */
  PROTO_OUT_WEIGHTS = 1,    /* "weights" (B, [H,] Lq, Lk) FP32 */
  PROTO_OUT_ALLOWED_KEYS,   /* "allowed_keys"  (B, [H,] Lq) INT32 */
  PROTO_OUT_ENTROPY,        /* "entropy"       (B, [H,] Lq) FP32, nats */
  PROTO_OUT_MAX_WEIGHT,     /* "max_weight"    (B, [H,] Lq) FP32 */
  PROTO_OUT_JACOBIAN_NORM,  /* "jacobian_norm" (B, [H,] Lq) FP32 */
  PROTO_OUT_LSE,            /* "lse" (B, [H,] Lq) FP32: the row's
                               log-sum-exp (core/attn.h), -inf for a row
                               with nothing allowed and no sink; JSON
                               prints -inf as null */
  PROTO_OUT_COUNT
};

/* How many inputs a v2 request can name: every input of the additive
 * model, which has the dot-product model's and its three weights. */
#define PROTO_IN_COUNT 13

/* The most tensors one v2 request names: each input and each output at
 * most once (a name given twice is refused). */
#define PROTO_TENSORS_MAX (PROTO_IN_COUNT + PROTO_OUT_COUNT)

/* 1 for the four diagnostics (computed together, from the weights). */
static inline int proto_out_is_diagnostic(int k) {
  return k >= PROTO_OUT_ALLOWED_KEYS && k <= PROTO_OUT_JACOBIAN_NORM;
}

/* Where a v2 output goes when the request names a shared memory region
 * for it (Triton's system shared memory extension, below). */
typedef struct proto_shm_ref {
  void *region;             /* the handle proto_shm.find returned; NULL:
                               the output travels in the answer */
  uint64_t offset;          /* shared_memory_offset, within the region */
  uint64_t byte_size;       /* shared_memory_byte_size */
} proto_shm_ref;

/* Bytes of a client's shared memory region an input is read from in
 * place (proto_shm.view). */
typedef struct proto_range {
  const void *p;
  size_t n;
} proto_range;

#define PROTO_SHARED_MAX 4

typedef struct proto_request {
  attn_problem prob;        /* points into the buffers below */
  int codec;                /* enum proto_codec */

  int qrank;                /* 3: (B, L, D) or 4: (B, H, L, D); the output
                               and weights take the same rank */
  int flat;                 /* 1: the query came as {"shape","data"}, so the
                               response uses that form too; 0: nested */
  int return_weights;       /* 1: compute and return the weights */
  int diagnostics;          /* 1: compute the per-row diagnostics (the
                               weights are then computed too, into
                               req->weights, returned or not) */
  char *id_json;            /* the request's "id" printed as JSON (a string
                               or number), or NULL when absent */

  float *out;               /* (B, H, Lq, Dv), allocated by the decoder */
  float *weights;           /* (B, H, Lq, Lk) or NULL when neither the
                               weights nor diagnostics were requested: the
                               worker passes it to the core as it is */

  /* Diagnostics, each (B, H, Lq), allocated when req->diagnostics; the
   * worker fills them with attn_diagnostics after the core ran. */
  int32_t *allowed_keys;
  float *entropy, *max_weight, *jacobian_norm;

  /* The row log-sum-exp (B, H, Lq), allocated when return_lse; the worker
   * has the core write it (attn_run_tasks_lse). */
  int return_lse;
  float *lse;

  size_t in_bytes;          /* bytes the inputs keep: the decoded tensors,
                               and the received body when some are read
                               in it (proto_v2_decode_body) */
  size_t out_bytes;         /* bytes of out, weights and diagnostics */

  void *owned[24];          /* every allocation of this request */
  int n_owned;
  size_t out_room;          /* bytes of out's block before out (the
                               room a binary answer's JSON part can take,
                               proto_v2_encode_parts), else 0 */

  /* v2 only (codec PROTO_CODEC_V2). */
  int model;                /* enum proto_model */
  int outputs[PROTO_OUT_COUNT]; /* enum proto_output, in response order */
  int n_outputs;            /* 1 to PROTO_OUT_COUNT */
  int binary[PROTO_OUT_COUNT];  /* by enum proto_output: 1 = binary data */
  uint64_t timeout_us;      /* parameter "timeout"; 0 = none given */
  proto_shm_ref shm_out[PROTO_OUT_COUNT]; /* by enum proto_output: written
                               into a region after the answer is encoded
                               (proto_v2_shm_outputs), not sent in it */
  /* Inputs prob reads where they lie in a shared memory region (see
   * proto_shm above): the client may truncate the object under them, so
   * every thread that computes the request reads them inside a SIGBUS
   * guard over these ranges (server/shm/fault.h, fault_run). */
  proto_range shared[PROTO_SHARED_MAX];
  int n_shared;
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
 * "weights": .., "diagnostics": {"allowed_keys": .., "entropy": ..,
 * "max_weight": .., "jacobian_norm": ..}} in the form of the query (nested
 * or flat); weights only when return_weights, diagnostics only when
 * requested.  *body is
 * malloc'd and NUL-terminated, *len excludes the NUL; the caller frees it
 * with free().  Returns 0 or ATTND_ENOMEM. */
int proto_v1_encode(const proto_request *req, char **body, size_t *len);

/* ---- KServe v2 / Open Inference Protocol (v2*.c) ----------------------
 *
 * Routing is the server's; which models and versions exist, and every
 * byte of their requests and answers, are proto's. */

/* Longest model name proto_v2_set_model_name takes (bytes, without NUL). */
#define PROTO_MODEL_NAME_MAX 64

/* A model's name as the v2 answers and paths spell it (model: enum
 * proto_model).  The string is static: never freed. */
const char *proto_v2_model_name(int model);

/* Checks a name for the dot-product model: 1 to PROTO_MODEL_NAME_MAX
 * letters, digits, '_', '-' and '.', the first a letter or digit, and not
 * the additive model's name.  Returns 0, or ATTND_EINVAL with the reason
 * in err. */
int proto_v2_model_name_check(const char *name, char err[PROTO_ERR_MAX]);

/* Serves the dot-product model under name instead of "attention" (every
 * path, model_name, metadata, ready, config and stats answer).  Not
 * thread-safe: call once at start, before any thread reads a name.
 * Returns 0, or ATTND_EINVAL with the reason in err (name unchanged). */
int proto_v2_set_model_name(const char *name, char err[PROTO_ERR_MAX]);

/* Looks a model up by the {m} and optional {v} of a /v2/models path
 * (version NULL when the path has none; "1" is the only version, and
 * "01" the same, as Triton reads the segment as an integer).
 * Returns the enum proto_model, or ATTND_ENOTFOUND with a message in err
 * ("unknown model 'x' (models: attention, additive_attention)", with
 * the chosen name in place of attention). */
int proto_v2_model_find(const char *name, const char *version,
                        char err[PROTO_ERR_MAX]);

/* The JSON bodies of GET /v2 (server metadata: name "attnd", the given
 * version, extensions), GET /v2/models/{m} (inputs and outputs with
 * datatypes and shapes, -1 for a variable axis) and GET .../ready
 * ({"name": m, "ready": bool}).  *body is malloc'd, freed by the caller
 * with free(); *len excludes the NUL.  Return 0 or ATTND_ENOMEM. */
int proto_v2_server_metadata(const char *version, char **body, size_t *len);
int proto_v2_model_metadata(int model, char **body, size_t *len);
int proto_v2_model_ready(int model, int ready, char **body, size_t *len);

/* One phase of Triton's statistics extension: how many, and their total
 * nanoseconds. */
typedef struct proto_stat {
  uint64_t count, ns;
} proto_stat;

/* A model's figures for GET /v2/models[/{m}]/stats, as the server counted
 * them over its v2 inference requests: success and fail (arrival to
 * answer), queue (waiting for a worker), compute_input (inflating and
 * decoding the body), compute_infer (the core), compute_output
 * (encoding).  Every request is its own execution (batch size 1), so
 * compute_infer.count is both the inference and the execution count. */
typedef struct proto_model_stats {
  uint64_t last_inference_ms;   /* Unix ms of the last success, 0 = none */
  proto_stat success, fail, queue, compute_input, compute_infer,
      compute_output;
} proto_model_stats;

/* The bodies of GET /v2/models/{m}/config (Triton's model_configuration
 * extension: the model's config in Triton's JSON form, its tensors as in
 * the metadata, max_batch_size 0 since the batch axis is part of every
 * tensor, one CPU instance group of `instances` workers) and of GET
 * /v2/models[/{m}]/stats (Triton's statistics extension: one entry per
 * models[i], from stats[i]).  As the metadata bodies: *body malloc'd,
 * freed by the caller; 0 or ATTND_ENOMEM. */
int proto_v2_model_config(int model, int instances, char **body,
                          size_t *len);
int proto_v2_model_stats(const int *models, const proto_model_stats *stats,
                         int n, char **body, size_t *len);

/* Decodes a POST /v2/models/{m}/infer body for model (enum proto_model):
 * a JSON inference request, optionally followed by binary tensors (the
 * Triton binary tensor data extension).  header_len is the request's
 * Inference-Header-Content-Length value as sent (NULL when absent: the
 * whole body is JSON); proto checks it.  Inputs may be FP32, FP64, FP16 or
 * BF16 (JSON or binary), valid_lens INT32 or INT64, mask BOOL.
 * Returns 0, ATTND_EINVAL (message in err naming the input, parameter or
 * header), ATTND_ETOOBIG (max_elems, as proto_v1_decode) or ATTND_ENOMEM.
 * req is then as after proto_v1_decode, with codec PROTO_CODEC_V2. */
int proto_v2_decode(const char *body, size_t len, const char *header_len,
                    int model, proto_request *req, size_t max_elems,
                    char err[PROTO_ERR_MAX]);

/* ---- Triton's system shared memory extension (v2_shm.c) ---------------
 *
 * A client on the same host registers a POSIX shared memory object as a
 * named region (POST /v2/systemsharedmemory/region/{name}/register); a v2
 * inference request then names a region in an input's or an output's
 * parameters (shared_memory_region, shared_memory_byte_size,
 * shared_memory_offset) instead of carrying the tensor.  The regions are
 * the server's (server/shm/shm.h): proto reaches them only through a
 * proto_shm.  It reads each input out of its region once, into the buffer
 * the core reads (or a bounce buffer it converts from), and validates
 * that copy like a binary tensor: the client may write the region at any
 * time, even while it is copied.  The one exception is an FP32 float
 * input (query, key, value, bias, ...) when the server offers views and
 * the answer prints no number (every output binary or into a region, no
 * diagnostics): it is checked finite where it lies and the core reads it
 * there (proto_request.shared), so a client that writes it during the
 * request can change its own answer's numbers, never its form, nor what
 * attnd reads or writes.  Integer inputs (valid_lens, cu_seqlens) and
 * masks, which steer indexing, are always copied and checked. */
typedef struct proto_shm {
  void *ctx;
  /* Finds the region registered as name and holds it until the request
   * is over; returns its handle with its registered byte size in
   * *byte_size, or NULL: with err empty when no region has that name
   * (404), with a message in err when it cannot be held (400). */
  void *(*find)(void *ctx, const char *name, uint64_t *byte_size,
                char err[PROTO_ERR_MAX]);
  /* Copies n bytes at offset off of region (off + n within its byte
   * size) into dst.  0, or ATTND_EINVAL with a message in err when the
   * object no longer holds them (truncated after registration).  Bytes
   * the client writes during the copy may land in dst or not, so dst is
   * what gets checked. */
  int (*read)(void *ctx, void *region, uint64_t off, void *dst, size_t n,
              char err[PROTO_ERR_MAX]);
  /* NULL (every input is copied), or: the address in attnd's memory of
   * the n bytes at offset off of region (off + n within its byte size),
   * aligned as off is, in *at, after scan(*at, n / 4) ran over them
   * guarded as read's copy is; scan's value in *bad.  0, or as read.
   * The bytes stay there while the region is held. */
  int (*view)(void *ctx, void *region, uint64_t off, size_t n,
              size_t (*scan)(const void *, size_t), const void **at,
              size_t *bad, char err[PROTO_ERR_MAX]);
} proto_shm;

/* One output of a computed request to be written into its region. */
typedef struct proto_shm_write {
  void *region;             /* proto_shm_ref.region */
  uint64_t offset;          /* within the region */
  const void *data;         /* the output's bytes, little-endian */
  size_t len;               /* at most proto_shm_ref.byte_size (checked
                               by the decoder) */
} proto_shm_write;

/* The outputs of req that go to regions, in the order the request lists
 * them, into w; returns how many.  For the server, once the answer is
 * encoded: req's buffers stay req's. */
int proto_v2_shm_outputs(proto_request *req,
                         proto_shm_write w[PROTO_OUT_COUNT]);

/* Longest key and region name attnd keeps (NAME_MAX of /dev/shm). */
#define PROTO_SHM_NAME_MAX 255

/* The body of POST /v2/systemsharedmemory/region/{name}/register:
 * {"key": "/shm_name", "offset": N, "byte_size": N}, offset optional
 * (0).  name is the region's, for messages.  Returns 0, ATTND_EINVAL with
 * Triton's message in err (no key or byte_size, a key made of '/' alone
 * or with Triton's reserved prefix, numbers that are not unsigned
 * integers, not JSON) or attnd's (a member other than the three, with the
 * nearest of them), or ATTND_ENOMEM. */
typedef struct proto_shm_register {
  char key[PROTO_SHM_NAME_MAX + 1]; /* as sent, leading '/' included */
  uint64_t offset, byte_size;
} proto_shm_register;
int proto_shm_register_decode(const char *body, size_t len, const char *name,
                              proto_shm_register *out,
                              char err[PROTO_ERR_MAX]);

/* One element of GET /v2/systemsharedmemory[/region/{name}]/status. */
typedef struct proto_shm_status {
  const char *name, *key;
  uint64_t offset, byte_size;
} proto_shm_status;

/* The status body: a JSON array of {"name","key","offset","byte_size"},
 * in the order given.  *body is malloc'd (free()); 0 or ATTND_ENOMEM. */
int proto_shm_status_encode(const proto_shm_status *r, size_t n,
                            char **body, size_t *len);

/* ---- a body as it arrives (body.c) ------------------------------------
 *
 * The server receives a body in chunks, each one just read from the
 * socket and still in cache.  proto_body keeps them, and checks on the
 * way in that the 4-byte words after the v2 JSON part are finite
 * float32s, so that proto_v2_decode_body can hand the core the FP32
 * binary inputs where they lie, without a copy and without reading the
 * body again once it has gone cold.  The body is placed so that its
 * binary part starts on a 64-byte boundary (a body that outgrows its
 * Content-Length keeps only malloc's alignment there, which suffices).
 *
 * All fields are proto's; the server reads p and len only. */
typedef struct proto_body {
  char *base;               /* the allocation (mem_malloc), or NULL */
  char *p;                  /* the body's first byte, inside base */
  size_t len, cap;          /* bytes held, bytes p has room for */
  size_t scan_from;         /* offset of the first word checked; SIZE_MAX:
                               none (no Inference-Header-Content-Length) */
  size_t clean_end;         /* the words in [scan_from, clean_end) are
                               finite float32s */
  int stopped;              /* a non-finite word ended the check there */
} proto_body;

/* Starts an empty body.  expect is the Content-Length (0 if unknown),
 * reserved now; header_len the Inference-Header-Content-Length value as
 * sent, or NULL (a value that is not a byte count within expect is
 * ignored here: proto_v2_decode_body reports it).  Returns 0 or
 * ATTND_ENOMEM (nothing reserved; appends may still succeed).  Every
 * body starts here. */
int proto_body_init(proto_body *b, size_t expect, const char *header_len);

/* Appends n bytes, growing the buffer as needed.  Returns 0 or
 * ATTND_ENOMEM (b keeps what it held). */
int proto_body_append(proto_body *b, const char *data, size_t n);

/* Releases the buffer unless a decode took it; safe on a zeroed or
 * freed body. */
void proto_body_free(proto_body *b);

/* proto_v2_decode of b->p, b->len.  FP32 binary inputs that lie on
 * checked, 4-byte-aligned words are used in place: req then takes b's
 * buffer (b is left empty; proto_request_free releases it).  Same
 * results, messages and return values as proto_v2_decode. */
int proto_v2_decode_body(proto_body *b, const char *header_len, int model,
                         proto_request *req, size_t max_elems,
                         char err[PROTO_ERR_MAX]);

/* proto_v2_decode and proto_v2_decode_body with shared memory regions
 * (proto_shm, above); shm NULL means that none is registered: every
 * shared_memory_region is then unknown.  Besides their results:
 * ATTND_ENOTFOUND for a region that does not exist (Triton's 404), and
 * what shm->read returns. */
int proto_v2_decode_shm(const char *body, size_t len, const char *header_len,
                        int model, const proto_shm *shm, proto_request *req,
                        size_t max_elems, char err[PROTO_ERR_MAX]);
int proto_v2_decode_body_shm(proto_body *b, const char *header_len,
                             int model, const proto_shm *shm,
                             proto_request *req, size_t max_elems,
                             char err[PROTO_ERR_MAX]);

/* Encodes a computed v2 request: the JSON response (model_name,
 * model_version, id, outputs) and then the binary outputs, in the order
 * the outputs are listed.  *json_len is the JSON part's length: equal to
 * *len when no output is binary, else the Inference-Header-Content-Length
 * to send.  *body is malloc'd (free()).  Returns 0 or ATTND_ENOMEM. */
int proto_v2_encode(const proto_request *req, char **body, size_t *len,
                    size_t *json_len);

/* A v2 response in parts, so that binary outputs are sent from the
 * buffers the core wrote instead of being copied behind the JSON. */
typedef struct proto_parts {
  char *json;               /* the JSON part (malloc, free()) */
  size_t json_len;          /* its Inference-Header-Content-Length */
  const void *data[PROTO_OUT_COUNT];  /* the binary outputs, in order */
  size_t len[PROTO_OUT_COUNT];
  int n;                    /* binary outputs; 0: nothing here */
  void *blocks[4];          /* the buffers data points into, each freed */
  int n_blocks;             /* with free() by proto_parts_free */
  int joined;               /* 1: the one binary output follows the JSON
                               part in memory (json + json_len == data[0],
                               n == 1; json lies in blocks[0] and is not
                               freed on its own), so the whole response
                               is json_len + len[0] bytes from json */
} proto_parts;

/* The bytes proto_v2_encode writes, as the JSON part and the binary
 * outputs where they lie.  The buffers holding those outputs move from
 * req into *parts (proto_request_free no longer releases them), so req is
 * not encoded again.  Returns 0, 1 when it does not apply (no binary
 * output, or a big-endian host; *parts is then empty: use
 * proto_v2_encode), or ATTND_ENOMEM (req unchanged). */
int proto_v2_encode_parts(proto_request *req, proto_parts *parts);

/* Frees what parts holds; safe on an empty or freed one. */
void proto_parts_free(proto_parts *parts);

/* Encodes with the codec that decoded req (proto_v1_encode sets *json_len
 * = *len).  What the worker calls. */
int proto_encode(const proto_request *req, char **body, size_t *len,
                 size_t *json_len);

/* An upper bound of the bytes req's encoded answer takes beyond its
 * output tensors (req->out_bytes), for admission against the in-flight
 * budget: 16 bytes a number printed as JSON (sign, nine digits, point,
 * exponent, comma) and 4 a row of brackets, the binary outputs' bytes
 * (copied when the answer leaves in one piece), and the envelope.
 * Weights returned as JSON are about three times their float32 size. */
size_t proto_answer_bytes(const proto_request *req);

/* The end of a 413 for a request that the in-flight budget
 * (--max-inflight-mb) can never hold, what the client can do: need is
 * what it takes, without_weights what it would take without the
 * attention weights (the same unit as limit, bytes or elements).  When
 * that fits in limit: "; for the output alone send \"return_weights\":
 * false (...)", or for weights computed only for the diagnostics, to
 * leave those out; otherwise to send smaller tensors.  Written into s
 * (cap bytes) after a "; ". */
void proto_budget_advice(const proto_request *req, size_t without_weights,
                         size_t limit, char *s, size_t cap);

/* The encoding work req's answer takes: *text_values numbers printed as
 * JSON, *binary_bytes of binary tensors.  Outputs written into shared
 * memory regions count in neither. */
void proto_answer_work(const proto_request *req, size_t *text_values,
                       size_t *binary_bytes);

/* The shapes and options of a v2 request from its JSON part alone (len
 * bytes: what Inference-Header-Content-Length announces), before its
 * binary data has arrived, so that a server can weigh a request it has
 * not read yet.  Fills req->prob's shapes and options (causal, window,
 * dropout, scoring), req->return_weights and req->diagnostics; no tensor
 * is read or allocated, and req->prob's tensor pointers stay NULL.
 * Returns 0, or an ATTND_E* code with a message in err (the whole body's
 * decode reports the same problem later).  The caller calls
 * proto_request_free either way. */
int proto_v2_decode_shapes(const char *json, size_t len, int model,
                           proto_request *req, size_t max_elems,
                           char err[PROTO_ERR_MAX]);

/* ---- HTTP content coding (compress.c) ---------------------------------- */

/* Decodes a request body sent with Content-Encoding `coding` ("gzip",
 * "x-gzip", "deflate" (zlib or raw), "identity"; case-insensitive, NULL =
 * identity).  Inflates as a stream (gzip: one member after another, RFC
 * 1952) and stops once the output would pass max_out bytes, so a small
 * bomb costs at most max_out.  On success *out
 * is malloc'd (free()) and *out_len set; for identity *out is NULL (use
 * the input as it is).  The output buffer's growth is held in the budget
 * as it grows (mem_hold).  Returns 0, ATTND_ETOOBIG (past max_out),
 * ATTND_EBUSY (the budget cannot hold the output; no message),
 * ATTND_EINVAL (unknown coding, corrupt or truncated stream, bytes after
 * it that start no gzip member; message in err) or ATTND_ENOMEM. */
int proto_inflate(const char *coding, const char *in, size_t len,
                  size_t max_out, char **out, size_t *out_len,
                  char err[PROTO_ERR_MAX]);

/* Picks the response coding for an Accept-Encoding value: "gzip" or
 * "deflate" (by q-value, gzip on a tie; q=0 refuses), or NULL for none. */
const char *proto_accept_coding(const char *accept_encoding);

/* Compresses len bytes with coding ("gzip" or "deflate", the zlib
 * format) at level 1.  *out is malloc'd (free()).  Returns 0,
 * ATTND_EINVAL (another coding, or more than 1 GiB: send it as it is) or
 * ATTND_ENOMEM. */
int proto_deflate(const char *coding, const char *in, size_t len,
                  char **out, size_t *out_len);

/* Encodes {"error": "<msg>"} with msg JSON-escaped.  *body is malloc'd and
 * freed by the caller with free().  Returns 0 or ATTND_ENOMEM. */
int proto_error_body(const char *msg, char **body, size_t *len);

/* Releases everything the request owns and zeroes it.  Safe on a zeroed
 * request and on one whose decode failed. */
void proto_request_free(proto_request *req);

#endif /* PROTO_H */
