/* support_filter.c - see support_filter.h. */
#include "support_filter.h"

#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "server/conn/net.h"

void support_drop_acks(int l) {
  int e;
  if (net_drop_tcp_flags(l, NET_TCP_SYN | NET_TCP_ACK, NET_TCP_ACK) == 0)
    return;
  e = errno;
  ck_abort_msg("SO_ATTACH_FILTER on a TCP listen socket: %s%s", strerror(e),
               e == EPERM ? " (this kernel allows it only with CAP_NET_ADMIN: "
                            "run as root, or the container with --cap-add "
                            "NET_ADMIN)"
                          : "");
}
