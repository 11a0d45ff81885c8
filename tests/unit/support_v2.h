/* support_v2.h - v2 bodies for the unit tests of the v2 codec
 * (test_v2*.c).
 *
 * A body is a v2 request as sent: the JSON header, then raw bytes.
 * body_json(b, json) starts b with json and writes its length into
 * b->hlen (the Inference-Header-Content-Length); body_add(b, p, n) appends
 * n raw bytes (the caller keeps within buf).  v2_dec(b, hlen, model, r,
 * err) decodes b with proto_v2_decode and returns its code.
 * BAD(b, hlen, phrase...) asserts that b is refused with ATTND_EINVAL for
 * the attention model, the request left empty, the message holding every
 * phrase given.  IN_Q, IN_K and IN_V are JSON inputs: Q (1,2,2), K and V
 * (1,3,2). */
#ifndef ATTND_TESTS_SUPPORT_V2_H
#define ATTND_TESTS_SUPPORT_V2_H

#include <stddef.h>

#include "proto/proto.h"

typedef struct body {
  char buf[4096];
  size_t len;
  char hlen[32];
} body;

void body_json(body *b, const char *json);
void body_add(body *b, const void *p, size_t n);
int v2_dec(const body *b, const char *hlen, int model, proto_request *r,
           char *err);
void v2_bad_input(const body *b, const char *hlen, int line,
                  const char **phrases);

#define BAD(b, hlen, ...) \
  v2_bad_input(b, hlen, __LINE__, (const char *[]){__VA_ARGS__, NULL})

#define IN_Q "{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,2,2]," \
             "\"data\":[1,0,0,2]}"
#define IN_K "{\"name\":\"key\",\"datatype\":\"FP32\",\"shape\":[1,3,2]," \
             "\"data\":[[[1,1],[2,0],[0,3]]]}"
#define IN_V "{\"name\":\"value\",\"datatype\":\"FP32\",\"shape\":[1,3,2]," \
             "\"data\":[1,0,0,1,1,1]}"

#endif
