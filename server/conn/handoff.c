/* handoff.c - placing a connection on a lane's libmicrohttpd daemon (see
 * handoff.h). */
#include "server/conn/handoff.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include "core/attnd_err.h"
#include "server/obs/reqid.h"

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

/* Writes now as an IMF-fixdate (RFC 9110 section 5.6.7), "Sun, 06 Nov
 * 1994 08:49:37 GMT", into date (29 bytes and the NUL; the rest is room
 * the compiler cannot rule out).  The names come from tables here, not
 * from strftime, whose are the locale's. */
static void handoff_date(char date[64]) {
  static const char days[] = "SunMonTueWedThuFriSat";
  static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
  time_t t = time(NULL);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || tm.tm_wday < 0 || tm.tm_wday > 6 ||
      tm.tm_mon < 0 || tm.tm_mon > 11) {
    snprintf(date, 64, "Thu, 01 Jan 1970 00:00:00 GMT");
    return;
  }
  snprintf(date, 64, "%.3s, %02d %.3s %04d %02d:%02d:%02d GMT",
           days + 3 * tm.tm_wday, tm.tm_mday, months + 3 * tm.tm_mon,
           tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* Writes a whole answer of status (with its reason phrase) and the JSON
 * {"error": msg} at once, without reading the request: Date and a fresh
 * X-Request-ID as every answer of attnd's carries.  The body's length,
 * or 0 when the socket would not take it all. */
static size_t handoff_answer(int fd, const char *status, const char *msg) {
  char answer[768], date[64], rid[REQID_LEN + 1];
  int body = (int)strlen(msg) + 13; /* {"error": "", msg} */
  int n;
  handoff_date(date);
  n = snprintf(answer, sizeof answer,
               "HTTP/1.1 %s\r\n"
               "Date: %s\r\n"
               "Connection: close\r\n"
               "Content-Type: application/json\r\n"
               "Retry-After: 1\r\n"
               REQID_HEADER ": %s\r\n"
               "Content-Length: %d\r\n\r\n"
               "{\"error\": \"%s\"}",
               status, date, reqid_pick(NULL, rid), body, msg);
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
