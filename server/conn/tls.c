/* tls.c - PEM files for HTTPS and the probe's TLS client (see tls.h). */
#include "server/conn/tls.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "core/attnd_err.h"

int tls_supported(void) {
  return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* Reads a whole PEM file into a fresh NUL-terminated string; NULL after
 * writing why to err. */
static char *tls_read_pem(const char *flag, const char *path, FILE *err) {
  FILE *f = fopen(path, "rb");
  char *text = f ? malloc(TLS_PEM_MAX + 1) : NULL;
  size_t n = text ? fread(text, 1, TLS_PEM_MAX + 1, f) : 0;
  const char *why = !f          ? "cannot open it"
                    : !text     ? "out of memory"
                    : ferror(f) ? "cannot read it"
                    : n > TLS_PEM_MAX ? "larger than 1 MiB"
                                      : NULL;
  if (f)
    fclose(f);
  if (!why) {
    text[n] = '\0';
    if (n == 0 || !strstr(text, "-----BEGIN "))
      why = "not a PEM file";
  }
  if (why) {
    fprintf(err, "attnd: %s: '%s': %s\n", flag, path, why);
    if (text)
      explicit_bzero(text, n < TLS_PEM_MAX ? n : TLS_PEM_MAX);
    free(text);
    return NULL;
  }
  return text;
}

int tls_load(const char *cert_path, const char *key_path, struct tls_pem *out,
             FILE *err) {
  memset(out, 0, sizeof *out);
  out->cert = tls_read_pem("--tls-cert", cert_path, err);
  if (out->cert)
    out->key = tls_read_pem("--tls-key", key_path, err);
  if (out->cert && out->key)
    return 0;
  tls_free(out);
  return ATTND_EINVAL;
}

void tls_free(struct tls_pem *p) {
  if (p->key)
    explicit_bzero(p->key, strlen(p->key));
  free(p->key);
  free(p->cert);
  p->key = p->cert = NULL;
}

/* ---- the probe's client side ----------------------------------------- */

/* Sends all of req; 0 or -1.  Every GnuTLS error counts as fatal here:
 * on a blocking socket EAGAIN only means its timeout expired. */
static int tls_send_all(gnutls_session_t s, const char *req, size_t len) {
  while (len > 0) {
    ssize_t n = gnutls_record_send(s, req, len);
    if (n == GNUTLS_E_INTERRUPTED)
      continue;
    if (n <= 0)
      return -1;
    req += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Reads until a newline, EOF or a full buffer; bytes read or -1. */
static ssize_t tls_recv_line(gnutls_session_t s, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  while (len < cap - 1 && !strchr(buf, '\n')) {
    ssize_t n = gnutls_record_recv(s, buf + len, cap - 1 - len);
    if (n == GNUTLS_E_INTERRUPTED)
      continue;
    if (n == 0 || n == GNUTLS_E_PREMATURE_TERMINATION)
      break;
    if (n < 0)
      return -1;
    len += (size_t)n;
    buf[len] = '\0';
  }
  return (ssize_t)len;
}

ssize_t tls_exchange(int fd, const char *req, size_t len, char *buf,
                     size_t cap) {
  gnutls_certificate_credentials_t cred = NULL;
  gnutls_session_t s = NULL;
  ssize_t got = -1;
  int rc;

  if (cap < 2 || gnutls_certificate_allocate_credentials(&cred) < 0)
    return -1;
  if (gnutls_init(&s, GNUTLS_CLIENT) < 0)
    goto out;
  if (gnutls_set_default_priority(s) < 0 ||
      gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred) < 0)
    goto out;
  gnutls_transport_set_int(s, fd);
  do
    rc = gnutls_handshake(s);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc == 0 && tls_send_all(s, req, len) == 0)
    got = tls_recv_line(s, buf, cap);
out:
  if (s)
    gnutls_deinit(s);
  gnutls_certificate_free_credentials(cred);
  return got;
}
