/* unixsock.h - the Unix domain socket attnd also listens on
 * (--unix-socket), and its file.
 *
 * At start the path is taken over only from a dead server: a socket file
 * nobody answers on (connect is refused) is a leftover of a process that
 * did not exit cleanly, and is replaced; a socket someone answers on (or
 * whose backlog is full) belongs to a live server, and anything that is
 * not a socket (a file, a directory, a symbolic link) is never removed:
 * both refuse the start.  The file gets its permission bits before the
 * socket listens, so no client connects through wider ones.  At the end
 * the file is removed, unless it is no longer the one created here (a
 * successor that took over the path keeps its own).
 *
 * Threads: called from the controlling thread only.
 */
#ifndef ATTND_UNIXSOCK_H
#define ATTND_UNIXSOCK_H

#include <sys/types.h>

struct unixsock {
  char path[108];           /* "" when there is none */
  dev_t dev;                /* the file created, to know it again */
  ino_t ino;
};

/* Binds a listening, non-blocking Unix stream socket at path (shorter
 * than 108 bytes) with permission bits mode, replacing a stale socket
 * file as above, and fills u.  Returns the socket, or -1 after logging
 * why (errno: EADDRINUSE when a live server answers there, EEXIST when
 * something other than a socket is there). */
int unixsock_listen(struct unixsock *u, const char *path, unsigned mode);

/* Removes the file at u->path if it is still the one unixsock_listen
 * created, and forgets it.  Idempotent. */
void unixsock_unlink(struct unixsock *u);

#endif /* ATTND_UNIXSOCK_H */
