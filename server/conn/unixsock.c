/* unixsock.c - the Unix domain socket and its file (see unixsock.h). */
#include "server/conn/unixsock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/obs/log.h"

/* Fills sun with path; its length, or 0 when path does not fit. */
static socklen_t unixsock_addr(const char *path, struct sockaddr_un *sun) {
  size_t n = strlen(path);
  memset(sun, 0, sizeof *sun);
  if (n == 0 || n >= sizeof sun->sun_path)
    return 0;
  sun->sun_family = AF_UNIX;
  memcpy(sun->sun_path, path, n);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

/* Whether a server answers on the socket file at sun: 1 yes (connected,
 * or its backlog is full), 0 no (refused, or the file has gone), -1 when
 * it cannot be told (errno set). */
static int unixsock_live(const struct sockaddr_un *sun, socklen_t len) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc, eno;
  if (fd < 0)
    return -1;
  rc = connect(fd, (const struct sockaddr *)sun, len);
  eno = errno;
  close(fd);
  if (rc == 0 || eno == EAGAIN || eno == EINPROGRESS)
    return 1;
  if (eno == ECONNREFUSED || eno == ENOENT)
    return 0;
  errno = eno;
  return -1;
}

/* Clears the way for a new socket at path: nothing there, or a stale
 * socket removed.  0, or -1 after logging why. */
static int unixsock_clear(const char *path, const struct sockaddr_un *sun,
                          socklen_t len) {
  struct stat st;
  int live;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT)
      return 0;
    log_error("unix socket %s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISSOCK(st.st_mode)) {
    log_error("unix socket %s: the path exists and is not a socket; "
              "refusing to remove it", path);
    errno = EEXIST;
    return -1;
  }
  live = unixsock_live(sun, len);
  if (live > 0) {
    log_error("unix socket %s: another server answers on it (a running "
              "attnd?); refusing to take it over", path);
    errno = EADDRINUSE;
    return -1;
  }
  if (live < 0) {
    log_error("unix socket %s: cannot tell whether a server answers on it "
              "(%s); not removing it", path, strerror(errno));
    return -1;
  }
  if (unlink(path) != 0 && errno != ENOENT) {
    log_error("unix socket %s: cannot remove the stale socket: %s", path,
              strerror(errno));
    return -1;
  }
  log_info("unix socket %s: replaced a stale socket nobody answered on",
           path);
  return 0;
}

int unixsock_listen(struct unixsock *u, const char *path, unsigned mode) {
  struct sockaddr_un sun;
  socklen_t len = unixsock_addr(path, &sun);
  struct stat st;
  int fd, eno;
  memset(u, 0, sizeof *u);
  if (!len) {
    log_error("unix socket %s: the path must be 1 to %zu bytes", path,
              sizeof sun.sun_path - 1);
    errno = ENAMETOOLONG;
    return -1;
  }
  if (unixsock_clear(path, &sun, len) != 0)
    return -1;
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    eno = errno;
    log_error("unix socket %s: %s", path, strerror(eno));
    errno = eno;
    return -1;
  }
  if (bind(fd, (struct sockaddr *)&sun, len) != 0) {
    eno = errno;
    log_error("unix socket %s: cannot bind: %s", path, strerror(eno));
    close(fd);
    errno = eno;
    return -1;
  }
  memcpy(u->path, path, strlen(path) + 1);
  /* The bits before listening: until then a client's connect is refused
   * whatever the bits say. */
  if (chmod(path, mode & 0777) != 0 || lstat(path, &st) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    eno = errno;
    log_error("unix socket %s: %s", path, strerror(eno));
    close(fd);
    unlink(path);
    u->path[0] = '\0';
    errno = eno;
    return -1;
  }
  u->dev = st.st_dev;
  u->ino = st.st_ino;
  return fd;
}

void unixsock_unlink(struct unixsock *u) {
  struct stat st;
  if (!u->path[0])
    return;
  if (lstat(u->path, &st) == 0 && S_ISSOCK(st.st_mode) &&
      st.st_dev == u->dev && st.st_ino == u->ino && unlink(u->path) != 0)
    log_error("unix socket %s: cannot remove it: %s", u->path,
              strerror(errno));
  u->path[0] = '\0';
}
