/* handoff.h - placing an accepted connection on a libmicrohttpd thread.
 *
 * attnd's accept thread (acceptor.h) picks a lane for each connection.
 * Each lane is a libmicrohttpd daemon of its own with one internal
 * thread, no listen socket and no thread pool, and handoff_add gives the
 * connection to the lane's daemon with MHD_add_connection, which
 * documents that the daemon serves it: which thread serves which
 * connection is then a matter of the library's contract, not of how it
 * picks a pool thread.  The acceptor holds the whole server to
 * --max-conns and --max-conns-per-ip; every lane's daemon may hold twice
 * --max-conns (handoff_daemon_options), a limit it must never reach:
 * libmicrohttpd closes a connection it adds past its limit with neither
 * an answer nor a word to attnd.
 *
 * Unix socket clients: MHD_add_connection takes the client's address for
 * libmicrohttpd's own use (the access handler may ask for it); a Unix
 * client's is given as the address of an unnamed Unix socket (its
 * family alone).  libmicrohttpd's TCP_NODELAY and TCP_CORK calls fail on
 * such a connection, harmlessly (see mhdlog.h).
 *
 * No state; safe from any thread (the daemon's own locking covers
 * MHD_add_connection).
 */
#ifndef ATTND_HANDOFF_H
#define ATTND_HANDOFF_H

#include <stddef.h>
#include <sys/socket.h>

#include <microhttpd.h>

/* A lane's daemon: an epoll loop on one internal thread, without a
 * listen socket of its own.  TURBO (opportunistic reads and writes)
 * measured about 5-10% more small requests per second on a 2-core
 * machine. */
#define HANDOFF_MHD_FLAGS                                                    \
  (MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME | \
   MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET)

/* Fills o (an MHD_OPTION_ARRAY) with a lane daemon's connection limit:
 * twice max_conns.  The acceptor counts them all, so a lane is never full
 * before the server is; the second max_conns is room for connections the
 * library still counts after attnd has: it reports a close before it
 * lets go of the connection's place, and the acceptor hands the waiting
 * client over on that report; and for those the acceptor has written
 * off (acceptor.c), at most max_conns, which may start after all. */
void handoff_daemon_options(size_t max_conns, struct MHD_OptionItem o[2]);

/* Adds fd (a new non-blocking connection from sa, len) to d, a lane's
 * daemon started with HANDOFF_MHD_FLAGS and handoff_daemon_options.  0
 * once d owns the connection; -1 when d refused it (out of memory):
 * libmicrohttpd has then closed it and reports nothing. */
int handoff_add(struct MHD_Daemon *d, int fd, const struct sockaddr *sa,
                socklen_t len);

/* Answers a connection the server will not serve (draining, and no room
 * for it) with a 503: {"error": ...}, Retry-After, Connection: close,
 * Date and a fresh X-Request-ID (reqid.h), written at once without
 * reading the request; no allocation, no blocking call.  The caller then closes
 * it, best with a lingering close (linger.h).  Returns the body bytes
 * written, or 0 when the socket would not take the whole answer. */
size_t handoff_refuse(int fd);

/* Answers a connection over --max-conns-per-ip (limit) with a 429 the
 * same way, naming the flag.  The caller then closes it: a client that
 * already holds the limit gets no lingering close. */
size_t handoff_refuse_per_address(int fd, size_t limit);

#endif /* ATTND_HANDOFF_H */
