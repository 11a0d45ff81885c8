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
 * With max_open connections open it stops accepting until one closes, so
 * further clients wait in the kernel's backlog.  Quiescing closes the
 * listen sockets: the kernel refuses new clients at once and resets
 * those in the backlogs.
 *
 * Threads: acceptor_listen, acceptor_run, acceptor_quiesce and
 * acceptor_stop from the controlling thread; acceptor_started and
 * acceptor_closed from any thread.  The accept thread calls the hand-off
 * callback (see acceptor.c).
 */
#ifndef ATTND_ACCEPTOR_H
#define ATTND_ACCEPTOR_H

#include <stddef.h>
#include <sys/socket.h>

struct acceptor;

/* Takes ownership of fd, a new non-blocking connection from sa, for lane
 * lane (< the acceptor's lanes).  Returns 0 once fd belongs to the
 * callee, which then reports acceptor_started and, later,
 * acceptor_closed with the lane it served fd on (lane, unless it could
 * not place it there: the counts only steer the balancing); -1 when fd
 * was refused (and closed by the callee), which reports neither. */
typedef int acceptor_fn(void *arg, int fd, const struct sockaddr *sa,
                        socklen_t len, unsigned lane);

/* Binds and listens on sa (an IPv6 address listens for IPv6 only) with
 * one socket per lane, up to 64, for lanes (>= 1) lanes; lanes beyond
 * 64 get connections from the balancing alone.  Fails with EADDRINUSE
 * when any socket already holds a (non-zero) port, even one that would
 * share it.  NULL with errno set when it cannot. */
struct acceptor *acceptor_listen(const struct sockaddr *sa, socklen_t len,
                                 unsigned lanes);

/* The port actually bound (useful with port 0). */
int acceptor_port(const struct acceptor *a);

/* Starts the accept thread: each connection goes to fn(arg, ...), at
 * most max_open (>= 1) at a time.  0, or -1 when the thread cannot be
 * started. */
int acceptor_run(struct acceptor *a, size_t max_open, acceptor_fn *fn,
                 void *arg);

/* A connection handed over has started being served (once per
 * connection the callback took). */
void acceptor_started(struct acceptor *a);

/* A connection that started on lane has closed: there is room for
 * another. */
void acceptor_closed(struct acceptor *a, unsigned lane);

/* Connections handed over and not yet closed: all of them, and those
 * of one lane. */
size_t acceptor_open(struct acceptor *a);
size_t acceptor_lane_open(struct acceptor *a, unsigned lane);

/* Stops accepting and closes the listen sockets; returns once the accept
 * thread has exited.  Idempotent. */
void acceptor_quiesce(struct acceptor *a);

/* Quiesces and frees.  acceptor_started and acceptor_closed must not be
 * called after it.  NULL is a no-op. */
void acceptor_stop(struct acceptor *a);

#endif /* ATTND_ACCEPTOR_H */
