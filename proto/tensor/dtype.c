/* dtype.c - the KServe v2 datatypes attnd accepts, and their conversions.
 *
 * Binary tensors are little-endian and unaligned in the body, so every
 * element is loaded through memcpy (one instruction on x86-64 and arm64)
 * and converted straight into the float32 buffer the core reads: one pass,
 * no intermediate copy.  Narrow formats widen exactly (every FP16 and
 * BF16 value is a float32); FP64 narrows with the C conversion, which
 * rounds to nearest, ties to even, in the default floating-point
 * environment that attnd never changes.  One number at a time
 * (proto__f16_to_f32 and the roundings of a double): text/fpnarrow.c. */
#include <string.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "proto/tensor/tensor.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[PROTO__DT_COUNT] = {
  [PROTO__DT_BOOL] = {"BOOL", 1},   [PROTO__DT_UINT8] = {"UINT8", 1},
  [PROTO__DT_UINT16] = {"UINT16", 2}, [PROTO__DT_UINT32] = {"UINT32", 4},
  [PROTO__DT_UINT64] = {"UINT64", 8}, [PROTO__DT_INT8] = {"INT8", 1},
  [PROTO__DT_INT16] = {"INT16", 2}, [PROTO__DT_INT32] = {"INT32", 4},
  [PROTO__DT_INT64] = {"INT64", 8}, [PROTO__DT_FP16] = {"FP16", 2},
  [PROTO__DT_BF16] = {"BF16", 2},   [PROTO__DT_FP32] = {"FP32", 4},
  [PROTO__DT_FP64] = {"FP64", 8},   [PROTO__DT_BYTES] = {"BYTES", 0},
};

int proto__dtype_parse(const char *s) {
  for (int i = 0; i < PROTO__DT_COUNT; i++)
    if (!strcmp(s, dtypes[i].name))
      return i;
  return -1;
}

const char *proto__dtype_name(int dt) {
  return dt >= 0 && dt < PROTO__DT_COUNT ? dtypes[dt].name : "?";
}

size_t proto__dtype_size(int dt) {
  return dt >= 0 && dt < PROTO__DT_COUNT ? dtypes[dt].size : 0;
}

/* ---- bulk conversion of binary tensors -------------------------------- */

static uint16_t load16(const unsigned char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap16(v);
#endif
  return v;
}

static uint32_t load32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

static uint64_t load64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

/* The bulk converters work in blocks of BLOCK elements: a block is
 * converted with no branch per element, with a constant trip count and
 * restrict pointers so that gcc vectorizes it even at -O2, while a flag
 * collects non-finite inputs; only a flagged block is converted again,
 * stopping at the first bad element.  The last partial block runs the
 * same code one element at a time. */
#define BLOCK 256

static int f32_bad(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}

/* One element of each type: convert into *dst, return 1 if non-finite.
 * FP32 is a plain copy (the body is rarely 4-byte aligned at a tensor, so
 * it is copied once rather than used in place) plus the exponent test. */
static inline int one_fp32(const unsigned char *src, float *dst) {
  uint32_t b = load32(src);
  memcpy(dst, &b, 4);
  return (b & 0x7f800000u) == 0x7f800000u;
}

/* FP64: the C conversion rounds to nearest even; a NaN, an infinity or a
 * value that rounds past FLT_MAX comes out non-finite. */
static inline int one_fp64(const unsigned char *src, float *dst) {
  uint64_t b = load64(src);
  double x;
  memcpy(&x, &b, 8);
  *dst = (float)x;
  return f32_bad(*dst);
}

/* FP16: the exponent and mantissa bits shifted into a float's place and
 * scaled by 2^112 give the value exactly, subnormals included (a float
 * subnormal times a power of two that makes it normal is exact); exponent
 * 31 (infinity, NaN) is flagged. */
static inline int one_fp16(const unsigned char *src, float *dst) {
  uint16_t h = load16(src);
  uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;
  float f;
  memcpy(&f, &mag, 4);
  f *= 0x1p112f;
  memcpy(&mag, &f, 4);
  mag |= (uint32_t)(h & 0x8000u) << 16;
  memcpy(dst, &mag, 4);
  return (h & 0x7c00u) == 0x7c00u;
}

static inline int one_bf16(const unsigned char *src, float *dst) {
  uint32_t bits = (uint32_t)load16(src) << 16;
  memcpy(dst, &bits, 4);
  return (bits & 0x7f800000u) == 0x7f800000u;
}

/* A converter over n elements of `size` bytes; returns the index of the
 * first non-finite element or n. */
#define CONVERTER(name, one, size)                                          \
  static size_t name(const unsigned char *restrict src, size_t n,           \
                     float *restrict dst) {                                 \
    size_t i = 0;                                                           \
    for (; i + BLOCK <= n; i += BLOCK) {                                    \
      int bad = 0;                                                          \
      for (size_t j = 0; j < BLOCK; j++)                                    \
        bad |= one(src + (size) * (i + j), dst + i + j);                    \
      if (bad)                                                              \
        break;                                                              \
    }                                                                       \
    for (; i < n; i++)                                                      \
      if (one(src + (size) * i, dst + i))                                   \
        return i;                                                           \
    return n;                                                               \
  }

CONVERTER(conv_fp32, one_fp32, 4)

/* The same test without the copy, for words checked where they lie
 * (body.c, on every piece of a body as it arrives). */
static inline int bad_word(const unsigned char *src) {
  return (load32(src) & 0x7f800000u) == 0x7f800000u;
}

#if defined(__GNUC__) && defined(__x86_64__)
/* 64 words (256 bytes) a step: the index of the first step holding a bad
 * word, or where fewer than 64 words are left.  SSE2 takes 16 bytes a
 * step at about 8 bytes a cycle, which was 5 % of a v2 request's CPU at
 * 64 connections.  Not inlined: the caller goes on in SSE code. */
__attribute__((target("avx512f"), noinline))
static size_t first_bad_avx512(const unsigned char *s, size_t n) {
  const __m512i e = _mm512_set1_epi32(0x7f800000);
  size_t i = 0;
#define BAD16(p) \
  _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(p), e), e)
  for (; i + 64 <= n; i += 64) {
    const unsigned char *p = s + 4 * i;
    if (BAD16(p) | BAD16(p + 64) | BAD16(p + 128) | BAD16(p + 192))
      break;
  }
#undef BAD16
  return i;
}

/* The same with 32-byte vectors, for CPUs with AVX2 but not AVX-512F. */
__attribute__((target("avx2"), noinline))
static size_t first_bad_avx2(const unsigned char *s, size_t n) {
  const __m256i e = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
#define BAD8(p)                                                            \
  _mm256_cmpeq_epi32(                                                      \
      _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p)), e), e)
  for (; i + 64 <= n; i += 64) {
    const unsigned char *p = s + 4 * i;
    __m256i m = _mm256_or_si256(_mm256_or_si256(BAD8(p), BAD8(p + 32)),
                                _mm256_or_si256(BAD8(p + 64), BAD8(p + 96)));
    m = _mm256_or_si256(m, _mm256_or_si256(
                               _mm256_or_si256(BAD8(p + 128), BAD8(p + 160)),
                               _mm256_or_si256(BAD8(p + 192), BAD8(p + 224))));
    if (!_mm256_testz_si256(m, m))
      break;
  }
#undef BAD8
  return i;
}
#endif

size_t proto__f32_first_bad(const void *src, size_t n) {
  return proto__f32_first_bad_width(src, n, proto__vector_bytes());
}

size_t proto__f32_first_bad_width(const void *src, size_t n, int width) {
  const unsigned char *restrict s = src;
  size_t i = 0;
  if (width > proto__vector_bytes())
    width = proto__vector_bytes();
#if defined(__GNUC__) && defined(__x86_64__)
  /* the wide loops stop at the step with the bad word; the loops below
   * then find it within that step */
  if (n >= 128 && width >= 32)
    i = width == 64 ? first_bad_avx512(s, n) : first_bad_avx2(s, n);
#endif
  for (; i + BLOCK <= n; i += BLOCK) {
    int bad = 0;
    for (size_t j = 0; j < BLOCK; j++)
      bad |= bad_word(s + 4 * (i + j));
    if (bad)
      break;
  }
  for (; i < n; i++)
    if (bad_word(s + 4 * i))
      return i;
  return n;
}
CONVERTER(conv_fp64, one_fp64, 8)
CONVERTER(conv_fp16, one_fp16, 2)
CONVERTER(conv_bf16, one_bf16, 2)

size_t proto__bin_to_f32(int dt, const void *src, size_t n, float *dst) {
  const unsigned char *s = src;
  switch (dt) {
  case PROTO__DT_FP32: return conv_fp32(s, n, dst);
  case PROTO__DT_FP64: return conv_fp64(s, n, dst);
  case PROTO__DT_FP16: return conv_fp16(s, n, dst);
  case PROTO__DT_BF16: return conv_bf16(s, n, dst);
  default: return 0;
  }
}

size_t proto__bin_to_len(int dt, const void *src, size_t n, long long hi,
                         int32_t *dst, long long *bad) {
  const unsigned char *s = src;
  for (size_t i = 0; i < n; i++) {
    long long v = dt == PROTO__DT_INT64 ? (long long)(int64_t)load64(s + 8 * i)
                                        : (long long)(int32_t)load32(s + 4 * i);
    if (v < 0 || v > hi) {
      *bad = v;
      return i;
    }
    dst[i] = (int32_t)v;
  }
  return n;
}

size_t proto__bin_to_bool(const void *src, size_t n, uint8_t *dst) {
  const unsigned char *s = src;
  memcpy(dst, s, n);
  for (size_t i = 0; i < n; i++)
    if (dst[i] > 1)
      return i;
  return n;
}
