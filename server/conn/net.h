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

/* The port of an IPv4 or IPv6 address, and setting it. */
int net_port(const struct sockaddr *sa);
void net_set_port(struct sockaddr_storage *ss, int port);

struct sock_filter;

/* Attaches the classic BPF program code[0..n) to socket fd with
 * setsockopt(SOL_SOCKET, opt): SO_ATTACH_FILTER, or
 * SO_ATTACH_REUSEPORT_CBPF for a reuseport group.  The kernel copies the
 * program.  0, or -1 with errno set. */
int net_attach_filter(int fd, int opt, const struct sock_filter *code,
                      unsigned short n);

/* TCP header flag bits, for net_drop_tcp_flags. */
#define NET_TCP_SYN 0x02
#define NET_TCP_ACK 0x10

/* Attaches a socket filter (SO_ATTACH_FILTER) to the TCP socket fd that
 * drops every segment whose flags, masked with mask, equal value, and
 * lets the others through: (SYN | ACK, SYN) holds off new handshakes,
 * (SYN | ACK, ACK) their final ACKs.  SO_DETACH_FILTER removes it.  Some
 * kernels allow it only with CAP_NET_ADMIN (EPERM).  0, or -1 with errno
 * set. */
int net_drop_tcp_flags(int fd, unsigned mask, unsigned value);

#endif /* ATTND_NET_H */
