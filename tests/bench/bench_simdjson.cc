/* bench_simdjson.cc - the library peer of attnd's JSON tensor reader, for
 * tests/bench/bench_json.c: simdjson's On Demand API (Debian
 * libsimdjson-dev) walks the body, and fast_float reads each number token
 * (raw_json_token) as a float32, held to the JSON number grammar and
 * refused when not finite, as attnd's reader does.
 *
 * It does the work a daemon built on the library would do for these
 * bodies: every member of the document visited (so every byte the answer
 * depends on is validated), the tensors' shapes found and checked (nested
 * arrays rectangular, flat data as long as its shape says), and each
 * tensor written into a buffer of its own, allocated per request.  It
 * does not do attnd's other checks (ranks, how q, k, v relate, budgets):
 * that only flatters the peer.  The parser is kept from one body to the
 * next, as a worker thread would keep it.
 *
 * simdjson reads up to SIMDJSON_PADDING bytes past the body: the caller
 * passes a buffer that long (a daemon would receive bodies into such
 * buffers, so the copy is not timed). */
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <system_error>

#include <fast_float/fast_float.h>
#include <simdjson.h>

#include "tests/bench/bench_simdjson.h"

using namespace simdjson;
static_assert(SIMD_PEER_PADDING >= SIMDJSON_PADDING, "padding");

namespace {

constexpr int MAX_RANK = 4;

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* [p, q), which fast_float read whole, is a JSON number: a digit after
 * the sign, no leading zero, a digit after any '.' (fast_float also takes
 * "1.", ".5", "01", "inf" and "nan"). */
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

/* One element as a finite float32: its raw token (which runs on over the
 * whitespace after it) read by fast_float. */
inline bool read_f32(ondemand::value v, float *out) {
  std::string_view t = v.raw_json_token();
  const char *p = t.data(), *end = p + t.size();
  while (end > p && (end[-1] == ' ' || end[-1] == '\n' || end[-1] == '\r' ||
                     end[-1] == '\t'))
    end--;
  auto r = fast_float::from_chars(p, end, *out);
  return r.ec == std::errc() && r.ptr == end && json_token(p, end) &&
         std::isfinite(*out);
}

struct tensor {
  float *x = nullptr;
  size_t n = 0, total = 0; /* written, and the shape's product */
  int rank = 0;            /* 0 until the first leaf is reached */
  size_t dims[MAX_RANK] = {};
};

/* The nested array a at depth into t: along the first elements the
 * lengths (count_elements) become the shape and, at the first number,
 * the buffer is allocated; every other array must match them. */
bool nested(ondemand::array a, tensor *t, int depth) {
  if (depth >= MAX_RANK)
    return false;
  bool first = t->rank == 0;
  if (first) {
    size_t n;
    if (a.count_elements().get(n) || n == 0)
      return false;
    t->dims[depth] = n;
  }
  size_t count = 0;
  for (auto el : a) {
    ondemand::value v;
    if (el.get(v))
      return false;
    if (first && count == 0) { /* leaf or not, decided once */
      ondemand::json_type type;
      if (v.type().get(type))
        return false;
      if (type != ondemand::json_type::array) {
        t->rank = depth + 1;
        t->total = 1;
        for (int d = 0; d < t->rank; d++)
          t->total *= t->dims[d];
        t->x = static_cast<float *>(std::malloc(t->total * sizeof(float)));
        if (!t->x)
          return false;
      }
    }
    if (depth + 1 < t->rank || t->rank == 0) {
      ondemand::array inner;
      if (v.get_array().get(inner) || !nested(inner, t, depth + 1))
        return false;
    } else {
      if (t->n == t->total || !read_f32(v, &t->x[t->n++]))
        return false;
    }
    count++;
  }
  return count == t->dims[depth] && depth < t->rank;
}

/* A v2 input's "shape": positive integers, at most MAX_RANK of them. */
bool shape_of(ondemand::value v, tensor *t) {
  ondemand::array a;
  if (v.get_array().get(a))
    return false;
  t->rank = 0;
  t->total = 1;
  for (auto el : a) {
    uint64_t d;
    if (el.get_uint64().get(d) || d == 0 || t->rank == MAX_RANK)
      return false;
    t->dims[t->rank++] = d;
    t->total *= d;
  }
  return t->rank > 0;
}

/* A v2 input's flat "data" of t->total numbers. */
bool flat(ondemand::value v, tensor *t) {
  ondemand::array a;
  if (v.get_array().get(a))
    return false;
  t->x = static_cast<float *>(std::malloc(t->total * sizeof(float)));
  if (!t->x)
    return false;
  for (auto el : a) {
    ondemand::value e;
    if (el.get(e) || t->n == t->total || !read_f32(e, &t->x[t->n++]))
      return false;
  }
  return t->n == t->total;
}

}  // namespace

struct simd_peer {
  ondemand::parser parser;
  tensor t[3];
  size_t numbers;
};

namespace {

void release(simd_peer *s) {
  for (tensor &t : s->t) {
    std::free(t.x);
    t = tensor{};
  }
}

int tensor_index(std::string_view k) {
  return k == "query" ? 0 : k == "key" ? 1 : k == "value" ? 2 : -1;
}

/* {"query": nested, "key": ..., "value": ..., "return_weights": bool} */
bool decode_v1(simd_peer *s, ondemand::document &doc) {
  ondemand::object o;
  if (doc.get_object().get(o))
    return false;
  for (auto field : o) {
    std::string_view k;
    if (field.unescaped_key().get(k))
      return false;
    ondemand::value v;
    if (field.value().get(v))
      return false;
    int i = tensor_index(k);
    if (i >= 0) {
      ondemand::array a;
      if (s->t[i].x || v.get_array().get(a) || !nested(a, &s->t[i], 0))
        return false;
    } else if (k == "return_weights") {
      bool b;
      if (v.get_bool().get(b))
        return false;
    } else {
      return false;
    }
  }
  return true;
}

/* The members of one input {"name", "datatype": "FP32", "shape", "data"}
 * (shape before data, as clients write them) into *t and *which. */
bool input_fields(ondemand::object in, tensor *t, int *which) {
  bool shaped = false;
  for (auto field : in) {
    std::string_view k, str;
    if (field.unescaped_key().get(k))
      return false;
    ondemand::value v;
    if (field.value().get(v))
      return false;
    if (k == "name") {
      if (v.get_string().get(str) || (*which = tensor_index(str)) < 0)
        return false;
    } else if (k == "datatype") {
      if (v.get_string().get(str) || str != "FP32")
        return false;
    } else if (k == "shape") {
      if (t->x || !shape_of(v, t))
        return false;
      shaped = true;
    } else if (k == "data") {
      if (!shaped || t->x || !flat(v, t))
        return false;
    } else {
      return false;
    }
  }
  return t->x != nullptr;
}

/* One input into its tensor (query, key or value, each once). */
bool decode_input(simd_peer *s, ondemand::object in) {
  tensor t;
  int which = -1;
  if (!input_fields(in, &t, &which) || which < 0 || s->t[which].x) {
    std::free(t.x);
    return false;
  }
  s->t[which] = t;
  return true;
}

/* {"inputs": [input...], "outputs": [{"name": ...}...]} */
bool decode_v2(simd_peer *s, ondemand::document &doc) {
  ondemand::object o;
  if (doc.get_object().get(o))
    return false;
  for (auto field : o) {
    std::string_view k;
    if (field.unescaped_key().get(k))
      return false;
    ondemand::array a;
    if (field.value().get_array().get(a))
      return false;
    for (auto el : a) {
      ondemand::object item;
      if (el.get_object().get(item))
        return false;
      if (k == "inputs") {
        if (!decode_input(s, item))
          return false;
      } else if (k == "outputs") {
        for (auto f : item) {
          std::string_view name;
          if (f.value().get_string().get(name))
            return false;
        }
      } else {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" {

simd_peer *simd_peer_new(void) { return new (std::nothrow) simd_peer(); }

void simd_peer_free(simd_peer *s) {
  if (s)
    release(s);
  delete s;
}

long simd_peer_decode(simd_peer *s, const char *body, size_t len,
                      size_t cap, int v2) {
  release(s);
  ondemand::document doc;
  if (s->parser.iterate(body, len, cap).get(doc))
    return -1;
  bool ok = v2 ? decode_v2(s, doc) : decode_v1(s, doc);
  /* nothing after the object (3.0.1's document has no at_end()) */
  const char *rest;
  if (!ok || doc.current_location().get(rest) != OUT_OF_BOUNDS)
    return -1;
  long n = 0;
  for (const tensor &t : s->t) {
    if (!t.x)
      return -1;
    n += (long)t.total;
  }
  return n;
}

const float *simd_peer_tensor(const simd_peer *s, int i) { return s->t[i].x; }

}  // extern "C"
