/* support_jobs.c - see support_jobs.h. */
#include "support_jobs.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attn.h"
#include "proto/proto.h"
#include "server/obs/metrics.h"

char *support_expected_body(const char *json, size_t *len) {
  proto_request r;
  char err[PROTO_ERR_MAX], *body;
  size_t n;
  memset(&r, 0, sizeof r);
  ck_assert_int_eq(proto_v1_decode(json, strlen(json), &r, 0, err), 0);
  ck_assert_int_eq(attn_forward(&r.prob, r.out, r.return_weights ? r.weights : NULL), 0);
  ck_assert_int_eq(proto_v1_encode(&r, &body, &n), 0);
  proto_request_free(&r);
  if (len)
    *len = n;
  return body;
}

/* A (1, L, D) tensor of small deterministic values, as nested JSON. */
static void put_tensor(char **at, int L, int D, int seed) {
  int i, j;
  *at += sprintf(*at, "[[");
  for (i = 0; i < L; i++) {
    *at += sprintf(*at, "%s[", i ? "," : "");
    for (j = 0; j < D; j++)
      *at += sprintf(*at, "%s%d", j ? "," : "", ((i * 7 + j * 3 + seed) % 11) - 5);
    *at += sprintf(*at, "]");
  }
  *at += sprintf(*at, "]]");
}

char *support_large_request(int weights) {
  char *json = malloc(1 << 20), *at = json;
  ck_assert_ptr_nonnull(json);
  at += sprintf(at, "{\"scale\": 0.05, \"return_weights\": %s, \"query\": ",
                weights ? "true" : "false");
  put_tensor(&at, SUPPORT_LARGE_L, 16, 1);
  at += sprintf(at, ", \"key\": ");
  put_tensor(&at, SUPPORT_LARGE_L, 16, 2);
  at += sprintf(at, ", \"value\": ");
  put_tensor(&at, SUPPORT_LARGE_L, 16, 3);
  sprintf(at, "}");
  return json;
}

/* The value after "\n<key> " in m's exposition. */
static unsigned long long support_sample(struct metrics *m, const char *key) {
  char *body, *at;
  size_t len;
  unsigned long long v;
  ck_assert_int_eq(metrics_render(m, &body, &len), 0);
  at = strstr(body, key);
  ck_assert_msg(at != NULL, "no %s in the metrics", key + 1);
  v = strtoull(at + strlen(key), NULL, 10);
  free(body);
  return v;
}

unsigned long long support_counter(struct metrics *m, const char *name) {
  char key[128];
  snprintf(key, sizeof key, "\n%s ", name);
  return support_sample(m, key);
}

unsigned long long support_counter_labelled(struct metrics *m,
                                            const char *name,
                                            const char *labels) {
  char key[192];
  snprintf(key, sizeof key, "\n%s{%s} ", name, labels);
  return support_sample(m, key);
}
