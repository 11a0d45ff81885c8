/* acceptor_lanes.c - which lane gets a connection: the kernel steers
 * each to the listen socket of the CPU its handshake arrived on, and the
 * acceptor balances what one lane would take too much of onto the least
 * loaded one.
 *
 * DESIGN: acceptor_steer runs on the controlling thread while the
 * sockets are created; acceptor_lane on the accept thread (or, in the
 * drain, the controlling thread once the accept thread is joined) under
 * a->mu, which also guards the lanes' counts that acceptor_lane_open
 * reads from any thread.
 */
#include "server/conn/acceptor_impl.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdint.h>
#include <string.h>

#include "server/conn/net.h"
#include "server/obs/log.h"

/* The kernel puts a new connection in the listen socket (of the group,
 * in the order they listened) that this classic BPF program returns: the
 * number of the CPU its handshake arrived on, modulo the sockets.  For a
 * client on this machine that is the CPU its thread connected from.
 * Without the program (an old kernel; logged) the kernel picks by a hash
 * of the addresses, and only the balancing groups connections. */
void acceptor_steer(struct acceptor *a) {
  struct sock_filter code[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, (uint32_t)(SKF_AD_OFF + SKF_AD_CPU)},
      {BPF_ALU | BPF_MOD | BPF_K, 0, 0, a->nfd},
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  if (a->nfd > 1 &&
      net_attach_filter(a->fd[0], SO_ATTACH_REUSEPORT_CBPF, code,
                        sizeof code / sizeof code[0]) != 0)
    log_error("accept: cannot steer connections by CPU (%s); lanes are "
              "balanced only", strerror(errno));
}

/* The least loaded lane.  Under a->mu. */
static unsigned acceptor_least(const struct acceptor *a) {
  unsigned least = 0;
  for (unsigned l = 1; l < a->lanes; l++)
    if (a->lane[l].open < a->lane[least].open)
      least = l;
  return least;
}

/* The lane for a connection from listen socket i: lane i, unless it is
 * full, when the least loaded lane gets it.  Lane i fills when it holds
 * the slack more than the least loaded one, and stays full until that
 * one has caught up: a crowd from one CPU is dealt out in blocks of the
 * slack.  wrk, for one, often opens both of its threads' connections
 * from one CPU, one thread's 32 after the other's, and each block is
 * then one thread's (when the lanes took turns past the slack, the
 * second thread's pool was split over both).  From the Unix socket
 * (ACCEPTOR_ANY_LANE), the least loaded lane.  Under a->mu. */
unsigned acceptor_lane(struct acceptor *a, unsigned i) {
  size_t slack = a->lanes < ACCEPTOR_SLACK_ALL ? ACCEPTOR_SLACK_ALL / a->lanes
                                               : 1;
  unsigned least = acceptor_least(a);
  if (i == ACCEPTOR_ANY_LANE)
    return least;
  if (a->lane[i].full && a->lane[i].open <= a->lane[least].open)
    a->lane[i].full = 0;
  else if (a->lane[i].open >= a->lane[least].open + slack)
    a->lane[i].full = 1;
  return a->lane[i].full ? least : i;
}

size_t acceptor_lane_open(struct acceptor *a, unsigned lane) {
  size_t n = 0;
  pthread_mutex_lock(&a->mu);
  if (lane < a->lanes)
    n = a->lane[lane].open;
  pthread_mutex_unlock(&a->mu);
  return n;
}
