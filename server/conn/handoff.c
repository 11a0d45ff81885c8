/* handoff.c - placing a connection on a lane's libmicrohttpd daemon (see
 * handoff.h). */
#include "server/conn/handoff.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "core/attnd_err.h"

void handoff_daemon_options(size_t max_conns, struct MHD_OptionItem o[2]) {
  size_t room = max_conns < UINT_MAX / 2 ? 2 * max_conns : UINT_MAX;
  o[0] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                 (intptr_t)room, NULL};
  o[1] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int handoff_add(struct MHD_Daemon *d, int fd, const struct sockaddr *sa,
                socklen_t len) {
  /* An unnamed Unix socket's address: the family alone. */
  static const struct sockaddr_un unnamed = {.sun_family = AF_UNIX};
  if (sa->sa_family == AF_UNIX) {
    sa = (const struct sockaddr *)&unnamed;
    len = sizeof unnamed.sun_family;
  }
  return MHD_add_connection(d, fd, sa, len) == MHD_YES ? 0 : -1;
}

/* Writes a whole answer of status (with its reason phrase) and the JSON
 * {"error": msg} at once, without reading the request; the body's
 * length, or 0 when the socket would not take it all. */
static size_t handoff_answer(int fd, const char *status, const char *msg) {
  char answer[640];
  int body = (int)strlen(msg) + 13; /* {"error": "", msg} */
  int n = snprintf(answer, sizeof answer,
                   "HTTP/1.1 %s\r\n"
                   "Connection: close\r\n"
                   "Content-Type: application/json\r\n"
                   "Retry-After: 1\r\n"
                   "Content-Length: %d\r\n\r\n"
                   "{\"error\": \"%s\"}",
                   status, body, msg);
  if (n <= 0 || (size_t)n >= sizeof answer ||
      send(fd, answer, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
    return 0;
  return (size_t)body;
}

size_t handoff_refuse(int fd) {
  return handoff_answer(fd, "503 Service Unavailable",
                        attnd_strerror(ATTND_EDRAINING));
}

size_t handoff_refuse_per_address(int fd, size_t limit) {
  char msg[160];
  snprintf(msg, sizeof msg, "too many connections from this address: "
           "--max-conns-per-ip is %zu; reuse a connection, or close one",
           limit);
  return handoff_answer(fd, "429 Too Many Requests", msg);
}
