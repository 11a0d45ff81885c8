/* support_filter.c - see support_filter.h. */
#include "support_filter.h"

#include <check.h>
#include <errno.h>
#include <linux/filter.h>
#include <string.h>
#include <sys/socket.h>

#include "server/net.h"

void support_drop_acks(int l) {
  /* The TCP flags are byte 13 of the TCP header, where a socket filter's
   * data starts; 0x12 masks SYN and ACK, 0x10 is ACK alone. */
  struct sock_filter code[] = {
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, 13},
      {BPF_ALU | BPF_AND | BPF_K, 0, 0, 0x12},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0x10},
      {BPF_RET | BPF_K, 0, 0, 0},
      {BPF_RET | BPF_K, 0, 0, 0xffffffffu},
  };
  int e;
  if (net_attach_filter(l, SO_ATTACH_FILTER, code,
                        sizeof code / sizeof code[0]) == 0)
    return;
  e = errno;
  ck_abort_msg("SO_ATTACH_FILTER on a TCP listen socket: %s%s", strerror(e),
               e == EPERM ? " (this kernel allows it only with CAP_NET_ADMIN: "
                            "run as root, or the container with --cap-add "
                            "NET_ADMIN)"
                          : "");
}
