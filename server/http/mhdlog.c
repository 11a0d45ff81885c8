/* mhdlog.c - libmicrohttpd's messages in attnd's log (see mhdlog.h). */
#include "server/http/mhdlog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/obs/log.h"

/* The format libmicrohttpd 0.9.75 uses for a socket option it could not
 * set (mhd_send.c), with the option name, "ON"/"OFF" and strerror. */
static const char mhdlog_sockopt[] = "Setting %s option to %s state failed: ";

/* What it says next, when the options that push an answer out all
 * failed (mhd_send.c): on a Unix socket there is nothing to push. */
static const char mhdlog_push[] = "Failed to push the data from buffers";

/* Set by a TCP option refused as not supported, on this thread, until
 * the next message: libmicrohttpd tries its options and reports the
 * failed push in the same call. */
static _Thread_local int mhdlog_after_not_tcp;

/* 1 when the message is a TCP option refused on a socket that is not
 * TCP. */
static int mhdlog_not_tcp(const char *fmt, va_list ap) {
  va_list copy;
  const char *reason;
  if (strncmp(fmt, mhdlog_sockopt, sizeof mhdlog_sockopt - 1) != 0)
    return 0;
  va_copy(copy, ap);
  (void)va_arg(copy, const char *); /* the option */
  (void)va_arg(copy, const char *); /* its state */
  reason = va_arg(copy, const char *);
  va_end(copy);
  return reason && strcmp(reason, strerror(EOPNOTSUPP)) == 0;
}

/* libmicrohttpd's message for an answer of its own. */
static const char mhdlog_answer[] =
    "Error processing request (HTTP response code is %u";

unsigned mhdlog_answer_status(const char *fmt, va_list ap) {
  va_list copy;
  unsigned status;
  if (strncmp(fmt, mhdlog_answer, sizeof mhdlog_answer - 1) != 0)
    return 0;
  va_copy(copy, ap);
  status = va_arg(copy, unsigned);
  va_end(copy);
  return status;
}

void mhdlog_message(const char *fmt, va_list ap) {
  char msg[1024];
  int after_not_tcp = mhdlog_after_not_tcp;
  mhdlog_after_not_tcp = 0;
  if (mhdlog_not_tcp(fmt, ap)) {
    mhdlog_after_not_tcp = 1;
    return;
  }
  if (after_not_tcp && strncmp(fmt, mhdlog_push, sizeof mhdlog_push - 1) == 0)
    return;
  if (strncmp(fmt, "Warning: ", 9) == 0) {
    vsnprintf(msg, sizeof msg, fmt + 9, ap);
    msg[strcspn(msg, "\n")] = '\0';
    log_info("libmicrohttpd warning: %s", msg);
    return;
  }
  log_verror(fmt, ap);
}
