/* fpconv.cc - decimal <-> float32 for the JSON number path, behind a C API
 * (proto_impl.h, "numbers").
 *
 * Reading uses fast_float (Debian libfast-float-dev, header only; the
 * algorithm libstdc++ 12 itself uses for std::from_chars): correctly
 * rounded, exact for any length of mantissa, about 10 ns a number.
 * fast_float accepts more than JSON does ("1.", ".5", "inf", "nan"), so
 * each token it reads is then held to the JSON number grammar here.
 * Printing uses fmt's Dragonbox (Debian libfmt-dev, header only): the
 * fewest significant digits that read back as the same float, the closest
 * such decimal when there are several; the same digits as std::to_chars'
 * Ryu, in about a fifth of its time (10 ns against 48 here).
 *
 * Nothing here allocates, throws or keeps state: every function is
 * reentrant. */
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <system_error>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h> /* SSSE3, AVX2, AVX-512: in the functions that ask */
#endif

#include <fast_float/fast_float.h>
/* Header-only: nothing of fmt at run time, like fast_float. */
#define FMT_HEADER_ONLY
#include <fmt/format.h>

/* proto_impl.h is C; of it, the lists need the one-number printer and
 * the CPU's vector width. */
extern "C" int proto__fmt_f32(char *s, float x);
extern "C" int proto__vector_bytes(void);

namespace {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

inline bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* fast_float reads a superset of JSON's numbers: besides them, "inf",
 * "nan", ".5", "01" and "1." (and "1.e5").  It stops before an 'e' that no
 * exponent digits follow, so [p, q) it has read is a JSON number exactly
 * when it starts with a digit after the sign, has no leading zero, and
 * has a digit after any '.'. */
inline bool json_token(const char *p, const char *q) {
  if (p < q && *p == '-')
    p++;
  if (p == q || !is_digit(*p))
    return false;
  if (*p == '0' && p + 1 < q && is_digit(p[1]))
    return false;
  while (p < q && is_digit(*p))
    p++;
  return p == q || *p != '.' || (p + 1 < q && is_digit(p[1]));
}

/* Reads one JSON number at p into *out (float or double): the token's
 * end, or nullptr. */
template <typename T>
inline const char *read_json(const char *p, const char *end, T *out) {
  auto r = fast_float::from_chars(p, end, *out);
  if (r.ec != std::errc() || !json_token(p, r.ptr))
    return nullptr;
  return r.ptr;
}

/* Leading decimal digits of the 8 bytes at s (0..8), their value in *v.
 * A byte is a digit when neither b + 0x46 nor b - 0x30 sets its top bit;
 * a digit byte carries and borrows nothing, so the first non-digit byte is
 * found exactly.  The bytes from it on are shifted out and '0's shifted
 * in as leading digits for fast_float's eight-digit SWAR. */
inline int digits8(const char *s, uint64_t *v) {
  uint64_t x;
  std::memcpy(&x, s, sizeof x);
  uint64_t non = ((x + 0x4646464646464646u) | (x - 0x3030303030303030u)) &
                 0x8080808080808080u;
  int n = non ? __builtin_ctzll(non) >> 3 : 8;
  if (n > 0 && n < 8) /* the digits to the top, '0's below them */
    x = (x << (64 - 8 * n)) | (0x3030303030303030u >> (8 * n));
  *v = n ? fast_float::parse_eight_digits_unrolled(x) : 0;
  return n;
}

/* Appends the digits at s to *m, counting them in *nd; past 19 digits in
 * all only counts them (the caller then leaves the number to fast_float).
 * Returns the end of the digits. */
inline const char *take_digits(const char *s, const char *end, uint64_t *m,
                               int *nd) {
  static const uint64_t p10u[9] = {1,      10,      100,      1000,     10000,
                                   100000, 1000000, 10000000, 100000000};
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (end - s >= 8 && *nd <= 19) {
    uint64_t v;
    int n = digits8(s, &v);
    *m = *m * p10u[n] + v;
    s += n;
    *nd += n;
    if (n < 8)
      return s;
  }
#endif
  for (; s < end && is_digit(*s) && *nd <= 19; s++, ++*nd)
    *m = *m * 10 + (uint64_t)(*s - '0');
  for (; s < end && is_digit(*s); s++)
    ++*nd;
  return s;
}

/* 10^0 .. 10^22: every one exact in a double, what Clinger's fast path
 * multiplies or divides by (clinger_f32, fast_token). */
const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* 10^0 .. 10^-15, each the double nearest it: the eight-token readers
 * multiply by these where fast_token divides by pow10_exact (see
 * tokens8 for why the float is the same). */
const double pow10_recip[16] = {1e0,   1e-1,  1e-2,  1e-3,  1e-4,  1e-5,
                                1e-6,  1e-7,  1e-8,  1e-9,  1e-10, 1e-11,
                                1e-12, 1e-13, 1e-14, 1e-15};

/* Clinger's fast path, for float32: a decimal of at most 19 digits m and
 * exponent e (|e| <= 22, m <= 2^53) is m * 10^e or m / 10^-e in one
 * correctly rounded double operation (both operands exact).  That double
 * d is then rounded to float; double rounding can only differ from
 * rounding the decimal itself when d lies exactly on a midpoint between
 * two floats (any other double is at least one double ulp from every
 * midpoint, farther than d is from the decimal), so that case, and
 * results outside the normal float range, go to fast_float.  Most tensor
 * numbers (up to 9 digits, small exponents) take this path, which also
 * checks the JSON grammar in the same pass.  Digits count toward the 19
 * from the first, zeros included (0.000...0ddd with more goes to
 * fast_float).
 *
 * Returns 1 when decided: *q is the token's end and *out its value, or *q
 * is nullptr when the bytes at p are not a JSON number.  Returns 0 when
 * fast_float must read the token. */
inline int clinger_f32(const char *p, const char *end, float *out,
                       const char **q) {
  const char *s = p;
  bool neg = s < end && *s == '-';
  uint64_t m = 0;
  int nd = 0, e10 = 0;
  *q = nullptr;
  s += neg;
  if (s == end || !is_digit(*s))
    return 1;
  if (*s == '0') {
    if (++s < end && is_digit(*s))
      return 1; /* leading zero */
  } else {
    s = take_digits(s, end, &m, &nd);
  }
  if (s < end && *s == '.') {
    if (++s == end || !is_digit(*s))
      return 1;
    const char *f = s;
    s = take_digits(s, end, &m, &nd);
    e10 = -(int)(s - f);
  }
  if (s < end && (*s == 'e' || *s == 'E')) {
    int es = 1, x = 0;
    if (++s < end && (*s == '+' || *s == '-'))
      es = *s++ == '-' ? -1 : 1;
    if (s == end || !is_digit(*s))
      return 1;
    do
      x = x < 10000 ? x * 10 + (*s - '0') : x;
    while (++s < end && is_digit(*s));
    e10 += es * x;
  }
  *q = s;
  if (nd > 19)
    return 0;
  if (m == 0) {
    *out = neg ? -0.0f : 0.0f;
    return 1;
  }
  if (e10 < -22 || e10 > 22)
    return 0;
  double d = e10 < 0 ? (double)m / pow10_exact[-e10]
                      : (double)m * pow10_exact[e10];
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  if (!(d >= FLT_MIN && d < FLT_MAX))
    return 0;
  /* m up to 2^53 is exact, and d is the decimal correctly rounded: only
   * a d exactly on a float midpoint is in doubt.  A longer m (16 to 19
   * digits: a float64's repr, as Python's json.dumps writes a float32
   * tensor's values) is rounded once more, so d is within 2 double ulps
   * of the decimal, and in doubt within 4 ulps of a midpoint. */
  uint32_t low = (uint32_t)(bits & 0x1fffffffu);
  if (m <= (1ull << 53) ? low == 0x10000000u
                        : low - (0x10000000u - 4u) <= 8u)
    return 0;
  float f = (float)d;
  *out = neg ? -f : f;
  return 1;
}

/* A float32 JSON number at p: the token's end, or nullptr when it is not
 * a JSON number or its value rounds to no finite float.  fast_float rounds
 * the decimal itself to nearest (ties to even), so every decimal below
 * FLT_MAX + half an ulp (2^128 - 2^103, the midpoint to 2^128) becomes a
 * float and FLT_MAX's own shortest text, 3.4028235e38, reads back as
 * FLT_MAX; from the midpoint on, the float is infinite.  (Its double, by
 * contrast, can be past FLT_MAX, or on the midpoint itself, for a decimal
 * below it: 3.4028235677973366e38.) */
inline const char *read_f32(const char *p, const char *end, float *out) {
  const char *q;
  if (clinger_f32(p, end, out, &q))
    return q;
  q = read_json(p, end, out);
  return q && std::isfinite(*out) ? q : nullptr;
}

/* ---- lists: many numbers at once ----------------------------------------
 *
 * A tensor's elements come as one long run "x,y,z,...".  Read one after
 * another, each number waits for the one before it: its first byte is
 * known only once the previous token has been read digit by digit.  Here
 * the commas of a chunk are found first (one SIMD compare per 16 bytes,
 * their offsets written to a table), so that every token's bytes [s, c)
 * are known before any is read and the CPU overlaps consecutive numbers.
 * A token of the common shape, -?(0|[1-9][0-9]*)(\.[0-9]+)? in at most 16
 * bytes, is checked in one step from the mask of its digit bytes (one
 * 16-byte load that ends at its comma), its digits are multiplied out in
 * SIMD lanes, and one double division finishes it (Clinger's fast path,
 * as in clinger_f32).  With AVX-512 or AVX2, and in lists of 256 bytes
 * or more, eight tokens at a time take those steps together (tokens8,
 * tokens8_avx2), finished by a multiplication instead; one leading space
 * is then allowed too (json.dumps).
 * Anything else (whitespace, exponents, longer tokens, double-rounding
 * midpoints, errors) goes to read_f32 on [s, c), which decides it exactly
 * as a lone number.  SSE2 is in every x86-64; elsewhere (or with
 * -DATTND_PORTABLE_NUM) every token takes read_f32.
 *
 * The list grammar is unchanged: n numbers, whitespace around each, one
 * comma between each two, nothing else.  Numbers and whitespace hold no
 * commas, so that is exactly n - 1 commas and n tokens between them that
 * each read as whitespace, one number, whitespace. */

#if defined(__SSE2__) && !defined(ATTND_PORTABLE_NUM)
#define NUM_SSE2 1
#endif

#ifdef NUM_SSE2
/* 0xff in the lanes under k (k = 0..16), 0 in the others. */
inline __m128i below(unsigned k) {
  const __m128i lane = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                     12, 13, 14, 15);
  return _mm_cmpgt_epi8(_mm_set1_epi8((char)k), lane);
}

/* The value of the 16 digits (0..9 each, lane 0 the most significant). */
inline uint64_t value16(__m128i d) {
  const __m128i z = _mm_setzero_si128();
  __m128i a = _mm_madd_epi16(_mm_unpacklo_epi8(d, z), _mm_set1_epi32(0x1000a));
  __m128i b = _mm_madd_epi16(_mm_unpackhi_epi8(d, z), _mm_set1_epi32(0x1000a));
  __m128i c = _mm_madd_epi16(_mm_packs_epi32(a, b), _mm_set1_epi32(0x10064));
  __m128i e = _mm_madd_epi16(_mm_packs_epi32(c, c), _mm_set1_epi32(0x12710));
  uint64_t r = (uint64_t)_mm_cvtsi128_si64(e); /* 8 digits, 8 digits */
  return (r & 0xffffffffu) * 100000000u + (r >> 32);
}

/* The token [s, c) when it has the common shape above: at most 16 bytes,
 * of which the 16 before c must be readable.  Returns false, *out
 * untouched, for any other bytes (read_f32 then decides them). */
__attribute__((always_inline)) inline bool fast_token(const char *s,
                                                   const char *c,
                                                   float *out) {
  size_t len = (size_t)(c - s);
  if (len - 1 > 15)
    return false;
  /* lanes [b, 16) hold the token */
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(c - 16));
  __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0'));
  __m128i dv = _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t);
  unsigned b = 16 - (unsigned)len, neg = s[0] == '-';
  unsigned non = ~(unsigned)_mm_movemask_epi8(dv) & (0xffffu << (b + neg)) &
                 0xffffu;
  unsigned dl = 16, nf = 0; /* the '.''s lane, the digits after it */
  if (non) {
    dl = (unsigned)__builtin_ctz(non);
    if ((non & (non - 1)) || s[dl - b] != '.' || dl == 15)
      return false;
    nf = 15 - dl;
  }
  unsigned ni = dl - b - neg;
  if (ni == 0 || (ni > 1 && s[neg] == '0'))
    return false;
  /* digits only, then those before the '.' one lane up: 16 digits */
  __m128i d = _mm_andnot_si128(below(b), _mm_and_si128(t, dv));
  __m128i up = below(nf ? dl + 1 : 0);
  d = _mm_or_si128(_mm_andnot_si128(up, d),
                   _mm_and_si128(up, _mm_slli_si128(d, 1)));
  uint64_t m = value16(d); /* < 10^15: exact in a double */
  double x = (double)m / pow10_exact[nf];
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  /* 1e-15 <= x < 1e16 or x == 0: in range; midpoints go to read_f32 */
  if ((bits & 0x1fffffffu) == 0x10000000u)
    return false;
  float f = (float)x;
  uint32_t fb;
  std::memcpy(&fb, &f, sizeof fb);
  fb |= neg << 31;
  std::memcpy(out, &fb, sizeof fb);
  return true;
}
#endif

/* The token [s, c): whitespace, one number, whitespace, as read_f32. */
__attribute__((noinline)) bool slow_token(const char *s, const char *c,
                                          float *out) {
  while (s < c && is_ws(*s))
    s++;
  const char *q = read_f32(s, c, out);
  if (!q)
    return false;
  while (q < c && is_ws(*q))
    q++;
  return q == c;
}

/* The token [s, c) of a list that starts at p.  Kept out of read_list's
 * loop: inlined there (gcc 12), the same instructions ran 2.5x slower on
 * the benchmark machine. */
__attribute__((noinline)) bool list_token(const char *p, const char *s,
                                          const char *c, float *out) {
  while (s < c && *s == ' ') /* json.dumps' ", " */
    s++;
#ifdef NUM_SSE2
  if (c - p >= 16) {
    if (fast_token(s, c, out))
      return true;
  } else { /* the first bytes: 16 of them from a copy */
    char b[16] = {0};
    std::memcpy(b + 16 - (c - s), s, (size_t)(c - s));
    if (fast_token(b + 16 - (c - s), b + 16, out))
      return true;
  }
#else
  (void)p;
#endif
  return slow_token(s, c, out);
}

/* Bytes of a list whose commas one pass finds (their offsets fit the
 * table on the stack: 4 KiB). */
constexpr size_t LIST_CHUNK = 1024;

#ifdef NUM_SSE2
inline uint64_t comma_bits64(const char *s) {
  const __m128i cm = _mm_set1_epi8(',');
  uint64_t m = 0;
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s) + k);
    m |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cm))
         << (16 * k);
  }
  return m;
}

/* Set bits of x (no popcnt instruction in baseline x86-64). */
inline unsigned bits64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555u);
  x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
  return (unsigned)((x * 0x0101010101010101u) >> 56);
}

/* Writes base + the offset of each set bit of m to out; returns how many.
 * Eight are written whether or not there are eight (out has room), so
 * that the loop's length is the same for every block of a list. */
inline size_t put_offsets(uint64_t m, uint32_t base, uint32_t *out) {
  unsigned cnt = bits64(m);
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) {
    out[j] = base + (uint32_t)__builtin_ctzll(m | 1ull << 63);
    m &= m - 1;
  }
  for (unsigned j = 8; j < cnt; j++) {
    out[j] = base + (uint32_t)__builtin_ctzll(m);
    m &= m - 1;
  }
  return cnt;
}
#endif

#if defined(NUM_SSE2) && defined(__GNUC__)
#define NUM_AVX512BW 1
/* find_commas 64 bytes a step (AVX-512BW): one compare, then each 16
 * bytes' comma offsets packed out of a vector of them (vpcompressd).
 * Not inlined: the list's tokens are then read by SSE code. */
__attribute__((target("avx512f,avx512bw,popcnt"), noinline)) size_t
find_commas_avx512(const char *s, size_t len, uint32_t *pos) {
  const __m512i cm = _mm512_set1_epi8(','), step = _mm512_set1_epi32(16);
  size_t k = 0, i = 0;
  for (; i < len; i += 64) {
    __m512i v = len - i >= 64
                    ? _mm512_loadu_si512(s + i)
                    : _mm512_maskz_loadu_epi8(~0ull >> (64 - (len - i)),
                                              s + i);
    uint64_t m = _mm512_cmpeq_epi8_mask(v, cm);
    __m512i at = _mm512_add_epi32(
        _mm512_set1_epi32((int)i),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                          15));
    for (int q = 0; q < 4; q++, m >>= 16, at = _mm512_add_epi32(at, step)) {
      __mmask16 mq = (__mmask16)m;
      _mm512_storeu_si512(pos + k, _mm512_maskz_compress_epi32(mq, at));
      k += (size_t)__builtin_popcount(mq);
    }
  }
  return k;
}
#endif

#ifdef NUM_AVX512BW
/* ---- eight tokens at once (AVX-512 F, BW, DQ, VL, CD) ----
 *
 * fast_token's shape and arithmetic for eight consecutive tokens of a
 * list, with no step per token: each token's 16 bytes (ending at its
 * comma) are one 128-bit lane of two 512-bit registers, so each byte
 * class (digit, '.', '-', ' ', '0', inside the token) is one compare
 * giving a 64-bit mask of 16 bits a token.  The eight tokens' 16-bit
 * masks are then words of one 128-bit register, where the grammar is
 * checked with word arithmetic (x & -x is a token's first byte) that
 * never carries from one token into the next.  The digits are multiplied
 * out in the lanes as value16 does, and one vmulpd by the doubles
 * nearest 10^-k (pow10_recip) and one vcvtpd2ps finish all eight.  The
 * mantissa is exact when the token has a '.' (15 digits at most); the
 * multiplier and the product are each rounded once, so the product is
 * within 2 double ulps of the decimal (without a '.', the mantissa's
 * conversion is the one rounding and the multiplier is 1), and its float
 * is the decimal's unless a midpoint between two floats lies within 4
 * ulps of it; those are left to list_token, as
 * fast_token, whose division is correctly rounded, leaves the exact
 * midpoints.  (vdivpd's 16 cycles for eight doubles were a quarter of
 * tokens8's time.)  One leading space (json.dumps' ", ") is allowed.
 *
 * Tokens of any other shape, and double-rounding midpoints, are left to
 * list_token: the return value's bit i is set for each token i that was
 * not written.  Token i is [c_{i-1} + 1, c_i) with c_i = cb + pos[i] and
 * c_{-1} + 1 = s; cb - s <= 16, and the 16 bytes before c_0 readable. */
#define TOKENS8_FN                                                          \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd"),    \
                 noinline))

/* gcc 12's AVX2 and AVX-512 intrinsics start from an "undefined"
 * register, which -W(maybe-)uninitialized reports once inlined (gcc bug
 * 105593, as for the printer below). */
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* The grammar of eight tokens, [ ]?-?(0|[1-9][0-9]*)(\.[0-9]+)?, a token
 * a 16-bit word of each byte-class mask (t: inside the token; dg digits,
 * dt '.', sp ' ', mi '-', zero '0', each inside it): word arithmetic that
 * never carries from one token into the next (x & -x is a token's first
 * byte).  Returns 0xffff in the words of the tokens of that shape, 0 in
 * the others; *neg gets the '-' bit of each negative token. */
__attribute__((always_inline)) inline __m128i token_grammar(
    __m128i t, __m128i dg, __m128i dt, __m128i sp, __m128i mi, __m128i zero,
    __m128i *neg) {
  const __m128i z = _mm_setzero_si128(), one = _mm_set1_epi16(1);
  __m128i first = _mm_and_si128(t, _mm_sub_epi16(z, t));
  sp = _mm_and_si128(first, sp);
  t = _mm_andnot_si128(sp, t);
  first = _mm_and_si128(t, _mm_sub_epi16(z, t));
  mi = _mm_and_si128(first, mi);
  t = _mm_andnot_si128(mi, t);
  first = _mm_and_si128(t, _mm_sub_epi16(z, t)); /* the first digit */
  __m128i bad = _mm_andnot_si128(_mm_or_si128(dg, dt), t);
  bad = _mm_or_si128(bad, _mm_andnot_si128(dg, first));
  bad = _mm_or_si128(bad, _mm_and_si128(dt, _mm_sub_epi16(dt, one)));
  bad = _mm_or_si128(bad, _mm_and_si128(dt, _mm_set1_epi16(-0x8000)));
  bad = _mm_or_si128(bad, _mm_and_si128(dg, _mm_slli_epi16(
      _mm_and_si128(first, zero), 1))); /* a leading zero */
  *neg = mi;
  return _mm_andnot_si128(_mm_cmpeq_epi16(first, z), _mm_cmpeq_epi16(bad, z));
}

/* The lanes of eight doubles within 4 ulps of a float midpoint (the low
 * 29 bits of the mantissa, which the float drops, near 2^28). */
__attribute__((target("avx512f"), always_inline)) inline __mmask8
near_midpoint8(__m512d x) {
  __m512i low = _mm512_and_si512(_mm512_castpd_si512(x),
                                 _mm512_set1_epi64(0x1fffffff));
  return _mm512_cmple_epu64_mask(
      _mm512_sub_epi64(low, _mm512_set1_epi64(0x10000000 - 4)),
      _mm512_set1_epi64(8));
}

/* The verdict's words as 8 bits. */
__attribute__((always_inline)) inline unsigned word_bits(__m128i w) {
  return (unsigned)_mm_movemask_epi8(_mm_packs_epi16(w, _mm_setzero_si128()));
}

/* The 16 bytes that end at the comma cb + at. */
__attribute__((always_inline)) inline __m128i window(const char *cb,
                                                    uint32_t at) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i *>(cb + at - 16));
}

/* The 16-bit masks of tokens 0-3 (a) and 4-7 (b) as eight words. */
#define TOKEN_WORDS(a, b) _mm_set_epi64x((long long)(b), (long long)(a))

TOKENS8_FN unsigned tokens8(const char *s, const char *cb,
                            const uint32_t *pos, float *out) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pos));
  const __m256i st = _mm256_alignr_epi32(
      _mm256_add_epi32(e, _mm256_set1_epi32(1)),
      _mm256_set1_epi32((int)(s - cb)), 7);
  const __m256i len = _mm256_sub_epi32(e, st);
  if (_mm256_cmpgt_epu32_mask(_mm256_sub_epi32(len, _mm256_set1_epi32(1)),
                              _mm256_set1_epi32(15)))
    return 0xff; /* a token is empty or longer than 16 bytes */

  __m512i v[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; h++) {
    v[h] = _mm512_castsi128_si512(window(cb, pos[4 * h]));
    v[h] = _mm512_inserti32x4(v[h], window(cb, pos[4 * h + 1]), 1);
    v[h] = _mm512_inserti32x4(v[h], window(cb, pos[4 * h + 2]), 2);
    v[h] = _mm512_inserti32x4(v[h], window(cb, pos[4 * h + 3]), 3);
  }
  /* byte j of a token's lane is inside it when j + len >= 16 */
  const __m512i lane = _mm512_broadcast_i32x4(_mm_setr_epi8(
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i len512 = _mm512_castsi256_si512(len);
  uint64_t in[2], dig[2], dot[2], minus[2], space[2], zero[2];
  __m512i d[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; h++) {
    __m512i which = _mm512_add_epi32(
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_set1_epi32(4 * h));
    __m512i lb = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(which, len512),
                                     _mm512_setzero_si512());
    in[h] = _mm512_cmpge_epu8_mask(_mm512_add_epi8(lane, lb),
                                   _mm512_set1_epi8(16));
    d[h] = _mm512_sub_epi8(v[h], _mm512_set1_epi8('0'));
    dig[h] = _mm512_mask_cmple_epu8_mask(in[h], d[h], _mm512_set1_epi8(9));
    dot[h] = _mm512_mask_cmpeq_epi8_mask(in[h], v[h], _mm512_set1_epi8('.'));
    minus[h] = _mm512_mask_cmpeq_epi8_mask(in[h], v[h], _mm512_set1_epi8('-'));
    space[h] = _mm512_mask_cmpeq_epi8_mask(in[h], v[h], _mm512_set1_epi8(' '));
    zero[h] = _mm512_mask_cmpeq_epi8_mask(in[h], v[h], _mm512_set1_epi8('0'));
  }

  const __m128i z = _mm_setzero_si128(), one = _mm_set1_epi16(1);
  const __m128i dt = TOKEN_WORDS(dot[0], dot[1]);
  __m128i mi;
  __mmask8 ok = (__mmask8)word_bits(token_grammar(
      TOKEN_WORDS(in[0], in[1]), TOKEN_WORDS(dig[0], dig[1]), dt,
      TOKEN_WORDS(space[0], space[1]), TOKEN_WORDS(minus[0], minus[1]),
      TOKEN_WORDS(zero[0], zero[1]), &mi));
  if (!ok)
    return 0xff;

  /* digits before the '.' one byte up, as fast_token; nf digits after */
  __mmask8 has_dot = _mm_cmpneq_epi16_mask(dt, z);
  __m128i up = _mm_maskz_mov_epi16(has_dot,
                                   _mm_or_si128(_mm_sub_epi16(dt, one), dt));
  __m256i nf = _mm256_maskz_sub_epi32(
      has_dot, _mm256_lzcnt_epi32(_mm256_cvtepu16_epi32(dt)),
      _mm256_set1_epi32(16));
  uint64_t ups[2] = {(uint64_t)_mm_cvtsi128_si64(up),
                     (uint64_t)_mm_extract_epi64(up, 1)};
  __m512i m[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; h++) {
    __m512i x = _mm512_maskz_mov_epi8(dig[h], d[h]);
    x = _mm512_mask_mov_epi8(x, ups[h], _mm512_bslli_epi128(x, 1));
    x = _mm512_maddubs_epi16(x, _mm512_set1_epi16(0x010a));
    x = _mm512_madd_epi16(x, _mm512_set1_epi32(0x00010064));
    x = _mm512_madd_epi16(_mm512_packus_epi32(x, x),
                          _mm512_set1_epi32(0x00012710));
    /* each lane's first qword: 8 leading digits, then 8 more */
    m[h] = _mm512_add_epi64(
        _mm512_mul_epu32(x, _mm512_set1_epi64(100000000)),
        _mm512_srli_epi64(x, 32));
  }
  __m512i mant = _mm512_permutex2var_epi64(
      m[0], _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), m[1]);
  __m512d p10 = _mm512_permutex2var_pd(
      _mm512_loadu_pd(pow10_recip), _mm512_cvtepu32_epi64(nf),
      _mm512_loadu_pd(pow10_recip + 8));
  __m512d x = _mm512_mul_pd(_mm512_cvtepu64_pd(mant), p10);
  ok &= ~near_midpoint8(x);
  __m256i f = _mm256_castps_si256(_mm512_cvtpd_ps(x));
  f = _mm256_mask_or_epi32(f, _mm_cmpneq_epi16_mask(mi, z), f,
                           _mm256_set1_epi32(INT32_MIN));
  _mm256_mask_storeu_epi32(out, ok, f);
  return (unsigned)(uint8_t)~ok;
}
#undef TOKEN_WORDS

/* tokens8's steps on AVX2 (no mask registers): each 256-bit register
 * holds two tokens, a byte class is a compare and a movemask (two
 * tokens' 16-bit masks), the grammar is the same word arithmetic, and the
 * byte masks it yields are spread back over the bytes with a shuffle.
 * Without vplzcntd, vcvtuqq2pd or masked stores: the digits after the '.'
 * come from the exponent of the '.''s bit as a float, the mantissa
 * becomes a double by the 2^52 trick (so values from 2^52 on are left to
 * list_token), and all eight floats are stored (list_token then
 * overwrites those it reads). */
#define TOKENS8_AVX2_FN __attribute__((target("avx2"), noinline))

/* near_midpoint8 for four doubles, as 4 bits (AVX2 compares only
 * signed: the low bits minus 2^28 - 4 in 0..8). */
__attribute__((target("avx2"), always_inline)) inline unsigned
near_midpoint4(__m256d x) {
  __m256i low = _mm256_and_si256(_mm256_castpd_si256(x),
                                 _mm256_set1_epi64x(0x1fffffff));
  __m256i d = _mm256_sub_epi64(low, _mm256_set1_epi64x(0x10000000 - 4));
  __m256i bad = _mm256_andnot_si256(
      _mm256_cmpgt_epi64(d, _mm256_set1_epi64x(8)),
      _mm256_cmpgt_epi64(d, _mm256_set1_epi64x(-1)));
  return (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(bad));
}

/* Bytes 0-15 of the result: bit j of word lo (j = 0..15) spread to byte
 * j as 0 or 0xff; bytes 16-31 the same of word hi.  The words are bits
 * 0-15 and 16-31 of pair. */
__attribute__((target("avx2"), always_inline)) inline __m256i
spread_bits(uint32_t pair) {
  const __m256i which = _mm256_setr_epi8(
      0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
      2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)pair), which);
  return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

TOKENS8_AVX2_FN unsigned tokens8_avx2(const char *s, const char *cb,
                                      const uint32_t *pos, float *out) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pos));
  const __m256i st = _mm256_blend_epi32(
      _mm256_permutevar8x32_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(1)),
                                  _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6)),
      _mm256_set1_epi32((int)(s - cb)), 0x01);
  const __m256i len = _mm256_sub_epi32(e, st);
  const __m256i lm1 = _mm256_sub_epi32(len, _mm256_set1_epi32(1));
  if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(
          _mm256_min_epu32(lm1, _mm256_set1_epi32(15)), lm1)) != -1)
    return 0xff; /* a token is empty or longer than 16 bytes */

  const __m256i lane = _mm256_setr_epi8(
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint32_t in[4], dig[4], dot[4], minus[4], space[4], zero[4];
  __m256i d[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) { /* tokens 2q and 2q + 1 */
    __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(window(cb, pos[2 * q])),
        window(cb, pos[2 * q + 1]), 1);
    __m256i lb = _mm256_shuffle_epi8(
        _mm256_permutevar8x32_epi32(len, _mm256_setr_epi32(2 * q, 0, 0, 0,
                                                           2 * q + 1, 0, 0, 0)),
        _mm256_setzero_si256());
    __m256i t = _mm256_cmpgt_epi8(_mm256_add_epi8(lane, lb),
                                  _mm256_set1_epi8(15));
    __m256i dv = _mm256_sub_epi8(v, _mm256_set1_epi8('0'));
    __m256i dg = _mm256_and_si256(
        t, _mm256_cmpeq_epi8(_mm256_min_epu8(dv, _mm256_set1_epi8(9)), dv));
    d[q] = _mm256_and_si256(dv, dg);
    in[q] = (uint32_t)_mm256_movemask_epi8(t);
    dig[q] = (uint32_t)_mm256_movemask_epi8(dg);
#define CLASS(ch) (uint32_t) _mm256_movemask_epi8(_mm256_and_si256( \
      t, _mm256_cmpeq_epi8(v, _mm256_set1_epi8(ch))))
    dot[q] = CLASS('.');
    minus[q] = CLASS('-');
    space[q] = CLASS(' ');
    zero[q] = CLASS('0');
#undef CLASS
  }

#define WORDS(m) _mm_setr_epi32((int)(m)[0], (int)(m)[1], (int)(m)[2], \
                                (int)(m)[3])
  const __m128i z = _mm_setzero_si128(), one = _mm_set1_epi16(1);
  const __m128i dt = WORDS(dot);
  __m128i mi;
  unsigned ok = word_bits(token_grammar(WORDS(in), WORDS(dig), dt,
                                        WORDS(space), WORDS(minus),
                                        WORDS(zero), &mi));
#undef WORDS
  if (!ok)
    return 0xff;

  __m128i has_dot = _mm_andnot_si128(_mm_cmpeq_epi16(dt, z),
                                     _mm_set1_epi16(-1));
  __m128i up = _mm_and_si128(has_dot,
                             _mm_or_si128(_mm_sub_epi16(dt, one), dt));
  /* the '.' at bit j: 2^j as a float has exponent field 127 + j */
  __m256i nf = _mm256_and_si256(
      _mm256_cvtepi16_epi32(has_dot),
      _mm256_sub_epi32(_mm256_set1_epi32(127 + 15),
                       _mm256_srli_epi32(_mm256_castps_si256(
                           _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(dt))),
                                         23)));
  uint32_t ups[4];
  _mm_storeu_si128(reinterpret_cast<__m128i *>(ups), up);
  __m256i m[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++) {
    __m256i x = d[q];
    x = _mm256_blendv_epi8(x, _mm256_slli_si256(x, 1), spread_bits(ups[q]));
    x = _mm256_maddubs_epi16(x, _mm256_set1_epi16(0x010a));
    x = _mm256_madd_epi16(x, _mm256_set1_epi32(0x00010064));
    x = _mm256_madd_epi16(_mm256_packus_epi32(x, x),
                          _mm256_set1_epi32(0x00012710));
    m[q] = _mm256_add_epi64(
        _mm256_mul_epu32(x, _mm256_set1_epi64x(100000000)),
        _mm256_srli_epi64(x, 32));
  }
  const __m256i two52 = _mm256_set1_epi64x(0x4330000000000000ll);
  unsigned left = ~ok & 0xff;
  __m128 f[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; h++) { /* tokens 4h .. 4h + 3 */
    __m256i mant = _mm256_permute4x64_epi64(
        _mm256_unpacklo_epi64(m[2 * h], m[2 * h + 1]), 0xd8);
    left |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(
                _mm256_cmpgt_epi64(mant, _mm256_set1_epi64x((1ll << 52) - 1))))
            << (4 * h);
    __m256d x = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(mant, two52)),
                              _mm256_castsi256_pd(two52));
    x = _mm256_mul_pd(x, _mm256_i32gather_pd(
        pow10_recip, h ? _mm256_extracti128_si256(nf, 1)
                       : _mm256_castsi256_si128(nf), 8));
    left |= near_midpoint4(x) << (4 * h);
    f[h] = _mm256_cvtpd_ps(x);
  }
  __m256i neg = _mm256_and_si256(
      _mm256_cvtepi16_epi32(_mm_cmpeq_epi16(_mm_cmpeq_epi16(mi, z), z)),
      _mm256_set1_epi32(INT32_MIN));
  __m256 all = _mm256_insertf128_ps(_mm256_castps128_ps256(f[0]), f[1], 1);
  _mm256_storeu_ps(out, _mm256_or_ps(all, _mm256_castsi256_ps(neg)));
  return left;
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

/* Offsets of the commas in s[0, len) (len <= LIST_CHUNK) into pos, which
 * has room for LIST_CHUNK + 16; returns how many. */
inline size_t find_commas(const char *s, size_t len, uint32_t *pos,
                          bool wide) {
  size_t k = 0, i = 0;
#ifdef NUM_AVX512BW
  if (wide)
    return find_commas_avx512(s, len, pos);
#else
  (void)wide;
#endif
#ifdef NUM_SSE2
  for (; i + 64 <= len; i += 64)
    k += put_offsets(comma_bits64(s + i), (uint32_t)i, pos + k);
  if (i < len) {
    alignas(16) char t[64] = {0};
    std::memcpy(t, s + i, len - i);
    k += put_offsets(comma_bits64(t), (uint32_t)i, pos + k);
  }
#else
  for (; i < len; i++) {
    pos[k] = (uint32_t)i;
    k += s[i] == ',';
  }
#endif
  return k;
}

/* n comma-separated numbers filling [p, end) into dst, with vectors of
 * at most width bytes: 0 or -1. */
inline int read_list(const char *p, const char *end, float *dst, size_t n,
                     int width) {
  if (n == 0)
    return p == end ? 0 : -1;
  uint32_t pos[LIST_CHUNK + 16];
  const char *s = p; /* the current token's first byte */
  float *o = dst, *last = dst + n - 1;
#ifdef NUM_AVX512BW
  /* lists of 256 bytes on: with 64-byte vectors the comma finder and
   * tokens8, with 32-byte ones tokens8_avx2; shorter ones a token at a
   * time */
  const int eights = end - p >= 256 && width >= 32 ? width : 0;
  const bool wide = eights == 64;
  int refused = 0; /* groups in a row tokens8 read none of */
#else
  const bool wide = false;
  (void)width;
#endif
  for (const char *cb = p; cb < end; cb += LIST_CHUNK) {
    size_t len = (size_t)(end - cb) < LIST_CHUNK ? (size_t)(end - cb)
                                                 : LIST_CHUNK;
    size_t k = find_commas(cb, len, pos, wide);
    if (k > (size_t)(last - o))
      return -1; /* more than n numbers */
    if (cb + len == end)
      pos[k++] = (uint32_t)len; /* the last token ends at the list's end */
#ifdef NUM_AVX512BW
    const char *s0 = s; /* the chunk's first token, its number */
    float *o0 = o;
#endif
    for (size_t j = 0; j < k;) {
#ifdef NUM_AVX512BW
      /* eight tokens from g: from j, or, for the chunk's last tokens,
       * the last eight (reading again some that are read, to the same
       * values); not for a long token, nor the list's first 16 bytes;
       * and no more once two groups in a row were refused whole, as
       * every group of a list of longer tokens is (json.dumps' 17
       * digits) */
      size_t g = j + 8 <= k ? j : k >= 8 ? k - 8 : 0;
      const char *gs = g ? cb + pos[g - 1] + 1 : s0;
      if (eights && refused < 2 && k >= 8 && cb - gs <= 16 &&
          cb + pos[g] - p >= 16) {
        float *go = o0 + g;
        unsigned left = eights == 64 ? tokens8(gs, cb, pos + g, go)
                                     : tokens8_avx2(gs, cb, pos + g, go);
        refused = left == 0xff ? refused + 1 : 0;
        for (; left; left &= left - 1) {
          unsigned i = (unsigned)__builtin_ctz(left);
          if (!list_token(p, i ? cb + pos[g + i - 1] + 1 : gs,
                          cb + pos[g + i], go + i))
            return -1;
        }
        j = g + 8;
        s = cb + pos[j - 1] + 1;
        o = o0 + j;
        continue;
      }
#endif
      const char *c = cb + pos[j++];
      if (!list_token(p, s, c, o++))
        return -1;
      s = c + 1;
    }
  }
  return o == last + 1 ? 0 : -1;
}

/* Number of decimal digits of v, 1 <= v < 10^9. */
inline int digit_count(uint32_t v) {
  return 1 + (v >= 10) + (v >= 100) + (v >= 1000) + (v >= 10000) +
         (v >= 100000) + (v >= 1000000) + (v >= 10000000) +
         (v >= 100000000);
}

/* The eight decimal digits of v < 10^8, leading zeros included, as the
 * bytes of a word, most significant first in memory, without a branch:
 * halves, quarters and single digits are split inside the word, every
 * lane at once, by multiplies and shifts that divide exactly over the
 * lane's range (x * 5243 >> 19 == x / 100 for x < 10^4, x * 103 >> 10
 * == x / 10 for x < 100). */
inline uint64_t eight_digits(uint32_t v) {
  uint64_t x = (uint64_t)(v / 10000u) | ((uint64_t)(v % 10000u) << 32);
  uint64_t q = ((x * 5243u) >> 19) & 0x0000007f0000007full;
  x = q | ((x - q * 100u) << 16);
  q = ((x * 103u) >> 10) & 0x000f000f000f000full;
  x = q | ((x - q * 10u) << 8);
  return x + 0x3030303030303030ull;
}

/* Up to 16 digit bytes, first in memory in lo.  They stay in registers:
 * digits written to memory and read back at another offset make the load
 * wait for the stores before it, which cost more than the printing. */
struct digits16 {
  uint64_t lo, hi;
};

/* d shifted toward its first byte by k bytes (0 <= k < 16). */
inline digits16 skip_digits(digits16 d, int k) {
#ifdef __SIZEOF_INT128__
  unsigned __int128 w = (unsigned __int128)d.hi << 64 | d.lo;
  w >>= 8 * k;
  return digits16{(uint64_t)w, (uint64_t)(w >> 64)};
#else /* 32-bit targets: the same, a word at a time */
  if (k >= 8)
    return digits16{d.hi >> (8 * (k - 8)), 0};
  if (k == 0)
    return d;
  return digits16{(d.lo >> (8 * k)) | (d.hi << (64 - 8 * k)), d.hi >> (8 * k)};
#endif
}

/* The n significant digits of v (1 <= n <= 9, v < 10^9) first, then
 * zero bytes. */
inline digits16 significant_digits(uint32_t v, int n) {
  uint64_t low8 = eight_digits(v % 100000000u);
  digits16 nine{low8 << 8 | (uint64_t)('0' + v / 100000000u), low8 >> 56};
  return skip_digits(nine, 9 - n);
}

/* ---- printing's plain layouts by table ----------------------------------
 *
 * Tensors are mostly numbers of exponent -5..8, printed without one
 * ("-0.0123", "4.5", "120").  Which of those layouts a number takes
 * depends on its exponent and digit count, and branching on them costs
 * more than the digits themselves (a mixed tensor mispredicts about one
 * branch a number).  So every layout is one row of a table: for each of
 * its bytes, the lane of a 16-byte source (the nine digits with leading
 * zeros, then '0', '.' and '-') it is copied from, and its length.  One
 * SSSE3 byte shuffle then lays the number out, with no branch.  Rows
 * from NEG_ROWS on are the same layouts after a '-', which the printers
 * of several numbers at once use. */
#if defined(__GNUC__) && defined(__x86_64__)
#define NUM_SHUFFLE 1
#endif

constexpr int E_MIN = -5, E_MAX = 8; /* exponents printed plainly */
constexpr int ZERO_LANE = 9, DOT_LANE = 10, MINUS_LANE = 11, NONE_LANE = 0x80;

/* Row (e - E_MIN) * 9 + n - 1 of the table: exponent e, n digits; plus
 * NEG_ROWS after a '-' (at most 16 bytes: "-0.0000123456789"). */
constexpr int NEG_ROWS = 128;
constexpr int plain_row(int e, int n, bool neg = false) {
  return (e - E_MIN) * 9 + n - 1 + (neg ? NEG_ROWS : 0);
}
constexpr int PLAIN_ROWS = 2 * NEG_ROWS;
static_assert((E_MAX - E_MIN + 1) * 9 <= NEG_ROWS, "rows overlap");
/* A source's upper word after its last digit (byte 8): '0', '.' and '-'
 * in bytes 9, 10 and 11 (ZERO_LANE, DOT_LANE, MINUS_LANE). */
constexpr uint64_t SRC_TAIL =
    (uint64_t)'0' << 8 | (uint64_t)'.' << 16 | (uint64_t)'-' << 24;

struct plain_layouts {
  uint8_t lane[PLAIN_ROWS][16]; /* byte j of the text: this source lane */
  uint8_t len[PLAIN_ROWS];

  constexpr plain_layouts() : lane(), len() {
    for (int neg = 0; neg <= 1; neg++)
      for (int e = E_MIN; e <= E_MAX; e++)
        for (int n = 1; n <= 9; n++)
          fill(e, n, neg, lane[plain_row(e, n, neg)],
               &len[plain_row(e, n, neg)]);
  }

  /* Digit i (0 = the leading one) of n is in lane 9 - n + i. */
  static constexpr void fill(int e, int n, bool neg, uint8_t *c,
                             uint8_t *l) {
    int first = 9 - n, k = 0;
    for (int j = 0; j < 16; j++)
      c[j] = NONE_LANE;
    if (neg)
      c[k++] = MINUS_LANE;
    int start = k;
    if (e < 0) { /* 0.000ddd */
      c[k++] = ZERO_LANE;
      c[k++] = DOT_LANE;
      for (int z = 0; z < -e - 1; z++)
        c[k++] = ZERO_LANE;
      for (int i = 0; i < n; i++)
        c[k++] = (uint8_t)(first + i);
    } else if (n <= e + 1) { /* an integer: the digits, then zeros */
      for (int i = 0; i < n; i++)
        c[k++] = (uint8_t)(first + i);
      while (k - start <= e)
        c[k++] = ZERO_LANE;
    } else { /* ddd.ddd */
      for (int i = 0; i < n; i++) {
        if (i == e + 1)
          c[k++] = DOT_LANE;
        c[k++] = (uint8_t)(first + i);
      }
    }
    *l = (uint8_t)k;
  }
};

constexpr plain_layouts plain;

#ifdef NUM_SHUFFLE
/* sig (n digits, < 10^9) at exponent e (E_MIN..E_MAX) at o, which holds
 * 16 bytes; returns the length. */
__attribute__((target("ssse3"))) int put_plain(char *o, uint32_t sig, int n,
                                               int e) {
  uint64_t low8 = eight_digits(sig % 100000000u);
  uint64_t lo = low8 << 8 | (uint64_t)('0' + sig / 100000000u);
  uint64_t hi = low8 >> 56 | SRC_TAIL;
  __m128i src = _mm_set_epi64x((long long)hi, (long long)lo);
  __m128i c = _mm_loadu_si128(
      reinterpret_cast<const __m128i *>(plain.lane[plain_row(e, n)]));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(o), _mm_shuffle_epi8(src, c));
  return plain.len[plain_row(e, n)];
}

inline bool use_shuffle() { return __builtin_cpu_supports("ssse3"); }
#endif

/* Stores all 16 bytes of d at o. */
inline void put16(char *o, digits16 d) {
  std::memcpy(o, &d.lo, 8);
  std::memcpy(o + 8, &d.hi, 8);
}

/* sig * 10^e10 (sig > 0) laid out as proto__fmt_f32 documents, '-' first
 * when neg.  The digits are stored with fixed-size writes that may run
 * past the text's end (out holds PROTO__F32_MAX bytes; at most 26 are
 * written).  Returns the length, or -1 when sig has more than 9 digits
 * (no float's shortest digits do). */
inline int put_decimal(char *out, bool neg, uint32_t sig, int e10) {
  while (sig % 10 == 0) {
    sig /= 10;
    e10++;
  }
  if (sig >= 1000000000u)
    return -1;
  int n = digit_count(sig);
  int e = e10 + n - 1; /* exponent of the leading digit */
  char *o = out + neg;
  out[0] = '-';
#ifdef NUM_SHUFFLE
  if (e >= E_MIN && e <= E_MAX && use_shuffle()) {
    o += put_plain(o, sig, n, e);
    *o = '\0';
    return (int)(o - out);
  }
#endif
  digits16 d = significant_digits(sig, n);
  if (e >= 0 && e < 9) {
    put16(o, d);
    if (n <= e + 1) { /* an integer: the digits, then zeros */
      std::memcpy(o + n, "00000000", 8);
      o += e + 1;
    } else {
      put16(o + e + 2, skip_digits(d, e + 1));
      o[e + 1] = '.';
      o += n + 1;
    }
  } else if (e < 0 && e >= -5) {
    std::memcpy(o, "0.00000", 8);
    o += 1 - e;
    put16(o, d);
    o += n;
  } else {
    o[0] = (char)d.lo;
    o[1] = '.';
    put16(o + 2, skip_digits(d, 1));
    o += n > 1 ? n + 1 : 1;
    *o++ = 'e';
    if (e < 0)
      *o++ = '-';
    int ae = e < 0 ? -e : e;
    if (ae >= 10)
      *o++ = (char)('0' + ae / 10);
    *o++ = (char)('0' + ae % 10);
  }
  *o = '\0';
  return (int)(o - out);
}

/* x[0, n) as "x0,x1,...": the one-number printer each time. */
inline size_t fmt_list(char *out, const float *x, size_t n) {
  char *o = out;
  for (size_t i = 0; i < n; i++) {
    o += proto__fmt_f32(o, x[i]);
    *o++ = ',';
  }
  o -= n > 0;
  *o = '\0';
  return (size_t)(o - out);
}

/* ---- printing several numbers at once (AVX2, AVX-512F) ------------------
 *
 * Per number, Dragonbox's decision between its two divisors (see
 * fmt::detail::dragonbox::to_decimal, float32, round to nearest even) is
 * two thirds of the printing's instructions.  fpconv_lanes.inc makes it
 * for four (AVX2) or eight (AVX-512F) floats at once, one per 64-bit
 * lane: fmt's cache of powers of ten, the same 32 x 64-bit products (as
 * 32 x 32-bit halves) and the same tests, each outcome computed and
 * selected rather than branched to; then, in the same lanes, put_decimal's
 * steps up to the bytes put_plain shuffles (with AVX512CD, the digit
 * count and trailing zeros from the digit bytes' bits, without a
 * division).  The layout loop shuffles them one number at a time, the
 * sign included.  Lanes that take no divisor decision (zero,
 * infinities and NaN, subnormals, powers of two: Dragonbox's shorter
 * interval) or print with an exponent are flagged and go to
 * proto__fmt_f32.  test_numparse holds every printer to the same text
 * over a sweep of all floats. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(ATTND_PORTABLE_NUM)
#define NUM_LANES 1
#endif

#ifdef NUM_LANES
/* The powers of ten float32's Dragonbox uses: 10^k, k in this range. */
constexpr int POW10_MIN_K = fmt::detail::dragonbox::float_info<float>::min_k;
constexpr int POW10_MAX_K = fmt::detail::dragonbox::float_info<float>::max_k;

/* fmt's cache of those powers, which it keeps inside a function, copied
 * once (at load) where a gather can read it. */
struct pow10_cache {
  uint64_t at[POW10_MAX_K - POW10_MIN_K + 1];
  pow10_cache() {
    using cache = fmt::detail::dragonbox::cache_accessor<float>;
    for (int k = POW10_MIN_K; k <= POW10_MAX_K; k++)
      at[k - POW10_MIN_K] = cache::get_cached_power(k);
  }
};
const pow10_cache pow10_cached;

/* gcc 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which
 * -W(maybe-)uninitialized reports once inlined (gcc bug 105593, fixed in
 * gcc 13). */
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* Up to BLOCK numbers' put_plain sources and table rows, one after
 * another, as shortest_groups leaves them for the layout loop. */
constexpr int BLOCK = 64;
struct plain_block {
  uint8_t src[BLOCK][16]; /* put_plain's source: 9 digits, '0', '.', '-' */
  uint8_t row[BLOCK];     /* plain_row(e, n, neg) */
};

namespace avx512 {
#define LANES_FN __attribute__((target("avx512f,avx512bw,avx512cd")))
#define LANES_LZCNT 1
constexpr int LANES = 8;
typedef uint64_t u64v __attribute__((vector_size(64)));
typedef uint32_t u32v __attribute__((vector_size(64)));
typedef uint16_t u16v __attribute__((vector_size(64)));
typedef __mmask8 lanes_mask;
LANES_FN inline lanes_mask eq(u64v a, u64v b) {
  return _mm512_cmpeq_epi64_mask((__m512i)a, (__m512i)b);
}
LANES_FN inline lanes_mask lt(u64v a, u64v b) {
  return _mm512_cmplt_epi64_mask((__m512i)a, (__m512i)b);
}
LANES_FN inline lanes_mask both(lanes_mask a, lanes_mask b) { return a & b; }
LANES_FN inline lanes_mask either(lanes_mask a, lanes_mask b) { return a | b; }
LANES_FN inline lanes_mask but_not(lanes_mask a, lanes_mask b) {
  return a & (lanes_mask)~b;
}
LANES_FN inline lanes_mask flip(lanes_mask a) { return (lanes_mask)~a; }
LANES_FN inline u64v sel(lanes_mask m, u64v a, u64v b) {
  return (u64v)_mm512_mask_blend_epi64(m, (__m512i)b, (__m512i)a);
}
LANES_FN inline u64v add_if(u64v v, lanes_mask m, uint64_t k) {
  return (u64v)_mm512_mask_add_epi64((__m512i)v, m, (__m512i)v,
                                     _mm512_set1_epi64((long long)k));
}
LANES_FN inline unsigned bits_of(lanes_mask m) { return m; }
LANES_FN inline u64v load_bits(const float *x) {
  return (u64v)_mm512_cvtepu32_epi64(
      _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)));
}
LANES_FN inline u64v mul32(u64v a, u64v b) {
  return (u64v)_mm512_mul_epu32((__m512i)a, (__m512i)b);
}
LANES_FN inline u64v gather(const uint64_t *t, u64v i) {
  return (u64v)_mm512_i64gather_epi64((__m512i)i, t, 8);
}
LANES_FN inline u16v mulhi16(u16v a, uint16_t k) {
  return (u16v)_mm512_mulhi_epu16((__m512i)a, _mm512_set1_epi16((short)k));
}
LANES_FN inline u64v lzcnt(u64v a) {
  return (u64v)_mm512_lzcnt_epi64((__m512i)a);
}
LANES_FN inline u64v shl(u64v a, u64v bits) {
  return (u64v)_mm512_sllv_epi64((__m512i)a, (__m512i)bits);
}
LANES_FN inline u64v shr(u64v a, u64v bits) {
  return (u64v)_mm512_srlv_epi64((__m512i)a, (__m512i)bits);
}
LANES_FN inline void put_src(plain_block *o, int at, u64v lo, u64v hi,
                             u64v row) {
  const __m512i first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i second = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_si512(o->src[at], _mm512_permutex2var_epi64(
                                      (__m512i)lo, first, (__m512i)hi));
  _mm512_storeu_si512(o->src[at + 4], _mm512_permutex2var_epi64(
                                          (__m512i)lo, second, (__m512i)hi));
  _mm_storel_epi64(reinterpret_cast<__m128i *>(o->row + at),
                   _mm512_cvtepi64_epi8((__m512i)row));
}
#include "fpconv_lanes.inc"
#undef LANES_LZCNT
#undef LANES_FN
}  // namespace avx512

namespace avx2 {
#define LANES_FN __attribute__((target("avx2")))
constexpr int LANES = 4;
typedef uint64_t u64v __attribute__((vector_size(32)));
typedef int64_t i64v __attribute__((vector_size(32)));
typedef uint32_t u32v __attribute__((vector_size(32)));
typedef uint16_t u16v __attribute__((vector_size(32)));
typedef i64v lanes_mask; /* -1 in the lanes of the set, 0 elsewhere */
LANES_FN inline lanes_mask eq(u64v a, u64v b) { return a == b; }
LANES_FN inline lanes_mask lt(u64v a, u64v b) { return (i64v)a < (i64v)b; }
LANES_FN inline lanes_mask both(lanes_mask a, lanes_mask b) { return a & b; }
LANES_FN inline lanes_mask either(lanes_mask a, lanes_mask b) { return a | b; }
LANES_FN inline lanes_mask but_not(lanes_mask a, lanes_mask b) { return a & ~b; }
LANES_FN inline lanes_mask flip(lanes_mask a) { return ~a; }
LANES_FN inline u64v sel(lanes_mask m, u64v a, u64v b) { return m ? a : b; }
LANES_FN inline u64v add_if(u64v v, lanes_mask m, uint64_t k) {
  return v + ((u64v)m & k);
}
LANES_FN inline u64v load_bits(const float *x) {
  return (u64v)_mm256_cvtepu32_epi64(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(x)));
}
LANES_FN inline u64v mul32(u64v a, u64v b) {
  return (u64v)_mm256_mul_epu32((__m256i)a, (__m256i)b);
}
LANES_FN inline u16v mulhi16(u16v a, uint16_t k) {
  return (u16v)_mm256_mulhi_epu16((__m256i)a, _mm256_set1_epi16((short)k));
}
LANES_FN inline u64v gather(const uint64_t *t, u64v i) {
  return (u64v)_mm256_i64gather_epi64(
      reinterpret_cast<const long long *>(t), (__m256i)i, 8);
}
LANES_FN inline unsigned bits_of(lanes_mask m) {
  return (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd((__m256i)m));
}
LANES_FN inline void put_src(plain_block *o, int at, u64v lo, u64v hi,
                             u64v row) {
  __m256i a = _mm256_unpacklo_epi64((__m256i)lo, (__m256i)hi); /* 0, 2 */
  __m256i b = _mm256_unpackhi_epi64((__m256i)lo, (__m256i)hi); /* 1, 3 */
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(o->src[at]),
                      _mm256_permute2x128_si256(a, b, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(o->src[at + 2]),
                      _mm256_permute2x128_si256(a, b, 0x31));
  for (int j = 0; j < LANES; j++)
    o->row[at + j] = (uint8_t)row[j];
}
#include "fpconv_lanes.inc"
#undef LANES_FN
}  // namespace avx2
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* x[0, n) as fmt_list does, up to BLOCK numbers decided by one call of
 * an instruction set's shortest_groups at a time, each then laid out by
 * one byte shuffle (put_plain's, sign included). */
template <int LANES>
uint64_t groups_of(const float *x, int groups, const uint64_t *pow10,
                   plain_block *out);
template <>
inline uint64_t groups_of<8>(const float *x, int groups,
                             const uint64_t *pow10, plain_block *out) {
  return avx512::shortest_groups(x, groups, pow10, out);
}
template <>
inline uint64_t groups_of<4>(const float *x, int groups,
                             const uint64_t *pow10, plain_block *out) {
  return avx2::shortest_groups(x, groups, pow10, out);
}

template <int LANES>
__attribute__((target("ssse3"))) size_t fmt_list_lanes(char *out,
                                                       const float *x,
                                                       size_t n) {
  constexpr int MAX_GROUPS = BLOCK / LANES;
  char *o = out;
  size_t i = 0;
  while (n - i >= (size_t)LANES) {
    size_t left = (n - i) / LANES;
    int groups = left < (size_t)MAX_GROUPS ? (int)left : MAX_GROUPS;
    plain_block p;
    uint64_t other = groups_of<LANES>(x + i, groups, pow10_cached.at, &p);
    for (int j = 0; j < LANES * groups; j++) {
      if (other >> j & 1) {
        o += proto__fmt_f32(o, x[i + j]);
      } else {
        int row = p.row[j];
        __m128i v =
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(p.src[j]));
        __m128i c = _mm_loadu_si128(
            reinterpret_cast<const __m128i *>(plain.lane[row]));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o),
                         _mm_shuffle_epi8(v, c));
        o += plain.len[row];
      }
      *o++ = ',';
    }
    i += (size_t)(LANES * groups);
  }
  if (i < n)
    return (size_t)(o - out) + fmt_list(o, x + i, n - i);
  *--o = '\0'; /* the last comma */
  return (size_t)(o - out);
}

/* The widest printer this CPU runs: 8, 4, or 1 number at a time. */
inline int widest_printer() {
  int v = proto__vector_bytes();
  return v == 64 ? 8 : v == 32 ? 4 : 1;
}
#endif

/* x[0, n) by the printer of the given width (8, 4 or 1), or the one at
 * a time when this CPU lacks it. */
inline size_t fmt_list_width(char *out, const float *x, size_t n,
                             int width) {
#ifdef NUM_LANES
  int best = widest_printer();
  if (width == 8 && best >= 8 && n >= 8)
    return fmt_list_lanes<8>(out, x, n);
  if (width == 4 && best >= 4 && n >= 4)
    return fmt_list_lanes<4>(out, x, n);
#else
  (void)width;
#endif
  return fmt_list(out, x, n);
}

}  // namespace

extern "C" {

const char *proto__num_f64(const char *p, const char *end, double *out) {
  return read_json(p, end, out);
}

const char *proto__num_f32(const char *p, const char *end, float *out) {
  return read_f32(p, end, out);
}

int proto__num_list_f32(const char *p, const char *end, float *dst,
                        size_t n) {
  return read_list(p, end, dst, n, proto__vector_bytes());
}

int proto__num_list_f32_width(const char *p, const char *end, float *dst,
                              size_t n, int width) {
  int w = proto__vector_bytes();
  return read_list(p, end, dst, n, width < w ? width : w);
}

int proto__num_fmt_f32(char *out, float x) {
  /* Dragonbox's shortest digits as an integer and a power of ten, x =
   * sig * 10^e10. */
  if (!std::isfinite(x) || x == 0.0f)
    return -1;
  auto dec = fmt::detail::dragonbox::to_decimal(x);
  return put_decimal(out, x < 0, dec.significand, dec.exponent);
}

size_t proto__num_fmt_f32_list(char *out, const float *x, size_t n) {
#ifdef NUM_LANES
  return fmt_list_width(out, x, n, widest_printer());
#else
  return fmt_list(out, x, n);
#endif
}

size_t proto__num_fmt_f32_list_width(char *out, const float *x, size_t n,
                                     int width) {
  return fmt_list_width(out, x, n, width);
}

}  // extern "C"
