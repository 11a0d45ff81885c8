/* test_numparse.c - the JSON number path's reader and printer: numscan
 * (proto/text/numscan.c), the reader over fast_float (proto/text/fpread.cc)
 * and the printer over Dragonbox (proto/text/fpprint.cc).
 *
 *  - proto__num_f32 against strtof (bit for bit, the sign of zero too) over
 *    random bit patterns printed many ways, exact midpoints between
 *    neighbours and decimals just either side of them, subnormals, the
 *    float range's edges, mantissas hundreds of digits long, and exponents
 *    far outside float range; float32 range as rounding decides it (a
 *    decimal is refused exactly when strtof makes it infinite, so
 *    3.4028235e38 is FLT_MAX); proto__num_f64 against strtod; the
 *    JSON number grammar, token by token.
 *  - The printer: shortest digits that read back, not longer than a
 *    brute-force search, over random and swept bit patterns (make
 *    printer-exhaustive checks all 2^32); its table of powers of ten
 *    against their definition, by exact multiplication.
 *  - A decimal against a double, exactly (numexact.c): random doubles'
 *    exact expansions (printf's), the decimals a unit either side of them
 *    and their digits cut short, in every form, to 767 digits; zeros,
 *    huge exponents, long tokens.  Every FP16 and BF16 midpoint, against
 *    the grids built from the formats' definitions.
 * The decoders' numbers are in test_numparse_decode.c. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/tensor/tensor.h"

#include "support_num.h"
#include "support_suite.h"

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
  ck_assert_msg(num_f32_bits(got) == num_f32_bits(want), "%s: %a, strtof %a", s,
                (double)got, (double)want);
  /* inside a list, with bytes after it (the eight-byte digit steps) */
  char list[4200];
  float two[2];
  int n = snprintf(list, sizeof list, " %s ,0          ", s);
  ck_assert_int_eq(proto__num_list_f32(list, list + n, two, 2), 0);
  ck_assert_msg(num_f32_bits(two[0]) == num_f32_bits(want), "%s in a list: %a", s,
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
    float f = num_rnd_float();
    int p = 1 + (int)(num_rnd() % 17);
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
    float f = fabsf(num_rnd_float());
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
    snprintf(s, sizeof s, "%.9g", (double)num_bits_f32(u));
    check_f32(s);
    snprintf(s, sizeof s, "%.20e", (double)num_bits_f32(u) * 0.75);
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
    int len = 20 + (int)(num_rnd() % 2000), o = 0;
    if (num_rnd() % 2)
      s[o++] = '-';
    s[o++] = (char)('1' + num_rnd() % 9);
    int dot = (int)(num_rnd() % (unsigned)len);
    for (int k = 1; k < len; k++) {
      if (k == dot)
        s[o++] = '.';
      /* long runs of 0 or 9 put the value next to a boundary */
      s[o++] = i % 3 == 0 ? '0' : i % 3 == 1 ? '9' : (char)('0' + num_rnd() % 10);
    }
    if (i % 3 != 2)
      s[o - 1] = '1';
    o += snprintf(s + o, 32, "e%d", (int)(num_rnd() % 90) - 45 - (dot ? dot : len));
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
    float f = num_rnd_float();
    snprintf(s, sizeof s, "%.*g", 16 + i % 2, (double)f);
    check_f32(s);
    float g = nextafterf(f, f < 0 ? -INFINITY : INFINITY);
    if (!isfinite(g) || f == 0)
      continue;
    double mid = ((double)f + (double)g) / 2;
    /* mid moved by -8 .. 8 float64 ulps, printed with 17 to 19 digits */
    double x = mid;
    int k = (int)(num_rnd() % 17) - 8;
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
        ck_assert_msg(num_f32_bits(got[i]) == num_f32_bits(want[i]),
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
  unsigned r = (unsigned)num_rnd();
  if (r % 3 == 0)
    t[o++] = '-';
  int ni = 1 + (int)(num_rnd() % (num_rnd() % 4 ? 3 : 20));
  for (int k = 0; k < ni; k++)
    t[o++] = (char)('0' + num_rnd() % 10);
  if (t[o - ni] == '0' && ni > 1 && num_rnd() % 4)
    t[o - ni] = (char)('1' + num_rnd() % 9); /* mostly no leading zero */
  if (num_rnd() % 4) {
    t[o++] = '.';
    int nf = (int)(num_rnd() % (num_rnd() % 4 ? 10 : 22)) + (num_rnd() % 8 != 0);
    for (int k = 0; k < nf; k++)
      t[o++] = (char)('0' + num_rnd() % 10);
  }
  if (num_rnd() % 5 == 0) {
    t[o++] = num_rnd() % 2 ? 'e' : 'E';
    if (num_rnd() % 2)
      t[o++] = num_rnd() % 2 ? '-' : '+';
    int ne = (int)(num_rnd() % 4);
    for (int k = 0; k < ne; k++)
      t[o++] = (char)('0' + num_rnd() % 10);
  }
  return o;
}

static const char ws_bytes[] = " \t\n\r";

START_TEST(lists_of_random_tokens_read_as_one_by_one) {
  char s[8192];
  for (int it = 0; it < 6000; it++) {
    int n = 1 + (int)(num_rnd() % (it % 10 == 0 ? 500 : 40)), o = 0;
    int spaces = num_rnd() % 6 == 0;
    for (int i = 0; i < n && o < 7900; i++) {
      if (i)
        s[o++] = ',';
      while (spaces && num_rnd() % 3 == 0)
        s[o++] = ws_bytes[num_rnd() % 4];
      o += rnd_token(s + o);
      while (spaces && num_rnd() % 3 == 0)
        s[o++] = ws_bytes[num_rnd() % 4];
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
      ck_assert_msg(num_f32_bits(x[k]) == num_f32_bits(strtof(ties[i], NULL)),
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
    float f = num_bits_f32(0x3f800000u + (uint32_t)(num_rnd() % (10u << 23)));
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
    ck_assert_msg(num_f32_bits(x[0]) == num_f32_bits(strtof(s, NULL)) &&
                      num_f32_bits(x[1]) == num_f32_bits(strtof(s, NULL)),
                  "%s: %a, strtof %a", s, (double)x[0],
                  (double)strtof(s, NULL));
  }
  ck_assert_int_eq(found, 300);
  float mx[300];
  for (int w = 0; w < 3; w++) {
    ck_assert_int_eq(proto__num_list_f32_width(all, all + all_len, mx, 300,
                                               list_widths[w]), 0);
    for (int i = 0; i < 300; i++)
      ck_assert_msg(num_f32_bits(mx[i]) == num_f32_bits(strtof(mids[i], NULL)),
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
    float f = i % 3 ? num_rnd_float() : (float)((double)(num_rnd() % 2000000) / 1e6 - 1);
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
    ck_assert_msg(num_f32_bits(x[i]) == num_f32_bits(strtof(texts[i], NULL)),
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
    float f = num_bits_f32(0x3a800000u + (uint32_t)(num_rnd() % (28u << 23)));
    double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
    char ip[48];
    int idig = mid < 1 ? 1 : snprintf(ip, sizeof ip, "%.0f", floor(mid));
    int neg = (int)(num_rnd() % 2);
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
      ck_assert_msg(num_f32_bits(x[i]) == num_f32_bits(strtof(tok[i], NULL)),
                    "%s, %d-byte vectors: %a, strtof %a", tok[i],
                    list_widths[w], (double)x[i],
                    (double)strtof(tok[i], NULL));
  }
  free(all);
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
    float f = num_rnd_float();
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
    proto__fmt_f32(s, num_bits_f32(u));
    ck_assert(strtof(s, NULL) == num_bits_f32(u));
  }
  for (uint64_t u = 1; u < 0x100000000ull; u += 16411) {
    float f = num_bits_f32((uint32_t)u);
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
      x[i] = num_rnd() % 4 == 0 ? odd[num_rnd() % nodd] : num_rnd_float();
    check_list(x, n);
  }
  /* a sweep over all floats, 4096 at a time (a tensor chunk's worth),
   * non-finite ones included */
  static float big[4096];
  size_t k = 0;
  for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
    big[k++] = num_bits_f32((uint32_t)u);
    if (k == 4096) {
      check_list(big, k);
      k = 0;
    }
  }
  check_list(big, k);
  /* tensor-like values: weights in (0, 1) and N(0, 1)-sized outputs */
  for (int r = 0; r < 16; r++) {
    for (size_t i = 0; i < 4096; i++)
      big[i] = r % 2 ? (float)(num_rnd() % 1000000) / 1e6f / (float)(1 + r)
                     : (float)((int64_t)(num_rnd() % 2000001) - 1000000) / 3e5f;
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

/* ---- a decimal against a double, exactly (numexact.c) ------------------ */

/* text against x must give want (-1, 0, 1), with either sign on the text
 * (the comparison is of magnitudes). */
static void check_cmp(const char *text, double x, int want) {
  const char *t = text[0] == '-' ? text + 1 : text;
  char neg[4200];
  snprintf(neg, sizeof neg, "-%s", t);
  ck_assert_msg(proto__num_cmp(t, t + strlen(t), x) == want,
                "%.80s against %a: want %d", t, x, want);
  ck_assert_msg(proto__num_cmp(neg, neg + strlen(neg), -x) == want,
                "%.80s against %a: want %d", neg, -x, want);
}

/* A random finite non-zero double: any bit pattern, some subnormal. */
static double rnd_double(void) {
  for (;;) {
    uint64_t u = num_rnd();
    if (num_rnd() % 8 == 0)
      u &= 0x800fffffffffffffull;
    double x;
    memcpy(&x, &u, sizeof x);
    if (isfinite(x) && x != 0)
      return x;
  }
}

/* Random doubles over the whole range (up to 767 significant digits) and
 * their exact decimals in four forms: equal; one unit more at a digit
 * past the last (above); one less at the last, nines after (below). */
START_TEST(decimals_compare_exactly_with_doubles) {
  char d[1024], m[1100], t[1200];
  long e;
  for (int i = 0; i < 3000; i++) {
    double x = i == 0 ? 0x1p-1074 : i == 1 ? DBL_MAX : i == 2 ? 0x1.fffffffffffffp-1023
             : i == 3 ? 1.0 : rnd_double();
    int form = i % 4, neg = (i / 4) % 2;
    num_exact_digits(x, d, sizeof d, &e);
    size_t n = strlen(d);
    num_decimal(t, sizeof t, neg, d, e, form);
    check_cmp(t, x, 0);
    /* trailing zeros do not change the value */
    snprintf(m, sizeof m, "%s000", d);
    num_decimal(t, sizeof t, neg, m, e, (form + 1) % 4);
    check_cmp(t, x, 0);
    snprintf(m, sizeof m, "%s00001", d);
    num_decimal(t, sizeof t, neg, m, e, form);
    check_cmp(t, x, 1);
    if (n > 1 || d[0] > '1') {
      snprintf(m, sizeof m, "%s", d);
      m[n - 1]--;
      snprintf(m + n, sizeof m - n, "9999999999");
      num_decimal(t, sizeof t, neg, m[0] == '0' ? m + 1 : m,
                  m[0] == '0' ? e - 1 : e, form);
      check_cmp(t, x, -1);
    }
    /* cut short: x's digits left over */
    if (n > 1) {
      snprintf(m, sizeof m, "%.*s", (int)(n - 1 - num_rnd() % (n - 1)), d);
      num_decimal(t, sizeof t, neg, m, e, form);
      check_cmp(t, x, -1);
    }
    /* ten times too big or small */
    num_decimal(t, sizeof t, neg, d, e + 1, form);
    check_cmp(t, x, 1);
    num_decimal(t, sizeof t, neg, d, e - 1, form);
    check_cmp(t, x, -1);
  }
}
END_TEST

/* Zeros, exponents past any double, leading zeros and mantissas
 * thousands of digits long. */
START_TEST(decimal_edges_compare_exactly) {
  static char t[4200];
  check_cmp("0", 0.0, 0);
  check_cmp("0.000e-7", 0.0, 0);
  check_cmp("0E+99999999999999999999999", -0.0, 0);
  check_cmp("0", 0x1p-1074, -1);
  check_cmp("1e-400", 0.0, 1);
  check_cmp("1e-400", 0x1p-1074, -1);
  check_cmp("1e400", DBL_MAX, 1);
  check_cmp("1e99999999999999999999999999", 1.0, 1);
  check_cmp("1e-99999999999999999999999999", 1.0, -1);
  check_cmp("1", INFINITY, -1);
  check_cmp("1000488281250000000001e-21", 1.00048828125, 1);
  check_cmp("1000488281249999999999e-21", 1.00048828125, -1);
  check_cmp("100048828125E-11", 1.00048828125, 0);
  check_cmp("0.0000100048828125e+5", 1.00048828125, 0);
  check_cmp("65520", 65520.0, 0);
  check_cmp("65519.99999999999999999999999", 65520.0, -1);
  check_cmp("6.5520000000000000000000000001e4", 65520.0, 1);
  /* 1 then 4000 zeros, or 0. then 4000 zeros: the digits are all read */
  memset(t, '0', 4001);
  t[0] = '1';
  snprintf(t + 4001, sizeof t - 4001, "e-4000");
  check_cmp(t, 1.0, 0);
  t[3999] = '1';
  check_cmp(t, 1.0, 1);
  memcpy(t, "0.", 2);
  memset(t + 2, '0', 4000);
  snprintf(t + 4002, sizeof t - 4002, "1e4001");
  check_cmp(t, 1.0, 0);
  snprintf(t + 4002, sizeof t - 4002, "1e4000");
  check_cmp(t, 0.1, -1); /* 0.1's double is above 1/10 */
}
END_TEST

/* Every midpoint between neighbours of each type (and the one past its
 * largest value) is found, in both signs; no value of the grid, no
 * double next to a midpoint, nothing past the top midpoint is one. */
START_TEST(half_midpoints_are_found) {
  for (int bf = 0; bf < 2; bf++) {
    unsigned top = bf ? 0x7f7f : 0x7bff;
    for (unsigned h = 0; h <= top; h++) {
      double a = bf ? num_bf16_value(h) : num_f16_value(h);
      double b = bf ? num_bf16_value(h + 1) : num_f16_value(h + 1);
      double mid = (a + b) / 2;
      for (int s = 1; s >= -1; s -= 2) {
        ck_assert_msg(proto__half_midpoint(s * mid, bf), "%a (bf %d)",
                      s * mid, bf);
        ck_assert_msg(!proto__half_midpoint(s * a, bf), "%a (bf %d)",
                      s * a, bf);
        ck_assert(!proto__half_midpoint(nextafter(s * mid, 0), bf));
        ck_assert(!proto__half_midpoint(nextafter(s * mid, s * 2.0), bf));
      }
    }
    double past = bf ? num_bf16_value(top + 1) : num_f16_value(top + 1);
    ck_assert(!proto__half_midpoint(past * 1.5, bf));
    ck_assert(!proto__half_midpoint(past * 1.0009765625, bf));
    ck_assert(!proto__half_midpoint(INFINITY, bf));
    ck_assert(!proto__half_midpoint(NAN, bf));
    ck_assert(!proto__half_midpoint(0x1p-1074, bf));
  }
}
END_TEST

int main(void) {
  support_case cases[] = {
    {"parse", {random_floats_printed_many_ways, midpoints_between_neighbours,
               subnormals_and_range_edges, long_mantissas,
               float64_reprs_and_near_midpoints, json_number_grammar,
               number_lists, lists_of_random_tokens_read_as_one_by_one,
               list_tokens_at_every_offset_and_length,
               list_errors_at_every_position, list_values_equal_strtof,
               short_tokens_near_midpoints_equal_strtof}},
    {"print", {printed_floats_are_shortest_and_closest,
               printed_layout_is_unchanged, printed_lists_match_one_by_one,
               printer_powers_of_ten_are_exact}},
    {"exact", {decimals_compare_exactly_with_doubles,
               decimal_edges_compare_exactly, half_midpoints_are_found}},
  };
  return support_run("numparse", cases, sizeof cases / sizeof cases[0]);
}
