/* fpconv.cc - decimal <-> float32 for the JSON number path, behind a C API
 * (proto_impl.h, "numbers").
 *
 * Reading uses fast_float (Debian libfast-float-dev, header only; the
 * algorithm libstdc++ 12 itself uses for std::from_chars): correctly
 * rounded, exact for any length of mantissa, about 10 ns a number.
 * fast_float accepts more than JSON does ("1.", ".5", "inf", "nan"), so
 * each token it reads is then held to the JSON number grammar here.  Printing uses libstdc++'s
 * std::to_chars, whose shortest form for a float is Ryu: the fewest
 * significant digits that read back as the same float, the closest such
 * decimal when there are several.
 *
 * Nothing here allocates, throws or keeps state: every function is
 * reentrant. */
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <system_error>

#include <fast_float/fast_float.h>

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

}  // namespace

extern "C" {

const char *proto__num_f64(const char *p, const char *end, double *out) {
  return read_json(p, end, out);
}

const char *proto__num_f32(const char *p, const char *end, float *out) {
  const char *q = read_json(p, end, out);
  return q && f32_in_range(p, q, *out) ? q : nullptr;
}

int proto__num_list_f32(const char *p, const char *end, float *dst,
                        size_t n) {
  for (size_t i = 0; i < n; i++) {
    while (p < end && is_ws(*p))
      p++;
    const char *q = read_json(p, end, &dst[i]);
    if (!q || !f32_in_range(p, q, dst[i]))
      return -1;
    p = q;
    while (p < end && is_ws(*p))
      p++;
    if (i + 1 < n) {
      if (p == end || *p != ',')
        return -1;
      p++;
    }
  }
  return p == end ? 0 : -1;
}

int proto__num_shortest_f32(float x, uint64_t *digits, int *exp10) {
  char s[64];
  auto r = std::to_chars(s, s + sizeof s, std::fabs(x),
                         std::chars_format::scientific);
  if (r.ec != std::errc())
    return -1;
  /* "d.ddde+XX" or "de-XX" */
  uint64_t m = 0;
  int nd = 0, e = 0, neg = 0;
  const char *p = s;
  for (; p < r.ptr && *p != 'e'; p++)
    if (is_digit(*p)) {
      m = m * 10 + (uint64_t)(*p - '0');
      nd++;
    }
  if (p == r.ptr || nd == 0 || nd > 9)
    return -1;
  if (++p < r.ptr && (*p == '+' || *p == '-'))
    neg = *p++ == '-';
  for (; p < r.ptr && is_digit(*p); p++)
    e = e * 10 + (*p - '0');
  *digits = m;
  *exp10 = (neg ? -e : e) - (nd - 1);
  return 0;
}

}  // extern "C"
