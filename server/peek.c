/* peek.c - a new connection's announced body length (see peek.h). */
#include "peek.h"

#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define PEEK_FIELD "content-length:"
#define PEEK_MAX_DIGITS 19          /* below 10^19 fits 64 bits */
#define PEEK_STACK_MAX 4096         /* peek_socket_content_length's cap */

/* The value of the field line [p, end) when it is a Content-Length
 * (optional whitespace around a decimal), else 0. */
static unsigned long long peek_field(const char *p, const char *end) {
  size_t flen = sizeof PEEK_FIELD - 1;
  unsigned long long v = 0;
  int digits = 0;
  if ((size_t)(end - p) < flen || strncasecmp(p, PEEK_FIELD, flen) != 0)
    return 0;
  for (p += flen; p < end && (*p == ' ' || *p == '\t'); p++)
    ;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (++digits > PEEK_MAX_DIGITS)
      return 0;
    v = v * 10 + (unsigned long long)(*p - '0');
  }
  for (; p < end && (*p == ' ' || *p == '\t' || *p == '\r'); p++)
    ;
  return digits && p == end ? v : 0;
}

unsigned long long peek_content_length(const char *head, size_t n) {
  const char *p = head, *end = head + n, *nl;
  /* The request line first, then one field a line until a blank one;
   * only whole lines (ending in LF) count. */
  if (!(nl = memchr(p, '\n', n)))
    return 0;
  for (p = nl + 1; (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1) {
    unsigned long long v;
    if (nl == p || (nl == p + 1 && *p == '\r'))
      return 0;  /* the end of the header block */
    if ((v = peek_field(p, nl)))
      return v;
  }
  return 0;
}

unsigned long long peek_socket_content_length(int fd, size_t cap) {
  char buf[PEEK_STACK_MAX];
  ssize_t n;
  if (cap > sizeof buf)
    cap = sizeof buf;
  n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 ? peek_content_length(buf, (size_t)n) : 0;
}
