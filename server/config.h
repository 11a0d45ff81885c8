/* config.h - attnd's command line and ATTND_* environment configuration.
 *
 * Every flag has an environment variable (--max-batch <-> ATTND_MAX_BATCH);
 * a flag wins over its variable, a variable over the default.  Values are
 * range-checked here so that the rest of the server may trust them.
 * Not thread-safe: parse once in main() before any thread starts; the
 * result is read-only afterwards.
 */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#define ATTND_VERSION "0.1.0"

struct config {
  char host[64];            /* numeric IPv4 or IPv6 address to bind */
  int port;                 /* 0 = ephemeral */
  int workers;              /* compute threads */
  int max_batch;            /* requests per batch */
  long max_delay_us;        /* wait this long for a batch to fill */
  long inline_us;           /* cheaper requests skip the queue */
  long inline_idle_us;      /* and up to this as the one in flight */
  int max_queue;            /* queued requests beyond which 503 */
  long max_inflight_mb;     /* budget of bodies, tensors and answers */
  long max_body_mb;         /* request bodies beyond this get 413 */
  long max_request_gflop;   /* estimated cost beyond which 413, 0 = none */
  int body_timeout_s;       /* a body's deadline from its headers, 0 = none */
  long timeout_ms;          /* request deadline, 0 = none */
  long drain_delay_ms;      /* readiness 503 -> stop accepting */
  long drain_s;             /* bound on the whole drain */
  int max_conns;            /* simultaneous connections */
  int max_conns_per_ip;     /* simultaneous connections from one client
                               address, 0 = no per-address limit */
  int conn_memory_kb;       /* libmicrohttpd memory per connection */
  int conn_timeout_s;       /* idle connection timeout */
  int log_json;             /* 0 text, 1 json */
  int access_log;           /* 1: one log line per request */
  int http_threads;         /* MHD thread pool size */
  int probe;                /* --probe: check a running attnd and exit */
  char token[256];          /* bearer token for /v1/attention, "" = none;
                               --token-file is read into it */
  char token_file[256];
  int token_metrics;        /* 1: /metrics needs the token too */
  char tls_cert[256];       /* PEM certificate chain file, "" = plain HTTP */
  char tls_key[256];        /* PEM private key file (with tls_cert) */
  char unix_socket[108];    /* also serve on this Unix socket path, "" =
                               none (sun_path holds 107 bytes and a NUL) */
  unsigned unix_socket_mode;  /* its permission bits, <= 0777 */
  int allow_client_shm;     /* 1: /v2/systemsharedmemory register and
                               unregister are served (else 501) */
  int shm_max_regions;      /* regions registered at once */
  long shm_max_mb;          /* their total byte size, MiB */
  char model_name[65];      /* the dot-product model's v2 name, checked by
                               proto_v2_model_name_check */
};

enum config_result {
  CONFIG_RUN = 0,           /* configuration complete: start the server */
  CONFIG_EXIT = 1,          /* --help or --version printed: exit 0 */
  CONFIG_PROBE = 2          /* --probe: GET /healthz of host:port, exit */
};

/* Fills cfg from defaults, the environment and argv.  Returns CONFIG_RUN,
 * CONFIG_EXIT (help or version was written to out), CONFIG_PROBE (cfg is
 * complete and --probe was given), or ATTND_EINVAL after
 * writing a one-line message naming the flag or variable and the problem
 * to err.  Never exits the process itself. */
int config_parse(struct config *cfg, int argc, char **argv, FILE *out,
                 FILE *err);

/* Writes the usage text, every option with its default and variable. */
void config_usage(FILE *out);

#endif /* ATTND_CONFIG_H */
