/* peers.c - connections per client address (see peers.h).
 *
 * A chained hash table of the addresses that hold connections: an entry
 * is made for an address's first connection and freed with its last, so
 * the table holds at most --max-conns entries. */
#include "server/conn/peers.h"

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "proto/mem.h"

#define PEERS_BUCKETS 1024  /* a power of two */

struct peer {
  struct peer *next;
  unsigned char addr[16];   /* IPv6, or IPv4-mapped */
  size_t n;
};

struct peers {
  size_t limit;
  struct peer *bucket[PEERS_BUCKETS];
};

struct peers *peers_new(size_t limit) {
  struct peers *p = mem_calloc(1, sizeof *p);
  if (p)
    p->limit = limit ? limit : 1;
  return p;
}

/* sa's address as 16 bytes (IPv4 mapped into IPv6); 0 when sa is not an
 * IP address. */
static int peers_key(const struct sockaddr *sa, unsigned char key[16]) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0xff, 0xff};
  if (!sa)
    return 0;
  if (sa->sa_family == AF_INET) {
    memcpy(key, mapped, sizeof mapped);
    memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return 1;
  }
  if (sa->sa_family == AF_INET6) {
    memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return 1;
  }
  return 0;
}

static struct peer **peers_slot(struct peers *p, const unsigned char key[16]) {
  uint64_t h = 1469598103934665603u; /* FNV-1a */
  struct peer **e;
  for (int i = 0; i < 16; i++)
    h = (h ^ key[i]) * 1099511628211u;
  e = &p->bucket[h & (PEERS_BUCKETS - 1)];
  while (*e && memcmp((*e)->addr, key, 16) != 0)
    e = &(*e)->next;
  return e;
}

int peers_take(struct peers *p, const struct sockaddr *sa) {
  unsigned char key[16];
  struct peer **e;
  if (!peers_key(sa, key))
    return 0;
  e = peers_slot(p, key);
  if (!*e) {
    if (!(*e = mem_calloc(1, sizeof **e)))
      return -1;
    memcpy((*e)->addr, key, 16);
  }
  if ((*e)->n >= p->limit)
    return -1;
  (*e)->n++;
  return 0;
}

void peers_release(struct peers *p, const struct sockaddr *sa) {
  unsigned char key[16];
  struct peer **e, *gone;
  if (!peers_key(sa, key))
    return;
  e = peers_slot(p, key);
  if (!*e)
    return;
  if ((*e)->n > 0)
    (*e)->n--;
  if ((*e)->n == 0) {
    gone = *e;
    *e = gone->next;
    mem_free(gone);
  }
}

void peers_free(struct peers *p) {
  if (!p)
    return;
  for (int i = 0; i < PEERS_BUCKETS; i++)
    while (p->bucket[i]) {
      struct peer *e = p->bucket[i];
      p->bucket[i] = e->next;
      mem_free(e);
    }
  mem_free(p);
}
