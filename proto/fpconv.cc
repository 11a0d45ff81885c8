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
#include <immintrin.h> /* SSSE3 and AVX-512F, each in functions that ask */
#endif

#include <fast_float/fast_float.h>
/* Header-only: nothing of fmt at run time, like fast_float. */
#define FMT_HEADER_ONLY
#include <fmt/format.h>

/* proto_impl.h is C; of it, the lists need the one-number printer. */
extern "C" int proto__fmt_f32(char *s, float x);

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

inline bool use_avx512bw() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("popcnt");
}
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

/* n comma-separated numbers filling [p, end) into dst: 0 or -1. */
inline int read_list(const char *p, const char *end, float *dst, size_t n) {
  if (n == 0)
    return p == end ? 0 : -1;
  uint32_t pos[LIST_CHUNK + 16];
  const char *s = p; /* the current token's first byte */
  float *o = dst, *last = dst + n - 1;
#ifdef NUM_AVX512BW
  const bool wide = end - p >= 256 && use_avx512bw();
#else
  const bool wide = false;
#endif
  for (const char *cb = p; cb < end; cb += LIST_CHUNK) {
    size_t len = (size_t)(end - cb) < LIST_CHUNK ? (size_t)(end - cb)
                                                 : LIST_CHUNK;
    size_t k = find_commas(cb, len, pos, wide);
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

/* ---- printing's plain layouts by table ----------------------------------
 *
 * Tensors are mostly numbers of exponent -5..8, printed without one
 * ("-0.0123", "4.5", "120").  Which of those layouts a number takes
 * depends on its exponent and digit count, and branching on them costs
 * more than the digits themselves (a mixed tensor mispredicts about one
 * branch a number).  So every layout is one row of a table: for each of
 * its bytes, the lane of a 16-byte source (the nine digits with leading
 * zeros, then '0' and '.') it is copied from, and its length.  One
 * SSSE3 byte shuffle then lays the number out, with no branch. */
#if defined(__GNUC__) && defined(__x86_64__)
#define NUM_SHUFFLE 1
#endif

constexpr int E_MIN = -5, E_MAX = 8; /* exponents printed plainly */
constexpr int ZERO_LANE = 9, DOT_LANE = 10, NONE_LANE = 0x80;

/* Row (e - E_MIN) * 9 + n - 1 of the table: exponent e, n digits. */
constexpr int plain_row(int e, int n) { return (e - E_MIN) * 9 + n - 1; }
constexpr int PLAIN_ROWS = (E_MAX - E_MIN + 1) * 9;

struct plain_layouts {
  uint8_t lane[PLAIN_ROWS][16]; /* byte j of the text: this source lane */
  uint8_t len[PLAIN_ROWS];

  constexpr plain_layouts() : lane(), len() {
    for (int e = E_MIN; e <= E_MAX; e++)
      for (int n = 1; n <= 9; n++)
        fill(e, n, lane[plain_row(e, n)], &len[plain_row(e, n)]);
  }

  /* Digit i (0 = the leading one) of n is in lane 9 - n + i. */
  static constexpr void fill(int e, int n, uint8_t *c, uint8_t *l) {
    int first = 9 - n, k = 0;
    for (int j = 0; j < 16; j++)
      c[j] = NONE_LANE;
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
      while (k <= e)
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
  uint64_t hi = low8 >> 56 | (uint64_t)'0' << 8 | (uint64_t)'.' << 16;
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

/* ---- printing eight numbers at once (AVX-512F) --------------------------
 *
 * Per number, Dragonbox's decision between its two divisors (see
 * fmt::detail::dragonbox::to_decimal, float32, round to nearest even) is
 * two thirds of the printing's instructions.  shortest8 makes it for
 * eight floats at once, one per 64-bit lane: fmt's cache of powers of
 * ten, the same 32 x 64-bit products (as 32 x 32-bit halves) and the
 * same tests, each outcome computed and selected by mask rather than
 * branched to.  The digits are then laid out one number at a time, as
 * the one-number printer does.  Lanes that need none of this decision
 * (zero, infinities and NaN, subnormals, powers of two: Dragonbox's
 * shorter interval) are flagged and printed by proto__fmt_f32.
 * test_numparse holds the two printers to the same text over a sweep of
 * all floats. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(ATTND_PORTABLE_NUM)
#define NUM_AVX512 1
#endif

#ifdef NUM_AVX512
#define AVX512_FN __attribute__((target("avx512f")))
/* gcc 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which
 * -W(maybe-)uninitialized reports once inlined (gcc bug 105593, fixed in
 * gcc 13). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

/* The powers of ten float32's Dragonbox uses: 10^k, k in this range. */
constexpr int POW10_MIN_K = fmt::detail::dragonbox::float_info<float>::min_k;
constexpr int POW10_MAX_K = fmt::detail::dragonbox::float_info<float>::max_k;

AVX512_FN inline __m512i lanes64(uint64_t v) {
  return _mm512_set1_epi64((long long)v);
}

/* The low 64 bits of a * c (a < 2^32 in each lane). */
AVX512_FN inline __m512i mul_low64(__m512i a, __m512i c, __m512i c_hi) {
  return _mm512_add_epi64(_mm512_mul_epu32(a, c),
                          _mm512_slli_epi64(_mm512_mul_epu32(a, c_hi), 32));
}

/* Bit 64 - beta of r (the product's parity as Dragonbox reads it), and
 * whether bits 32 - beta .. 63 - beta are all zero (its integer test). */
AVX512_FN inline void parity(__m512i r, __m512i beta, __mmask8 *odd,
                             __mmask8 *whole) {
  __m512i p = _mm512_srlv_epi64(r, _mm512_sub_epi64(lanes64(64), beta));
  __m512i w = _mm512_srlv_epi64(r, _mm512_sub_epi64(lanes64(32), beta));
  *odd = _mm512_test_epi64_mask(p, lanes64(1));
  *whole = _mm512_testn_epi64_mask(w, lanes64(0xffffffffu));
}

/* What the layout loop needs of eight numbers: each one's 16-byte
 * source as put_plain builds it (the nine digits, '0', '.') and its row
 * of the plain layout table, plain_row(e, n). */
struct plain_src {
  uint8_t src[8][16];
  uint8_t row[8];
};

/* s / P for s < 2^32 in each lane: a 32 x 32-bit product and a shift, the
 * multiplier and shift the compiler uses for a constant divisor. */
template <uint32_t M, int S> AVX512_FN inline __m512i div_const(__m512i s) {
  return _mm512_srli_epi64(_mm512_mul_epu32(s, lanes64(M)), S);
}

/* Divides the trailing zeros of s out by P = 10^K where it can (the
 * sequence 8, 4, 2, 1 removes up to 15), counting them into e. */
template <uint32_t P, int K, uint32_t M, int S>
AVX512_FN inline void strip8(__m512i *s, __m512i *e) {
  __m512i q = div_const<M, S>(*s);
  __mmask8 z =
      _mm512_cmpeq_epi64_mask(_mm512_mul_epu32(q, lanes64(P)), *s);
  *s = _mm512_mask_mov_epi64(*s, z, q);
  *e = _mm512_mask_add_epi64(*e, z, *e, lanes64(K));
}

/* The eight decimal digits of v < 10^8 as the bytes of each lane, most
 * significant first in memory: eight_digits, on eight lanes.  Each 32-bit
 * half holds a four-digit group, and every product stays inside its half
 * (5243 * 9999 and 103 * 99 fit), so 32-bit multiplies do it. */
AVX512_FN inline __m512i digits8_lanes(__m512i v) {
  __m512i hi = div_const<0xd1b71759u, 45>(v); /* v / 10^4 */
  __m512i lo = _mm512_sub_epi64(v, _mm512_mul_epu32(hi, lanes64(10000)));
  __m512i x = _mm512_or_si512(hi, _mm512_slli_epi64(lo, 32));
  __m512i q = _mm512_and_si512(
      _mm512_srli_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(5243)), 19),
      _mm512_set1_epi32(0x7f));
  x = _mm512_or_si512(
      q, _mm512_slli_epi32(
             _mm512_sub_epi32(x, _mm512_mullo_epi32(q, _mm512_set1_epi32(100))),
             16));
  q = _mm512_and_si512(
      _mm512_srli_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(103)), 10),
      _mm512_set1_epi32(0x000f000f));
  x = _mm512_or_si512(
      q, _mm512_slli_epi32(
             _mm512_sub_epi32(x, _mm512_mullo_epi32(q, _mm512_set1_epi32(10))),
             8));
  return _mm512_add_epi32(x, _mm512_set1_epi32(0x30303030));
}

/* Shortest digits of x[0, 8), laid out in *out for put_plain's table;
 * returns the mask of lanes left to proto__fmt_f32: those shortest8
 * does not decide, and those printed with an exponent. */
AVX512_FN unsigned shortest8(const float *x, const uint64_t *pow10,
                             plain_src *out) {
  const __m512i one = lanes64(1), low32 = lanes64(0xffffffffu);
  __m512i bits = _mm512_cvtepu32_epi64(
      _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)));
  __m512i fc = _mm512_and_si512(bits, lanes64(0x7fffff));
  __m512i be = _mm512_and_si512(_mm512_srli_epi64(bits, 23), lanes64(0xff));
  __mmask8 normal = _mm512_test_epi64_mask(fc, fc) &
                    _mm512_test_epi64_mask(be, be) &
                    _mm512_cmpneq_epi64_mask(be, lanes64(0xff));
  /* the other lanes get a harmless exponent: their cache index stays in
   * the table */
  be = _mm512_mask_blend_epi64(normal, lanes64(150), be);
  __m512i e2 = _mm512_sub_epi64(be, lanes64(150)); /* x = fc * 2^e2 */
  fc = _mm512_or_si512(fc, lanes64(1u << 23));
  __mmask8 even = _mm512_testn_epi64_mask(fc, one);

  /* minus_k = floor_log10_pow2(e2) - kappa; beta = e2 +
   * floor_log2_pow10(-minus_k) (signed 32 x 32-bit products) */
  __m512i minus_k = _mm512_sub_epi64(
      _mm512_srai_epi64(_mm512_mul_epi32(e2, lanes64(315653)), 20), one);
  __m512i k = _mm512_sub_epi64(_mm512_setzero_si512(), minus_k);
  __m512i beta = _mm512_add_epi64(
      e2, _mm512_srai_epi64(_mm512_mul_epi32(k, lanes64(1741647)), 19));
  __m512i c = _mm512_i64gather_epi64(
      _mm512_sub_epi64(k, lanes64((uint64_t)(int64_t)POW10_MIN_K)), pow10,
      8);
  __m512i c_hi = _mm512_srli_epi64(c, 32);

  __m512i deltai = _mm512_and_si512(
      _mm512_srlv_epi64(c, _mm512_sub_epi64(lanes64(63), beta)), low32);
  __m512i two_fc = _mm512_slli_epi64(fc, 1);
  __m512i u = _mm512_sllv_epi64(_mm512_or_si512(two_fc, one), beta);
  /* z = u * c, 96 bits: its top 32 bits, and whether the 32 below are 0 */
  __m512i p_lo = _mm512_mul_epu32(u, c), p_hi = _mm512_mul_epu32(u, c_hi);
  __m512i mid = _mm512_add_epi64(_mm512_srli_epi64(p_lo, 32),
                                 _mm512_and_si512(p_hi, low32));
  __m512i z = _mm512_add_epi64(_mm512_srli_epi64(p_hi, 32),
                               _mm512_srli_epi64(mid, 32));
  __mmask8 z_whole = _mm512_testn_epi64_mask(mid, low32);

  /* the larger divisor, 100 */
  __m512i big = _mm512_srli_epi64(_mm512_mul_epu32(z, lanes64(1374389535)),
                                  37);
  __m512i r = _mm512_sub_epi64(z, _mm512_mul_epu32(big, lanes64(100)));
  __mmask8 x_odd, x_whole, y_odd, y_whole;
  parity(mul_low64(_mm512_sub_epi64(two_fc, one), c, c_hi), beta, &x_odd,
         &x_whole);
  parity(mul_low64(two_fc, c, c_hi), beta, &y_odd, &y_whole);
  __mmask8 drop_right =
      _mm512_testn_epi64_mask(r, r) & z_whole & (__mmask8)~even;
  __mmask8 use_big =
      (_mm512_cmplt_epu64_mask(r, deltai) & (__mmask8)~drop_right) |
      (_mm512_cmpeq_epu64_mask(r, deltai) & (x_odd | (x_whole & even)));

  /* the smaller divisor, 10 (32-bit arithmetic, as fmt's) */
  __m512i sbig = _mm512_mask_sub_epi64(big, drop_right, big, one);
  __m512i sr = _mm512_mask_mov_epi64(r, drop_right, lanes64(100));
  __m512i dist = _mm512_and_si512(
      _mm512_add_epi64(_mm512_sub_epi64(sr, _mm512_srli_epi64(deltai, 1)),
                       lanes64(5)),
      low32);
  __mmask8 approx_y_odd = _mm512_testn_epi64_mask(dist, one);
  __m512i t = _mm512_and_si512(_mm512_mul_epu32(dist, lanes64(6554)), low32);
  __mmask8 divisible = _mm512_cmplt_epu64_mask(
      _mm512_and_si512(t, lanes64(0xffff)), lanes64(6554));
  __m512i small = _mm512_and_si512(
      _mm512_add_epi64(_mm512_mul_epu32(sbig, lanes64(10)),
                       _mm512_srli_epi64(t, 16)),
      low32);
  __mmask8 down = divisible & ((y_odd ^ approx_y_odd) |
                               (y_whole & _mm512_test_epi64_mask(small, one)));
  small = _mm512_and_si512(_mm512_mask_sub_epi64(small, down, small, one),
                           low32);

  __m512i s = _mm512_mask_blend_epi64(use_big, small, big);
  __m512i e = _mm512_mask_add_epi64(minus_k, use_big, minus_k, one);
  e = _mm512_add_epi64(e, one); /* + kappa: x = s * 10^e */

  /* put_decimal's steps: no trailing zeros, the digit count n, the
   * exponent of the leading digit, the table row, the digits */
  strip8<100000000u, 8, 0x55e63b89u, 57>(&s, &e);
  strip8<10000u, 4, 0xd1b71759u, 45>(&s, &e);
  strip8<100u, 2, 0x51eb851fu, 37>(&s, &e);
  strip8<10u, 1, 0xcccccccdu, 35>(&s, &e);
  __m512i n = one;
  static const uint32_t p10[8] = {10,      100,      1000,      10000,
                                  100000,  1000000,  10000000,  100000000};
#pragma GCC unroll 8
  for (int d = 0; d < 8; d++)
    n = _mm512_mask_add_epi64(
        n, _mm512_cmpge_epu64_mask(s, lanes64(p10[d])), n, one);
  __m512i lead = _mm512_sub_epi64(_mm512_add_epi64(e, n), one);
  __mmask8 plain_ok =
      _mm512_cmpge_epi64_mask(lead, lanes64((uint64_t)(int64_t)E_MIN)) &
      _mm512_cmple_epi64_mask(lead, lanes64(E_MAX)) &
      _mm512_cmplt_epu64_mask(s, lanes64(1000000000u));
  __m512i le = _mm512_sub_epi64(lead, lanes64((uint64_t)(int64_t)E_MIN));
  __m512i row = _mm512_add_epi64(
      _mm512_add_epi64(_mm512_slli_epi64(le, 3), le),
      _mm512_sub_epi64(n, one));
  _mm_storel_epi64(reinterpret_cast<__m128i *>(out->row),
                   _mm512_cvtepi64_epi8(row));

  __m512i top = div_const<0x55e63b89u, 57>(s); /* s / 10^8 */
  __m512i d8 = digits8_lanes(
      _mm512_sub_epi64(s, _mm512_mul_epu32(top, lanes64(100000000u))));
  __m512i lo = _mm512_or_si512(_mm512_slli_epi64(d8, 8),
                               _mm512_add_epi64(top, lanes64('0')));
  __m512i hi = _mm512_or_si512(_mm512_srli_epi64(d8, 56),
                               lanes64((uint64_t)'0' << 8 | (uint64_t)'.' << 16));
  const __m512i first = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i second = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_si512(out->src[0], _mm512_permutex2var_epi64(lo, first, hi));
  _mm512_storeu_si512(out->src[4], _mm512_permutex2var_epi64(lo, second, hi));
  return (unsigned)(uint8_t) ~(normal & plain_ok);
}

/* shortest8 over x[0, 8 * groups) (groups <= 8): the mask of the
 * numbers left to proto__fmt_f32, bit i for x[i].  Not inlined: the
 * layout loop after it is SSE code, and running that with the upper
 * halves of the AVX-512 registers in use costs more than the printing
 * (the return clears them). */
AVX512_FN __attribute__((noinline)) uint64_t shortest_groups(
    const float *x, int groups, const uint64_t *pow10, plain_src *out) {
  uint64_t other = 0;
  for (int g = 0; g < groups; g++)
    other |= (uint64_t)shortest8(x + 8 * g, pow10, out + g) << (8 * g);
  return other;
}
#pragma GCC diagnostic pop

/* x[0, n) as fmt_list does, up to 64 numbers decided by shortest_groups
 * at a time, each then laid out by one byte shuffle (put_plain's). */
__attribute__((target("ssse3"))) size_t fmt_list_avx512(char *out,
                                                         const float *x,
                                                         size_t n) {
  /* fmt's cache of powers of ten, copied where a gather can read it */
  using cache = fmt::detail::dragonbox::cache_accessor<float>;
  uint64_t pow10[POW10_MAX_K - POW10_MIN_K + 1];
  for (int k = POW10_MIN_K; k <= POW10_MAX_K; k++)
    pow10[k - POW10_MIN_K] = cache::get_cached_power(k);
  char *o = out;
  size_t i = 0;
  while (n - i >= 8) {
    int groups = (n - i) / 8 < 8 ? (int)((n - i) / 8) : 8;
    plain_src p[8];
    uint64_t other = shortest_groups(x + i, groups, pow10, p);
    for (int j = 0; j < 8 * groups; j++, i++) {
      if (other >> j & 1) {
        o += proto__fmt_f32(o, x[i]);
      } else {
        const plain_src *g = &p[j >> 3];
        int row = g->row[j & 7];
        *o = '-';
        o += std::signbit(x[i]);
        __m128i v = _mm_loadu_si128(
            reinterpret_cast<const __m128i *>(g->src[j & 7]));
        __m128i c = _mm_loadu_si128(
            reinterpret_cast<const __m128i *>(plain.lane[row]));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(o),
                         _mm_shuffle_epi8(v, c));
        o += plain.len[row];
      }
      *o++ = ',';
    }
  }
  if (i < n)
    return (size_t)(o - out) + fmt_list(o, x + i, n - i);
  *--o = '\0'; /* the last comma */
  return (size_t)(o - out);
}
#endif
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
   * sig * 10^e10. */
  if (!std::isfinite(x) || x == 0.0f)
    return -1;
  auto dec = fmt::detail::dragonbox::to_decimal(x);
  return put_decimal(out, x < 0, dec.significand, dec.exponent);
}

size_t proto__num_fmt_f32_list(char *out, const float *x, size_t n) {
#ifdef NUM_AVX512
  if (n >= 8 && __builtin_cpu_supports("avx512f"))
    return fmt_list_avx512(out, x, n);
#endif
  return fmt_list(out, x, n);
}

}  // extern "C"
