/* linger.h - lingering close for connections answered before their body.
 *
 * An answer queued before the request body has arrived (413 from the
 * Content-Length alone, 404 or 405 for a POST, a framing refusal) makes
 * libmicrohttpd close the connection once the answer is sent, with the
 * client's body still unread.  Closing a socket with unread input makes
 * the kernel send a reset, and a client that writes its whole body before
 * it reads (Python's http.client and requests, most scripts) then reports
 * "connection reset" instead of the answer.  nginx keeps such a
 * connection open for a while and drops what still arrives (its
 * lingering close); so does attnd: the HTTP thread keeps a duplicate of
 * the socket's descriptor and, once libmicrohttpd has sent the answer and
 * let go of its own, hands it here.  The socket is half-closed (the FIN
 * follows the answer), and what the client still sends is read and
 * dropped until it closes, LINGER_IDLE_MS pass without data,
 * LINGER_TOTAL_MS pass in all, or max_bytes have been read; then it is
 * closed.
 *
 * Threads: linger_start and linger_stop from the controlling thread;
 * linger_add from any thread.  One linger thread of its own owns the
 * sockets handed to it (see linger.c).
 */
#ifndef ATTND_LINGER_H
#define ATTND_LINGER_H

#include <stddef.h>

#define LINGER_IDLE_MS 5000   /* nginx's lingering_timeout */
#define LINGER_TOTAL_MS 30000 /* nginx's lingering_time */

/* The set of lingering sockets and its thread.  (Not "struct linger":
 * <sys/socket.h> has one, for SO_LINGER.) */
struct linger_set;

/* Starts the linger thread.  At most max_socks sockets linger at once
 * (further ones are closed at once, as without lingering); each is read
 * for at most max_bytes.  NULL after logging why. */
struct linger_set *linger_start(size_t max_socks, unsigned long long max_bytes);

/* Takes ownership of fd, a connected socket whose answer has been
 * written: half-closes it, then drains and closes it as above.  Never
 * fails: when it cannot linger (full, out of memory, l NULL), it closes fd
 * at once. */
void linger_add(struct linger_set *l, int fd);

/* Sockets lingering now. */
size_t linger_count(struct linger_set *l);

/* Stops the thread and closes every socket still lingering.  NULL is a
 * no-op. */
void linger_stop(struct linger_set *l);

#endif /* ATTND_LINGER_H */
