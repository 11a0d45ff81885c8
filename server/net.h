/* net.h - socket helpers shared by the listener and the probe.
 *
 * No globals; safe from any thread.
 */
#ifndef ATTND_NET_H
#define ATTND_NET_H

#include <sys/socket.h>

/* Fills ss with a numeric IPv4 or IPv6 host and a port.  Returns the
 * address length, or 0 when host is not a numeric address (ss is then
 * zeroed).  *ipv6, when not NULL, tells which family it was. */
socklen_t net_sockaddr(const char *host, int port,
                       struct sockaddr_storage *ss, int *ipv6);

/* Stops the listening socket fd from listening without closing it or
 * changing what its descriptor names, so that an epoll set watching fd
 * keeps a valid entry: the kernel refuses new clients at once (and
 * resets those in fd's backlog), and fd becomes a connected socket that
 * reports no event but writability while its peer, a socket made here
 * and returned in *peer, stays open and silent.  accept on fd then fails
 * with EINVAL.  Returns:
 *    0  done; the caller owns *peer and closes it after whoever watches
 *       fd has stopped (its close would make fd readable);
 *   -1  nothing changed: fd still listens (errno says why);
 *   -2  fd no longer listens but is not connected, so it reports EPOLLHUP
 *       until it is closed or its descriptor replaced (errno says why). */
int net_retire_listener(int fd, int *peer);

#endif /* ATTND_NET_H */
