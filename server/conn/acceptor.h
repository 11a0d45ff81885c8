/* acceptor.h - attnd's listen sockets, and the thread that accepts on
 * them and picks the HTTP thread (the lane) for each connection.
 *
 * libmicrohttpd's thread pool lets every pool thread accept from one
 * shared listen socket: whichever thread wakes first takes a burst of
 * connections, so which thread serves which client is left to chance.
 * That matters when the client runs on the same cores (a sidecar's
 * application, a proxy on the node, a load generator): a client thread
 * and the HTTP thread serving it share a core best when all of that
 * client thread's connections go to one HTTP thread, and different
 * client threads' to different ones.  So attnd listens with one socket
 * per lane, all on the same port (SO_REUSEPORT), and a classic BPF
 * program on the group has the kernel put each new connection in the
 * socket of the CPU its handshake arrived on (for a local client, the
 * CPU its thread connected from; for a remote one, the CPU that took the
 * NIC queue's interrupt), modulo the sockets.  Listen socket i's
 * connections go to lane i, unless lane i is full: once it holds the
 * slack, 64 / lanes connections (at least 1), more than the least
 * loaded lane, that lane gets them until it has caught up.  With two
 * lanes a client thread's pool of up to 32 connections stays together,
 * and clients that all arrive on one CPU (one NIC queue, or a client
 * whose threads all connected from one core) are dealt out in blocks of
 * 32, which keeps one client thread's pool together when it connected
 * after another's.  With more lanes the slack shrinks, so lanes whose
 * CPUs no client connects from (a client on two cores of a larger
 * machine) still get their share.
 *
 * Beside the TCP sockets it may listen on a Unix socket
 * (acceptor_listen_unix); its connections go to the least loaded lane.
 *
 * With max_open connections open it stops accepting until one closes, so
 * further clients wait in the kernel's backlog.
 *
 * Quiescing (the drain) resets no one: a client sees its connection
 * refused or gets an answer.  Closing a listen socket would reset the
 * connections in its backlog, whose clients have connected and sent
 * their requests, so acceptor_quiesce first stops new ones from
 * arriving: on the TCP sockets a socket filter drops new SYNs (the
 * client retries and, the socket closed by then, is refused), on the
 * Unix socket shutdown(SHUT_RD) makes connect() refuse.  Then it takes
 * what is in the backlogs, waiting out handshakes still under way
 * (handshake.h), and hands each over (or, past max_open, to the refuse
 * callback, which answers 503), closes the sockets, and waits briefly
 * until every connection handed over has had its first request (or
 * closed), so that the server does not stop before it has seen them.
 *
 * Threads: acceptor_listen, acceptor_listen_unix, acceptor_run,
 * acceptor_quiesce and acceptor_stop from the controlling thread;
 * acceptor_started, acceptor_served and acceptor_closed from any thread.
 * The accept thread calls the callbacks, and acceptor_quiesce calls them
 * on the controlling thread once the accept thread has ended (see
 * acceptor.c).
 */
#ifndef ATTND_ACCEPTOR_H
#define ATTND_ACCEPTOR_H

#include <stddef.h>
#include <sys/socket.h>

struct acceptor;

/* Takes ownership of fd, a new non-blocking connection from sa, for lane
 * lane (< the acceptor's lanes).  Returns 0 once fd belongs to the
 * callee, which then reports acceptor_started, acceptor_served once its
 * first request begins, and acceptor_closed with the lane it served fd
 * on (lane, unless it could not place it there: the counts only steer
 * the balancing); -1 when fd was refused (and closed by the callee),
 * which reports none of them. */
typedef int acceptor_fn(void *arg, int fd, const struct sockaddr *sa,
                        socklen_t len, unsigned lane);

/* Why a connection is refused (acceptor_refuse_fn). */
enum acceptor_refusal {
  ACCEPTOR_NO_ROOM = 0,     /* quiescing, and max_open are open */
  ACCEPTOR_PER_ADDRESS = 1  /* its address holds the per-address limit */
};

/* Takes ownership of fd, a connection the server will not serve, for
 * reason why (enum acceptor_refusal): answers it and closes it. */
typedef void acceptor_refuse_fn(void *arg, int fd, int why);

/* Binds and listens on sa (an IPv6 address listens for IPv6 only) with
 * one socket per lane, up to 64, for lanes (>= 1) lanes; lanes beyond
 * 64 get connections from the balancing alone.  Fails with EADDRINUSE
 * when any socket already holds a (non-zero) port, even one that would
 * share it.  NULL with errno set when it cannot. */
struct acceptor *acceptor_listen(const struct sockaddr *sa, socklen_t len,
                                 unsigned lanes);

/* The port actually bound (useful with port 0). */
int acceptor_port(const struct acceptor *a);

/* Also listens on a Unix socket at path with permission bits mode (see
 * unixsock.h: a stale socket file is replaced, a live one or anything
 * else refused; the file is removed when the acceptor quiesces).  Before
 * acceptor_run.  0, or -1 after logging why. */
int acceptor_listen_unix(struct acceptor *a, const char *path,
                         unsigned mode);

/* Limits the connections one client IP address may hold open at once
 * to n (0: no limit; peers.h says what an address is).  A connection
 * beyond it goes to the refuse callback (ACCEPTOR_PER_ADDRESS) at once,
 * or is closed when there is none.  Before acceptor_run.  0, or -1 out
 * of memory. */
int acceptor_limit_per_address(struct acceptor *a, size_t n);

#ifdef ATTND_TEST_HOOKS
/* Waits ms (ACCEPTOR_WRITE_OFF_MS unless set) for room with no
 * connection starting or closing before the connections handed over that
 * never started are written off (acceptor.c's DESIGN note), so that a
 * test need not wait the 10 s.  Before acceptor_run.  The test build
 * only. */
void acceptor_write_off_after(struct acceptor *a, unsigned ms);
#endif

/* Starts the accept thread: each connection goes to fn(arg, ...), at
 * most max_open (>= 1) at a time; refuse answers those that find no
 * room while quiescing (NULL: they go to fn all the same) and those over
 * the per-address limit.  0, or -1 when the thread cannot be started. */
int acceptor_run(struct acceptor *a, size_t max_open, acceptor_fn *fn,
                 acceptor_refuse_fn *refuse, void *arg);

/* A connection handed over has started being served (once per
 * connection the callback took). */
void acceptor_started(struct acceptor *a);

/* The first request of a connection handed over has begun (once per
 * connection, at most). */
void acceptor_served(struct acceptor *a);

/* A connection that started on lane has closed: there is room for
 * another.  served: acceptor_served was reported for it.  peer: the
 * address fn was given for it (NULL when not known, which leaves its
 * per-address count as it was). */
void acceptor_closed(struct acceptor *a, unsigned lane, int served,
                     const struct sockaddr *peer);

/* Connections handed over and not yet closed: all of them, and those
 * of one lane. */
size_t acceptor_open(struct acceptor *a);
size_t acceptor_lane_open(struct acceptor *a, unsigned lane);

/* Connections handed over that have neither had a first request nor
 * closed. */
size_t acceptor_unserved(struct acceptor *a);

/* Stops accepting as above: new clients are refused, those in the
 * backlogs are handed over (or refused with an answer), the listen
 * sockets close and the Unix socket's file is removed.  Returns once
 * each connection handed over has had its first request or closed, or
 * ACCEPTOR_SERVED_MS have passed.  Idempotent. */
void acceptor_quiesce(struct acceptor *a);

/* How long acceptor_quiesce waits for the backlog's last handshakes,
 * and then for the first requests of the connections handed over. */
#define ACCEPTOR_SWEEP_MS 1000
#define ACCEPTOR_SERVED_MS 1000

/* Quiesces and frees.  acceptor_started and acceptor_closed must not be
 * called after it.  NULL is a no-op. */
void acceptor_stop(struct acceptor *a);

#endif /* ATTND_ACCEPTOR_H */
