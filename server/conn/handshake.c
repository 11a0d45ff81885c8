/* handshake.c - counting half-open TCP connections with sock_diag (see
 * handshake.h).
 *
 * One NETLINK_SOCK_DIAG dump request, SOCK_DIAG_BY_FAMILY with
 * inet_diag_req_v2, asks for the family's TCP sockets in SYN_RECV; the
 * kernel lists its request sockets under that state.  The answer is read
 * until NLMSG_DONE and counted by local address and port.
 */
#include "server/conn/handshake.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define HANDSHAKE_TIMEOUT_MS 200  /* the kernel answers at once */

/* Whether a diagnosed socket's local end is sa's address and port. */
static int handshake_matches(const struct inet_diag_msg *m,
                             const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
    return m->id.idiag_sport == in4->sin_port &&
           (in4->sin_addr.s_addr == htonl(INADDR_ANY) ||
            m->id.idiag_src[0] == in4->sin_addr.s_addr);
  }
  {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    return m->id.idiag_sport == in6->sin6_port &&
           (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) ||
            memcmp(m->id.idiag_src, &in6->sin6_addr, 16) == 0);
  }
}

/* Sends the dump request for sa's family. */
static int handshake_ask(int fd, const struct sockaddr *sa) {
  struct {
    struct nlmsghdr nh;
    struct inet_diag_req_v2 r;
  } req;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  memset(&req, 0, sizeof req);
  req.nh.nlmsg_len = sizeof req;
  req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.r.sdiag_family = (unsigned char)sa->sa_family;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = 1u << TCP_SYN_RECV;
  return sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&kernel,
                sizeof kernel) == (ssize_t)sizeof req
             ? 0
             : -1;
}

/* Reads the dump; the count of matching sockets, or -1. */
static int handshake_count(int fd, const struct sockaddr *sa) {
  long buf[2048]; /* 16 KiB, aligned for struct nlmsghdr */
  int count = 0;
  for (;;) {
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    struct nlmsghdr *h = (struct nlmsghdr *)buf;
    int n = (int)got;
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    for (; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE)
        return count;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(h);
        errno = e->error ? -e->error : EPROTO;
        return -1;
      }
      if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
          h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
          handshake_matches(NLMSG_DATA(h), sa))
        count++;
    }
  }
}

int handshake_pending(const struct sockaddr *sa) {
  struct timeval tv = {0, HANDSHAKE_TIMEOUT_MS * 1000};
  int fd, n, eno;
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) {
    errno = EAFNOSUPPORT;
    return -1;
  }
  fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0)
    return -1;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  n = handshake_ask(fd, sa) == 0 ? handshake_count(fd, sa) : -1;
  eno = errno;
  close(fd);
  errno = eno;
  return n;
}
