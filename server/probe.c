/* probe.c - GET /healthz against a running attnd (see probe.h). */
#include "probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../core/attnd_err.h"

/* Fills ss for host:port, mapping a wildcard host to its loopback. */
static socklen_t probe_addr(const char *host, int port,
                            struct sockaddr_storage *ss) {
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  memset(ss, 0, sizeof *ss);
  if (strcmp(host, "0.0.0.0") == 0)
    host = "127.0.0.1";
  else if (strcmp(host, "::") == 0)
    host = "::1";
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)port);
    return sizeof *in4;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    return sizeof *in6;
  }
  return 0;
}

/* Reads until the status line is complete; returns the status or -1. */
static int probe_status(int fd) {
  char buf[256];
  size_t len = 0;
  int status;
  while (len < sizeof buf - 1) {
    ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
    if (n <= 0)
      break;
    len += (size_t)n;
    buf[len] = '\0';
    if (strchr(buf, '\n'))
      break;
  }
  buf[len] = '\0';
  if (sscanf(buf, "HTTP/%*d.%*d %d", &status) != 1)
    return -1;
  return status;
}

int probe_run(const char *host, int port, int timeout_ms) {
  static const char req[] =
      "GET /healthz HTTP/1.0\r\nHost: attnd\r\nConnection: close\r\n\r\n";
  struct sockaddr_storage ss;
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  socklen_t sl = probe_addr(host, port, &ss);
  int fd, status = -1;

  if (!sl) {
    fprintf(stderr, "attnd: probe: bad address '%s'\n", host);
    return ATTND_EINTERNAL;
  }
  fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    goto fail;
  /* On Linux SO_SNDTIMEO bounds connect() as well as write(). */
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&ss, sl) == 0 &&
      write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1))
    status = probe_status(fd);
  close(fd);
  if (status == 200)
    return 0;
fail:
  fprintf(stderr, "attnd: probe: %s:%d/healthz: %s\n", host, port,
          status > 0 ? "unhealthy status" : "no answer");
  return ATTND_EINTERNAL;
}
