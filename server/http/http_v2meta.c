/* http_v2meta.c - the KServe v2 metadata, health, model configuration
 * and statistics GETs: /v2, /v2/health/{live,ready}, /v2/models/stats
 * and /v2/models/{m}[/versions/{v}][/ready|/config|/stats]
 * (http_impl.h).  http.c routes to them; proto/ writes the bodies.
 *
 * DESIGN
 *
 * Each handler runs on the MHD thread that owns the request's connection
 * (the threads and a request's states: the DESIGN comment of http.c), so
 * r is that thread's alone.  Of the shared state it reads the readiness
 * h->state, an atomic the controlling thread sets, and the metrics, which
 * any thread may read (metrics.h).  No locks.
 */
#include "server/http/http_impl.h"

#include <stdatomic.h>
#include <stdio.h>

#include "server/config.h"

enum MHD_Result http_get_v2_server(struct http_req *r) {
  char *body;
  size_t len;
  int rc = proto_v2_server_metadata(ATTND_VERSION, &body, &len);
  return http_send(r, 200, rc, body, len);
}

enum MHD_Result http_get_v2_live(struct http_req *r) {
  static char live[] = "{\"live\": true}";
  return http_answer(r, 200, live, sizeof live - 1, 0, http_json, NULL);
}

enum MHD_Result http_get_v2_ready(struct http_req *r) {
  static char ready[] = "{\"ready\": true}";
  static char draining[] = "{\"ready\": false, \"error\": \"draining\"}";
  static char starting[] = "{\"ready\": false, \"error\": \"starting\"}";
  int s = atomic_load(&r->h->state);
  if (s == HTTP_READY)
    return http_answer(r, 200, ready, sizeof ready - 1, 0, http_json, NULL);
  snprintf(r->reason, sizeof r->reason, "%s",
           s == HTTP_DRAINING ? "draining" : "starting");
  if (s == HTTP_DRAINING)
    return http_answer(r, 503, draining, sizeof draining - 1, 0, http_json,
                       NULL);
  return http_answer(r, 503, starting, sizeof starting - 1, 0, http_json,
                     NULL);
}

enum MHD_Result http_get_v2_model(struct http_req *r) {
  char *body;
  size_t len;
  int rc = proto_v2_model_metadata(r->model, &body, &len);
  return http_send(r, 200, rc, body, len);
}

enum MHD_Result http_get_v2_model_config(struct http_req *r) {
  char *body;
  size_t len;
  int rc = proto_v2_model_config(r->model, r->h->cfg.workers, &body, &len);
  return http_send(r, 200, rc, body, len);
}

/* One model's statistics (r->model >= 0), or every model's. */
enum MHD_Result http_get_v2_stats(struct http_req *r) {
  proto_model_stats st[PROTO_MODEL_COUNT];
  int models[PROTO_MODEL_COUNT], n = 0, rc;
  char *body;
  size_t len;
  for (int m = 0; m < PROTO_MODEL_COUNT; m++)
    if (r->model < 0 || r->model == m) {
      models[n] = m;
      metrics_model_stats(r->h->m, m, &st[n++]);
    }
  rc = proto_v2_model_stats(models, st, n, &body, &len);
  return http_send(r, 200, rc, body, len);
}

/* GET /v2/models/stats: r->model is 0 from the allocation; every model. */
enum MHD_Result http_get_v2_stats_all(struct http_req *r) {
  r->model = -1;
  return http_get_v2_stats(r);
}

enum MHD_Result http_get_v2_model_ready(struct http_req *r) {
  int ready = atomic_load(&r->h->state) == HTTP_READY;
  char *body;
  size_t len;
  int rc = proto_v2_model_ready(r->model, ready, &body, &len);
  return http_send(r, ready ? 200 : 503, rc, body, len);
}
