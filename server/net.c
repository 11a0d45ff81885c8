/* net.c - socket helpers; see net.h. */
#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Copies net_fd_with_remainder tries; each miss skips a run of numbers
 * in use, so a few are plenty. */
#define NET_REMAINDER_TRIES 16

socklen_t net_sockaddr(const char *host, int port,
                       struct sockaddr_storage *ss, int *ipv6) {
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  memset(ss, 0, sizeof *ss);
  if (ipv6)
    *ipv6 = 0;
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    net_set_port(ss, port);
    return sizeof *in4;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    net_set_port(ss, port);
    if (ipv6)
      *ipv6 = 1;
    return sizeof *in6;
  }
  memset(ss, 0, sizeof *ss);
  return 0;
}

int net_port(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

void net_set_port(struct sockaddr_storage *ss, int port) {
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

int net_fd_with_remainder(int fd, unsigned rem, unsigned mod) {
  unsigned want = rem;
  if (mod <= 1 || (unsigned)fd % mod == rem)
    return fd;
  for (int i = 0; i < NET_REMAINDER_TRIES; i++) {
    int d = fcntl(fd, F_DUPFD_CLOEXEC, (int)want);
    if (d < 0)
      return -1;
    if ((unsigned)d % mod == rem) {
      close(fd);
      return d;
    }
    close(d);
    /* Every number from want to d is in use: the next candidate is the
     * first above d with the remainder. */
    want = (unsigned)d - (unsigned)d % mod + rem;
    if (want <= (unsigned)d)
      want += mod;
  }
  errno = EMFILE;
  return -1;
}
