/* reqid.c - request ids (see reqid.h).
 *
 * DESIGN: reqid_prefix and reqid_key are written once by reqid_init()
 * before any thread starts, then only read; reqid_next is the one shared
 * counter, bumped with a relaxed atomic by whichever HTTP thread needs an
 * id.  An id is the random prefix in hex, then hex(mix(key + n)) for the
 * n-th id: mix is a bijection on 64-bit words, so distinct counts give
 * distinct ids until the counter wraps (2^64 requests).
 */
#include "server/obs/reqid.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t reqid_key;
/* The prefix's 16 hex digits (zeros until reqid_init). */
static char reqid_prefix[17] = "0000000000000000";
static _Atomic uint64_t reqid_next;

/* The splitmix64 finaliser: a bijection that scrambles every bit. */
static uint64_t reqid_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Writes v as 16 lowercase hex digits. */
static void reqid_hex(char *dst, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; i--, v >>= 4)
    dst[i] = digits[v & 15];
}

void reqid_init(void) {
  uint64_t seed[2];
  if (getrandom(seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed[0] = reqid_mix((uint64_t)ts.tv_sec * 1000000000u +
                        (uint64_t)ts.tv_nsec);
    seed[1] = reqid_mix(seed[0] ^ (uint64_t)getpid());
  }
  reqid_hex(reqid_prefix, seed[0]);
  reqid_key = seed[1];
}

int reqid_valid(const char *s) {
  size_t n = 0;
  if (!s)
    return 0;
  for (; s[n]; n++) {
    unsigned char c = (unsigned char)s[n];
    if (n >= REQID_MAX || c < 0x21 || c > 0x7e || c == '"' || c == '\\')
      return 0;
  }
  return n > 0;
}

const char *reqid_pick(const char *client, char buf[REQID_LEN + 1]) {
  uint64_t n;
  if (reqid_valid(client))
    return client;
  n = atomic_fetch_add_explicit(&reqid_next, 1, memory_order_relaxed);
  memcpy(buf, reqid_prefix, 16);
  reqid_hex(buf + 16, reqid_mix(reqid_key + n));
  buf[REQID_LEN] = '\0';
  return buf;
}
