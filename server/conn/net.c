/* net.c - socket helpers; see net.h. */
#include "server/conn/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

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

int net_attach_filter(int fd, int opt, const struct sock_filter *code,
                      unsigned short n) {
  struct sock_fprog prog;
  /* Zeroed first: the kernel copies the padding after prog.len too. */
  memset(&prog, 0, sizeof prog);
  prog.len = n;
  prog.filter = (struct sock_filter *)code;
  return setsockopt(fd, SOL_SOCKET, opt, &prog, sizeof prog);
}

int net_drop_tcp_flags(int fd, unsigned mask, unsigned value) {
  /* A socket filter's data starts at the TCP header, whose byte 13 holds
   * the flags. */
  struct sock_filter code[] = {
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, 13},
      {BPF_ALU | BPF_AND | BPF_K, 0, 0, mask},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, value},
      {BPF_RET | BPF_K, 0, 0, 0},
      {BPF_RET | BPF_K, 0, 0, 0xffffffffu},
  };
  return net_attach_filter(fd, SO_ATTACH_FILTER, code,
                           sizeof code / sizeof code[0]);
}
