/* http_daemon.c - the HTTP daemons and their lifecycle: one libmicrohttpd
 * daemon per lane, started and stopped with the acceptor, the watcher and
 * the linger thread; the acceptor's hand-off of a connection to its lane,
 * its refusals, and the connection notices that keep its counts.
 *
 * DESIGN
 *
 * http_start, http_set_state, http_quiesce and http_stop run on the
 * controlling thread (main.c); http_port and http_active on any.  The
 * accept thread calls http_on_accept and http_on_refuse; each lane's
 * thread calls http_on_connection and http_on_mhd_log for its own
 * connections.  Shared after http_start returns: h->state and
 * h->quiesced (atomics the controlling thread writes), h->active and
 * h->posts (atomics the lane threads count); struct http_conn belongs to
 * its connection's lane.  No locks of our own.  A request's life on its
 * lane is http.c's DESIGN comment.
 */
#include "server/http/http_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/conn/acceptor.h"
#include "server/conn/handoff.h"
#include "server/conn/linger.h"
#include "server/conn/net.h"
#include "server/conn/watch.h"
#include "server/http/mhdlog.h"
#include "server/obs/log.h"
#include "server/obs/metrics.h"
#include "proto/mem.h"

/* ---- connections -------------------------------------------------------- */

/* MHD's word that a connection handed over has started or closed, on
 * its lane's thread (cls is the lane).  Its struct http_conn lives
 * between the two; without memory for one, the acceptor is told at once
 * that it was served, so that the drain never waits for it. */
static void http_on_connection(void *cls, struct MHD_Connection *c,
                               void **socket_context,
                               enum MHD_ConnectionNotificationCode toe) {
  struct http_lane *lane = cls;
  struct http *h = lane->h;
  struct http_conn *hc;
  const union MHD_ConnectionInfo *i;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    acceptor_started(h->acc);
    if (!(*socket_context = mem_calloc(1, sizeof(struct http_conn))))
      acceptor_served(h->acc);
  } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    hc = *socket_context;
    i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    acceptor_closed(h->acc, lane->idx, hc ? hc->served : 1,
                    i ? i->client_addr : NULL);
    mem_free(hc);
    *socket_context = NULL;
  }
}

/* The accept thread's hand-off to the lane's daemon (handoff.h).  MHD
 * closes fd when it refuses it (out of memory) and then reports
 * nothing. */
static int http_on_accept(void *arg, int fd, const struct sockaddr *sa,
                          socklen_t len, unsigned lane) {
  struct http *h = arg;
  return handoff_add(h->lanes[lane].d, fd, sa, len);
}

/* A connection attnd will not serve: from the backlog while draining,
 * with no room, a 503 at once and then a lingering close, which reads
 * its request away; over --max-conns-per-ip, a 429 and a close (that
 * client holds the limit already: no lingering for it). */
static void http_on_refuse(void *arg, int fd, int why) {
  struct http *h = arg;
  size_t n;
  if (why == ACCEPTOR_PER_ADDRESS) {
    n = handoff_refuse_per_address(fd, (size_t)h->cfg.max_conns_per_ip);
    metrics_record_request(h->m, METRICS_ROUTE_OTHER, 429, 0, n, 0);
    close(fd);
    return;
  }
  n = handoff_refuse(fd);
  metrics_record_request(h->m, METRICS_ROUTE_OTHER, 503, 0, n, 0);
  linger_add(h->lg, fd);
}

static void http_on_mhd_log(void *cls, const char *fmt, va_list ap) {
  struct http *h = cls;
  unsigned status = mhdlog_answer_status(fmt, ap);
  /* An answer the library sent itself, never seen by the handler. */
  if (status)
    metrics_record_request(h->m, METRICS_ROUTE_OTHER, status, 0, 0, 0);
  mhdlog_message(fmt, ap);
}

/* ---- lifecycle ------------------------------------------------------- */

/* TLS 1.2 and 1.3 only, GnuTLS's default ciphers within them. */
static const char http_tls_priorities[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";

/* The TLS options (an MHD_OPTION_ARRAY): just the end mark when the
 * server speaks plain HTTP. */
static void http_tls_options(const struct http_config *cfg,
                             struct MHD_OptionItem o[4]) {
  int n = 0;
  if (cfg->tls_cert && cfg->tls_key) {
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0,
                                     (void *)cfg->tls_cert};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0,
                                     (void *)cfg->tls_key};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                     (void *)http_tls_priorities};
  }
  o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

/* MHD_OPTION_CONNECTION_MEMORY_INCREMENT for a connection memory of
 * mem bytes.  libmicrohttpd 0.9.75 grows its read buffer (by an eighth
 * of the pool's free room, while that is at least 8 KiB) only when fewer
 * than this many bytes of it are free before a read; its default, 1 KiB,
 * leaves a body read half the pool at a time.  The whole pool makes
 * every read try to grow it, so a body is read about three quarters of
 * the pool at a time: 25 KiB instead of 16 KiB with 32 KiB, a third fewer
 * reads and polls, at no cost in memory.  Header limits are unchanged:
 * MHD takes room for header fields back from the unused end of the read
 * buffer.  libmicrohttpd 1.0 takes at most a quarter of the pool, warns
 * at every start about anything larger, and reads a body half the pool
 * at a time whatever the value (docs/decisions.md, "Read sizes"): it
 * gets that quarter. */
static size_t http_memory_increment(size_t mem) {
#if MHD_VERSION >= 0x01000000
  return mem / 4;
#else
  return mem;
#endif
}

/* Lane lane's daemon (handoff.h): one thread; a connection limit above
 * --max-conns, which the acceptor enforces over all lanes, as it does
 * --max-conns-per-ip. */
static struct MHD_Daemon *http_start_daemon(struct http *h,
                                            struct http_lane *lane) {
  unsigned int flags = HANDOFF_MHD_FLAGS;
  struct MHD_OptionItem tls[4], limit[2];
  handoff_daemon_options((size_t)h->cfg.max_conns, limit);
  if (h->cfg.tls_cert && h->cfg.tls_key)
    flags |= MHD_USE_TLS;
  http_tls_options(&h->cfg, tls);
  return MHD_start_daemon(
      flags, 0, NULL, NULL, http_on_request, h,
      /* First, so that MHD reports even option errors through it. */
      MHD_OPTION_EXTERNAL_LOGGER, http_on_mhd_log, h,
      MHD_OPTION_ARRAY, limit,
      MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, lane,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)h->cfg.conn_timeout_s,
      /* --conn-memory-kb, 32 KiB (MHD's default) unless the operator
       * asks for more: MHD zeroes the pool after every request and maps
       * a larger one afresh for each connection, which costs clients
       * that connect for each request more than larger reads save
       * keep-alive uploads (docs/decisions.md, "Connection memory: 32
       * KiB unless asked"). */
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, h->cfg.conn_memory,
      MHD_OPTION_CONNECTION_MEMORY_INCREMENT,
      http_memory_increment(h->cfg.conn_memory),
      MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, h,
      MHD_OPTION_ARRAY, tls,
      MHD_OPTION_END);
}

/* Starts every lane's daemon; 0, or -1 after logging why. */
static int http_start_lanes(struct http *h) {
  unsigned n = (unsigned)h->cfg.threads;
  if (!(h->lanes = calloc(n, sizeof *h->lanes))) {
    log_error("http: out of memory");
    return -1;
  }
  for (unsigned i = 0; i < n; i++) {
    h->lanes[i] = (struct http_lane){h, NULL, i};
    if (!(h->lanes[i].d = http_start_daemon(h, &h->lanes[i]))) {
      log_error("http: cannot listen on %s:%d: libmicrohttpd did not "
                "start (see above)", h->cfg.host, h->cfg.port);
      return -1;
    }
  }
  return 0;
}

/* Stops the lanes' daemons started so far, and frees the lanes. */
static void http_stop_lanes(struct http *h) {
  for (unsigned i = 0; h->lanes && i < (unsigned)h->cfg.threads; i++)
    if (h->lanes[i].d)
      MHD_stop_daemon(h->lanes[i].d);
  free(h->lanes);
  h->lanes = NULL;
}

struct http *http_start(const struct http_config *cfg, struct batcher *b,
                        struct metrics *m) {
  struct http *h = calloc(1, sizeof *h);
  struct sockaddr_storage ss;
  socklen_t len;

  if (!h) {
    log_error("http: out of memory");
    return NULL;
  }
  h->cfg = *cfg;
  h->b = b;
  h->m = m;
  if (!(len = net_sockaddr(cfg->host, cfg->port, &ss, NULL))) {
    log_error("http: bad listen address '%s'", cfg->host);
    goto err;
  }
  h->acc = acceptor_listen((struct sockaddr *)&ss, len,
                           (unsigned)cfg->threads);
  if (!h->acc) {
    log_error("http: cannot listen on %s:%d: %s", cfg->host, cfg->port,
              strerror(errno));
    goto err;
  }
  if (cfg->unix_path && cfg->unix_path[0] &&
      acceptor_listen_unix(h->acc, cfg->unix_path, cfg->unix_mode) != 0)
    goto err;
  if (acceptor_limit_per_address(h->acc, (size_t)cfg->max_conns_per_ip)) {
    log_error("http: out of memory");
    goto err;
  }
  if (http_start_lanes(h) != 0)
    goto err;
  if (!(h->watch = watch_start()))
    log_warn("http: cannot start the watcher thread (%s): requests whose "
             "clients leave run to the end", strerror(errno));
  /* Without it (logged) early answers close as libmicrohttpd does. */
  h->lg = linger_start((size_t)cfg->max_conns,
                       (unsigned long long)cfg->max_body * HTTP_DRAIN_FACTOR);
  if (acceptor_run(h->acc, (size_t)cfg->max_conns, http_on_accept,
                   http_on_refuse, h) != 0) {
    log_error("http: cannot start the accept thread");
    linger_stop(h->lg);
    goto err;
  }
  return h;
err:
  http_stop_lanes(h);
  watch_stop(h->watch);
  acceptor_stop(h->acc);
  free(h);
  return NULL;
}

int http_port(struct http *h) { return acceptor_port(h->acc); }

void http_set_state(struct http *h, enum http_state s) {
  atomic_store(&h->state, (int)s);
}

/* Closing the listen sockets (the acceptor's, which MHD never sees) makes
 * the kernel refuse new clients and reset those in the backlogs.
 * (libmicrohttpd 0.9.75's own MHD_quiesce_daemon races its pool threads
 * on a busy server and can abort the process: attnd never calls it.) */
void http_quiesce(struct http *h) {
  if (atomic_exchange(&h->quiesced, 1))
    return;
  acceptor_quiesce(h->acc);
}

size_t http_active(struct http *h) { return atomic_load(&h->active); }

void http_stop(struct http *h) {
  /* Accepting stops first: a connection handed over after MHD stopped
   * would be refused.  MHD reports each close to the acceptor, which
   * therefore outlives MHD_stop_daemon. */
  acceptor_quiesce(h->acc);
  http_stop_lanes(h);
  watch_stop(h->watch);  /* no connection is suspended any more */
  acceptor_stop(h->acc);
  linger_stop(h->lg);
  free(h);
}
