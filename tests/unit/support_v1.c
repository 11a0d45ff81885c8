/* support_v1.c - see support_v1.h. */
#include "support_v1.h"

#include <string.h>

int v1_dec(const char *json, proto_request *r, char *err) {
  return proto_v1_decode(json, strlen(json), r, 0, err);
}

void v1_bad_input(const char *json, int line, const char **phrases) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = v1_dec(json, &r, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d for %s", line, rc, json);
  ck_assert_int_eq(r.n_owned, 0);
  ck_assert_ptr_null(r.out);
  for (const char **p = phrases; *p; p++)
    ck_assert_msg(strstr(err, *p), "line %d: message \"%s\" lacks \"%s\"",
                  line, err, *p);
  proto_request_free(&r);
}
