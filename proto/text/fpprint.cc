/* fpprint.cc - float32 -> the shortest JSON number text, for the encoders
 * (contract: fpconv.h).
 *
 * Dragonbox (Debian libdragonbox-dev, header only: jkj::dragonbox::
 * to_decimal) gives the fewest significant digits that read back as the
 * same float, the closest such decimal when there are several, as an
 * integer and a power of ten (the same digits as std::to_chars' Ryu);
 * put_decimal lays them out, by one byte shuffle from a table of layouts
 * where SSSE3 allows.  A list of numbers (a tensor row) is printed 8 or 4
 * at a time with AVX-512F or AVX2: fpprint_lanes.inc makes Dragonbox's
 * decision for every lane at once, with the powers of ten of pow10_table.
 *
 * Nothing here allocates, throws or keeps state: every function is
 * reentrant. */
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h> /* SSSE3, AVX2, AVX-512: in the functions that ask */
#endif

#include <dragonbox/dragonbox.h>

#include "fpconv.h"

namespace {

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
 * wait for the stores before it (no store forwarding). */
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
 * depends on its exponent and digit count, which vary from number to
 * number in a tensor, so branches on them mispredict.  So every layout is one row of a table: for each of
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

/* ---- Dragonbox's powers of ten ------------------------------------------
 *
 * The printers of several numbers at once multiply by Dragonbox's float32
 * cache: for each k, 10^k scaled by a power of two into [2^63, 2^64) and
 * rounded up (exact for 0 <= k <= 27, where 5^k has at most 64 bits).
 * jkj::dragonbox keeps that table in its detail namespace, which is no
 * interface, so it is computed here, at compile time, with exact integer
 * arithmetic.  test_numparse checks each entry against its definition;
 * make printer-exhaustive checks the printers built on it against
 * jkj::dragonbox::to_decimal for every float. */

/* An unsigned integer below 2^128 as two words, with the few exact
 * operations the table needs. */
struct u128 {
  uint64_t hi, lo;
};

constexpr u128 mul_small(u128 a, uint32_t m) { /* a * m < 2^128, m < 2^31 */
  uint64_t low = (a.lo & 0xffffffffu) * m;
  uint64_t mid = (low >> 32) + (a.lo >> 32) * m;
  return u128{a.hi * m + (mid >> 32), mid << 32 | (low & 0xffffffffu)};
}

constexpr int bit_length(u128 a) {
  int n = 0;
  for (uint64_t w = a.hi ? a.hi : a.lo; w; w >>= 1)
    n++;
  return a.hi ? 64 + n : n;
}

constexpr u128 pow5(int m) {
  u128 v{0, 1};
  for (int i = 0; i < m; i++)
    v = mul_small(v, 5);
  return v;
}

/* 10^k in [2^63, 2^64) times a power of two, rounded up. */
constexpr uint64_t pow10_entry(int k) {
  if (k >= 0) { /* 10^k = 5^k * 2^k: the bits of 5^k, at most 107 */
    u128 v = pow5(k);
    int n = bit_length(v);
    if (n <= 64)
      return v.lo << (64 - n);
    int s = n - 64; /* v >> s, and whether bits were dropped */
    return ((v.lo >> s) | (v.hi << (64 - s))) + ((v.lo << (64 - s)) != 0);
  }
  /* 10^k = 2^k / 5^-k: the quotient of 2^N by d = 5^-k (at most 72
   * bits), N = 63 + d's bit length, bit by bit; it is in (2^63, 2^64) */
  u128 d = pow5(-k), r{0, 0};
  int N = 63 + bit_length(d);
  uint64_t q = 0;
  for (int i = N; i >= 0; i--) {
    r = u128{r.hi << 1 | r.lo >> 63, r.lo << 1 | (i == N)};
    q <<= 1;
    if (r.hi > d.hi || (r.hi == d.hi && r.lo >= d.lo)) {
      r = u128{r.hi - d.hi - (r.lo < d.lo), r.lo - d.lo};
      q |= 1;
    }
  }
  return q + (r.hi != 0 || r.lo != 0);
}

constexpr int POW10_MIN_K = PROTO__POW10_MIN_K;
constexpr int POW10_MAX_K = PROTO__POW10_MAX_K;

struct pow10_powers {
  uint64_t at[POW10_MAX_K - POW10_MIN_K + 1];
  constexpr pow10_powers() : at() {
    for (int k = POW10_MIN_K; k <= POW10_MAX_K; k++)
      at[k - POW10_MIN_K] = pow10_entry(k);
  }
};
constexpr pow10_powers pow10_table;

/* The range holds every k the lanes look up: k = 1 - floor(e2 log10 2)
 * for a normal float's binary exponent e2 = be - 150, be = 1..254 (the
 * lanes' floor_log10_pow2). */
constexpr bool pow10_range_covers_floats() {
  for (int be = 1; be <= 254; be++) {
    int k = 1 - ((be - 150) * 315653 >> 20);
    if (k < POW10_MIN_K || k > POW10_MAX_K)
      return false;
  }
  return true;
}
static_assert(pow10_range_covers_floats(), "powers of ten missing");

/* ---- printing several numbers at once (AVX2, AVX-512F) ------------------
 *
 * Most of a number's printing is Dragonbox's decision between its two
 * divisors (jkj::dragonbox::to_decimal, float32, round to nearest even).
 * fpprint_lanes.inc makes it for four (AVX2) or eight (AVX-512F) floats
 * at once, one per 64-bit lane: the powers of ten above, the same 32 x
 * 64-bit products (as 32 x 32-bit halves) and the same tests, each
 * outcome computed and selected rather than branched to; then, in the
 * same lanes, put_decimal's steps up to the bytes put_plain shuffles
 * (with AVX512CD, the digit count and trailing zeros from the digit
 * bytes' bits, without a division).  The layout loop shuffles them one
 * number at a time, the sign included.  Lanes that take no divisor
 * decision (zero, infinities and NaN, subnormals, powers of two:
 * Dragonbox's shorter interval) or print with an exponent are flagged
 * and go to proto__fmt_f32.  test_numparse holds every printer to the
 * same text over a sample of floats, make printer-exhaustive over all of
 * them. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(ATTND_PORTABLE_NUM)
#define NUM_LANES 1
#endif

#ifdef NUM_LANES
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
#include "fpprint_lanes.inc"
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
#include "fpprint_lanes.inc"
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
    uint64_t other = groups_of<LANES>(x + i, groups, pow10_table.at, &p);
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

int proto__num_fmt_f32(char *out, float x) {
  if (!std::isfinite(x) || x == 0.0f)
    return -1;
  /* x = sig * 10^exponent, sig without trailing zeros */
  auto dec = jkj::dragonbox::to_decimal(x, jkj::dragonbox::policy::sign::ignore);
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

uint64_t proto__num_pow10(int k) {
  return k >= PROTO__POW10_MIN_K && k <= PROTO__POW10_MAX_K
             ? pow10_table.at[k - PROTO__POW10_MIN_K]
             : 0;
}

}  // extern "C"
