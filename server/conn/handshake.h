/* handshake.h - TCP handshakes still under way to a listening address.
 *
 * A client's connect() returns once the server's SYN-ACK arrives, so the
 * client may already be sending its request while the server's kernel
 * waits for the last ACK of the handshake: that connection is not yet in
 * the listen socket's accept queue (it is a request socket in state
 * SYN_RECV), and closing the listen socket then drops it, and the client
 * sees a reset.  Before it closes its listen sockets the acceptor waits
 * until none is under way; the kernel's socket diagnostics (sock_diag,
 * what `ss` reads; no privilege needed within the process's network
 * namespace) tell.
 *
 * No state; safe from any thread.
 */
#ifndef ATTND_HANDSHAKE_H
#define ATTND_HANDSHAKE_H

#include <sys/socket.h>

/* The number of TCP connections in SYN_RECV to sa (an IPv4 or IPv6
 * address and port; a wildcard address matches any local address on the
 * port).  -1 when the kernel cannot tell (no sock_diag), with errno
 * set. */
int handshake_pending(const struct sockaddr *sa);

#endif /* ATTND_HANDSHAKE_H */
