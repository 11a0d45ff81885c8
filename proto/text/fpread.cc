/* fpread.cc - JSON number text -> float32 (or double), for the JSON
 * decoders (contract: fpconv.h).
 *
 * fast_float (Debian libfast-float-dev, header only; the algorithm
 * libstdc++ 12 itself uses for std::from_chars) is the exact reader:
 * correctly rounded for a mantissa of any length.  It accepts more than
 * JSON does ("1.", ".5", "inf", "nan"), so each token it reads is then
 * held to the JSON number grammar here.  In front of it, Clinger's fast
 * path (clinger_f32) decides the common short tokens in one double
 * operation, and a list of numbers (a tensor leaf) is read with its
 * commas found first, so that consecutive tokens are read independently,
 * up to eight at a time with AVX2 or AVX-512 (read_list; the eight-token
 * kernels are in fpread_eights.inc).  Whatever a fast path cannot decide
 * exactly goes to fast_float.
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

#include "fpconv.h"

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

/* Whether the JSON number [p, q), which is not zero, lies below 1 in
 * magnitude: its decimal exponent (the first non-zero digit's place plus
 * the 'e' part, the latter clamped far beyond any float) is negative.
 * That is all it takes to tell a number that underflows a float or a
 * double from one that overflows it. */
inline bool below_one(const char *p, const char *q) {
  long place = -1, e = 0;
  bool seen = false, frac = false, neg = false;
  for (; p < q && *p != 'e' && *p != 'E'; p++) {
    if (*p == '.') {
      frac = true;
    } else if (is_digit(*p)) {
      if (!seen && *p != '0')
        seen = true;
      if (!frac && seen)
        place++;
      else if (frac && !seen)
        place--;
    }
  }
  if (p < q) { /* the exponent */
    p++;
    if (p < q && (*p == '+' || *p == '-'))
      neg = *p++ == '-';
    for (; p < q && is_digit(*p); p++)
      if (e < 100000)
        e = e * 10 + (*p - '0');
  }
  return place + (neg ? -e : e) < 0;
}

/* Reads one JSON number at p into *out (float or double): the token's
 * end, or nullptr.  A number beyond the type's range reads as it rounds:
 * +-0 below the smallest subnormal's half, +-infinity (which the callers
 * refuse) past the largest finite value.  Some fast_float releases report
 * both as errc::result_out_of_range and others as success, so the value
 * is set here from the text, the same on every release. */
template <typename T>
inline const char *read_json(const char *p, const char *end, T *out) {
  auto r = fast_float::from_chars(p, end, *out);
  if (r.ec == std::errc::result_out_of_range && json_token(p, r.ptr)) {
    T mag = below_one(p, r.ptr) ? T(0) : T(INFINITY);
    *out = *p == '-' ? -mag : mag;
    return r.ptr;
  }
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

/* The token [s, c) of a list that starts at p.  Not inlined: read_list's
 * loop runs slower with it inside (gcc 12; see docs/decisions.md). */
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
#include "fpread_eights.inc"
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

}  // extern "C"
