/* mhdlog.h - libmicrohttpd's messages in attnd's log.
 *
 * libmicrohttpd reports through one callback (MHD_OPTION_EXTERNAL_LOGGER)
 * everything from a failed start to a hint.  mhdlog_message sorts them:
 *   - "Warning: ..." (libmicrohttpd's own word, e.g. for an option value
 *     it ignores) becomes an informational line, "libmicrohttpd warning:
 *     ...", not an error;
 *   - a TCP_NODELAY or TCP_CORK call that failed with EOPNOTSUPP is
 *     dropped, and so is the "Failed to push the data" that follows it:
 *     that is a Unix socket connection (handoff.h), which has neither
 *     option nor anything to push, and libmicrohttpd 0.9.75 tries them on
 *     each answer of a connection added from outside;
 *   - everything else is an error line, as before.
 *
 * State: one thread-local flag between a refused option and the message
 * after it.  Safe from any thread.
 */
#ifndef ATTND_MHDLOG_H
#define ATTND_MHDLOG_H

#include <stdarg.h>

/* Logs one libmicrohttpd message, fmt and its arguments ap, as above. */
void mhdlog_message(const char *fmt, va_list ap);

/* The status of an answer libmicrohttpd sends itself (a malformed
 * request, a head beyond its memory: docs/api.md), when the message is
 * the one it logs for that ("Error processing request (HTTP response
 * code is %u ..."), in 0.9.75 and 1.0.1 alike; else 0.  Those requests
 * never reach attnd's handler, so this is how they are counted. */
unsigned mhdlog_answer_status(const char *fmt, va_list ap);

#endif /* ATTND_MHDLOG_H */
