/* tls.h - optional HTTPS: the PEM files attnd serves with, and the client
 * side of `attnd --probe` against an HTTPS attnd.
 *
 * The server side is libmicrohttpd's GnuTLS support (MHD_USE_TLS with the
 * PEM text in memory, see http.c); this module only reads the files, once,
 * at startup, before any thread starts.  No request can make attnd read
 * a file.  The probe side uses GnuTLS directly.
 *
 * Threads: tls_load/tls_free from main before/after the server runs;
 * tls_exchange is reentrant (its session is local).
 */
#ifndef ATTND_TLS_H
#define ATTND_TLS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* The largest PEM file tls_load accepts (a long chain is a few KiB). */
#define TLS_PEM_MAX ((size_t)1 << 20)

struct tls_pem {
  char *cert;               /* NUL-terminated PEM certificate chain */
  char *key;                /* NUL-terminated PEM private key */
};

/* 1 when the linked libmicrohttpd was built with TLS (GnuTLS), else 0. */
int tls_supported(void);

/* Reads the certificate and key PEM files into out.  Returns 0, or
 * ATTND_EINVAL after writing one line naming the flag, the file and the
 * problem (unreadable, empty, over TLS_PEM_MAX, not PEM) to err; out is
 * then empty.  Whether the pair is a valid certificate and matching key
 * is checked by the TLS library when the server starts. */
int tls_load(const char *cert_path, const char *key_path, struct tls_pem *out,
             FILE *err);

/* Wipes the key text and frees both; safe on an empty or zeroed struct. */
void tls_free(struct tls_pem *p);

/* Over the connected socket fd: TLS handshake (the server certificate is
 * NOT verified: the probe checks liveness, it sends no secret), sends the
 * len bytes of req, reads the answer until the first line is complete,
 * EOF, or cap - 1 bytes.  buf is NUL-terminated.  Returns the number of
 * bytes read, or -1 on a handshake, send or receive error (including the
 * socket's own SO_RCVTIMEO/SO_SNDTIMEO timeouts). */
ssize_t tls_exchange(int fd, const char *req, size_t len, char *buf,
                     size_t cap);

#endif /* ATTND_TLS_H */
