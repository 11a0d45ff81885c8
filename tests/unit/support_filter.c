/* support_filter.c - see support_filter.h. */
#include "support_filter.h"

#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "server/conn/net.h"
#include "support_skip.h"

int support_drop_acks(int l, const char *test) {
  int e;
  if (net_drop_tcp_flags(l, NET_TCP_SYN | NET_TCP_ACK, NET_TCP_ACK) == 0)
    return 0;
  e = errno;
  if (e == EPERM) {
    support_skip(test, "this kernel attaches a socket filter to a TCP socket "
                 "only with CAP_NET_ADMIN, which this process lacks");
    return -1;
  }
  ck_abort_msg("SO_ATTACH_FILTER on a TCP listen socket: %s", strerror(e));
  return -1;
}
