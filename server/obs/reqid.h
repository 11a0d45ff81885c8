/* reqid.h - request ids: the client's X-Request-ID, or one attnd makes.
 *
 * Every request carries an id that attnd echoes as X-Request-ID and
 * writes in its access-log line, so that a client, a proxy and attnd's
 * log can name the same request.  A client's id is kept when it is 1 to
 * REQID_MAX bytes of visible ASCII (0x21-0x7e) other than '"' and '\\':
 * safe in a header, a text log field and a JSON string as it is.  Anything
 * else (empty, too long, spaces, control or non-ASCII bytes) is replaced
 * by a generated id: REQID_LEN lowercase hex digits, a random per-process
 * prefix followed by a scrambled per-process counter, so unique within the
 * process and, with overwhelming odds, across processes.
 *
 * reqid_init() runs once before any thread starts; the rest is safe from
 * any thread (one relaxed atomic increment per generated id).
 */
#ifndef ATTND_REQID_H
#define ATTND_REQID_H

#include <stddef.h>

#define REQID_HEADER "X-Request-ID"
#define REQID_MAX 128  /* longest client id kept, in bytes */
#define REQID_LEN 32   /* a generated id's length, in hex digits */

/* Seeds the generator from getrandom(2) (the clock and pid if that
 * fails).  Without it ids are still unique within the process. */
void reqid_init(void);

/* 1 when s (NUL-terminated, may be NULL) is an id to keep, else 0. */
int reqid_valid(const char *s);

/* The id of a request whose X-Request-ID header is client (NULL when it
 * sent none): client itself when reqid_valid(client), else a fresh id
 * written into buf.  Never fails; the result lives as long as client or
 * buf. */
const char *reqid_pick(const char *client, char buf[REQID_LEN + 1]);

#endif /* ATTND_REQID_H */
