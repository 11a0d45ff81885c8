/* http_route.c - which route a request is, and the routes answered at
 * once: the route table, the /v2/models/{model}[/...] and shared memory
 * paths, the method and token checks in that order (http_dispatch), and
 * the GETs that need nothing but the request (health, readiness,
 * metrics, the playground's files).
 *
 * DESIGN: runs on the lane threads, each request on its connection's
 * lane (http.c); reads the route tables (const) and h->state (atomic),
 * writes only the request.
 */
#include "server/http/http_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "server/http/assets.h"
#include "server/shm/shm_http.h"

/* ---- synchronous routes ------------------------------------------------ */

static enum MHD_Result http_get_healthz(struct http_req *r) {
  static char ok[] = "{\"status\": \"ok\"}";
  return http_answer(r, 200, ok, sizeof ok - 1, 0, http_json, NULL);
}

static enum MHD_Result http_get_readyz(struct http_req *r) {
  static char ready[] = "{\"status\": \"ready\"}";
  int s = atomic_load(&r->h->state);
  if (s == HTTP_READY)
    return http_answer(r, 200, ready, sizeof ready - 1, 0, http_json, NULL);
  return http_fail(r, s == HTTP_DRAINING ? ATTND_EDRAINING : ATTND_ENOTREADY,
                   NULL, NULL);
}

static enum MHD_Result http_get_metrics(struct http_req *r) {
  char *body;
  size_t len;
  if (metrics_render(r->h->m, &body, &len) != 0)
    return http_fail(r, ATTND_ENOMEM, NULL, NULL);
  return http_answer(r, 200, body, len, 1, METRICS_CONTENT_TYPE, NULL);
}

/* The playground page's embedded files (assets.h); 1 if path is one. */
static int http_is_asset(const char *path) {
  return assets_lookup(path, NULL, NULL, NULL) == 0;
}

static enum MHD_Result http_get_asset(struct http_req *r) {
  const unsigned char *data;
  const char *ctype;
  size_t len;
  if (assets_lookup(r->url, &data, &len, &ctype) != 0)
    return http_fail(r, ATTND_ENOTFOUND, NULL, NULL);
  /* Static storage for the life of the process: PERSISTENT, no copy. */
  return http_answer(r, 200, (char *)data, len, 0, ctype, NULL);
}

/* ---- routing ---------------------------------------------------------- */

static const struct http_route http_routes[] = {
  {"/v1/attention", METRICS_ROUTE_ATTENTION, "POST", NULL, BODY_V1, 1},
  {"/healthz", METRICS_ROUTE_HEALTHZ, "GET, HEAD", http_get_healthz, 0, 0},
  {"/readyz", METRICS_ROUTE_READYZ, "GET, HEAD", http_get_readyz, 0, 0},
  {"/metrics", METRICS_ROUTE_METRICS, "GET, HEAD", http_get_metrics, 0, 2},
  {"/v2", METRICS_ROUTE_V2, "GET, HEAD", http_get_v2_server, 0, 1},
  {"/v2/health/live", METRICS_ROUTE_V2_LIVE, "GET, HEAD", http_get_v2_live, 0,
   0},
  {"/v2/health/ready", METRICS_ROUTE_V2_READY, "GET, HEAD", http_get_v2_ready,
   0, 0},
  {"/v2/models/stats", METRICS_ROUTE_V2_STATS, "GET, HEAD",
   http_get_v2_stats_all, 0, 1},
};

/* /v2/models/{m}[/versions/{v}][/ready|/infer|/config|/stats], resolved after
 * the model. */
static const struct http_route http_v2_model_route = {
  "/v2/models/{m}", METRICS_ROUTE_V2_MODEL, "GET, HEAD", http_get_v2_model, 0,
  1};
static const struct http_route http_v2_ready_route = {
  "/v2/models/{m}/ready", METRICS_ROUTE_V2_MODEL_READY, "GET, HEAD",
  http_get_v2_model_ready, 0, 1};
static const struct http_route http_v2_infer_route = {
  "/v2/models/{m}/infer", METRICS_ROUTE_V2_INFER, "POST", NULL, BODY_V2, 1};
static const struct http_route http_v2_config_route = {
  "/v2/models/{m}/config", METRICS_ROUTE_V2_MODEL_CONFIG, "GET, HEAD",
  http_get_v2_model_config, 0, 1};
static const struct http_route http_v2_stats_route = {
  "/v2/models/{m}/stats", METRICS_ROUTE_V2_STATS, "GET, HEAD",
  http_get_v2_stats, 0, 1};

/* The routes under /v2/models/{m}[/versions/{v}], by the last segment. */
static const struct {
  const char *action;
  const struct http_route *route;
} http_v2_actions[] = {
  {"", &http_v2_model_route},          {"ready", &http_v2_ready_route},
  {"infer", &http_v2_infer_route},     {"config", &http_v2_config_route},
  {"stats", &http_v2_stats_route}};

static enum MHD_Result http_get_shm_status(struct http_req *r) {
  char *body, err[PROTO_ERR_MAX] = "";
  size_t len;
  int rc = shm_http_status(r->h->cfg.shm, r->url, &body, &len, err);
  if (rc != 0)
    return http_fail(r, rc, err[0] ? err : NULL, NULL);
  return http_answer(r, 200, body, len, 1, http_json, NULL);
}

/* /v2/systemsharedmemory[/region/{region}]/{status,register,unregister}
 * (shm_http.h): status and unregister with or without a region. */
static const struct http_route http_shm_status_route = {
  "/v2/systemsharedmemory/status", METRICS_ROUTE_SHM_STATUS, "GET, HEAD",
  http_get_shm_status, 0, 1};
static const struct http_route http_shm_register_route = {
  "/v2/systemsharedmemory/region/{region}/register",
  METRICS_ROUTE_SHM_REGISTER, "POST", NULL, BODY_SHM, 1};
static const struct http_route http_shm_unregister_route = {
  "/v2/systemsharedmemory/unregister", METRICS_ROUTE_SHM_UNREGISTER, "POST",
  NULL, BODY_SHM, 1};

/* Every embedded file shares one route entry; its path is the URL. */
static const struct http_route http_asset_route = {
  "(static file)", METRICS_ROUTE_STATIC, "GET, HEAD", http_get_asset, 0, 0};

/* Splits the part of a /v2/models/ URL after the prefix into model,
 * version (or NULL) and action ("" when none), in buf.  0 or -1. */
static int http_v2_split(const char *rest, char *buf, size_t cap,
                         const char **m, const char **v, const char **act) {
  char *seg[4], *p;
  int n = 0;
  if (strlen(rest) >= cap)
    return -1;
  strcpy(buf, rest);
  for (p = buf; n < 4; n++) {
    seg[n] = p;
    p = strchr(p, '/');
    if (!p) {
      n++;
      break;
    }
    *p++ = '\0';
  }
  if (p || seg[0][0] == '\0')
    return -1;  /* more than four segments, or no model name */
  *m = seg[0];
  *v = NULL;
  *act = "";
  if (n >= 3 && strcmp(seg[1], "versions") == 0) {
    *v = seg[2];
    if (n == 4)
      *act = seg[3];
    return 0;
  }
  if (n == 2)
    *act = seg[1];
  return n <= 2 ? 0 : -1;
}

/* Resolves /v2/models/... into a route and r->model; on failure fills msg
 * (404: unknown path, model or version) and returns NULL. */
static const struct http_route *http_find_v2_model(struct http_req *r,
                                                   const char *url,
                                                   char *msg, size_t cap) {
  char buf[256], err[PROTO_ERR_MAX];
  const char *m, *v, *act;
  const struct http_route *route = NULL;
  size_t i;
  if (http_v2_split(url + 11, buf, sizeof buf, &m, &v, &act) == 0)
    for (i = 0; i < sizeof http_v2_actions / sizeof http_v2_actions[0]; i++)
      if (!strcmp(act, http_v2_actions[i].action))
        route = http_v2_actions[i].route;
  if (!route) {
    snprintf(msg, cap, "no route for %.120s", url);
    return NULL;
  }
  err[0] = '\0';
  r->model = proto_v2_model_find(m, v, err);
  if (r->model < 0) {
    /* Counted under the route it would have been, like any 404 there. */
    r->route = route->metric;
    snprintf(msg, cap, "%s", err[0] ? err : "unknown model");
    return NULL;
  }
  return route;
}

static const struct http_route *http_find_route(struct http_req *r,
                                                const char *url, char *msg,
                                                size_t cap) {
  size_t i;
  int shm;
  for (i = 0; i < sizeof http_routes / sizeof http_routes[0]; i++)
    if (strcmp(url, http_routes[i].path) == 0)
      return &http_routes[i];
  if (strncmp(url, "/v2/models/", 11) == 0)
    return http_find_v2_model(r, url, msg, cap);
  if ((shm = shm_http_action(url)) >= 0)
    return shm == SHM_HTTP_STATUS     ? &http_shm_status_route
           : shm == SHM_HTTP_REGISTER ? &http_shm_register_route
                                      : &http_shm_unregister_route;
  if (http_is_asset(url))
    return &http_asset_route;
  snprintf(msg, cap, "no route for %.120s", url);
  return NULL;
}

/* ---- dispatch ----------------------------------------------------------- */

/* Routes r: answers it, or for a POST route starts receiving its body. */
enum MHD_Result http_dispatch(struct http_req *r) {
  const char *url = r->url, *method = r->method;
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  const struct http_route *route;
  char msg[PROTO_ERR_MAX];

  route = r->rt = http_find_route(r, url, msg, sizeof msg);
  if (route)
    r->route = route->metric;
  /* Which models exist is metadata too: without the token an unknown
   * /v2/models/ path is 401 like a known one, not 404. */
  if (!route && strncmp(url, "/v2/models/", 11) == 0 &&
      (r->auth = http_auth(r, NULL)) != AUTH_OK)
    return http_fail(r, ATTND_EUNAUTH, NULL, NULL);
  if (!route)
    return http_fail(r, ATTND_ENOTFOUND, msg, NULL);
  /* A POST to a POST route learns its verdict now, answered after the
   * body (http_post_begin); every other request is refused at once. */
  if (!route->get && !strcmp(method, "POST")) {
    r->posting = 1;
    atomic_fetch_add(&r->h->posts, 1);
    return http_post_begin(r);
  }
  if ((r->auth = http_auth(r, route)) != AUTH_OK)
    return http_fail(r, ATTND_EUNAUTH, NULL, NULL);
  if (route->get && get)
    return route->get(r);
  snprintf(msg, sizeof msg, "method %.16s not allowed on %.64s (allowed: %s)",
           method, url, route->allow);
  return http_fail(r, ATTND_EMETHOD, msg, route->allow);
}
