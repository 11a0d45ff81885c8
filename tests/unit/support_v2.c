/* support_v2.c - see support_v2.h. */
#include "support_v2.h"

#include <check.h>
#include <stdio.h>
#include <string.h>


void body_json(body *b, const char *json) {
  b->len = strlen(json);
  memcpy(b->buf, json, b->len);
  snprintf(b->hlen, sizeof b->hlen, "%zu", b->len);
}

void body_add(body *b, const void *p, size_t n) {
  memcpy(b->buf + b->len, p, n);
  b->len += n;
}

int v2_dec(const body *b, const char *hlen, int model, proto_request *r,
           char *err) {
  return proto_v2_decode(b->buf, b->len, hlen, model, r, 0, err);
}

void v2_bad_input(const body *b, const char *hlen, int line,
                  const char **phrases) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = v2_dec(b, hlen, PROTO_MODEL_ATTENTION, &r, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d (%s)", line, rc, err);
  ck_assert_int_eq(r.n_owned, 0);
  for (const char **p = phrases; *p; p++)
    ck_assert_msg(strstr(err, *p), "line %d: message \"%s\" lacks \"%s\"",
                  line, err, *p);
}
