/* test_log.c - the access-log line formats and request ids.
 *
 * log_format_access is given a fixed time, so whole text lines are
 * compared byte for byte; JSON lines are parsed back with cJSON.  The
 * escaping of client-supplied bytes (quotes, backslashes, control bytes,
 * UTF-8 and bytes that are not UTF-8), the cut of an over-long field, the
 * client address forms (IPv4, IPv6, IPv4-mapped, none) and the id rules
 * of reqid.h are checked here; tests/integration/test_observability.py
 * checks the same lines coming out of the real daemon.
 */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "server/obs/log.h"
#include "server/obs/reqid.h"

/* 2026-12-02T21:49:57.123Z */
static const struct timespec when = {1796248197, 123456789};

static struct sockaddr_in v4(const char *addr, unsigned port) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  inet_pton(AF_INET, addr, &sa.sin_addr);
  return sa;
}

static struct sockaddr_in6 v6(const char *addr, unsigned port) {
  struct sockaddr_in6 sa;
  memset(&sa, 0, sizeof sa);
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons((uint16_t)port);
  inet_pton(AF_INET6, addr, &sa.sin6_addr);
  return sa;
}

static struct log_access base(const struct sockaddr *client) {
  struct log_access a;
  memset(&a, 0, sizeof a);
  a.method = "POST";
  a.path = "/v1/attention";
  a.status = 200;
  a.bytes_in = 55;
  a.bytes_out = 120;
  a.total_ns = 1234567;    /* 1.235 ms */
  a.queue_ns = 1499;       /* 0.001 ms */
  a.compute_ns = 999500;   /* 1.000 ms (rounded up) */
  a.batch_size = 3;
  a.client = client;
  a.request_id = "req-42";
  return a;
}

/* The formatted line as a NUL-terminated string (static storage). */
static const char *line(const struct log_access *a, enum log_format fmt) {
  static char buf[LOG_LINE_MAX + 1];
  size_t n = log_format_access(a, fmt, &when, buf, LOG_LINE_MAX);
  ck_assert_uint_gt(n, 0);
  ck_assert_uint_le(n, LOG_LINE_MAX);
  ck_assert_int_eq(buf[n - 1], '\n');
  ck_assert_ptr_null(memchr(buf, '\n', n - 1));  /* one line, always */
  buf[n] = '\0';
  return buf;
}

static cJSON *json_line(const struct log_access *a) {
  cJSON *j = cJSON_Parse(line(a, LOG_FORMAT_JSON));
  ck_assert_msg(j != NULL, "not JSON: %s", line(a, LOG_FORMAT_JSON));
  return j;
}

static const char *str(cJSON *j, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  ck_assert_msg(cJSON_IsString(v), "no string %s", key);
  return v->valuestring;
}

static double num(cJSON *j, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  ck_assert_msg(cJSON_IsNumber(v), "no number %s", key);
  return v->valuedouble;
}

START_TEST(text_line_has_every_field_in_order) {
  struct sockaddr_in sa = v4("192.0.2.7", 53422);
  struct log_access a = base((struct sockaddr *)&sa);
  ck_assert_str_eq(line(&a, LOG_FORMAT_TEXT),
                   "attnd: 2026-12-02T21:49:57.123Z 192.0.2.7:53422 POST "
                   "/v1/attention 200 in=55 out=120 ms=1.235 queue_ms=0.001 "
                   "compute_ms=1.000 batch=3 id=req-42\n");
  a.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  a.status = 400;
  a.reason = "key: width 3 does not match query width 2";
  ck_assert_str_eq(line(&a, LOG_FORMAT_TEXT),
                   "attnd: 2026-12-02T21:49:57.123Z 192.0.2.7:53422 POST "
                   "/v1/attention 400 in=55 out=120 ms=1.235 queue_ms=0.001 "
                   "compute_ms=1.000 batch=3 id=req-42 traceparent=00-0af765"
                   "1916cd43dd8448eb211c80319c-b7ad6b7169203331-01 reason=\""
                   "key: width 3 does not match query width 2\"\n");
}
END_TEST

START_TEST(text_escapes_what_clients_send) {
  struct sockaddr_in6 sa = v6("2001:db8::1", 8080);
  struct log_access a = base((struct sockaddr *)&sa);
  a.method = "GE T";
  a.path = "/a\"b\\c\n\xc3\xa9 d";
  a.status = 404;
  a.reason = "no route for /a\"b\n \xff";
  a.traceparent = "x y";
  ck_assert_str_eq(line(&a, LOG_FORMAT_TEXT),
                   "attnd: 2026-12-02T21:49:57.123Z [2001:db8::1]:8080 "
                   "GE\\x20T /a\\x22b\\x5cc\\x0a\\xc3\\xa9\\x20d 404 in=55 "
                   "out=120 ms=1.235 queue_ms=0.001 compute_ms=1.000 batch=3 "
                   "id=req-42 traceparent=x\\x20y reason=\"no route for "
                   "/a\\x22b\\x0a \\xff\"\n");
}
END_TEST

START_TEST(missing_fields_are_dashes_or_left_out) {
  struct log_access a = base(NULL);
  cJSON *j;
  a.method = NULL;
  a.path = NULL;
  a.request_id = NULL;
  ck_assert_str_eq(line(&a, LOG_FORMAT_TEXT),
                   "attnd: 2026-12-02T21:49:57.123Z - - - 200 in=55 out=120 "
                   "ms=1.235 queue_ms=0.001 compute_ms=1.000 batch=3 id=-\n");
  j = json_line(&a);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "remote_addr"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "traceparent"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "reason"));
  ck_assert_str_eq(str(j, "request_id"), "-");
  cJSON_Delete(j);
}
END_TEST

START_TEST(json_line_has_every_field) {
  struct sockaddr_in sa = v4("192.0.2.7", 53422);
  struct log_access a = base((struct sockaddr *)&sa);
  cJSON *j;
  a.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  a.status = 503;
  a.reason = "queue full";
  j = json_line(&a);
  ck_assert_str_eq(str(j, "time"), "2026-12-02T21:49:57.123Z");
  ck_assert_str_eq(str(j, "remote_addr"), "192.0.2.7");
  ck_assert_int_eq((int)num(j, "remote_port"), 53422);
  ck_assert_str_eq(str(j, "request_id"), "req-42");
  ck_assert_str_eq(str(j, "method"), "POST");
  ck_assert_str_eq(str(j, "path"), "/v1/attention");
  ck_assert_int_eq((int)num(j, "status"), 503);
  ck_assert_int_eq((int)num(j, "bytes_in"), 55);
  ck_assert_int_eq((int)num(j, "bytes_out"), 120);
  ck_assert_double_eq_tol(num(j, "ms"), 1.235, 1e-9);
  ck_assert_double_eq_tol(num(j, "queue_ms"), 0.001, 1e-9);
  ck_assert_double_eq_tol(num(j, "compute_ms"), 1.0, 1e-9);
  ck_assert_int_eq((int)num(j, "batch"), 3);
  ck_assert_str_eq(str(j, "traceparent"), a.traceparent);
  ck_assert_str_eq(str(j, "reason"), "queue full");
  cJSON_Delete(j);
  /* The line starts with the time, for tools that sort by prefix. */
  ck_assert(strncmp(line(&a, LOG_FORMAT_JSON),
                    "{\"time\":\"2026-12-02T21:49:57.123Z\",", 35) == 0);
}
END_TEST

START_TEST(json_escapes_and_keeps_only_utf8) {
  struct sockaddr_in6 sa = v6("::ffff:192.0.2.9", 1);
  struct log_access a = base((struct sockaddr *)&sa);
  cJSON *j;
  /* A quote, a backslash, a control byte, a two-byte and a four-byte
   * character, then bytes that are not UTF-8: a lone continuation, an
   * overlong '/', a surrogate, and a sequence cut by the end. */
  a.path = "/\"\\\x01\xc3\xa9\xf0\x9f\x98\x80"
           "|\x80|\xc0\xaf|\xed\xa0\x80|\xe2\x82";
  a.reason = "tab\there";
  a.status = 404;
  j = json_line(&a);
  ck_assert_str_eq(str(j, "remote_addr"), "192.0.2.9");
  ck_assert_str_eq(str(j, "path"),
                   "/\"\\\x01\xc3\xa9\xf0\x9f\x98\x80|\xef\xbf\xbd|\xef\xbf\xbd"
                   "\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                   "\xef\xbf\xbd\xef\xbf\xbd");
  ck_assert_str_eq(str(j, "reason"), "tab\there");
  cJSON_Delete(j);
}
END_TEST

START_TEST(long_fields_are_cut_and_the_line_stays_bounded) {
  static char path[8192], reason[8192], tp[8192], id[8192];
  struct sockaddr_in6 sa = v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
  struct log_access a = base((struct sockaddr *)&sa);
  const char *l;
  cJSON *j;
  memset(path, 0x01, sizeof path - 1);  /* 6 bytes each, escaped */
  memset(reason, 0x01, sizeof reason - 1);
  memset(tp, 0x01, sizeof tp - 1);
  memset(id, 0x01, sizeof id - 1);
  a.path = path;
  a.reason = reason;
  a.traceparent = tp;
  a.request_id = id;
  a.method = id;
  a.status = 500;
  a.total_ns = a.queue_ns = a.compute_ns = UINT64_MAX;
  a.bytes_in = a.bytes_out = SIZE_MAX;
  a.batch_size = 2147483647;
  for (int fmt = 0; fmt < 2; fmt++) {
    /* Shorter than LOG_LINE_MAX in a larger buffer: a LOG_LINE_MAX one
     * never cuts a line. */
    static char buf[2 * LOG_LINE_MAX];
    size_t n = log_format_access(&a, fmt, &when, buf, sizeof buf);
    ck_assert_uint_lt(n, LOG_LINE_MAX);
  }
  l = line(&a, LOG_FORMAT_TEXT);
  ck_assert_ptr_nonnull(strstr(l, "\\x01...\""));  /* the reason's end */
  j = json_line(&a);
  ck_assert_uint_le(strlen(str(j, "path")), LOG_PATH_OUT);
  ck_assert_str_eq(str(j, "path") + strlen(str(j, "path")) - 4, "\x01...");
  ck_assert_uint_le(strlen(str(j, "reason")), LOG_REASON_OUT);
  cJSON_Delete(j);
  /* A buffer too small for the line still gets a bounded, ended line. */
  {
    char small[64];
    size_t n = log_format_access(&a, LOG_FORMAT_JSON, &when, small, 64);
    ck_assert_uint_eq(n, 64);
    ck_assert_int_eq(small[63], '\n');
  }
}
END_TEST

START_TEST(time_is_rfc3339_utc_with_milliseconds) {
  struct log_access a = base(NULL);
  struct timespec t = {0, 999999999};
  char buf[LOG_LINE_MAX];
  size_t n = log_format_access(&a, LOG_FORMAT_TEXT, &t, buf, sizeof buf);
  ck_assert_uint_gt(n, 31);
  ck_assert(memcmp(buf, "attnd: 1970-01-01T00:00:00.999Z ", 32) == 0);
  t.tv_sec = 951782400;  /* a leap day */
  t.tv_nsec = 7000000;
  n = log_format_access(&a, LOG_FORMAT_TEXT, &t, buf, sizeof buf);
  ck_assert(memcmp(buf, "attnd: 2000-02-29T00:00:00.007Z ", 32) == 0);
}
END_TEST

START_TEST(client_ids_are_kept_only_when_safe) {
  char buf[REQID_LEN + 1], longest[REQID_MAX + 2];
  ck_assert(reqid_valid("a"));
  ck_assert(reqid_valid("0af7651916cd43dd8448eb211c80319c"));
  ck_assert(reqid_valid("req-1:2/3+4=5@x.y_z~!#$%&'()*,;<>?[]^`{|}"));
  memset(longest, 'a', REQID_MAX);
  longest[REQID_MAX] = '\0';
  ck_assert(reqid_valid(longest));
  ck_assert_ptr_eq(reqid_pick(longest, buf), longest);
  longest[REQID_MAX] = 'a';
  longest[REQID_MAX + 1] = '\0';
  ck_assert(!reqid_valid(longest));
  ck_assert(!reqid_valid(NULL));
  ck_assert(!reqid_valid(""));
  ck_assert(!reqid_valid("has space"));
  ck_assert(!reqid_valid("quote\""));
  ck_assert(!reqid_valid("back\\slash"));
  ck_assert(!reqid_valid("tab\t"));
  ck_assert(!reqid_valid("del\x7f"));
  ck_assert(!reqid_valid("caf\xc3\xa9"));
  ck_assert_ptr_eq(reqid_pick(longest, buf), buf);
}
END_TEST

static int cmp_ids(const void *x, const void *y) {
  return memcmp(x, y, REQID_LEN);
}

START_TEST(generated_ids_are_hex_and_distinct) {
  enum { N = 20000 };
  char (*ids)[REQID_LEN + 1] = malloc(N * sizeof *ids);
  ck_assert_ptr_nonnull(ids);
  reqid_init();
  for (int i = 0; i < N; i++) {
    const char *id = reqid_pick(i % 2 ? NULL : "bad id", ids[i]);
    ck_assert_ptr_eq(id, ids[i]);
    ck_assert_uint_eq(strlen(id), REQID_LEN);
    ck_assert_uint_eq(strspn(id, "0123456789abcdef"), REQID_LEN);
    ck_assert(reqid_valid(id));
  }
  /* One process: the same prefix, a different rest every time. */
  ck_assert(memcmp(ids[0], ids[N - 1], 16) == 0);
  qsort(ids, N, sizeof *ids, cmp_ids);
  for (int i = 1; i < N; i++)
    ck_assert(memcmp(ids[i - 1], ids[i], REQID_LEN) != 0);
  free(ids);
}
END_TEST

static Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("access");
  tcase_add_test(tc, text_line_has_every_field_in_order);
  tcase_add_test(tc, text_escapes_what_clients_send);
  tcase_add_test(tc, missing_fields_are_dashes_or_left_out);
  tcase_add_test(tc, json_line_has_every_field);
  tcase_add_test(tc, json_escapes_and_keeps_only_utf8);
  tcase_add_test(tc, long_fields_are_cut_and_the_line_stays_bounded);
  tcase_add_test(tc, time_is_rfc3339_utc_with_milliseconds);
  suite_add_tcase(s, tc);
  tc = tcase_create("reqid");
  tcase_add_test(tc, client_ids_are_kept_only_when_safe);
  tcase_add_test(tc, generated_ids_are_hex_and_distinct);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(log_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
