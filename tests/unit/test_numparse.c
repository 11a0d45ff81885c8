/* test_numparse.c - the JSON number path: numscan (proto/text/numscan.c), the
 * reader over fast_float (proto/text/fpread.cc) and the printer over Dragonbox
 * (proto/text/fpprint.cc).
 *
 *  - proto__num_f32 against strtof (bit for bit, the sign of zero too) over
 *    random bit patterns printed many ways, exact midpoints between
 *    neighbours and decimals just either side of them, subnormals, the
 *    float range's edges, mantissas hundreds of digits long, and exponents
 *    far outside float range; float32 range as rounding decides it (a
 *    decimal is refused exactly when strtof makes it infinite, so
 *    3.4028235e38 is FLT_MAX); proto__num_f64 against strtod; the
 *    JSON number grammar, token by token.
 *  - The decoders: tensor numbers come out correctly rounded (a decimal
 *    that double rounding would get wrong proves numscan read it), in
 *    every form (v1 nested and flat, v2 data, FP16, BF16, BOOL, INT32).
 *  - The decoders against themselves on the cJSON path: a body goes
 *    through numscan, and the same body through cJSON alone (the test
 *    hook proto__test_cjson_path).
 *    Thousands of mutated bodies must give the same code, the same message
 *    and the same tensors both ways.
 *  - The printer: shortest digits that read back, not longer than a
 *    brute-force search, over random and swept bit patterns (make
 *    printer-exhaustive checks all 2^32); its table of powers of ten
 *    against their definition, by exact multiplication. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/tensor/tensor.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* A random finite float: any bit pattern, a third of them subnormal. */
static float rnd_float(void) {
  for (;;) {
    uint32_t u = (uint32_t)rnd();
    if (rnd() % 3 == 0)
      u &= 0x807fffffu;
    float f = bits_f32(u);
    if (isfinite(f))
      return f;
  }
}

/* Text s is accepted exactly when it rounds to a finite float (strtof,
 * to nearest), and must then read as strtof(s), bit for bit. */
static void check_f32(const char *s) {
  float got = 0;
  const char *end = s + strlen(s);
  const char *q = proto__num_f32(s, end, &got);
  double d = strtod(s, NULL);
  if (!isfinite(strtof(s, NULL))) {
    ck_assert_msg(q == NULL, "%s: accepted, strtof says infinity", s);
    return;
  }
  ck_assert_msg(q == end, "%s: refused or cut short", s);
  float want = strtof(s, NULL);
  ck_assert_msg(f32_bits(got) == f32_bits(want), "%s: %a, strtof %a", s,
                (double)got, (double)want);
  /* inside a list, with bytes after it (the eight-byte digit steps) */
  char list[4200];
  float two[2];
  int n = snprintf(list, sizeof list, " %s ,0          ", s);
  ck_assert_int_eq(proto__num_list_f32(list, list + n, two, 2), 0);
  ck_assert_msg(f32_bits(two[0]) == f32_bits(want), "%s in a list: %a", s,
                (double)two[0]);
  double g;
  ck_assert_ptr_eq(proto__num_f64(s, end, &g), end);
  ck_assert_msg(g == d && signbit(g) == signbit(d), "%s: %a, strtod %a", s,
                g, d);
}

/* ---- parsing one number ------------------------------------------------ */

START_TEST(random_floats_printed_many_ways) {
  char s[64];
  for (int i = 0; i < 30000; i++) {
    float f = rnd_float();
    int p = 1 + (int)(rnd() % 17);
    snprintf(s, sizeof s, "%.*g", p, (double)f);
    check_f32(s);
    snprintf(s, sizeof s, "%.*e", p, (double)f);
    check_f32(s);
    proto__fmt_f32(s, f);
    check_f32(s);
  }
}
END_TEST

/* The exact midpoint between a float and the next one up (exact in a
 * double), printed exactly, and the decimals one unit in its last digit
 * below and above: ties go to even, the others go their way. */
START_TEST(midpoints_between_neighbours) {
  char s[128];
  for (int i = 0; i < 10000; i++) {
    float f = fabsf(rnd_float());
    float g = nextafterf(f, INFINITY);
    if (!isfinite(g))
      continue;
    double mid = ((double)f + (double)g) / 2;
    int n = snprintf(s, sizeof s, "%.70e", mid);
    char *e = strchr(s, 'e');
    /* trim trailing zeros of the mantissa, keep it exact */
    char *z = e - 1;
    while (*z == '0')
      z--;
    if (*z == '.')
      z--;
    memmove(z + 1, e, strlen(e) + 1);
    (void)n;
    check_f32(s);
    /* just above: append digits before the exponent */
    char t[160];
    e = strchr(s, 'e');
    snprintf(t, sizeof t, "%.*s%s000000000000001%s", (int)(e - s), s,
             strchr(s, '.') ? "" : ".", e);
    check_f32(t);
    /* just below: mid - 2^-100 * mid, printed with 60 digits */
    snprintf(t, sizeof t, "%.60e", mid * (1 - 0x1p-52));
    check_f32(t);
  }
}
END_TEST

START_TEST(subnormals_and_range_edges) {
  char s[128];
  for (uint32_t u = 1; u < 0x800000u; u += 997) {
    snprintf(s, sizeof s, "%.9g", (double)bits_f32(u));
    check_f32(s);
    snprintf(s, sizeof s, "%.20e", (double)bits_f32(u) * 0.75);
    check_f32(s);
  }
  static const char *const edges[] = {
    "1e-45", "1.4e-45", "1.401298464324817e-45", "7e-46", "7.1e-46",
    "7.006492321624085e-46", "7.006492321624086e-46", "1e-46", "-1e-46",
    "1.1754943e-38", "1.17549435e-38", "1.1754942e-38", "3.4028234e38",
    "3.4028235e38", "3.40282346638528859811704183484516925440e+38",
    "3.4028234663852886e38", "3.4028234663852887e38", "3.40282356e38",
    "3.4028235677973366e38", "3.4028235677973365e38", "-3.4028234e38",
    "-3.4028236e38", "1e38", "1e39", "-1e39", "1e-400", "-1e-400",
    "1e400", "1e99999999999999999999", "1e-99999999999999999999", "0",
    "-0", "0.0", "-0.0e0", "0e-5", "0e999999", "1E+2", "1e-2", "123456789",
    "16777217", "16777216.5", "33554431", "1.00000005960464477539062500001",
    "1.000000059604644775390625", "0.999999970197677612304687499999"};
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    check_f32(edges[i]);
}
END_TEST

START_TEST(long_mantissas) {
  char s[2200];
  for (int i = 0; i < 400; i++) {
    int len = 20 + (int)(rnd() % 2000), o = 0;
    if (rnd() % 2)
      s[o++] = '-';
    s[o++] = (char)('1' + rnd() % 9);
    int dot = (int)(rnd() % (unsigned)len);
    for (int k = 1; k < len; k++) {
      if (k == dot)
        s[o++] = '.';
      /* long runs of 0 or 9 put the value next to a boundary */
      s[o++] = i % 3 == 0 ? '0' : i % 3 == 1 ? '9' : (char)('0' + rnd() % 10);
    }
    if (i % 3 != 2)
      s[o - 1] = '1';
    o += snprintf(s + o, 32, "e%d", (int)(rnd() % 90) - 45 - (dot ? dot : len));
    s[o] = '\0';
    check_f32(s);
  }
  /* the midpoint between 1 and its upper neighbour, then a 1 far out */
  snprintf(s, sizeof s, "1.000000059604644775390625%0*d1", 900, 0);
  check_f32(s);
}
END_TEST

/* 16 to 19 digits: a float64's repr of a float32 value (what json.dumps
 * of tolist() sends), and decimals of that length a few float64 ulps from
 * a float32 midpoint, where one more rounding could flip the result. */
START_TEST(float64_reprs_and_near_midpoints) {
  char s[64];
  for (int i = 0; i < 200000; i++) {
    float f = rnd_float();
    snprintf(s, sizeof s, "%.*g", 16 + i % 2, (double)f);
    check_f32(s);
    float g = nextafterf(f, f < 0 ? -INFINITY : INFINITY);
    if (!isfinite(g) || f == 0)
      continue;
    double mid = ((double)f + (double)g) / 2;
    /* mid moved by -8 .. 8 float64 ulps, printed with 17 to 19 digits */
    double x = mid;
    int k = (int)(rnd() % 17) - 8;
    for (; k > 0; k--)
      x = nextafter(x, INFINITY);
    for (; k < 0; k++)
      x = nextafter(x, -INFINITY);
    snprintf(s, sizeof s, "%.*e", 16 + i % 3, x);
    check_f32(s);
  }
}
END_TEST

START_TEST(json_number_grammar) {
  static const char *const bad[] = {
    "", "-", "+1", "01", "-01", "00", "1.", "-1.", "1.e5", ".5", "-.5",
    "1e", "1e+", "1E-", "inf", "-inf", "nan", "NaN", "Infinity", "0x10",
    " 1", "- 1", "1..2", "e5", "--1"};
  static const char *const good[] = {"0", "-0", "1", "-1", "10", "0.5",
                                     "-0.5", "1e5", "1E5", "1e+5", "1e-5",
                                     "1.5e-05", "0e0", "123.456e-007"};
  float f;
  double d;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const char *s = bad[i], *end = s + strlen(s);
    const char *q = proto__num_f32(s, end, &f);
    ck_assert_msg(q == NULL || q < end, "'%s' read as a whole number", s);
    q = proto__num_f64(s, end, &d);
    ck_assert_msg(q == NULL || q < end, "'%s' read as a whole number", s);
  }
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    const char *s = good[i], *end = s + strlen(s);
    ck_assert_ptr_eq(proto__num_f32(s, end, &f), end);
    ck_assert_ptr_eq(proto__num_f64(s, end, &d), end);
  }
  /* a token ends where JSON says it does */
  const char *s = "12,3";
  ck_assert_ptr_eq(proto__num_f32(s, s + 4, &f), s + 2);
  ck_assert(f == 12.0f);
}
END_TEST

START_TEST(number_lists) {
  float x[4];
  const char *ok = " 1 ,\t2.5,\n-3e0\r";
  ck_assert_int_eq(proto__num_list_f32(ok, ok + strlen(ok), x, 3), 0);
  ck_assert(x[0] == 1.0f && x[1] == 2.5f && x[2] == -3.0f);
  static const char *const bad[] = {"1,2", "1,2,3,4", "1,,3", "1,2,", ",1,2",
                                    "1 2 3", "1,2,true", "1,2,null",
                                    "1,2,\"3\"", "1,2,3e40", "1,2,NaN",
                                    "1,2,\x01" "3", "1;2;3"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    ck_assert_msg(proto__num_list_f32(bad[i], bad[i] + strlen(bad[i]), x,
                                      3) == -1, "'%s' accepted", bad[i]);
}
END_TEST

/* ---- lists: the comma-split fast path against the token-by-token one ---- */

static int is_ws_byte(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The list reader as it was before the fast path: one number after
 * another through proto__num_f32 (itself checked against strtof above). */
static int ref_list(const char *p, const char *end, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    while (p < end && is_ws_byte(*p))
      p++;
    const char *q = proto__num_f32(p, end, &dst[i]);
    if (!q)
      return -1;
    p = q;
    while (p < end && is_ws_byte(*p))
      p++;
    if (i + 1 < n) {
      if (p == end || *p != ',')
        return -1;
      p++;
    }
  }
  return p == end ? 0 : -1;
}

static size_t commas_in(const char *s, size_t len) {
  size_t k = 0;
  for (size_t i = 0; i < len; i++)
    k += s[i] == ',';
  return k;
}

/* The list readers' vector widths: AVX-512, AVX2, SSE2 (each where the CPU
 * has it, else the next narrower). */
static const int list_widths[3] = {64, 32, 16};

/* proto__num_list_f32 on a heap copy of s[0, len) exactly as long (so that
 * ASan and valgrind see any read outside it) gives what ref_list gives,
 * for n = commas + 1 and the counts either side of it. */
static void same_list(const char *s, size_t len) {
  enum { MAXN = 600 };
  static float got[MAXN], want[MAXN];
  size_t n0 = commas_in(s, len) + 1;
  ck_assert(n0 + 1 <= MAXN);
  char *b = malloc(len ? len : 1);
  memcpy(b, s, len);
  for (size_t n = n0 > 1 ? n0 - 1 : 0; n <= n0 + 1; n++) {
    int rw = ref_list(b, b + len, want, n);
    for (int w = 0; w < 3; w++) {
      int rg =
          proto__num_list_f32_width(b, b + len, got, n, list_widths[w]);
      ck_assert_msg(rg == rw, "n=%zu, %d-byte vectors: %d, token by token "
                    "%d: '%.*s'", n, list_widths[w], rg, rw, (int)len, s);
      for (size_t i = 0; rw == 0 && i < n; i++)
        ck_assert_msg(f32_bits(got[i]) == f32_bits(want[i]),
                      "element %zu, %d-byte vectors: %a, token by token %a: "
                      "'%.*s'", i, list_widths[w], (double)got[i],
                      (double)want[i], (int)len, s);
    }
  }
  free(b);
}

/* A random token: mostly the common shape, often not. */
static int rnd_token(char *t) {
  int o = 0;
  unsigned r = (unsigned)rnd();
  if (r % 3 == 0)
    t[o++] = '-';
  int ni = 1 + (int)(rnd() % (rnd() % 4 ? 3 : 20));
  for (int k = 0; k < ni; k++)
    t[o++] = (char)('0' + rnd() % 10);
  if (t[o - ni] == '0' && ni > 1 && rnd() % 4)
    t[o - ni] = (char)('1' + rnd() % 9); /* mostly no leading zero */
  if (rnd() % 4) {
    t[o++] = '.';
    int nf = (int)(rnd() % (rnd() % 4 ? 10 : 22)) + (rnd() % 8 != 0);
    for (int k = 0; k < nf; k++)
      t[o++] = (char)('0' + rnd() % 10);
  }
  if (rnd() % 5 == 0) {
    t[o++] = rnd() % 2 ? 'e' : 'E';
    if (rnd() % 2)
      t[o++] = rnd() % 2 ? '-' : '+';
    int ne = (int)(rnd() % 4);
    for (int k = 0; k < ne; k++)
      t[o++] = (char)('0' + rnd() % 10);
  }
  return o;
}

static const char ws_bytes[] = " \t\n\r";

START_TEST(lists_of_random_tokens_read_as_one_by_one) {
  char s[8192];
  for (int it = 0; it < 6000; it++) {
    int n = 1 + (int)(rnd() % (it % 10 == 0 ? 500 : 40)), o = 0;
    int spaces = rnd() % 6 == 0;
    for (int i = 0; i < n && o < 7900; i++) {
      if (i)
        s[o++] = ',';
      while (spaces && rnd() % 3 == 0)
        s[o++] = ws_bytes[rnd() % 4];
      o += rnd_token(s + o);
      while (spaces && rnd() % 3 == 0)
        s[o++] = ws_bytes[rnd() % 4];
    }
    same_list(s, (size_t)o);
  }
}
END_TEST

/* One token at the start, in the middle, and ending exactly at the
 * list's end, after prefixes that put it on every offset around the
 * 16-byte window, alone and between others; and after 30 numbers more,
 * so that the list is long enough to be read eight tokens at a time and
 * the token takes every place among its eight. */
START_TEST(list_tokens_at_every_offset_and_length) {
  static const char *const toks[] = {
    "0", "-0", "7", "-7", "0.5", "-0.5", "-0.123456", "0.0123456",
    "1.2345678", "-0.33333334", "123456789012345", "1234567890123456",
    "-123456789012345", "12345678901234567", "0.00000000000001",
    "0.000000000000001", "-9.99999999999999", "9.999999999999999",
    "99999999999999999999", "1234567890123456789", "12345678901234567890",
    "16777217", "-16777219", "8388608.5", "-8388609.5", "16777217.0",
    "33554433", "1e5", "-1.5e-3", "1.2345678e-05", "3.4028235e38",
    "3.4028236e38", "1e39", "1e-46", "-1e-45", "0e5", "-0.0e-0", "1E+2",
    "2e22", "2e23", "1e-22", "1e-23", "01", "-01", "00", "1.", "-.5", ".5",
    "1.e5", "1e", "1e+", "-", "", "+1", "--1", "1..2", "1.2.3", "1e5e5",
    "0x10", "inf", "nan", "1-", "1-2", "1+2", "1e1.5", "- 1", "1 2",
    " 1", "1 ", "\t-0.5\n", "\r1\r"};
  static const char *const fills[] = {"1", "-0.25", "10.5", "123456.75"};
  char s[1024];
  for (size_t t = 0; t < sizeof toks / sizeof *toks; t++) {
    for (int pre = 0; pre < 40; pre++) {
      for (int shape = 0; shape < 8; shape++) {
        const char *fill = fills[pre % 4];
        int o = 0;
        for (int k = 0; shape & 4 && k < 30; k++)
          o += snprintf(s + o, sizeof s - (size_t)o, "%s,", fills[k % 4]);
        int o0 = o;
        if (shape & 1) /* numbers before it: pre bytes' worth */
          while (o - o0 < pre)
            o += snprintf(s + o, sizeof s - (size_t)o, "%s,", fill);
        else /* or whitespace */
          for (int k = 0; k < pre % 20; k++)
            s[o++] = ' ';
        o += snprintf(s + o, sizeof s - (size_t)o, "%s", toks[t]);
        if (shape & 2)
          o += snprintf(s + o, sizeof s - (size_t)o, ",%s,%s", fill, fill);
        same_list(s, (size_t)o);
      }
    }
  }
}
END_TEST

/* Every byte of a list replaced by each byte of the number grammar and a
 * few others, deleted, and doubled: the same verdict, the same numbers.
 * The list is long enough to be read eight tokens at a time, and has
 * json.dumps' ", " in its second half. */
START_TEST(list_errors_at_every_position) {
  static const char base[] =
      "-0.5,12.25,-3,0.0123456,1e5,-7.5e-3,0,-0,123456789012345,"
      "0.33333334,2.5E+1,1234.5678,0.25,-0.125,7,-8.5,99.75,-0.0625,"
      "3.5,-1.75,0.5,6.25,-12.5,0.75,100.5,-2.25,0.001,-0.999,42,"
      "-0.5, 12.25, -3, 0.0123456, 1e5, -7.5e-3, 0, -0, 123456789012345, "
      "0.33333334, 2.5E+1, 1234.5678, 0.25, -0.125, 7, -8.5, 99.75";
  static const char subst[] = "0123456789-+.eE, \t\n\rx\"]";
  char s[sizeof base + 4];
  size_t len = strlen(base);
  for (size_t at = 0; at < len; at++) {
    for (size_t k = 0; k < sizeof subst - 1; k++) {
      memcpy(s, base, len);
      s[at] = subst[k];
      same_list(s, len);
    }
    memcpy(s, base, at); /* deleted */
    memcpy(s + at, base + at + 1, len - at - 1);
    same_list(s, len - 1);
    memcpy(s, base, at + 1); /* doubled */
    memcpy(s + at + 1, base + at, len - at);
    same_list(s, len + 1);
  }
}
END_TEST

/* Values the fast path must hand on: ties between floats that double
 * rounding would break the wrong way, and long lists across chunks. */
START_TEST(list_values_equal_strtof) {
  static const char *const ties[] = {
    "16777217", "16777219", "-16777221", "8388608.5", "8388609.5",
    "-4194304.25", "4194304.75", "33554434", "33554438", "16777217.000"};
  char s[64];
  for (size_t i = 0; i < sizeof ties / sizeof *ties; i++) {
    float x[3];
    int n = snprintf(s, sizeof s, "%s,%s,%s", ties[i], ties[i], ties[i]);
    ck_assert_int_eq(proto__num_list_f32(s, s + n, x, 3), 0);
    for (int k = 0; k < 3; k++)
      ck_assert_msg(f32_bits(x[k]) == f32_bits(strtof(ties[i], NULL)),
                    "%s: %a", ties[i], (double)x[k]);
  }
  /* 15 significant digits (16 bytes) that a double rounds onto the
   * midpoint between two floats while the decimal is to one side of it:
   * (float) of that double would break the tie to even, strtof goes to
   * the decimal's side; each twice on its own, then all in one list (read
   * eight at a time) */
  static char mids[300][20];
  char *all = malloc(sizeof mids);
  size_t all_len = 0;
  int found = 0;
  for (int i = 0; i < 200000 && found < 300; i++) {
    float f = bits_f32(0x3f800000u + (uint32_t)(rnd() % (10u << 23)));
    double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
    int idig = snprintf(s, sizeof s, "%.0f", floor(mid));
    snprintf(s, sizeof s, "%.*f", 15 - idig, mid);
    if (strtod(s, NULL) != mid || strtof(s, NULL) == (float)mid)
      continue;
    memcpy(mids[found], s, 17);
    all_len += (size_t)sprintf(all + all_len, found ? ",%s" : "%s", s);
    found++;
    float x[2];
    char l[64];
    int n = snprintf(l, sizeof l, "%s,%s", s, s);
    ck_assert_int_eq(strlen(s), 16);
    ck_assert_int_eq(proto__num_list_f32(l, l + n, x, 2), 0);
    ck_assert_msg(f32_bits(x[0]) == f32_bits(strtof(s, NULL)) &&
                      f32_bits(x[1]) == f32_bits(strtof(s, NULL)),
                  "%s: %a, strtof %a", s, (double)x[0],
                  (double)strtof(s, NULL));
  }
  ck_assert_int_eq(found, 300);
  float mx[300];
  for (int w = 0; w < 3; w++) {
    ck_assert_int_eq(proto__num_list_f32_width(all, all + all_len, mx, 300,
                                               list_widths[w]), 0);
    for (int i = 0; i < 300; i++)
      ck_assert_msg(f32_bits(mx[i]) == f32_bits(strtof(mids[i], NULL)),
                    "%s in a list, %d-byte vectors: %a", mids[i],
                    list_widths[w], (double)mx[i]);
  }
  free(all);
  /* 5000 numbers (about 50 KB, many chunks), 6 and 9 digits, shortest */
  enum { N = 5000 };
  size_t cap = (size_t)N * 25;
  char *b = malloc(cap);
  float *x = malloc(N * sizeof *x);
  static char texts[N][24];
  size_t o = 0;
  for (int i = 0; i < N; i++) {
    float f = i % 3 ? rnd_float() : (float)((double)(rnd() % 2000000) / 1e6 - 1);
    if (i % 3 == 1)
      proto__fmt_f32(texts[i], f);
    else
      snprintf(texts[i], sizeof texts[i], "%.6g", (double)f);
    if (!isfinite(strtof(texts[i], NULL)))
      snprintf(texts[i], sizeof texts[i], "%d", i);
    o += (size_t)snprintf(b + o, cap - o, i ? ",%s" : "%s", texts[i]);
  }
  ck_assert_int_eq(proto__num_list_f32(b, b + o, x, N), 0);
  for (int i = 0; i < N; i++)
    ck_assert_msg(f32_bits(x[i]) == f32_bits(strtof(texts[i], NULL)),
                  "%s: %a", texts[i], (double)x[i]);
  free(b);
  free(x);
}
END_TEST

/* Tokens of up to 15 bytes (the eight-token readers' shape) within a
 * few float64 ulps of the midpoint between two floats, on either side:
 * those readers multiply by the double nearest 10^-k, which is within 2
 * ulps of the decimal, so the ones nearer a midpoint must reach the
 * exact path.  About one in ten lands within 4 ulps. */
START_TEST(short_tokens_near_midpoints_equal_strtof) {
  enum { N = 4000 };
  static char tok[N][24];
  char *all = malloc((size_t)N * 24);
  size_t len = 0;
  int near = 0;
  for (int i = 0; i < N; i++) {
    float f = bits_f32(0x3a800000u + (uint32_t)(rnd() % (28u << 23)));
    double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
    char ip[48];
    int idig = mid < 1 ? 1 : snprintf(ip, sizeof ip, "%.0f", floor(mid));
    int neg = (int)(rnd() % 2);
    snprintf(tok[i], sizeof tok[i], "%s%.*f", neg ? "-" : "",
             14 - idig - neg, mid);
    double d = fabs(strtod(tok[i], NULL));
    near += fabs(d - mid) <= 4 * (nextafter(mid, INFINITY) - mid);
    len += (size_t)sprintf(all + len, i ? ",%s" : "%s", tok[i]);
  }
  ck_assert_int_gt(near, N / 50);
  float x[N];
  for (int w = 0; w < 3; w++) {
    ck_assert_int_eq(proto__num_list_f32_width(all, all + len, x, N,
                                               list_widths[w]), 0);
    for (int i = 0; i < N; i++)
      ck_assert_msg(f32_bits(x[i]) == f32_bits(strtof(tok[i], NULL)),
                    "%s, %d-byte vectors: %a, strtof %a", tok[i],
                    list_widths[w], (double)x[i],
                    (double)strtof(tok[i], NULL));
  }
  free(all);
}
END_TEST

/* ---- through the decoders ----------------------------------------------- */

/* 1 + 2^-24 is the midpoint between 1 and its upper neighbour; this
 * decimal is just above it, so strtof rounds up, while strtod gives the
 * midpoint itself, which (float) then rounds to even: 1. */
#define ABOVE_MID "1.0000000596046447753906250001"

static void decode_v1(const char *json, proto_request *r) {
  char err[PROTO_ERR_MAX];
  int rc = proto_v1_decode(json, strlen(json), r, 0, err);
  ck_assert_msg(rc == 0, "%s", err);
}

START_TEST(decoders_round_correctly) {
  float up = strtof(ABOVE_MID, NULL);
  ck_assert(up > 1.0f && (float)strtod(ABOVE_MID, NULL) == 1.0f);
  proto_request r;
  decode_v1("{\"query\":[[[" ABOVE_MID ",2]]],\"key\":[[[1,2]]],"
            "\"value\":[[[" ABOVE_MID "]]]}", &r);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 2.0f && r.prob.v[0] == up);
  proto_request_free(&r);
  decode_v1("{\"query\":{\"shape\":[1,1,2],\"data\":[" ABOVE_MID ",-0]},"
            "\"key\":[[[1,2]]],\"value\":[[[1]]],\"bias\":[" ABOVE_MID "]}",
            &r);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 0 && signbit(r.prob.q[1]));
  ck_assert(r.prob.bias[0] == up);
  proto_request_free(&r);
  char err[PROTO_ERR_MAX];
  const char *v2 =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,"
      "1,2],\"data\":[[" ABOVE_MID "],[3]]},{\"name\":\"key\",\"datatype\":"
      "\"FP64\",\"shape\":[1,1,2],\"data\":[" ABOVE_MID ",1]},{\"name\":"
      "\"value\",\"datatype\":\"FP16\",\"shape\":[1,1,2],\"data\":[1.0009765625,"
      "1.00048828125]},{\"name\":\"bias\",\"datatype\":\"BF16\",\"shape\":"
      "[1],\"data\":[1.01171875]},{\"name\":\"mask\",\"datatype\":\"BOOL\","
      "\"shape\":[1,1,1],\"data\":[true]},{\"name\":\"valid_lens\","
      "\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]}]}";
  ck_assert_int_eq(proto_v2_decode(v2, strlen(v2), NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err), 0);
  ck_assert(r.prob.q[0] == up && r.prob.q[1] == 3.0f);
  ck_assert(r.prob.k[0] == up);
  /* FP16: 1 + 2^-10 is on the grid; 1 + 2^-11 is a tie, to even: 1 */
  ck_assert(r.prob.v[0] == 1.0009765625f && r.prob.v[1] == 1.0f);
  /* BF16: 1.01171875 = 1 + 3 * 2^-8 is a tie between 1 + 2^-7 and
   * 1 + 2^-6... to even: 1 + 2^-6 */
  uint16_t h;
  float want;
  ck_assert_int_eq(proto__f64_to_bf16(1.01171875, &h), 0);
  proto__bf16_to_f32(h, &want);
  ck_assert(r.prob.bias[0] == want);
  ck_assert_int_eq(r.prob.mask[0], 1);
  ck_assert_int_eq(r.prob.valid_lens[0], 1);
  proto_request_free(&r);
}
END_TEST

/* Many random numbers, in every tensor form, read as strtof reads them. */
START_TEST(decoded_tensors_equal_strtof) {
  enum { N = 4 * 3 * 5 };
  char texts[N][48];
  float want[N];
  proto__buf b = {0};
  for (int i = 0; i < N; i++) {
    float f = rnd_float() * (rnd() % 2 ? 1.0f : 1e-30f);
    int p = 1 + (int)(rnd() % 12);
    snprintf(texts[i], sizeof texts[i], "%.*g", p, (double)f);
    if (!isfinite(strtof(texts[i], NULL)))
      snprintf(texts[i], sizeof texts[i], "%d", i);
    want[i] = strtof(texts[i], NULL);
  }
  /* query (4, 3, 5) nested with odd spacing; key flat; value v2 below */
  proto__buf_puts(&b, "{\"query\":[");
  for (int i = 0; i < N; i++) {
    if (i % 15 == 0)
      proto__buf_puts(&b, i ? "]], [[" : "[[");
    else if (i % 5 == 0)
      proto__buf_puts(&b, "] ,\n[");
    else
      proto__buf_puts(&b, " , ");
    proto__buf_puts(&b, texts[i]);
  }
  proto__buf_puts(&b, "]]],\"key\":{\"data\":[");
  for (int i = 0; i < N; i++) {
    proto__buf_puts(&b, i ? ",\t" : "");
    proto__buf_puts(&b, texts[i]);
  }
  proto__buf_puts(&b, "],\"shape\":[4,3,5]},\"value\":[[[1],[2],[3]],"
                      "[[1],[2],[3]],[[1],[2],[3]],[[1],[2],[3]]]}");
  ck_assert(!b.oom);
  proto_request r;
  decode_v1(b.p, &r);
  for (int i = 0; i < N; i++) {
    ck_assert_msg(f32_bits(r.prob.q[i]) == f32_bits(want[i]), "q %s",
                  texts[i]);
    ck_assert_msg(f32_bits(r.prob.k[i]) == f32_bits(want[i]), "k %s",
                  texts[i]);
  }
  proto_request_free(&r);
  proto__buf_free(&b);
}
END_TEST

/* ---- numscan against the cJSON path -------------------------------------- */

typedef struct outcome {
  int rc;
  char err[PROTO_ERR_MAX];
  proto_request r;
} outcome;

/* Decodes body (its first byte a space): path ' ' through numscan,
 * '\x01' through the cJSON path alone. */
static void run(char *body, size_t len, int v2, char path, outcome *o) {
  body[0] = ' ';
  proto__test_cjson_path(path == '\x01');
  o->rc = v2 ? proto_v2_decode(body, len, NULL, PROTO_MODEL_ATTENTION,
                               &o->r, 0, o->err)
             : proto_v1_decode(body, len, &o->r, 0, o->err);
  proto__test_cjson_path(0);
}

static void same_buffer(const void *a, const void *b, size_t bytes,
                        const char *what, const char *body) {
  ck_assert_msg((a == NULL) == (b == NULL), "%s present one way only: %s",
                what, body);
  if (a)
    ck_assert_msg(!memcmp(a, b, bytes), "%s differs: %s", what, body);
}

/* Elements of a mask or bias from its strides over (b, h, i, j). */
static size_t broadcast_elems(const attn_problem *p, const int64_t *st) {
  return 1 + (size_t)((p->B - 1) * st[0] + (p->H - 1) * st[1] +
                      (p->Lq - 1) * st[2] + (p->Lk - 1) * st[3]);
}

static void same_problem(const outcome *x, const outcome *y,
                         const char *body) {
  const attn_problem *p = &x->r.prob, *q = &y->r.prob;
  ck_assert_msg(p->B == q->B && p->H == q->H && p->Hkv == q->Hkv &&
                    p->Lq == q->Lq && p->Lk == q->Lk && p->D == q->D &&
                    p->Dk == q->Dk && p->Dv == q->Dv && p->Hd == q->Hd,
                "shapes differ: %s", body);
  ck_assert_msg(p->scale == q->scale && p->causal == q->causal &&
                    p->valid_lens_per_query == q->valid_lens_per_query &&
                    x->r.in_bytes == y->r.in_bytes &&
                    x->r.return_weights == y->r.return_weights &&
                    x->r.flat == y->r.flat && x->r.qrank == y->r.qrank,
                "options differ: %s", body);
  size_t bh = (size_t)p->B * p->H, bkv = (size_t)p->B * p->Hkv, f = 4;
  same_buffer(p->q, q->q, bh * p->Lq * p->D * f, "query", body);
  same_buffer(p->k, q->k, bkv * p->Lk * p->Dk * f, "key", body);
  same_buffer(p->v, q->v, bkv * p->Lk * p->Dv * f, "value", body);
  same_buffer(p->w_q, q->w_q, (size_t)p->Hd * p->D * f, "w_q", body);
  same_buffer(p->w_k, q->w_k, (size_t)p->Hd * p->Dk * f, "w_k", body);
  same_buffer(p->w_v, q->w_v, (size_t)p->Hd * f, "w_v", body);
  same_buffer(p->valid_lens, q->valid_lens,
              (size_t)p->B * (p->valid_lens_per_query ? p->Lq : 1) * 4,
              "valid_lens", body);
  same_buffer(p->mask, q->mask, broadcast_elems(p, p->mask_stride), "mask",
              body);
  same_buffer(p->bias, q->bias, broadcast_elems(p, p->bias_stride) * f,
              "bias", body);
}

static const char *const seeds[] = {
  " {\"query\":[[[0.5,-1.25,2],[1,1e-3,0]]],\"key\":[[[1,0,0],[0,1,0],"
  "[0,0,1]]],\"value\":[[[1,2],[3,4],[5,6]]],\"valid_lens\":[2],\"mask\":"
  "[[true,false,true],[1,1,0]],\"bias\":[[0.5,0.25,-1]],\"causal\":false,"
  "\"scale\":0.5,\"id\":\"q[1,2]\"}",
  " {\"query\":{\"shape\":[1,2,2,2],\"data\":[1,2,3,4,5,6,7,8]},\"key\":"
  "{\"data\":[1,2,3,4,5,6,7,8],\"shape\":[1,1,2,2]},\"value\":[[[[1],[2]]]],"
  "\"valid_lens\":[[1,2]],\"return_weights\":false,\"window\":[1,null]}",
  " {\"scoring\":\"additive\",\"query\":[[[1,2]]],\"key\":[[[1,2,3],"
  "[4,5,6]]],\"value\":[[[1],[2]]],\"w_q\":[[0.5,1],[1,0]],\"w_k\":[[1,0,1],"
  "[0,1,0]],\"w_v\":[1,-1],\"dropout\":{\"p\":0.25,\"seed\":7}}",
};

static const char *const seeds_v2[] = {
  " {\"id\":\"r1\",\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
  "\"shape\":[1,2,2],\"data\":[[1.5,2],[3,4e-2]]},{\"name\":\"key\","
  "\"datatype\":\"FP16\",\"shape\":[1,3,2],\"data\":[1,0,0,1,0.5,0.25]},"
  "{\"name\":\"value\",\"datatype\":\"BF16\",\"shape\":[1,3,2],\"data\":"
  "[[1,2],[3,4],[5,6]]},{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":"
  "[2,3],\"data\":[true,false,true,1,1,0]},{\"name\":\"valid_lens\","
  "\"datatype\":\"INT64\",\"shape\":[1],\"data\":[3]},{\"name\":\"bias\","
  "\"datatype\":\"FP64\",\"shape\":[3],\"data\":[0.1,0.2,0.3]}],"
  "\"outputs\":[{\"name\":\"output\"}],\"parameters\":{\"causal\":true}}",
};

/* Bytes mutations write: number, structure and whitespace characters,
 * and a control byte JSON does not allow between tokens. */
static const char alphabet[] = "0123456789-+.eE,[]{}\": tfnrulas\x01\t";

static size_t mutate(char *b, size_t len, size_t cap) {
  int ops = 1 + (int)(rnd() % 3);
  for (int k = 0; k < ops && len > 2; k++) {
    size_t at = 1 + rnd() % (len - 1);
    char ch = alphabet[rnd() % (sizeof alphabet - 1)];
    switch (rnd() % 4) {
    case 0:
      b[at] = ch;
      break;
    case 1: { /* delete 1..3 bytes */
      size_t n = 1 + rnd() % 3;
      if (at + n > len)
        n = len - at;
      memmove(b + at, b + at + n, len - at - n);
      len -= n;
      break;
    }
    case 2:
      if (len + 1 < cap) {
        memmove(b + at + 1, b + at, len - at);
        b[at] = ch;
        len++;
      }
      break;
    default: { /* copy a short segment over another place */
      size_t from = 1 + rnd() % (len - 1), n = 1 + rnd() % 12;
      if (from + n > len)
        n = len - from;
      if (len + n < cap) {
        memmove(b + at + n, b + at, len - at);
        memmove(b + at, b + (from >= at ? from + n : from), n);
        len += n;
      }
    }
    }
  }
  return len;
}

/* 1 when b[0, len) holds only JSON's blanks. */
static int blank(const char *b, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!strchr(" \t\r\n", b[i]) || !b[i])
      return 0;
  return 1;
}

static void compare_paths(char *b, size_t len, int v2) {
  outcome x, y;
  char shown[600], why[PROTO_ERR_MAX];
  proto__json_stats st;
  run(b, len, v2, ' ', &x);
  run(b, len, v2, '\x01', &y);
  b[0] = ' ';
  snprintf(shown, sizeof shown, "%.*s", (int)(len < 500 ? len : 500), b);
  /* a body the full check refuses gets its message, whichever path */
  if (!blank(b, len) &&
      proto__json_check(b, len, v2 ? PROTO_CODEC_V2 : PROTO_CODEC_V1, "", 0,
                        &st, why))
    ck_assert_msg(x.rc == ATTND_EINVAL && !strcmp(x.err, why),
                  "rc %d '%s', the check says '%s': %s", x.rc, x.err, why,
                  shown);
  ck_assert_msg(x.rc == y.rc, "rc %d vs %d (%s | %s): %s", x.rc, y.rc,
                x.err, y.err, shown);
  ck_assert_msg(!strcmp(x.err, y.err), "'%s' vs '%s': %s", x.err, y.err,
                shown);
  if (x.rc == 0)
    same_problem(&x, &y, shown);
  proto_request_free(&x.r);
  proto_request_free(&y.r);
}

START_TEST(mutated_bodies_decode_as_on_the_cjson_path) {
  char b[1024];
  int accepted = 0;
  for (int i = 0; i < 12000; i++) {
    int v2 = i % 4 == 3;
    const char *seed = v2 ? seeds_v2[0] : seeds[i % 3];
    size_t len = strlen(seed);
    memcpy(b, seed, len);
    if (i >= 8) /* the seeds themselves first, then mutants */
      len = mutate(b, len, sizeof b);
    outcome x;
    run(b, len, v2, ' ', &x);
    accepted += x.rc == 0;
    proto_request_free(&x.r);
    compare_paths(b, len, v2);
  }
  /* the mutants must exercise both outcomes */
  ck_assert_int_gt(accepted, 150);
  ck_assert_int_lt(accepted, 11000);
}
END_TEST

/* Leaves long enough for the scan's 64-byte steps (AVX-512BW where the
 * CPU has it), with a stop byte ([ ] { } ") or a comma written over each
 * of their bytes in turn: the same answer as the cJSON path. */
START_TEST(long_leaves_with_a_stop_byte_anywhere) {
  static const char stops[] = "[]{}\",";
  char b[2048];
  for (int n = 40; n <= 200; n += 53) { /* 161 to 804 bytes of numbers */
    size_t o = 0;
    o += (size_t)snprintf(b + o, sizeof b - o,
                          " {\"query\":{\"shape\":[1,1,1,%d],\"data\":[", n);
    size_t first = o;
    for (int i = 0; i < n; i++)
      o += (size_t)snprintf(b + o, sizeof b - o, "%s%d.%d", i ? "," : "",
                            i % 7, i);
    size_t last = o;
    o += (size_t)snprintf(b + o, sizeof b - o,
                          "]},\"key\":[[[1]]],\"value\":[[[1]]]}");
    compare_paths(b, o, 0);
    for (size_t k = first; k < last; k++) {
      char was = b[k];
      b[k] = stops[k % (sizeof stops - 1)];
      compare_paths(b, o, 0);
      b[k] = was;
    }
  }
}
END_TEST

/* Numbers JSON does not allow, which cJSON reads (and numscan's reader
 * refuses): 400 naming the token, on both paths and in every place a
 * number goes - a tensor element, the v1 envelope, a v2 shape. */
START_TEST(numbers_json_forbids_are_refused_on_both_paths) {
  static const char *const tokens[] = {"01", "-01", "00", "1.", "-1.", "0.",
                                       "1.e5", "00.5", "-.5", "1.E+2"};
  static const char *const v1[] = {
    " {\"query\":[[[%s,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
    " {\"query\":{\"shape\":[1,1,2],\"data\":[1,%s]},\"key\":[[[1,2]]],"
    "\"value\":[[[1]]]}",
    " {\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
    "\"scale\":%s}",
  };
  static const char v2[] =
      " {\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,1,%s],"
      "\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"key\",\"shape\":"
      "[1,1,1,2],\"datatype\":\"FP32\",\"data\":[1,2]},{\"name\":\"value\","
      "\"shape\":[1,1,1,1],\"datatype\":\"FP32\",\"data\":[1]}]}";
  char b[512], want[64];
  for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) {
    snprintf(want, sizeof want, "%s is not a JSON number", tokens[t]);
    for (size_t i = 0; i <= sizeof v1 / sizeof *v1; i++) {
      int is_v2 = i == sizeof v1 / sizeof *v1;
      /* the v2 shape holds integers: "1.e5" and "-.5" fail there as such */
      if (is_v2 && strpbrk(tokens[t], ".eE-"))
        continue;
      int len = snprintf(b, sizeof b, is_v2 ? v2 : v1[i], tokens[t]);
      outcome x;
      run(b, (size_t)len, is_v2, ' ', &x);
      ck_assert_msg(x.rc == ATTND_EINVAL, "%s: accepted", b);
      ck_assert_msg(strstr(x.err, want) && strstr(x.err, "at byte"),
                    "%s: %s", b, x.err);
      proto_request_free(&x.r);
      compare_paths(b, (size_t)len, is_v2);
    }
  }
}
END_TEST

/* The decimal a hair above (dir > 0) or below the midpoint between f and
 * the float above it, into s: the midpoint's exact expansion (a double,
 * so %.80e is exact) with a 1 appended, or with 1 taken off its 85th
 * digit.  Its double is the midpoint itself, which rounds to the even
 * float; the decimal rounds to the float on its side. */
static void near_midpoint_text(float f, int dir, char *s, size_t cap) {
  double m = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
  char e[16];
  snprintf(s, cap, "%.84e", m);
  char *x = strchr(s, 'e');
  snprintf(e, sizeof e, "%s", x);
  if (dir > 0) {
    x[0] = '1';
  } else {
    char *d = x - 1; /* borrow from the last digit */
    while (*d == '0')
      *d-- = '9';
    (*d)--;
    x[0] = '\0';
  }
  snprintf(x + (dir > 0), cap - (size_t)(x - s) - 1, "%s", e);
}

/* Bodies the cJSON path decodes (\x01 in front, or an escaped member
 * name) read every float32 as its decimal rounds, not as its double: the
 * same floats as numscan's exact reader, next to midpoints too. */
START_TEST(cjson_path_rounds_long_decimals_once) {
  enum { N = 256 };
  static char b[N * 100 + 256], tok[128];
  static float want[N];
  size_t len = (size_t)snprintf(b, sizeof b, " {\"query\":[[[0]]],"
                                "\"key\":[[[0]]],\"\\u0076alue\":[[[");
  for (int i = 0; i < N; i++) {
    /* 2^-10 to 2, where %.84e is the midpoint's whole expansion; every
     * other one negative */
    uint64_t r = rnd();
    float f = bits_f32((uint32_t)(r & 0x7fffffu) |
                       (uint32_t)(117 + (r >> 32) % 11) << 23);
    int neg = i % 4 >= 2;
    tok[0] = '-';
    near_midpoint_text(f, i % 2 ? 1 : -1, tok + neg, sizeof tok - 1);
    want[i] = i % 2 ? nextafterf(f, INFINITY) : f;
    if (neg)
      want[i] = -want[i];
    ck_assert_msg(strtof(tok, NULL) == want[i], "%s", tok);
    len += (size_t)snprintf(b + len, sizeof b - len, "%s%s", i ? "," : "",
                            tok);
  }
  len += (size_t)snprintf(b + len, sizeof b - len,
                          "]]],\"return_weights\":false}");
  outcome x;
  run(b, len, 0, ' ', &x);
  ck_assert_msg(x.rc == 0, "%s", x.err);
  const float *v = x.r.prob.v;
  int wrong = 0;
  for (int i = 0; i < N; i++)
    wrong += f32_bits(v[i]) != f32_bits(want[i]);
  ck_assert_msg(wrong == 0, "%d of %d values not rounded once", wrong, N);
  proto_request_free(&x.r);
  compare_paths(b, len, 0);
}
END_TEST

/* Bodies numscan leaves to cJSON, which accepts them: the same answer. */
START_TEST(what_only_cjson_accepts_still_decodes) {
  static const char *const bodies[] = {
    " {\"\\u0071uery\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
  };
  char b[256];
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    size_t len = strlen(bodies[i]);
    memcpy(b, bodies[i], len);
    outcome x;
    run(b, len, 0, ' ', &x);
    ck_assert_msg(x.rc == 0, "%s: %s", bodies[i], x.err);
    proto_request_free(&x.r);
    compare_paths(b, len, 0);
  }
}
END_TEST

/* ---- the top of each float range --------------------------------------
 *
 * A decimal is in range exactly when it rounds (to nearest) to a finite
 * value: below FLT_MAX + half an ulp (2^128 - 2^103), 65504 + 16 for FP16,
 * BF16's largest + half its ulp.  FLT_MAX prints as 3.4028235e38, whose
 * double is past FLT_MAX, and 3.4028235677973366e38, whose double is the
 * midpoint itself; both are under it.  Every text goes into every float
 * field of both codecs, through numscan (' ') and cJSON alone ('\x01'). */

/* 2^128 - 2^103 and BF16's 2^128 - 2^119 - 2^120, exactly. */
#define F32_MID "340282356779733661637539395458142568448"
#define BF16_MID "339617752923046005526922703901628039168"

/* v1 with t in query (nested), key (flat), bias and scale; v2 with t in
 * an FP32 and an FP64 input's data, the bias and parameters.scale, and h
 * in an FP16 value and b in a BF16 mask-free bias of their own. */
static size_t top_body(char *o, size_t cap, int v2, const char *t,
                       const char *h, const char *b) {
  if (!v2)
    return (size_t)snprintf(o, cap, " {\"query\":[[[%s,1]]],\"key\":"
                            "{\"shape\":[1,1,2],\"data\":[1,%s]},\"value\":"
                            "[[[%s]]],\"bias\":[[%s]],\"scale\":%s}", t, t,
                            h ? h : "1", t, t);
  return (size_t)snprintf(
      o, cap, " {\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\","
      "\"shape\":[1,1,2],\"data\":[%s,1]},{\"name\":\"key\",\"datatype\":"
      "\"FP64\",\"shape\":[1,1,2],\"data\":[1,%s]},{\"name\":\"value\","
      "\"datatype\":\"FP16\",\"shape\":[1,1,1],\"data\":[%s]},{\"name\":"
      "\"bias\",\"datatype\":\"%s\",\"shape\":[1,1],\"data\":[%s]}],"
      "\"parameters\":{\"scale\":%s}}", t, t, h ? h : "1", b ? "BF16" : "FP32",
      b ? b : t, t);
}

static void top_accepted(int v2, const char *t, float want, const char *h,
                         float hwant, const char *b, float bwant) {
  char body[1024];
  for (int path = 0; path < 2; path++) {
    size_t len = top_body(body, sizeof body, v2, t, h, b);
    outcome x;
    run(body, len, v2, path ? '\x01' : ' ', &x);
    ck_assert_msg(x.rc == 0, "%s (v%d, %s): %s", t, v2 + 1,
                  path ? "cJSON" : "numscan", x.err);
    const attn_problem *p = &x.r.prob;
    ck_assert_msg(p->q[0] == want && p->k[1] == want && p->scale == want &&
                      p->bias[0] == (b ? bwant : want) &&
                      p->v[0] == (h ? hwant : 1.0f),
                  "%s (v%d, %s): %a %a %a %a %a", t, v2 + 1,
                  path ? "cJSON" : "numscan", (double)p->q[0],
                  (double)p->k[1], (double)p->scale, (double)p->bias[0],
                  (double)p->v[0]);
    proto_request_free(&x.r);
  }
}

START_TEST(flt_max_text_is_accepted_everywhere) {
  static const char *const under[] = {
    "3.4028235e38", "3.4028235E+38", "34028235e31", "3.4028235677973366e38",
    "340282356779733661637539395458142568447",
    "3.40282356779733661637539395458142568447999e38",
    "340282356779733661637539395458142568447.9999", "3.4028234663852886e38"};
  char neg[64];
  for (size_t i = 0; i < sizeof under / sizeof *under; i++) {
    for (int v2 = 0; v2 < 2; v2++) {
      top_accepted(v2, under[i], FLT_MAX, NULL, 0, NULL, 0);
      snprintf(neg, sizeof neg, "-%s", under[i]);
      top_accepted(v2, neg, -FLT_MAX, NULL, 0, NULL, 0);
    }
  }
}
END_TEST

START_TEST(fp16_and_bf16_tops_are_accepted) {
  static const char *const h16[] = {"65504", "65519.99", "65519.999999999999999999",
                                    "6.5519999999999999999999e4"};
  float bmax;
  proto__bf16_to_f32(0x7f7f, &bmax);
  static const char *const b16[] = {"3.3895314e38", "3.3961775e38",
                                    "3.39617752923046e38",
                                    "3.396177529230460055269227039016280391679e38", "339617752923046005526922703901628039167"};
  char neg[64], nb[64];
  for (size_t i = 0; i < sizeof h16 / sizeof *h16; i++) {
    snprintf(neg, sizeof neg, "-%s", h16[i]);
    snprintf(nb, sizeof nb, "-%s", b16[i]);
    top_accepted(1, "1", 1, h16[i], 65504, b16[i], bmax);
    top_accepted(1, "1", 1, neg, -65504, nb, -bmax);
    top_accepted(0, "1", 1, NULL, 0, NULL, 0);
  }
  top_accepted(1, "1", 1, "1", 1, b16[4], bmax);
}
END_TEST

/* text refused in every field of kind (0: float32, 1: FP16, 2: BF16),
 * on both paths, with a message holding want. */
static void top_refused(const char *t, int kind, const char *want) {
  char body[1024];
  static const char *const fields[2][4] = {
    {"query[0][0][0]", "key[0][0][1]", "bias[0][0]", "scale"},
    {"query[0][0][0]", "key[0][0][1]", "bias[0][0]", "parameters.scale"}};
  for (int v2 = 0; v2 < (kind ? 1 : 2); v2++) {
    for (int f = 0; f < (kind ? 1 : 4); f++) {
      const char *q = f == 0 ? t : "1", *k = f == 1 ? t : "1";
      const char *bi = f == 2 ? t : "1", *sc = f == 3 ? t : "1";
      size_t len;
      if (kind)
        len = top_body(body, sizeof body, 1, "1", kind == 1 ? t : NULL,
                       kind == 2 ? t : NULL);
      else if (!v2)
        len = (size_t)snprintf(body, sizeof body, " {\"query\":[[[%s,1]]],"
                               "\"key\":{\"shape\":[1,1,2],\"data\":[1,%s]},"
                               "\"value\":[[[1]]],\"bias\":[[%s]],\"scale\":"
                               "%s}", q, k, bi, sc);
      else
        len = (size_t)snprintf(
            body, sizeof body, " {\"inputs\":[{\"name\":\"query\","
            "\"datatype\":\"FP32\",\"shape\":[1,1,2],\"data\":[%s,1]},"
            "{\"name\":\"key\",\"datatype\":\"FP64\",\"shape\":[1,1,2],"
            "\"data\":[1,%s]},{\"name\":\"value\",\"datatype\":\"FP32\","
            "\"shape\":[1,1,1],\"data\":[1]},{\"name\":\"bias\",\"datatype\":"
            "\"FP32\",\"shape\":[1,1],\"data\":[%s]}],\"parameters\":"
            "{\"scale\":%s}}", q, k, bi, sc);
      const char *name = kind == 1 ? "value[0][0][0]"
                         : kind == 2 ? "bias[0][0]" : fields[v2][f];
      char full[384];
      snprintf(full, sizeof full, "%s: %s", name, want);
      for (int path = 0; path < 2; path++) {
        outcome x;
        run(body, len, kind ? 1 : v2, path ? '\x01' : ' ', &x);
        ck_assert_msg(x.rc == ATTND_EINVAL && strstr(x.err, full),
                      "%s as %s (%s): rc %d '%s'", t, name,
                      path ? "cJSON" : "numscan", x.rc, x.err);
        if (x.rc == 0)
          proto_request_free(&x.r);
      }
    }
  }
}

START_TEST(past_the_midpoint_is_refused_with_the_value) {
  static const char *const f32_tie =
      " is out of float32 range (decimals from "
      "3.40282356779733661637539395458142568448e38 on round to infinity; "
      "the largest is 3.4028235e38)";
  static const char *const f32_max = " is out of float32 range (the "
                                     "largest is 3.4028235e38)";
  /* each number as it was written, then why */
  static const struct { const char *t; int kind; const char *why; } c[] = {
    {F32_MID, 0, NULL},
    {"3.40282356779733661637539395458142568448e38", 0, NULL},
    {"3.4028235677973367e38", 0, NULL},
    {"3.402823567797336616375393954581425684480000001e+38", 0, NULL},
    {"-" F32_MID, 0, NULL},
    {"3.4028236e38", 0, ""},
    {"1e39", 0, ""},
    {"-1e39", 0, ""},
    {"65520", 1, " is out of FP16 range (decimals from 65520 on round to "
                 "infinity; the largest is 65504)"},
    {"-65520.0000000000000001", 1, " is out of FP16 range"},
    {"65536", 1, " is out of FP16 range (the largest is 65504)"},
    {BF16_MID, 2, " is out of BF16 range (decimals from "
                  "3.39617752923046005526922703901628039168e38 on round "
                  "to infinity; the largest is 3.3895314e38)"},
    {"3.3961776e38", 2, " is out of BF16 range (the largest is "
                        "3.3895314e38)"},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    char m[300];
    snprintf(m, sizeof m, "%s%s", c[i].t,
             !c[i].why ? f32_tie : c[i].why[0] ? c[i].why : f32_max);
    top_refused(c[i].t, c[i].kind, m);
  }
}
END_TEST

/* Errors inside numscan's leaves carry the cJSON path's messages. */
START_TEST(errors_in_leaves_keep_their_messages) {
  static const struct { const char *body, *msg; } cases[] = {
    {"{\"query\":[[[1,1e39]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query[0][0][1]: 1e39 is out of float32 range (the largest is "
     "3.4028235e38)"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,true]]],\"value\":[[[1]]]}",
     "key: expected a number at [0][0][1], got true"},
    {"{\"query\":[[[1,2],[3]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query: ragged array at [0][1] (length 1, expected 2)"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2 3]]],\"value\":[[[1]]]}",
     "body is not valid JSON at byte 32: expected ',' or ']', got '3'"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
     "\"mask\":[[2]]}", "mask: expected true, false, 0 or 1 at [0][0], "
     "got 2"},
    {"{\"query\":[[[1,2]]],\"key\":[[[1,2]]],\"value\":[[[1]]],"
     "\"valid_lens\":[1.5]}", "valid_lens: expected an integer at [0], "
     "got 1.5"},
    {"{\"query\":[[[]]],\"key\":[[[1,2]]],\"value\":[[[1]]]}",
     "query: axis 2 is empty"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    proto_request r;
    char err[PROTO_ERR_MAX];
    int rc = proto_v1_decode(cases[i].body, strlen(cases[i].body), &r, 0,
                             err);
    ck_assert_int_eq(rc, ATTND_EINVAL);
    ck_assert_msg(!strcmp(err, cases[i].msg), "'%s', want '%s'", err,
                  cases[i].msg);
  }
  /* v2: a second "data" that is not JSON is still found */
  const char *v2 =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,"
      "2],\"data\":[1,2],\"data\":[1,2 3]},{\"name\":\"key\",\"datatype\":"
      "\"FP32\",\"shape\":[1,1,2],\"data\":[1,2]},{\"name\":\"value\","
      "\"datatype\":\"FP32\",\"shape\":[1,1,1],\"data\":[1]}]}";
  proto_request r;
  char err[PROTO_ERR_MAX];
  ck_assert_int_eq(proto_v2_decode(v2, strlen(v2), NULL,
                                   PROTO_MODEL_ATTENTION, &r, 0, err),
                   ATTND_EINVAL);
  ck_assert_msg(strstr(err, "not valid JSON"), "%s", err);
}
END_TEST

/* The byte-at-a-time count proto__count_commas replaced. */
static size_t commas_ref(const char *s, size_t n) {
  size_t commas = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ',') {
      commas++;
    } else if (s[i] == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
          i++;
    }
  }
  return commas;
}

START_TEST(comma_count_matches_the_bytewise_one) {
  static const char pick[] = ",,,\"\\ab1[]{}";
  char s[300];
  for (int i = 0; i < 100000; i++) {
    size_t n = rnd() % sizeof s;
    for (size_t k = 0; k < n; k++)
      s[k] = rnd() % 4 ? pick[rnd() % (sizeof pick - 1)] : 'x';
    ck_assert_uint_eq(proto__count_commas(s, n), commas_ref(s, n));
  }
}
END_TEST

/* ---- printing ---------------------------------------------------------- */

/* Fewest significant digits p for which "%.*g" reads back as f. */
static int shortest_p(float f, char *t, size_t cap) {
  int p = 1;
  for (; p <= 9; p++) {
    snprintf(t, cap, "%.*g", p, (double)f);
    if (strtof(t, NULL) == f)
      break;
  }
  return p;
}

static int sig_digits(const char *s) {
  int n = 0, started = 0, trailing = 0;
  for (; *s && *s != 'e'; s++) {
    if (*s >= '1' && *s <= '9')
      started = 1;
    if (started && *s >= '0' && *s <= '9') {
      n++;
      trailing = *s == '0' ? trailing + 1 : 0;
    }
  }
  return n - trailing;
}

START_TEST(printed_floats_are_shortest_and_closest) {
  char s[PROTO__F32_MAX], t[64];
  for (int i = 0; i < 60000; i++) {
    float f = rnd_float();
    int n = proto__fmt_f32(s, f);
    ck_assert_int_eq(n, (int)strlen(s));
    ck_assert_msg(strtof(s, NULL) == f, "%s != %a", s, (double)f);
    if (f == 0)
      continue;
    int p = shortest_p(f, t, sizeof t);
    ck_assert_msg(sig_digits(s) <= p, "%s has more digits than %s", s, t);
    /* the correctly rounded p-digit decimal reads back, so it is the
     * closest of the shortest: the printed value must be it */
    ck_assert_msg(strtod(s, NULL) == strtod(t, NULL), "%s vs %s", s, t);
  }
  /* every 61st float of one binade, and a sweep over all of them */
  for (uint32_t u = 0x3f800000u; u < 0x40000000u; u += 61) {
    proto__fmt_f32(s, bits_f32(u));
    ck_assert(strtof(s, NULL) == bits_f32(u));
  }
  for (uint64_t u = 1; u < 0x100000000ull; u += 16411) {
    float f = bits_f32((uint32_t)u);
    if (!isfinite(f))
      continue;
    proto__fmt_f32(s, f);
    ck_assert_msg(strtof(s, NULL) == f, "%s != %a", s, (double)f);
  }
}
END_TEST

START_TEST(printed_layout_is_unchanged) {
  static const struct { float x; const char *s; } cases[] = {
    {1.0f, "1"}, {-2.5f, "-2.5"}, {0.1f, "0.1"}, {100.0f, "100"},
    {123456789.0f, "123456790"}, {1e9f, "1e9"}, {1.5e10f, "1.5e10"},
    {0.001f, "0.001"}, {0.00001f, "0.00001"}, {0.000001f, "1e-6"},
    {1.25e-7f, "1.25e-7"}, {1e-45f, "1e-45"}, {-1e38f, "-1e38"},
    {3.4028235e38f, "3.4028235e38"}, {0.33333334f, "0.33333334"},
    {16777216.0f, "16777216"}, {-0.0f, "0"}};
  char s[PROTO__F32_MAX];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    proto__fmt_f32(s, cases[i].x);
    ck_assert_msg(!strcmp(s, cases[i].s), "%s, want %s", s, cases[i].s);
  }
}
END_TEST

/* n floats printed as a list, by the widest printer and by each of the
 * eight-, four- and one-at-a-time ones (those the CPU lacks fall back to
 * one at a time), checked against n one-by-one prints joined with
 * commas, in a buffer of exactly the documented size (so that ASan sees
 * any store past it). */
static void check_list(const float *x, size_t n) {
  size_t cap = n * (PROTO__F32_MAX + 1) + 1;
  char *got = malloc(cap), *want = malloc(cap), *o = want;
  ck_assert(got && want);
  for (size_t i = 0; i < n; i++) {
    if (i)
      *o++ = ',';
    o += proto__fmt_f32(o, x[i]);
  }
  *o = '\0';
  static const int widths[4] = {0, 8, 4, 1};
  for (int w = 0; w < 4; w++) {
    size_t len = widths[w]
                     ? proto__num_fmt_f32_list_width(got, x, n, widths[w])
                     : proto__num_fmt_f32_list(got, x, n);
    ck_assert_uint_eq(len, (size_t)(o - want));
    ck_assert_msg(!strcmp(got, want), "width %d, list of %zu differs:\n%s\n%s",
                  widths[w], n, got, want);
  }
  free(got);
  free(want);
}

START_TEST(printed_lists_match_one_by_one) {
  /* the wide printers take over from their fourth or eighth number on,
   * and hand some numbers back: lists of every length around their
   * groups, with those numbers at every position */
  static const float odd[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                              1e-45f, -1.17549435e-38f, 1.0f, -0.5f, 1024.0f,
                              0.00001f, 9.99999e-6f, 1e-6f, 123456792.0f,
                              999999940.0f, 1e9f, -3.4028235e38f, 0.1f,
                              1.5e-5f, 16777216.0f};
  size_t nodd = sizeof odd / sizeof *odd;
  float x[300] = {0};
  for (size_t n = 0; n <= 300; n = n < 80 ? n + 1 : n + 37) {
    for (size_t i = 0; i < n; i++)
      x[i] = rnd() % 4 == 0 ? odd[rnd() % nodd] : rnd_float();
    check_list(x, n);
  }
  /* a sweep over all floats, 4096 at a time (a tensor chunk's worth),
   * non-finite ones included */
  static float big[4096];
  size_t k = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
    big[k++] = bits_f32((uint32_t)u);
    if (k == 4096) {
      check_list(big, k);
      k = 0;
    }
  }
  check_list(big, k);
  /* tensor-like values: weights in (0, 1) and N(0, 1)-sized outputs */
  for (int r = 0; r < 16; r++) {
    for (size_t i = 0; i < 4096; i++)
      big[i] = r % 2 ? (float)(rnd() % 1000000) / 1e6f / (float)(1 + r)
                     : (float)((int64_t)(rnd() % 2000001) - 1000000) / 3e5f;
    check_list(big, 4096);
  }
}
END_TEST

/* ---- the printer's powers of ten ------------------------------------------
 *
 * proto__num_pow10(k) must be 10^k times the power of two that puts it in
 * [2^63, 2^64), rounded up.  fpprint.cc computes it by division; here each
 * entry c is checked by multiplication, exactly, in 32-bit limbs:
 * (c - 1) * 2^s < 10^k <= c * 2^s for k >= 0 (10^k and 5^k share their
 * bits), (c - 1) * 5^-k < 2^N <= c * 5^-k for k < 0. */
#define LIMBS 8 /* 256 bits: 5^46 * 2^64 has 171 */

typedef struct { uint32_t w[LIMBS]; } big;

static big big_u64(uint64_t v) {
  big b = {{(uint32_t)v, (uint32_t)(v >> 32)}};
  return b;
}

static big big_mul(big b, uint32_t m) {
  uint64_t carry = 0;
  for (int i = 0; i < LIMBS; i++) {
    uint64_t t = (uint64_t)b.w[i] * m + carry;
    b.w[i] = (uint32_t)t;
    carry = t >> 32;
  }
  ck_assert(carry == 0);
  return b;
}

static big big_shl(big b, int s) {
  for (; s > 0; s--)
    b = big_mul(b, 2);
  return b;
}

static int big_cmp(big a, big b) {
  for (int i = LIMBS - 1; i >= 0; i--)
    if (a.w[i] != b.w[i])
      return a.w[i] < b.w[i] ? -1 : 1;
  return 0;
}

static int big_bits(big b) {
  for (int i = LIMBS - 1; i >= 0; i--)
    for (int j = 31; j >= 0; j--)
      if (b.w[i] >> j & 1)
        return 32 * i + j + 1;
  return 0;
}

START_TEST(printer_powers_of_ten_are_exact) {
  for (int k = PROTO__POW10_MIN_K; k <= PROTO__POW10_MAX_K; k++) {
    uint64_t c = proto__num_pow10(k);
    ck_assert_msg(c >> 63 == 1, "10^%d: %llx not in [2^63, 2^64)", k,
                  (unsigned long long)c);
    big p5 = big_u64(1);
    for (int i = 0; i < (k < 0 ? -k : k); i++)
      p5 = big_mul(p5, 5);
    big hi, lo, v;
    if (k >= 0) {
      int s = big_bits(p5) - 64;
      v = big_shl(p5, s < 0 ? -s : 0);
      hi = big_shl(big_u64(c), s);
      lo = big_shl(big_u64(c - 1), s);
      if (s <= 0) /* 5^k fits: exact */
        lo = big_u64(c - 1);
    } else {
      v = big_shl(big_u64(1), 63 + big_bits(p5));
      hi = big_u64(c);
      lo = big_u64(c - 1);
      for (int i = 0; i < -k; i++) {
        hi = big_mul(hi, 5);
        lo = big_mul(lo, 5);
      }
    }
    ck_assert_msg(big_cmp(lo, v) < 0 && big_cmp(v, hi) <= 0,
                  "10^%d: %llx is not the rounded-up power", k,
                  (unsigned long long)c);
  }
  ck_assert(proto__num_pow10(0) == 0x8000000000000000ull);
  ck_assert(proto__num_pow10(1) == 0xa000000000000000ull);
  ck_assert(proto__num_pow10(-1) == 0xcccccccccccccccdull);
  ck_assert(proto__num_pow10(PROTO__POW10_MIN_K - 1) == 0);
  ck_assert(proto__num_pow10(PROTO__POW10_MAX_K + 1) == 0);
}
END_TEST

static Suite *numparse_suite(void) {
  Suite *s = suite_create("numparse");
  TCase *tc = tcase_create("parse");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, random_floats_printed_many_ways);
  tcase_add_test(tc, midpoints_between_neighbours);
  tcase_add_test(tc, subnormals_and_range_edges);
  tcase_add_test(tc, long_mantissas);
  tcase_add_test(tc, float64_reprs_and_near_midpoints);
  tcase_add_test(tc, json_number_grammar);
  tcase_add_test(tc, number_lists);
  tcase_add_test(tc, lists_of_random_tokens_read_as_one_by_one);
  tcase_add_test(tc, list_tokens_at_every_offset_and_length);
  tcase_add_test(tc, list_errors_at_every_position);
  tcase_add_test(tc, list_values_equal_strtof);
  tcase_add_test(tc, short_tokens_near_midpoints_equal_strtof);
  suite_add_tcase(s, tc);
  tc = tcase_create("decode");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, decoders_round_correctly);
  tcase_add_test(tc, decoded_tensors_equal_strtof);
  tcase_add_test(tc, mutated_bodies_decode_as_on_the_cjson_path);
  tcase_add_test(tc, what_only_cjson_accepts_still_decodes);
  tcase_add_test(tc, numbers_json_forbids_are_refused_on_both_paths);
  tcase_add_test(tc, cjson_path_rounds_long_decimals_once);
  tcase_add_test(tc, long_leaves_with_a_stop_byte_anywhere);
  tcase_add_test(tc, errors_in_leaves_keep_their_messages);
  tcase_add_test(tc, flt_max_text_is_accepted_everywhere);
  tcase_add_test(tc, fp16_and_bf16_tops_are_accepted);
  tcase_add_test(tc, past_the_midpoint_is_refused_with_the_value);
  tcase_add_test(tc, comma_count_matches_the_bytewise_one);
  suite_add_tcase(s, tc);
  tc = tcase_create("print");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, printed_floats_are_shortest_and_closest);
  tcase_add_test(tc, printed_layout_is_unchanged);
  tcase_add_test(tc, printed_lists_match_one_by_one);
  tcase_add_test(tc, printer_powers_of_ten_are_exact);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(numparse_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
