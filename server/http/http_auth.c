/* http_auth.c - the bearer token: a request's verdict for its route.
 *
 * DESIGN: runs on the lane threads; reads only h->cfg, fixed once
 * http_start has returned, and the request's own headers.
 */
#include "server/http/http_impl.h"

#include <string.h>
#include <strings.h>

/* ---- the token ------------------------------------------------------- */

/* AUTH_OK when the request carries "Authorization: Bearer <token>" (the
 * scheme is case-insensitive, RFC 7235), else AUTH_MISSING (no bearer
 * credentials, or an empty token) or AUTH_INVALID (a wrong token).
 * The comparison always runs over the whole configured token and folds
 * a length difference into the result, so its time depends only on the
 * configured token's length: it leaks neither where the first
 * difference is nor the length. */
static int http_check_token(struct http *h, struct MHD_Connection *c) {
  const char *want = h->cfg.token, *got;
  size_t n, m, i;
  unsigned char diff;
  got = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_AUTHORIZATION);
  if (!got || strncasecmp(got, "Bearer ", 7) != 0)
    return AUTH_MISSING;
  for (got += 7; *got == ' ' || *got == '\t'; got++) {
  }
  /* Whitespace around a field value is not part of it (RFC 9112, 5.1):
   * libmicrohttpd 1.0 trims it, 0.9.75 keeps what follows the value. */
  for (m = strlen(got); m > 0 && (got[m - 1] == ' ' || got[m - 1] == '\t');
       m--) {
  }
  if (!m)
    return AUTH_MISSING;
  n = strlen(want);
  diff = n != m;
  for (i = 0; i < n; i++)
    diff |= (unsigned char)(want[i] ^ got[i < m ? i : 0]);
  return diff == 0 ? AUTH_OK : AUTH_INVALID;
}

/* The route's auth verdict (AUTH_OK when it is open or no token is
 * configured); a NULL route is an unknown /v2/models/ path. */
int http_auth(struct http_req *r, const struct http_route *rt) {
  const struct http_config *cfg = &r->h->cfg;
  int need = rt ? rt->auth == AUTH_ALWAYS ||
                      (rt->auth == AUTH_IF_METRICS && cfg->token_metrics)
                : 1;
  if (!need || !cfg->token || !cfg->token[0])
    return AUTH_OK;
  return http_check_token(r->h, r->conn);
}
