/* net.c - socket address helpers; see net.h. */
#include "net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

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
