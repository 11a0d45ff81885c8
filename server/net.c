/* net.c - socket helpers; see net.h. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* How long the loopback handshake of net_retire_listener may take. */
#define NET_RETIRE_MS 2000

socklen_t net_sockaddr(const char *host, int port,
                       struct sockaddr_storage *ss, int *ipv6) {
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  memset(ss, 0, sizeof *ss);
  if (ipv6)
    *ipv6 = 0;
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)port);
    return sizeof *in4;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    if (ipv6)
      *ipv6 = 1;
    return sizeof *in6;
  }
  memset(ss, 0, sizeof *ss);
  return 0;
}

/* Where fd's peer listens: fd's own address (loopback for a wildcard),
 * any port.  Returns the address length, or 0. */
static socklen_t net_peer_addr(int fd, struct sockaddr_storage *ss) {
  socklen_t len = sizeof *ss;
  if (getsockname(fd, (struct sockaddr *)ss, &len) != 0)
    return 0;
  if (ss->ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    if (a->sin_addr.s_addr == htonl(INADDR_ANY))
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = 0;
    return len;
  }
  if (ss->ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    if (IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr))
      a->sin6_addr = in6addr_loopback;
    a->sin6_port = 0;
    return len;
  }
  errno = EAFNOSUPPORT;
  return 0;
}

/* A listening socket at ss (port 0); its address back in ss. */
static int net_peer_listener(struct sockaddr_storage *ss, socklen_t *len) {
  int pl = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (pl < 0)
    return -1;
  if (bind(pl, (struct sockaddr *)ss, *len) == 0 && listen(pl, 1) == 0 &&
      getsockname(pl, (struct sockaddr *)ss, len) == 0)
    return pl;
  int e = errno;
  close(pl);
  errno = e;
  return -1;
}

int net_retire_listener(int fd, int *peer) {
  struct sockaddr_storage ss;
  socklen_t len = net_peer_addr(fd, &ss);
  struct pollfd w;
  int pl, p, n, e, rc = -2;
  if (!len || (pl = net_peer_listener(&ss, &len)) < 0)
    return -1;
  /* On a listening TCP socket, SHUT_RD stops the listening: the socket
   * is closed to the network but stays bound, and may connect. */
  if (shutdown(fd, SHUT_RD) != 0) {
    rc = -1;
    goto out;
  }
  if (connect(fd, (struct sockaddr *)&ss, len) != 0 && errno != EINPROGRESS)
    goto out;
  w = (struct pollfd){pl, POLLIN, 0};
  while ((n = poll(&w, 1, NET_RETIRE_MS)) < 0 && errno == EINTR)
    ;
  if (n != 1) {
    if (n == 0)
      errno = ETIMEDOUT;
    goto out;
  }
  if ((p = accept4(pl, NULL, NULL, SOCK_CLOEXEC)) < 0)
    goto out;
  *peer = p;
  rc = 0;
out:
  e = errno;
  close(pl);
  errno = e;
  return rc;
}
