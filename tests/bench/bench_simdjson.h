/* bench_simdjson.h - the simdjson peer of attnd's JSON tensor reader
 * (bench_simdjson.cc), for bench_json.c. */
#ifndef BENCH_SIMDJSON_H
#define BENCH_SIMDJSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes simdjson may read past a body's end (SIMDJSON_PADDING). */
#define SIMD_PEER_PADDING 64

typedef struct simd_peer simd_peer;

/* A peer with its parser (kept across bodies); NULL when out of memory.
 * simd_peer_free releases it and the last body's tensors. */
simd_peer *simd_peer_new(void);
void simd_peer_free(simd_peer *s);

/* Decodes body[0, len) (cap >= len + SIMD_PEER_PADDING bytes readable)
 * as a /v1 body with nested query, key, value (v2 = 0) or a v2 JSON body
 * whose inputs query, key, value hold flat FP32 data (v2 = 1).  Returns
 * the numbers read, or -1 for a body it refuses.  The tensors stay the
 * peer's until its next decode. */
long simd_peer_decode(simd_peer *s, const char *body, size_t len, size_t cap,
                      int v2);

/* Tensor i (0 query, 1 key, 2 value) of the last decode. */
const float *simd_peer_tensor(const simd_peer *s, int i);

#ifdef __cplusplus
}
#endif

#endif
