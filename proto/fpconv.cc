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

#include <fast_float/fast_float.h>
/* Header-only: nothing of fmt at run time, like fast_float. */
#define FMT_HEADER_ONLY
#include <fmt/format.h>

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
  if (m > (1ull << 53) || e10 < -22 || e10 > 22)
    return 0;
  double d = e10 < 0 ? (double)m / pow10_exact[-e10]
                      : (double)m * pow10_exact[e10];
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  if (!(d >= FLT_MIN && d < FLT_MAX) || (bits & 0x1fffffffu) == 0x10000000u)
    return 0;
  float f = (float)d;
  *out = neg ? -f : f;
  return 1;
}

/* A float32 JSON number at p, within the cJSON path's range: the token's
 * end, or nullptr. */
inline const char *read_f32(const char *p, const char *end, float *out);

/* The double that strtod reads from [p, q): what cJSON would have stored. */
inline bool read_double(const char *p, const char *q, double *out) {
  auto r = fast_float::from_chars(p, q, *out);
  return r.ec == std::errc() && r.ptr == q;
}

/* float32 range as the cJSON path checks it: |double(text)| <= FLT_MAX.
 * Only the largest float can be rounded to from text whose double is past
 * FLT_MAX, so only that case needs the second reading. */
inline bool f32_in_range(const char *p, const char *q, float f) {
  if (std::fabs(f) < FLT_MAX)
    return true;
  double d;
  return std::isfinite(f) && read_double(p, q, &d) && std::fabs(d) <= FLT_MAX;
}

inline const char *read_f32(const char *p, const char *end, float *out) {
  const char *q;
  if (clinger_f32(p, end, out, &q))
    return q;
  q = read_json(p, end, out);
  return q && f32_in_range(p, q, *out) ? q : nullptr;
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
 * as in clinger_f32).  Anything else (whitespace, exponents, longer
 * tokens, double-rounding midpoints, errors) goes to read_f32 on [s, c),
 * which decides it exactly as a lone number.  SSE2 is in every x86-64;
 * elsewhere (or with -DATTND_PORTABLE_NUM) every token takes read_f32.
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

/* Offsets of the commas in s[0, len) (len <= LIST_CHUNK) into pos, which
 * has room for LIST_CHUNK + 8; returns how many. */
inline size_t find_commas(const char *s, size_t len, uint32_t *pos) {
  size_t k = 0, i = 0;
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

/* n comma-separated numbers filling [p, end) into dst: 0 or -1. */
inline int read_list(const char *p, const char *end, float *dst, size_t n) {
  if (n == 0)
    return p == end ? 0 : -1;
  uint32_t pos[LIST_CHUNK + 8];
  const char *s = p; /* the current token's first byte */
  float *o = dst, *last = dst + n - 1;
  for (const char *cb = p; cb < end; cb += LIST_CHUNK) {
    size_t len = (size_t)(end - cb) < LIST_CHUNK ? (size_t)(end - cb)
                                                 : LIST_CHUNK;
    size_t k = find_commas(cb, len, pos);
    if (k > (size_t)(last - o))
      return -1; /* more than n numbers */
    for (size_t j = 0; j < k; j++) {
      const char *c = cb + pos[j];
      if (!list_token(p, s, c, o++))
        return -1;
      s = c + 1;
    }
  }
  if (o != last)
    return -1;
  return list_token(p, s, end, o) ? 0 : -1;
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

/* Stores all 16 bytes of d at o. */
inline void put16(char *o, digits16 d) {
  std::memcpy(o, &d.lo, 8);
  std::memcpy(o + 8, &d.hi, 8);
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
  return read_list(p, end, dst, n);
}

int proto__num_fmt_f32(char *out, float x) {
  /* Dragonbox's shortest digits as an integer and a power of ten, x =
   * sig * 10^e10, laid out as proto__fmt_f32 documents.  The digits are
   * stored with fixed-size writes that may run past the text's end (out
   * holds PROTO__F32_MAX bytes; at most 26 are written). */
  if (!std::isfinite(x) || x == 0.0f)
    return -1;
  auto dec = fmt::detail::dragonbox::to_decimal(x);
  uint32_t sig = dec.significand;
  int e10 = dec.exponent;
  while (sig % 10 == 0) {
    sig /= 10;
    e10++;
  }
  if (sig >= 1000000000u)
    return -1;
  int n = digit_count(sig);
  digits16 d = significant_digits(sig, n);
  int e = e10 + n - 1; /* exponent of the leading digit */
  char *o = out + (x < 0);
  out[0] = '-';
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

}  // extern "C"
