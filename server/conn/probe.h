/* probe.h - `attnd --probe`: a container health check without curl.
 *
 * Connects to the configured --host/--port (a wildcard host 0.0.0.0 or ::
 * is probed on its loopback), sends GET /healthz and reads the status
 * line; over TLS when attnd serves HTTPS (--tls-cert), without verifying
 * the certificate and without sending the token (/healthz is always
 * open).  Single-threaded, blocking, bounded by a timeout.
 */
#ifndef ATTND_PROBE_H
#define ATTND_PROBE_H

/* Returns 0 when attnd at host:port answers /healthz with 200 within
 * timeout_ms (per connect, send and receive step), otherwise
 * ATTND_EINTERNAL (refused, timed out, TLS failed, or another status),
 * after writing one line saying why to stderr.  tls != 0: speak HTTPS. */
int probe_run(const char *host, int port, int timeout_ms, int tls);

#endif /* ATTND_PROBE_H */
