/* peers.h - how many connections each client address holds, for
 * --max-conns-per-ip.
 *
 * attnd enforces the per-address limit itself, at accept time, rather
 * than through libmicrohttpd's MHD_OPTION_PER_IP_CONNECTION_LIMIT: with
 * one daemon per lane (handoff.h) that option would count each lane
 * apart.  An address is an IPv4 or IPv6 address, port excluded; an
 * IPv4-mapped IPv6 address counts as its IPv4 address.  Other families
 * (a Unix socket's clients) are never counted nor refused.
 *
 * Not thread-safe: the acceptor calls it under its own lock.
 */
#ifndef ATTND_PEERS_H
#define ATTND_PEERS_H

#include <stddef.h>
#include <sys/socket.h>

struct peers;

/* A set allowing limit (>= 1) connections per address.  NULL when out
 * of memory. */
struct peers *peers_new(size_t limit);

/* Counts a connection from sa: 0 when it may be served, -1 when its
 * address already holds the limit (or no memory is left to count it),
 * which leaves the count unchanged. */
int peers_take(struct peers *p, const struct sockaddr *sa);

/* Uncounts a connection peers_take admitted from sa. */
void peers_release(struct peers *p, const struct sockaddr *sa);

/* NULL is a no-op. */
void peers_free(struct peers *p);

#endif /* ATTND_PEERS_H */
