/* probe.c - GET /healthz against a running attnd (see probe.h). */
#include "server/conn/probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/attnd_err.h"
#include "server/conn/net.h"
#include "server/conn/tls.h"

/* Fills ss for host:port, mapping a wildcard host to its loopback. */
static socklen_t probe_addr(const char *host, int port,
                            struct sockaddr_storage *ss) {
  if (strcmp(host, "0.0.0.0") == 0)
    host = "127.0.0.1";
  else if (strcmp(host, "::") == 0)
    host = "::1";
  return net_sockaddr(host, port, ss, NULL);
}

/* Reads until the status line is complete; returns the bytes read. */
static ssize_t probe_read_line(int fd, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  while (len < cap - 1 && !strchr(buf, '\n')) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n <= 0)
      break;
    len += (size_t)n;
    buf[len] = '\0';
  }
  return (ssize_t)len;
}

/* Sends req on the connected fd (through TLS if asked) and returns the
 * answer's HTTP status, or -1. */
static int probe_exchange(int fd, const char *req, size_t len, int tls) {
  char buf[256];
  ssize_t n;
  int status;
  if (tls)
    n = tls_exchange(fd, req, len, buf, sizeof buf);
  else if (write(fd, req, len) == (ssize_t)len)
    n = probe_read_line(fd, buf, sizeof buf);
  else
    n = -1;
  if (n <= 0 || sscanf(buf, "HTTP/%*d.%*d %d", &status) != 1)
    return -1;
  return status;
}

int probe_run(const char *host, int port, int timeout_ms, int tls) {
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
  if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
    status = probe_exchange(fd, req, sizeof req - 1, tls);
  close(fd);
  if (status == 200)
    return 0;
fail:
  fprintf(stderr, "attnd: probe: %s://%s:%d/healthz: %s\n",
          tls ? "https" : "http", host, port,
          status > 0 ? "unhealthy status" : "no answer");
  return ATTND_EINTERNAL;
}
