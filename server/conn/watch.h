/* watch.h - noticing, while a request is queued or computing, that its
 * client has gone or its deadline has passed.
 *
 * libmicrohttpd watches no suspended connection, nor one whose request
 * its own thread is computing: a client that closes while its request
 * waits or computes is noticed only when the answer is written.  attnd
 * owns the socket, so the watcher does it itself: one thread with an
 * epoll set of those connections' descriptors,
 * waiting for the peer's FIN or reset (EPOLLRDHUP, EPOLLHUP, EPOLLERR;
 * a half-closing client counts as gone), and for the earliest deadline.
 * Either stores its value in the request's flag (the job's cancel word,
 * which the workers and the core read: batcher.h), once; the first
 * reason wins.
 *
 * Threads: watch_add and watch_remove from any thread (an HTTP thread
 * adds when it suspends a connection, or before it runs the job itself;
 * the thread that finishes the job removes before it resumes the
 * connection or returns to libmicrohttpd).  After watch_remove returns,
 * the watcher touches neither the flag nor the descriptor again, so the
 * caller may free the one and libmicrohttpd close the other (a callback
 * for a flag set just before may still run: its arg is not the
 * request's, see watch_add).  Entries live in a
 * table of slots owned by the watch, named by index and generation, so
 * that an event the watcher took out of epoll just before a removal can
 * never reach a slot reused since.  Lock: w.mu, a leaf; the watcher
 * thread holds it while it acts on events, never across epoll_wait.
 */
#ifndef ATTND_WATCH_H
#define ATTND_WATCH_H

#include <stdint.h>

struct watch;

/* Starts the watcher thread.  NULL (errno set) when it cannot. */
struct watch *watch_start(void);

/* Watches fd, a connected socket the caller keeps open until
 * watch_remove, for the peer leaving, and deadline_ns (clock_now_ns(),
 * 0 = none) for passing: stores gone (the peer left) or late (the
 * deadline passed), both non-zero, in *flag while it is still 0.
 * Then, unless fired is NULL, calls fired(arg) on the watcher thread
 * with no lock of the watch held (several settings may share one call);
 * arg must stay valid until watch_stop.  Returns a handle (> 0) for
 * watch_remove, or 0 when it cannot watch (out of memory, or epoll
 * refuses the descriptor): the request then runs unwatched.  A deadline
 * any distance ahead is waited for (the watcher sleeps at most INT_MAX
 * ms at a time). */
uint64_t watch_add(struct watch *w, int fd, _Atomic int *flag, int gone,
                   uint64_t deadline_ns, int late, void (*fired)(void *),
                   void *arg);

/* Stops watching what handle names (0 is a no-op). */
void watch_remove(struct watch *w, uint64_t handle);

/* Stops the thread and frees everything; nothing may be watched any more.
 * NULL is a no-op. */
void watch_stop(struct watch *w);

#endif /* ATTND_WATCH_H */
