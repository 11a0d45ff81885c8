/* support_v1.h - decoding /v1 bodies in the unit tests of the /v1 codec
 * (test_proto*.c).
 *
 * v1_dec(json, r, err) decodes the NUL-terminated json with
 * proto_v1_decode and returns its code; r and err as there.
 * BAD(json, phrase...) asserts that json is refused with ATTND_EINVAL,
 * that the request holds nothing afterwards, and that the message holds
 * every phrase given.  OK(json, r) asserts that json decodes into r (the
 * caller frees r).  QKV3 is a valid rank-3 request's tensors: B=2, Lq=2,
 * Lk=3, D=2, Dv=1. */
#ifndef ATTND_TESTS_SUPPORT_V1_H
#define ATTND_TESTS_SUPPORT_V1_H

#include <check.h>

#include "proto/proto.h"

int v1_dec(const char *json, proto_request *r, char *err);
void v1_bad_input(const char *json, int line, const char **phrases);

#define BAD(json, ...) \
  v1_bad_input(json, __LINE__, (const char *[]){__VA_ARGS__, NULL})

#define OK(json, r)                                                        \
  do {                                                                     \
    char err_[PROTO_ERR_MAX];                                              \
    int rc_ = v1_dec(json, r, err_);                                       \
    ck_assert_msg(rc_ == 0, "rc %d: %s", rc_, err_);                       \
  } while (0)

#define QKV3 "\"query\":[[[1,2],[3,4]],[[5,6],[7,8]]]," \
             "\"key\":[[[1,0],[0,1],[1,1]],[[2,0],[0,2],[1,0]]]," \
             "\"value\":[[[1],[2],[3]],[[4],[5],[6]]]"

#endif
