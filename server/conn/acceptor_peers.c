/* acceptor_peers.c - --max-conns-per-ip at accept time: the acceptor's
 * use of the per-address counts (peers.h), which a connection takes when
 * it is handed over and gives back when it closes.
 *
 * DESIGN: the set is created on the controlling thread before the accept
 * thread starts; afterwards it is touched only under a->mu, by the accept
 * thread (admitting) and the lane threads (releasing, acceptor_closed).
 */
#include "server/conn/acceptor_impl.h"

int acceptor_limit_per_address(struct acceptor *a, size_t n) {
  if (n && !a->peers && !(a->peers = peers_new(n)))
    return -1;
  return 0;
}

int acceptor_peer_admit(struct acceptor *a, const struct sockaddr *sa) {
  return !a->peers || peers_take(a->peers, sa) == 0;
}

void acceptor_peer_release(struct acceptor *a, const struct sockaddr *sa) {
  if (a->peers && sa)
    peers_release(a->peers, sa);
}
