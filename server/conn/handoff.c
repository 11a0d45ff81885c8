/* handoff.c - placing a connection on a libmicrohttpd thread (see
 * handoff.h). */
#include "server/conn/handoff.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "server/conn/net.h"
#include "core/attnd_err.h"

void handoff_pool_options(unsigned threads, size_t max_conns,
                          struct MHD_OptionItem o[3]) {
  size_t limit = max_conns * (threads > 1 ? threads : 1);
  int n = 0;
  if (threads > 1)
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE,
                                     (intptr_t)threads, NULL};
  o[n++] = (struct MHD_OptionItem){
      MHD_OPTION_CONNECTION_LIMIT,
      (intptr_t)(limit < UINT_MAX ? limit : UINT_MAX), NULL};
  o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

unsigned handoff_lane(int fd, unsigned threads) {
  return threads > 1 && fd >= 0 ? (unsigned)fd % threads : 0;
}

int handoff_add(struct MHD_Daemon *d, unsigned threads, int fd,
                const struct sockaddr *sa, socklen_t len, unsigned lane) {
  /* An unnamed Unix socket's address: the family alone. */
  static const struct sockaddr_un unnamed = {.sun_family = AF_UNIX};
  int moved = net_fd_with_remainder(fd, lane, threads > 1 ? threads : 1);
  if (moved >= 0)
    fd = moved;
  if (sa->sa_family == AF_UNIX) {
    sa = (const struct sockaddr *)&unnamed;
    len = sizeof unnamed.sun_family;
  }
  return MHD_add_connection(d, fd, sa, len) == MHD_YES ? 0 : -1;
}

size_t handoff_refuse(int fd) {
  char answer[512];
  const char *msg = attnd_strerror(ATTND_EDRAINING);
  int body = (int)strlen(msg) + 13; /* {"error": "", msg} */
  int n = snprintf(answer, sizeof answer,
                   "HTTP/1.1 503 Service Unavailable\r\n"
                   "Connection: close\r\n"
                   "Content-Type: application/json\r\n"
                   "Retry-After: 1\r\n"
                   "Content-Length: %d\r\n\r\n"
                   "{\"error\": \"%s\"}",
                   body, msg);
  if (n <= 0 || (size_t)n >= sizeof answer ||
      send(fd, answer, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
    return 0;
  return (size_t)body;
}
