/* peek.h - what a new connection's first bytes announce, read with
 * MSG_PEEK before libmicrohttpd sees them.
 *
 * Only a hint for choosing the connection's read buffer (http.c): the
 * bytes stay in the socket, and libmicrohttpd parses and checks the
 * request as it would without the peek.  A wrong or missing hint costs
 * speed, never correctness.  No globals; safe from any thread.
 */
#ifndef ATTND_PEEK_H
#define ATTND_PEEK_H

#include <stddef.h>

/* The Content-Length of the first request in head (n bytes: the start of
 * what a client sent, not NUL-terminated), when its header block, as far
 * as head reaches, holds one whole Content-Length field with a decimal
 * value of at most 19 digits; the first such field wins.  0 otherwise:
 * none, a malformed one, one cut off by the end of head, or a field
 * after the end of the header block. */
unsigned long long peek_content_length(const char *head, size_t n);

/* Reads up to cap bytes of fd's waiting input without taking them
 * (MSG_PEEK, never blocking) and returns their Content-Length as
 * peek_content_length does; 0 when nothing is waiting. */
unsigned long long peek_socket_content_length(int fd, size_t cap);

#endif /* ATTND_PEEK_H */
