/* support_filter.h - holding a TCP handshake half-way, for the unit tests.
 *
 * support_drop_acks(l) attaches a socket filter to the TCP listen socket l
 * that drops every segment with ACK set and SYN clear: the client's final
 * ACK of the handshake and any data behind it.  A client's connect() then
 * returns while the server's kernel keeps the connection in SYN_RECV.
 * Detaching the filter (SO_DETACH_FILTER) lets the client's next segment
 * complete the handshake.  A failure aborts the test with its reason,
 * naming CAP_NET_ADMIN where the kernel requires it. */
#ifndef ATTND_TESTS_SUPPORT_FILTER_H
#define ATTND_TESTS_SUPPORT_FILTER_H

void support_drop_acks(int l);

#endif
