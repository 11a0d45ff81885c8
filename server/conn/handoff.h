/* handoff.h - placing an accepted connection on a libmicrohttpd thread.
 *
 * attnd's accept thread (acceptor.h) picks a lane for each connection,
 * and lane i is pool thread i of the libmicrohttpd daemon.  libmicrohttpd
 * 0.9.75's MHD_add_connection looks for a pool thread with room starting
 * at the one numbered (descriptor % pool size) (daemon.c), so when no
 * thread is ever full the descriptor's number picks the thread:
 * handoff_add first moves the descriptor to a number with the lane's
 * remainder (net_fd_with_remainder), and the daemon is started with a
 * connection limit that leaves every thread room (handoff_connection_limit).
 * tests/unit/test_handoff.c pins this against the real library.
 *
 * Unix socket clients: libmicrohttpd reads a client address as IPv4 or
 * IPv6 from its length alone (MHD_ip_addr_to_key), and a bound Unix
 * client's address can have either length, so handoff_add gives it the
 * address of an unnamed Unix socket instead (family only), which the
 * per-address limit lets through: --max-conns-per-ip does not apply to
 * them.  libmicrohttpd's TCP_NODELAY and TCP_CORK calls fail on such a
 * connection, harmlessly (see mhdlog.h).
 *
 * No state; safe from any thread (the daemon's own locking covers
 * MHD_add_connection).
 */
#ifndef ATTND_HANDOFF_H
#define ATTND_HANDOFF_H

#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

/* The daemon attnd hands connections to: an epoll thread pool without a
 * listen socket of its own.  TURBO (opportunistic reads and writes)
 * measured about 5-10% more small requests per second on a 2-core
 * machine. */
#define HANDOFF_MHD_FLAGS                                                    \
  (MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME | \
   MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET)

/* Fills o (an MHD_OPTION_ARRAY) with the pool options for threads (>= 1)
 * HTTP threads: MHD_OPTION_THREAD_POOL_SIZE, and a connection limit that
 * makes each thread's share (libmicrohttpd divides the limit evenly
 * among the pool) the whole of max_conns, so no thread is ever full; the
 * acceptor holds the server to max_conns.  One thread is the daemon's
 * own internal thread, without a pool: libmicrohttpd warns that a pool
 * of 1 is ignored. */
void handoff_pool_options(unsigned threads, size_t max_conns,
                          struct MHD_OptionItem o[3]);

/* Moves fd (a new non-blocking connection from sa, len) to a descriptor
 * of lane lane's thread and adds it to d, a daemon of threads threads
 * started with HANDOFF_MHD_FLAGS and handoff_pool_options.  When no
 * descriptor of that lane is free (out of descriptors) another thread
 * serves it.  0 once d owns the connection; -1 when d refused it (the
 * per-address limit, out of memory): libmicrohttpd has then closed it and
 * reports nothing. */
int handoff_add(struct MHD_Daemon *d, unsigned threads, int fd,
                const struct sockaddr *sa, socklen_t len, unsigned lane);

/* The lane, the pool thread, of a connection's descriptor. */
unsigned handoff_lane(int fd, unsigned threads);

/* Answers a connection the server will not serve (draining, and no room
 * for it) with a 503: {"error": ...}, Retry-After and Connection: close,
 * written at once without reading the request.  The caller then closes
 * it, best with a lingering close (linger.h).  Returns the body bytes
 * written, or 0 when the socket would not take the whole answer. */
size_t handoff_refuse(int fd);

#endif /* ATTND_HANDOFF_H */
