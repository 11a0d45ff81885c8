/* support_filter.h - holding a TCP handshake half-way, for the unit tests.
 *
 * support_drop_acks(l) attaches a socket filter to the TCP listen socket l
 * that drops every segment with ACK set and SYN clear: the client's final
 * ACK of the handshake and any data behind it.  A client's connect() then
 * returns while the server's kernel keeps the connection in SYN_RECV.
 * Detaching the filter (SO_DETACH_FILTER) lets the client's next segment
 * complete the handshake.  Returns 0; or, where the kernel allows a
 * socket filter on a TCP socket only with CAP_NET_ADMIN and the process
 * lacks it (a default container), reports the test as skipped, saying
 * so (support_skip.h), and returns -1: the test then returns.  Any other
 * failure aborts the test with its reason. */
#ifndef ATTND_TESTS_SUPPORT_FILTER_H
#define ATTND_TESTS_SUPPORT_FILTER_H

int support_drop_acks(int l, const char *test);

#endif
