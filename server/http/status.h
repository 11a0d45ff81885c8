/* status.h - the one table from attnd error codes to HTTP status codes.
 *
 * HTTP is the server's business, not the core's, so the mapping lives here
 * and nowhere else (core/attnd_err.h lists the codes).  Pure functions, safe
 * from any thread.
 */
#ifndef ATTND_STATUS_H
#define ATTND_STATUS_H

/* Returns the HTTP status for an attnd code: 200 for ATTND_OK, the mapped
 * status for each ATTND_E* code, and 500 for anything unknown (an unknown
 * code is a bug, and a bug is a 500). */
unsigned int status_from_err(int err);

/* Returns 1 when a response with this HTTP status should carry a
 * Retry-After header (the service is temporarily unable to serve). */
int status_wants_retry_after(unsigned int http_status);

#endif /* ATTND_STATUS_H */
