/* net.h - socket address helpers shared by the listener and the probe.
 *
 * Pure functions: no globals, safe from any thread.
 */
#ifndef ATTND_NET_H
#define ATTND_NET_H

#include <sys/socket.h>

/* Fills ss with a numeric IPv4 or IPv6 host and a port.  Returns the
 * address length, or 0 when host is not a numeric address (ss is then
 * zeroed).  *ipv6, when not NULL, tells which family it was. */
socklen_t net_sockaddr(const char *host, int port,
                       struct sockaddr_storage *ss, int *ipv6);

#endif /* ATTND_NET_H */
