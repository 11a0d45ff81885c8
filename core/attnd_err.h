/* attnd_err.h - the one list of attnd error codes.
 *
 * Every function in attnd that can fail returns int: 0 on success, one of
 * the negative ATTND_E* codes below on failure.  The list is an X-macro so
 * that the enum and the message table cannot drift apart (the libuv
 * UV_ERRNO_MAP idea).  The mapping from a code to an HTTP status lives in
 * exactly one place, server/http/status.c, because HTTP is the server's business
 * and not the core's.
 *
 * This header is self-contained: no globals, no I/O, safe from any thread.
 */
#ifndef ATTND_ERR_H
#define ATTND_ERR_H

/* XX(name, value, message) */
#define ATTND_ERRNO_MAP(XX)                                                  \
  XX(EINVAL,     -1, "invalid input")                                       \
  XX(ENOMEM,     -2, "out of memory")                                       \
  XX(ETOOBIG,    -3, "request body too large")                              \
  XX(EBUSY,      -4, "server busy, queue full")                             \
  XX(ETIMEDOUT,  -5, "deadline passed before the request finished")         \
  XX(ENOTFOUND,  -6, "not found")                                           \
  XX(EMETHOD,    -7, "method not allowed")                                  \
  XX(EDRAINING,  -8, "server is shutting down")                             \
  XX(EINTERNAL,  -9, "internal error")                                      \
  XX(EUNAUTH,   -10, "missing or invalid bearer token")                     \
  XX(ENOTREADY, -11, "server is not ready")                                 \
  XX(EDISABLED, -12, "not enabled on this server")                          \
  XX(EBODYTIME, -13, "request body did not arrive in time")                 \
  XX(ECANCELED, -14, "stopped: the client closed the connection")

enum attnd_err {
  ATTND_OK = 0,
#define ATTND__ERR_ENUM(name, value, msg) ATTND_##name = (value),
  ATTND_ERRNO_MAP(ATTND__ERR_ENUM)
#undef ATTND__ERR_ENUM
};

/* Returns a static, human readable message for an error code; never NULL. */
static inline const char *attnd_strerror(int err) {
  switch (err) {
  case ATTND_OK: return "ok";
#define ATTND__ERR_MSG(name, value, msg) case (value): return (msg);
  ATTND_ERRNO_MAP(ATTND__ERR_MSG)
#undef ATTND__ERR_MSG
  default: return "unknown error";
  }
}

#endif /* ATTND_ERR_H */
