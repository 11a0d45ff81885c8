/* acceptor_sockets.c - the acceptor's listen sockets: one TCP socket
 * per lane in one SO_REUSEPORT group on the same port (the kernel's pick
 * for port 0), refusing to join another process's group, and the Unix
 * socket beside them.
 *
 * DESIGN: the controlling thread creates the sockets (acceptor_listen,
 * acceptor_listen_unix) before the accept thread starts, and closes them
 * (acceptor_close_all) in the drain after it has been joined; the accept
 * thread only polls and accepts on them.  acceptor_port reads a value
 * fixed at creation, from any thread.
 */
#include "server/conn/acceptor_impl.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server/conn/net.h"
#include "proto/mem.h"

/* A non-blocking socket bound to sa (an IPv6 address for IPv6 only), in
 * sa's reuse group when reuse is set; -1 with errno when it cannot. */
static int acceptor_bound(const struct sockaddr *sa, socklen_t len,
                          int reuse) {
  int one = 1, eno;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
      (!reuse ||
       setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0) &&
      (sa->sa_family != AF_INET6 ||
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0) &&
      bind(fd, sa, len) == 0)
    return fd;
  eno = errno;
  close(fd);
  errno = eno;
  return -1;
}

/* Whether some socket is already bound to sa's port (another server, or
 * another attnd): a plain bind, without SO_REUSEPORT, fails then.  This
 * keeps attnd from silently joining the reuse group of another process
 * of the same user. */
static int acceptor_port_taken(const struct sockaddr *sa, socklen_t len) {
  int fd = acceptor_bound(sa, len, 0);
  if (fd < 0)
    return errno == EADDRINUSE;
  close(fd);
  return 0;
}

/* A listening socket on sa, in sa's reuse group. */
static int acceptor_bind(const struct sockaddr *sa, socklen_t len) {
  int eno, fd = acceptor_bound(sa, len, 1);
  if (fd < 0 || listen(fd, SOMAXCONN) == 0)
    return fd;
  eno = errno;
  close(fd);
  errno = eno;
  return -1;
}

static int acceptor_bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return -1;
  return net_port((struct sockaddr *)&ss);
}

/* Binds the group: the first socket takes the port (the kernel's choice
 * for port 0), the others join it. */
static int acceptor_bind_all(struct acceptor *a, const struct sockaddr *sa,
                             socklen_t len) {
  struct sockaddr_storage ss;
  memcpy(&ss, sa, len);
  if (net_port(sa) != 0 && acceptor_port_taken(sa, len))
    return -1;
  while (a->nfd < a->lanes && a->nfd < ACCEPTOR_MAX_LISTENERS) {
    int fd = acceptor_bind((struct sockaddr *)&ss, len);
    if (fd < 0)
      return -1;
    a->fd[a->nfd++] = fd;
    if (a->nfd == 1) {
      if ((a->port = acceptor_bound_port(fd)) < 0)
        return -1;
      net_set_port(&ss, a->port);
    }
  }
  a->addr = ss;
  acceptor_steer(a);
  return 0;
}

/* Closes the listen sockets and removes the Unix socket's file. */
void acceptor_close_all(struct acceptor *a) {
  for (unsigned i = 0; i < a->nfd; i++)
    close(a->fd[i]);
  a->nfd = 0;
  if (a->ufd >= 0)
    close(a->ufd);
  a->ufd = -1;
  unixsock_unlink(&a->unix_file);
}

struct acceptor *acceptor_listen(const struct sockaddr *sa, socklen_t len,
                                 unsigned lanes) {
  struct acceptor *a = mem_calloc(1, sizeof *a);
  pthread_condattr_t ca;
  int eno;
  if (!a)
    return NULL;
  a->wake = -1;
  a->ufd = -1;
  a->lanes = lanes ? lanes : 1;
  a->write_off_ms = ACCEPTOR_WRITE_OFF_MS;
  if (!(a->lane = mem_calloc(a->lanes, sizeof *a->lane)) ||
      acceptor_bind_all(a, sa, len) != 0 ||
      (a->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
    goto err;
  pthread_mutex_init(&a->mu, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  return a;
err:
  eno = errno ? errno : ENOMEM;
  acceptor_close_all(a);
  mem_free(a->lane);
  mem_free(a);
  errno = eno;
  return NULL;
}

int acceptor_port(const struct acceptor *a) { return a->port; }

int acceptor_listen_unix(struct acceptor *a, const char *path,
                         unsigned mode) {
  if (a->ufd >= 0 || a->wake < 0) {
    errno = EINVAL;
    return -1;
  }
  a->ufd = unixsock_listen(&a->unix_file, path, mode);
  return a->ufd >= 0 ? 0 : -1;
}
