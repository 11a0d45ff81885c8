/* body.c - a request body as it arrives (see proto.h, proto_body).
 *
 * Why check words on arrival: at 64 connections a 768 KiB v2 upload is
 * received in 16 KiB pieces interleaved with 63 others, so by the time it
 * is decoded it has left every cache.  Copying its FP32 tensors out of it
 * then cost about 12 % of a request's CPU, and using them in place still
 * meant reading them all once for the finiteness check.  Checking each
 * piece right after it is copied in reads it from L1/L2 instead.
 *
 * The check covers the 4-byte words from the end of the JSON part on, in
 * order, and stops at the first non-finite one: what comes after it
 * (later tensors of other types, or a bad value the decoder will report)
 * is simply not used in place.  The decoder decides per tensor from
 * scan_from and clean_end alone, so a wrong header or a body longer than
 * announced costs a copy, never a wrong answer. */
#include <stdint.h>
#include <string.h>

#include "proto/mem.h"
#include "proto/v2/v2.h"

/* The binary part's start lands on this boundary when the header length
 * is known before the first byte arrives. */
#define BODY_ALIGN 64

/* The header's byte count when it is one within limit, else SIZE_MAX. */
static size_t header_count(const char *h, size_t limit) {
  unsigned long long v;
  return h && !proto__v2_header_count(h, &v) && v <= limit ? (size_t)v
                                                            : SIZE_MAX;
}

/* Room for at least need bytes.  The first allocation picks the offset
 * of p in base that aligns the binary part; a later realloc keeps it,
 * and with it the alignment modulo malloc's (at least 4, all the decoder
 * needs). */
static int grow(proto_body *b, size_t need) {
  size_t cap = !b->base ? need : b->cap * 2 > need ? b->cap * 2 : need + 4096;
  size_t shift;
  char *nb;
  if (need > SIZE_MAX / 4)
    return ATTND_ENOMEM;
  if (!b->base) {
    size_t at = b->scan_from == SIZE_MAX ? 0 : b->scan_from;
    nb = mem_malloc(cap + BODY_ALIGN);
    if (!nb)
      return ATTND_ENOMEM;
    shift = (BODY_ALIGN - ((uintptr_t)nb + at) % BODY_ALIGN) % BODY_ALIGN;
  } else {
    shift = (size_t)(b->p - b->base);
    if (!(nb = mem_realloc(b->base, shift + cap)))
      return ATTND_ENOMEM;
  }
  b->base = nb;
  b->p = nb + shift;
  b->cap = cap;
  return 0;
}

int proto_body_init(proto_body *b, size_t expect, const char *header_len) {
  memset(b, 0, sizeof *b);
  b->scan_from = header_count(header_len, expect ? expect : SIZE_MAX / 4);
  b->clean_end = b->scan_from;
  return expect ? grow(b, expect) : 0;
}

/* Extends the checked words over what has arrived, whole words only. */
static void check_words(proto_body *b) {
  if (b->stopped || b->scan_from == SIZE_MAX || b->len < b->clean_end + 4)
    return;
  size_t n = (b->len - b->clean_end) / 4;
  size_t i = proto__f32_first_bad(b->p + b->clean_end, n);
  b->clean_end += 4 * i;
  b->stopped = i < n;
}

int proto_body_append(proto_body *b, const char *data, size_t n) {
  if (n > b->cap - b->len && grow(b, b->len + n))
    return ATTND_ENOMEM;
  if (n)
    memcpy(b->p + b->len, data, n);
  b->len += n;
  check_words(b);
  return 0;
}

void proto_body_free(proto_body *b) {
  mem_free(b->base);
  memset(b, 0, sizeof *b);
}
