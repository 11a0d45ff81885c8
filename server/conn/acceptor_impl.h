/* acceptor_impl.h - the acceptor's state and the functions its files
 * share; not a public API (that is acceptor.h), included by the
 * acceptor*.c files alone.  Which thread touches what, and the lock: the
 * DESIGN comment of acceptor.c.
 */
#ifndef ATTND_ACCEPTOR_IMPL_H
#define ATTND_ACCEPTOR_IMPL_H

#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/socket.h>

#include "server/conn/acceptor.h"
#include "server/conn/peers.h"
#include "server/conn/unixsock.h"

#define ACCEPTOR_BURST 16           /* accepts per wake of poll */
#define ACCEPTOR_BACKOFF_MS 100     /* after EMFILE and the like */
/* How long the thread waits for room with no start and no close before
 * it writes off the connections handed over that never started
 * (acceptor.c): far longer than a lane thread is ever busy with one
 * request's decoding or an inline computation. */
#define ACCEPTOR_WRITE_OFF_MS 10000
/* A lane holding ACCEPTOR_SLACK_ALL / lanes (at least 1) connections
 * more than the least loaded one is full until every other lane holds
 * as many: 32 with two lanes, 8 with eight.  A client with a thread
 * per CPU and 64 connections keeps each thread's pool on its lane; a
 * client on fewer CPUs than there are lanes still reaches the others. */
#define ACCEPTOR_SLACK_ALL 64
/* Lanes beyond this many get connections only from the balancing. */
#define ACCEPTOR_MAX_LISTENERS 64
/* The lane argument for a connection from the Unix socket. */
#define ACCEPTOR_ANY_LANE UINT_MAX
/* Without sock_diag (a sandbox that forbids netlink sockets, such as
 * the systemd unit's RestrictAddressFamilies), the backlog is taken
 * until it has stayed empty this long: handshakes under way complete
 * within a round trip. */
#define ACCEPTOR_QUIET_MS 100

struct acceptor {
  int fd[ACCEPTOR_MAX_LISTENERS];  /* listen sockets, one per lane up to
                                      the maximum */
  unsigned nfd;             /* how many; 0 once quiesced */
  int ufd;                  /* the Unix listen socket, or -1 */
  struct unixsock unix_file;
  struct sockaddr_storage addr;  /* the TCP address, port included */
  int wake;                 /* eventfd; -1 once quiesced */
  int port;
  acceptor_fn *fn;
  acceptor_refuse_fn *refuse;
  void *arg;
  size_t max_open;
  pthread_t thread;
  int running;              /* the thread was started and not joined */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t handed, started, closed;  /* under mu */
  size_t unserved;                 /* handed, not yet served nor closed;
                                      under mu */
  size_t written_off;              /* written off, not started since;
                                      at most max_open; under mu */
  unsigned write_off_ms;           /* ACCEPTOR_WRITE_OFF_MS, or a test's
                                      (acceptor_write_off_after) */
  int stopping;                    /* under mu */
  struct peers *peers;             /* per-address counts, or NULL; under
                                      mu */
  unsigned lanes;
  struct acceptor_lane {
    size_t open;                   /* connections on it */
    int full;                      /* see acceptor_lane */
  } *lane;                         /* [lanes], under mu */
};

/* ---- the listen sockets (acceptor_sockets.c) ----------------------------- */

/* Closes the listen sockets and removes the Unix socket's file. */
void acceptor_close_all(struct acceptor *a);

/* ---- the lanes (acceptor_lanes.c) ---------------------------------------- */

/* Has the kernel pick a new connection's listen socket by the CPU its
 * handshake arrived on (logged when it cannot). */
void acceptor_steer(struct acceptor *a);

/* The lane for a connection from listen socket i (ACCEPTOR_ANY_LANE: the
 * Unix socket).  Under a->mu. */
unsigned acceptor_lane(struct acceptor *a, unsigned i);

/* ---- the per-address limit (acceptor_peers.c), under a->mu --------------- */

/* 1 when a connection from sa may be served (and is counted), 0 when its
 * address holds the limit. */
int acceptor_peer_admit(struct acceptor *a, const struct sockaddr *sa);
/* Uncounts a connection acceptor_peer_admit counted (sa NULL: none). */
void acceptor_peer_release(struct acceptor *a, const struct sockaddr *sa);

/* ---- the accept thread (acceptor.c) -------------------------------------- */

/* Gives fd to the refuse callback for reason why, or closes it. */
void acceptor_refuse(struct acceptor *a, int fd, int why);
/* Counts fd, from listen socket i, and hands it to its lane. */
void acceptor_hand(struct acceptor *a, unsigned i, int fd,
                   const struct sockaddr_storage *ss, socklen_t len);
/* 1 for an accept4 error after which the next connection may be fine. */
int acceptor_transient(int e);

#endif /* ATTND_ACCEPTOR_IMPL_H */
