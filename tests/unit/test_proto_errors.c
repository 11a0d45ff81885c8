/* test_proto_errors.c - the /v1/attention JSON codec on malformed bodies:
 * unknown and duplicate fields, missing tensors, non-finite literals, NUL
 * bytes, every kind of syntax error with its byte and reason, nesting past
 * the limit, what decoding holds of the budget, wrong numbers, ranks and
 * shapes; each ATTND_EINVAL with a message naming the field and the
 * problem, and nothing leaked on a late failure. */
#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto/mem.h"
#include "proto/proto.h"
#include "proto/tensor/tensor.h"

#include "support_v1.h"
#include "support_suite.h"

/* ---- fields and body ------------------------------------------------------- */

START_TEST(unknown_field_is_named) {
  BAD("{" QKV3 ",\"vaild_lens\":[1,1]}", "unknown field 'vaild_lens'");
  BAD("{" QKV3 ",\"Query\":1}", "unknown field 'Query'");
}
END_TEST

START_TEST(duplicate_fields_at_every_level) {
  BAD("{" QKV3 ",\"query\":[[[1,2]]]}", "duplicate field 'query'");
  BAD("{" QKV3 ",\"mask\":null,\"mask\":null}", "duplicate field 'mask'");
  BAD("{\"query\":{\"shape\":[1,1,1],\"shape\":[1,1,1],\"data\":[1]},"
      "\"key\":[[[1]]],\"value\":[[[1]]]}", "query: duplicate field 'shape'");
}
END_TEST

START_TEST(missing_required_tensors) {
  BAD("{\"key\":[[[1]]],\"value\":[[[1]]]}", "query: required field is "
      "missing");
  BAD("{\"query\":[[[1]]],\"value\":[[[1]]]}", "key: required");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":null}", "value: "
      "required field is null");
}
END_TEST

START_TEST(body_errors_are_clear) {
  BAD("", "empty body");
  BAD(" \n\t ", "empty body");
  BAD("{\"query\":", "not valid JSON");
  BAD("query=1", "not valid JSON");
  BAD("[1,2,3]", "must be a JSON object", "an array");
  BAD("42", "must be a JSON object");
  BAD("{" QKV3 "} x", "unexpected data after the JSON object");
  BAD("{" QKV3 "}{}", "unexpected data after the JSON object");
}
END_TEST

START_TEST(body_is_read_by_length_not_nul) {
  const char *json = "{" QKV3 "}  \n";
  size_t len = strlen(json);
  char *buf = malloc(len + 8);
  memcpy(buf, json, len);
  memcpy(buf + len, "garbage!", 8); /* no NUL anywhere after the body */
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v1_decode(buf, len, &r, 0, err), 0);
  proto_request_free(&r);
  ck_assert_int_eq(proto_v1_decode(buf, len + 8, &r, 0, err), ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "unexpected data"));
  proto_request_free(&r);
  free(buf);
}
END_TEST

/* Python's json.dumps writes NaN, Infinity and -Infinity for a float that
 * is not finite: the message names the value's place and says why, on
 * attnd's own number reader (tensor arrays) and on cJSON's (elsewhere)
 * alike; a NaN deep in a long row (the vector scans) is named as well. */
START_TEST(non_finite_literals_name_their_place) {
  BAD("{\"query\":[[[1,2],[3,NaN]]],\"key\":[[[1,0]]],\"value\":[[[1]]]}",
      "query[0][1][1]: NaN is not a JSON number; attnd needs finite values");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[Infinity,0]]],\"value\":[[[1]]]}",
      "key[0][0][0]: Infinity is not a JSON number; attnd needs finite "
      "values");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,0]]],\"value\":{\"shape\":"
      "[1,1,1],\"data\":[-Infinity]}}",
      "value.data[0]: -Infinity is not a JSON number");
  BAD("{" QKV3 ",\"scale\":NaN}", "scale: NaN is not a JSON number");
  BAD("{" QKV3 ",\"bias\":[0,NaN,1]}", "bias[1]: NaN is not");
  BAD("{" QKV3 ",\"valid_lens\":[1,NaN]}", "valid_lens[1]: NaN is not");
  BAD("{" QKV3 ",\"dropout\":{\"p\":NaN}}", "dropout.p: NaN is not");
  BAD("[1,[NaN]]", "body[1][0]: NaN is not a JSON number");
  BAD("NaN", "body: NaN is not a JSON number");
  /* a name where a member name belongs is not a value */
  BAD("{NaN:1}", "body is not valid JSON at byte 1: expected a member "
      "name");
  /* row 0 of 200 numbers, the NaN at 137 */
  char json[4096];
  size_t o = (size_t)snprintf(json, sizeof json, "{\"query\":[[[");
  for (int i = 0; i < 200; i++)
    o += (size_t)snprintf(json + o, sizeof json - o, "%s%s", i ? "," : "",
                          i == 137 ? "NaN" : "0.125");
  snprintf(json + o, sizeof json - o, "]]],\"key\":[[[1]]],\"value\":"
           "[[[1]]]}");
  BAD(json, "query[0][0][137]: NaN is not a JSON number");
}
END_TEST

/* Exactly the message for a syntax error: the byte and the reason. */
static void syntax_err(const char *json, size_t len, const char *want,
                       int line) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode(json, len, &r, 0, err);
  ck_assert_msg(rc == ATTND_EINVAL, "line %d: rc %d", line, rc);
  ck_assert_msg(!strcmp(err, want), "line %d: \"%s\", want \"%s\"", line,
                err, want);
}
#define SYNTAX(json, want) syntax_err(json, strlen(json), want, __LINE__)

/* Every kind of syntax error is refused by the one-pass check with its
 * byte and its reason, inside the numbers of a tensor too (which the
 * check reads lazily, then token by token once the decode fails). */
START_TEST(syntax_errors_name_the_byte_and_the_reason) {
  const char *pre = "body is not valid JSON at byte ";
  char want[PROTO_ERR_MAX];
  static const struct { const char *json; int at; const char *why; } cases[] = {
    {"{\"query\":[[[1]]],\"id\": }", 23, "expected a value, got '}'"},
    {"{\"query\":[[[1]]],}", 17,
     "expected a member name (a string in double quotes), got '}'"},
    {"{\"query\" [[[1]]]}", 9, "expected ':' after the member name, got '['"},
    {"{\"query\":[[[1]]]", 16, "expected ',' or '}', got the end of the body"},
    {"{\"query\":[[[1]]}", 15, "expected ',' or ']', got '}'"},
    {"{\"query\":[[[1,2 3]]]}", 16, "expected ',' or ']', got '3'"},
    {"{\"query\":[[[1,]]]}", 14, "expected a value, got ']'"},
    {"{\"query\":[[[1,,2]]]}", 14, "expected a value, got ','"},
    {"{\"query\":[[[1,\x01 2]]]}", 14, "expected a value, got byte 0x01"},
    {"{\"query\":[[[1,01]]]}", 14, "01 is not a JSON number"},
    {"{\"query\":[[[1.]]]}", 12, "1. is not a JSON number"},
    {"{\"query\":[[[-.5]]]}", 12, "-.5 is not a JSON number"},
    {"{\"query\":[[[1e+]]]}", 12, "1e+ is not a JSON number"},
    {"{\"query\":[[[+1]]]}", 12, "expected a value, got '+'"},
    {"{\"query\":[[[tru]]]}", 12, "expected true, got 't'"},
    {"{\"causal\":nul}", 10, "expected null, got 'n'"},
    {"{\"id\":\"abc}", 6,
     "the string that starts there has no closing '\"'"},
    {"{\"id\":\"a\tb\"}", 8,
     "control byte 0x09 in a string (write it as an escape, \\u0009)"},
    {"{\"id\":\"a\\qb\"}", 8, "not a JSON escape (\\\" \\\\ \\/ \\b \\f "
     "\\n \\r \\t or \\u and four hex digits)"},
    {"{\"id\":\"\\u12g4\"}", 7, "not a JSON escape (\\\" \\\\ \\/ \\b "
     "\\f \\n \\r \\t or \\u and four hex digits)"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    snprintf(want, sizeof want, "%s%d: %s", pre, cases[k].at, cases[k].why);
    SYNTAX(cases[k].json, want);
  }
  SYNTAX("", "empty body: expected a JSON object with query, key and value");
  SYNTAX("{} x", "body has unexpected data after the JSON object at byte 3");
  SYNTAX("[1,2]", "body must be a JSON object, got an array");
  /* a syntax error inside a long list of numbers, behind a field the
   * decode would refuse first: the syntax error is the answer */
  char json[8192];
  size_t o = (size_t)snprintf(json, sizeof json, "{\"nope\":1,\"query\":[[[");
  for (int i = 0; i < 1000; i++)
    o += (size_t)snprintf(json + o, sizeof json - o, "%s%s", i ? "," : "",
                          i == 900 ? "1 2" : "0.5");
  snprintf(json + o, sizeof json - o, "]]]}");
  size_t at = (size_t)(strstr(json, "1 2") - json) + 2;
  snprintf(want, sizeof want, "%s%zu: expected ',' or ']', got '2'", pre, at);
  syntax_err(json, strlen(json), want, __LINE__);
  /* the same on the v2 codec, with where it is */
  static const char v2[] = "{\"inputs\":[{\"name\":\"query\",\"datatype\":"
                           "\"FP32\",\"shape\":[2],\"data\":[1,2 3]}]}";
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v2_decode(v2, sizeof v2 - 1, NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON at byte 69: expected ',' or "
                   "']', got '3'");
}
END_TEST

/* A holder of a budget of hold_cap bytes, for mem_hold. */
static size_t held_bytes, hold_cap;
static int hold_some(void *arg, size_t n) {
  (void)arg;
  if (n > hold_cap - held_bytes)
    return MEM_HOLD_BUSY;
  held_bytes += n;
  return 0;
}

/* A body of 2000 rows of 64 numbers (key and value), its tail as given. */
static char *rows_body(const char *tail, size_t *len) {
  proto__buf b = {0};
  proto__buf_puts(&b, "{\"query\":[[[");
  for (int i = 0; i < 64; i++)
    proto__buf_puts(&b, i ? ",0.5" : "0.5");
  proto__buf_puts(&b, "]]]");
  for (int t = 0; t < 2; t++) {
    proto__buf_puts(&b, t ? ",\"value\":[[" : ",\"key\":[[");
    for (int r = 0; r < 2000; r++) {
      proto__buf_puts(&b, r ? ",[" : "[");
      for (int i = 0; i < 64; i++)
        proto__buf_puts(&b, i ? ",1" : "1");
      proto__buf_puts(&b, "]");
    }
    proto__buf_puts(&b, "]]");
  }
  proto__buf_puts(&b, tail);
  ck_assert(!b.oom);
  *len = b.len;
  return b.p;
}

/* What the decode allocates is held first (mem_hold): at least its
 * tensors; a holder that refuses gets a 503's message naming the flag; a
 * body that is not JSON holds nothing. */
START_TEST(decoding_holds_what_it_allocates) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  size_t len;
  char *ok = rows_body(",\"id\":\"x\"}", &len);
  mem_hold_begin(hold_some, NULL);
  held_bytes = 0;
  hold_cap = SIZE_MAX;
  ck_assert_int_eq(proto_v1_decode(ok, len, &r, 0, err), 0);
  size_t need = held_bytes;
  ck_assert_msg(need >= r.in_bytes + r.out_bytes, "held %zu of %zu", need,
                r.in_bytes + r.out_bytes);
  proto_request_free(&r);
  held_bytes = 0;
  hold_cap = need / 2;
  ck_assert_int_eq(proto_v1_decode(ok, len, &r, 0, err), ATTND_EBUSY);
  ck_assert_msg(strstr(err, "decoding the request needs") &&
                strstr(err, "--max-inflight-mb"), "%s", err);
  ck_assert_int_eq(r.n_owned, 0);
  mem_free(ok);
  char *bad = rows_body(",\"id\": }", &len);
  held_bytes = 0;
  hold_cap = SIZE_MAX;
  ck_assert_int_eq(proto_v1_decode(bad, len, &r, 0, err), ATTND_EINVAL);
  ck_assert_msg(strstr(err, "expected a value, got '}'"), "%s", err);
  ck_assert_int_eq(held_bytes, 0);
  mem_hold_end();
  mem_free(bad);
}
END_TEST

/* Nesting deeper than the reader's limit says so, with the limit; at the
 * limit the body is read (and refused for what it holds). */
START_TEST(nesting_deeper_than_the_limit_names_it) {
  static char json[2 * PROTO_JSON_MAX_DEPTH + 64];
  proto_request r;
  char err[PROTO_ERR_MAX], want[PROTO_ERR_MAX];
  for (int depth = PROTO_JSON_MAX_DEPTH; depth <= PROTO_JSON_MAX_DEPTH + 1;
       depth++) {
    size_t o = (size_t)snprintf(json, sizeof json, "{\"id\":");
    for (int i = 1; i < depth; i++)
      json[o++] = '[';
    for (int i = 1; i < depth; i++)
      json[o++] = ']';
    json[o++] = '}';
    int rc = proto_v1_decode(json, o, &r, 0, err);
    ck_assert_int_eq(rc, ATTND_EINVAL);
    if (depth == PROTO_JSON_MAX_DEPTH) {
      ck_assert_msg(!strstr(err, "deeper") && !strstr(err, "not valid"),
                    "%s", err);
    } else {
      snprintf(want, sizeof want, "body is nested %d levels deep at byte "
               "%d; the limit is %d levels", PROTO_JSON_MAX_DEPTH + 1,
               6 + PROTO_JSON_MAX_DEPTH - 1, PROTO_JSON_MAX_DEPTH);
      ck_assert_str_eq(err, want);
    }
  }
}
END_TEST

/* cJSON skips every byte up to 0x20 as a blank, NUL too; the message
 * points at the first NUL, not where cJSON gave up. */
START_TEST(nul_bytes_are_pointed_at) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  static const char nuls[16] = {0};
  ck_assert_int_eq(proto_v1_decode(nuls, sizeof nuls, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON: byte 0 is a NUL (0x00); "
                   "JSON allows only spaces, tabs and line breaks between "
                   "tokens");
  static const char mid[] = "{\"query\": \0[[[1]]], \"key\"";
  ck_assert_int_eq(proto_v1_decode(mid, sizeof mid - 1, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "byte 10 is a NUL (0x00)"));
  /* a float32 1.0 sent as it is */
  static const char raw[4] = {0, 0, (char)0x80, 0x3f};
  ck_assert_int_eq(proto_v1_decode(raw, 4, &r, 0, err), ATTND_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "byte 0 is a NUL"));
  /* a NUL after the first bad byte is not the error */
  static const char late[] = "{\"query\" [[[1]]]\0";
  ck_assert_int_eq(proto_v1_decode(late, sizeof late - 1, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_str_eq(err, "body is not valid JSON at byte 9: expected ':' "
                   "after the member name, got '['");
}
END_TEST

/* A \u escape of half a surrogate pair (cJSON stops there, silent) is
 * named with its place and why, wherever it is: a value of any field, an
 * element, a member name; a whole pair is one character, taken. */
#define LONE " is a lone UTF-16 surrogate (a \\uD800-\\uDBFF escape must " \
             "be followed by a \\uDC00-\\uDFFF one)"
START_TEST(lone_surrogate_escapes_are_named) {
  proto_request r;
  char err[PROTO_ERR_MAX];
  static const struct { const char *json, *want; } cases[] = {
    {"{\"id\":\"\\ud800\"," QKV3 "}", "id: \\ud800 at byte 7" LONE},
    {"{\"id\":\"\\udc00\"," QKV3 "}", "id: \\udc00 at byte 7" LONE},
    {"{\"id\":\"ab\\uD800\"," QKV3 "}", "id: \\uD800 at byte 9" LONE},
    {"{\"id\":\"\\ud800x\"," QKV3 "}", "id: \\ud800 at byte 7" LONE},
    {"{\"id\":\"\\ud800\\ud800\\udc00\"," QKV3 "}",
     "id: \\ud800 at byte 7" LONE},
    {"{\"id\":\"\\ud800\\n\\udc00\"," QKV3 "}", "id: \\ud800 at byte 7" LONE},
    {"{\"id\":\"\\ud83d\\ude00\\ude00\"," QKV3 "}",
     "id: \\ude00 at byte 19" LONE},
    {"{" QKV3 ",\"causal\":\"\\udbff\"}",
     "causal: \\udbff at byte 135" LONE},
    {"{" QKV3 ",\"precision\":\"bf\\udfff\"}",
     "precision: \\udfff at byte 140" LONE},
    {"{\"query\":{\"shape\":[1,1,1],\"data\":[\"\\ud800\"]}}",
     "query.data[0]: \\ud800 at byte 35" LONE},
    {"{\"\\ud800\":1}", "body is not valid JSON: \\ud800 at byte 2" LONE},
    {"\"\\udc00\"", "body is not valid JSON: \\udc00 at byte 1" LONE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *j = cases[i].json;
    ck_assert_int_eq(proto_v1_decode(j, strlen(j), &r, 0, err), ATTND_EINVAL);
    ck_assert_str_eq(err, cases[i].want);
  }
  /* U+1F600 and U+10FFFF, each a pair */
  OK("{\"id\":\"\\ud83d\\ude00\\uDBFF\\uDFFF\"," QKV3 "}", &r);
  proto_request_free(&r);
}
END_TEST
#undef LONE

/* ---- numbers and shapes ---------------------------------------------------- */
/* ---- numbers and shapes ---------------------------------------------------- */

START_TEST(booleans_strings_and_nulls_are_not_numbers) {
  BAD("{\"query\":[[[1,2,3],[1,2,true]]],\"key\":[[[1,2,3]]],"
      "\"value\":[[[1]]]}", "query: expected a number at [0][1][2], got true");
  BAD("{\"query\":[[[1]]],\"key\":[[[\"1\"]]],\"value\":[[[1]]]}",
      "key: expected a number at [0][0][0], got a string");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[[null]]]}",
      "value: expected a number at [0][0][0], got null");
  BAD("{\"query\":{\"shape\":[1,1,2],\"data\":[1,false]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: expected a number at [0][0][1], got "
      "false");
  BAD("{\"query\":[[[1,[2]]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
      "query: expected a number at [0][0][1], got an array");
}
END_TEST

START_TEST(numbers_beyond_float_range_are_rejected) {
  BAD("{\"query\":[[[1,1e39]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
      "query[0][0][1]: 1e39 is out of float32 range");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,-4e38]]],\"value\":[[[1]]]}",
      "key[0][0][1]", "out of float32 range");
  BAD("{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1e999]]]}",
      "value[0][0][0]", "out of float32 range");
}
END_TEST

START_TEST(ragged_arrays_name_the_position) {
  BAD("{\"query\":[[[1,2],[1,2],[1,2],[1]]],\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: ragged array at [0][3]");
  BAD("{\"query\":[[[1,2]],[[1,2],[3,4]]],\"key\":[[[1,2]],[[1,2]]],"
      "\"value\":[[[1]],[[1]]]}", "query: ragged array at [1]");
  BAD("{\"query\":[[[1,2]],3],\"key\":[[[1,2]],[[1,2]]],"
      "\"value\":[[[1]],[[1]]]}",
      "query: ragged array at [1]", "got 3");
}
END_TEST

START_TEST(wrong_ranks_are_named) {
  BAD("{\"query\":[[1,2]],\"key\":[[1,2]],\"value\":[[1]]}",
      "query: expected rank 3 or 4, got 2");
  BAD("{\"query\":[[[[[1]]]]],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: expected rank", "got 5");
  BAD("{\"query\":[[[1]]],\"key\":[[[[1]]]],\"value\":[[[1]]]}",
      "key: expected rank 3 like query, got 4");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[1]]}",
      "value: expected rank 3 like query, got 2");
  BAD("{\"query\":1,\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: expected a tensor", "got 1");
}
END_TEST

START_TEST(shape_mismatches_are_named) {
  BAD("{\"query\":{\"shape\":[1,1,32],\"data\":[" 
      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},"
      "\"key\":{\"shape\":[1,1,31],\"data\":["
      "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},"
      "\"value\":[[[1]]]}", "key: width 31 does not match query width 32");
  BAD("{\"query\":[[[1]],[[1]]],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "key: batch 1 does not match query batch 2");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":[[[1]],[[1]]]}",
      "value: batch 2 does not match query batch 1");
  BAD("{\"query\":[[[1]]],\"key\":[[[1],[2]]],\"value\":[[[1]]]}",
      "value: length 1 does not match key length 2");
  BAD("{\"query\":[[[[1]],[[1]],[[1]]]],\"key\":[[[[1]],[[1]]]],"
      "\"value\":[[[[1]],[[1]]]]}", "key: 2 heads", "query heads 3");
  BAD("{\"query\":[[[[1]],[[1]]]],\"key\":[[[[1]],[[1]]]],"
      "\"value\":[[[[1]]]]}", "value: 1 heads do not match key heads 2");
}
END_TEST

START_TEST(empty_tensors_name_field_and_axis) {
  BAD("{\"query\":[],\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query: axis 0 is empty");
  BAD("{\"query\":[[[1]]],\"key\":[[[]]],\"value\":[[[1]]]}",
      "key: axis 2 is empty");
  BAD("{\"query\":[[[1]]],\"key\":[[[1]]],\"value\":{\"shape\":[1,0,1],"
      "\"data\":[]}}", "value: axis 1 is empty");
  BAD("{" QKV3 ",\"mask\":[]}", "mask: axis 0 is empty");
}
END_TEST

START_TEST(flat_form_errors) {
  BAD("{\"query\":{\"shape\":[1,2,2],\"data\":[1,2,3]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query", "\"data\" has 3 elements", "[1,2,2]",
      "needs 4");
  BAD("{\"query\":{\"shape\":[1,-2,2],\"data\":[1]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: shape[1]=-2 is negative");
  BAD("{\"query\":{\"shape\":[1,1.5,2],\"data\":[1]},\"key\":[[[1,2]]],"
      "\"value\":[[[1]]]}", "query: shape[1] must be an integer");
  BAD("{\"query\":{\"shape\":[1,1,1]},\"key\":[[[1]]],\"value\":[[[1]]]}",
      "query", "needs both \"shape\" and \"data\"");
  BAD("{\"query\":{\"shape\":[1,1,1],\"data\":[1],\"dtype\":\"f32\"},"
      "\"key\":[[[1]]],\"value\":[[[1]]]}", "query: unknown field 'dtype'");
  BAD("{\"query\":{\"shape\":[1,1,1],\"data\":1},\"key\":[[[1]]],"
      "\"value\":[[[1]]]}", "query", "\"data\" must be an array");
}
END_TEST

/* ---- failure paths leak nothing ---------------------------------------------- */

START_TEST(late_failures_free_earlier_buffers) {
  /* each fails after q, k and v were allocated and filled */
  BAD("{" QKV3 ",\"valid_lens\":[1,4]}", "valid_lens[1]=4");
  BAD("{" QKV3 ",\"mask\":[true,false,7]}", "mask");
  BAD("{" QKV3 ",\"bias\":[1,2,1e40]}", "bias[2]");
  BAD("{" QKV3 ",\"id\":{}}", "id");
  /* a partially decoded request is freed by the decoder and stays safe to
   * free again */
  proto_request r;
  char err[PROTO_ERR_MAX];
  const char *j = "{" QKV3 ",\"valid_lens\":[1,4]}";
  ck_assert_int_eq(proto_v1_decode(j, strlen(j), &r, 0, err), ATTND_EINVAL);
  proto_request_free(&r);
  proto_request_free(&r);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

int main(void) {
  support_case cases[] = {
    {"malformed", {unknown_field_is_named, duplicate_fields_at_every_level,
                   missing_required_tensors, body_errors_are_clear,
                   body_is_read_by_length_not_nul,
                   non_finite_literals_name_their_place,
                   nul_bytes_are_pointed_at,
                   lone_surrogate_escapes_are_named,
                   syntax_errors_name_the_byte_and_the_reason,
                   nesting_deeper_than_the_limit_names_it,
                   decoding_holds_what_it_allocates,
                   booleans_strings_and_nulls_are_not_numbers,
                   numbers_beyond_float_range_are_rejected,
                   ragged_arrays_name_the_position, wrong_ranks_are_named,
                   shape_mismatches_are_named,
                   empty_tensors_name_field_and_axis, flat_form_errors,
                   late_failures_free_earlier_buffers}},
  };
  return support_run("proto_errors", cases, sizeof cases / sizeof cases[0]);
}
