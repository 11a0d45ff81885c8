/* config.c - flags, ATTND_* variables and defaults (see config.h).
 *
 * One table describes every option; defaults, the environment, argv and
 * --help are all driven from it, so they cannot drift apart. */
#include "server/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <uv.h>

#include "core/attn.h"
#include "core/attnd_err.h"
#include "proto/proto.h"
#include "server/amx.h"

enum config_kind { KIND_INT, KIND_LONG, KIND_HOST, KIND_LOG, KIND_STR,
                   KIND_MODE };

struct config_opt {
  const char *name;         /* flag without the dashes */
  const char *env;          /* environment variable */
  enum config_kind kind;
  size_t off;               /* field offset in struct config */
  long min, max;            /* accepted range for numbers */
  const char *def;          /* default, as it would be typed */
  const char *help;
  const char *arg;          /* its value's name in --help; NULL: by kind */
};

#define OFF(f) offsetof(struct config, f)

static const struct config_opt config_opts[] = {
  {"host", "ATTND_HOST", KIND_HOST, OFF(host), 0, 0, "127.0.0.1",
   "numeric IPv4/IPv6 address to listen on"},
  {"port", "ATTND_PORT", KIND_INT, OFF(port), 0, 65535, "8000",
   "TCP port (0 = any free port)"},
  {"workers", "ATTND_WORKERS", KIND_INT, OFF(workers), 1, 1024, "cores",
   "compute worker threads"},
  {"max-batch", "ATTND_MAX_BATCH", KIND_INT, OFF(max_batch), 1, 4096, "32",
   "most requests of one shape per batch"},
  {"max-delay-us", "ATTND_MAX_DELAY_US", KIND_LONG, OFF(max_delay_us), 0,
   10000000, "0", "wait up to this long for a batch to fill (0 = greedy)"},
  {"inline-us", "ATTND_INLINE_US", KIND_LONG, OFF(inline_us), 0, 1000000,
   "100", "run cheaper requests on their HTTP thread, unqueued (0 = queue "
   "all)"},
  {"inline-idle-us", "ATTND_INLINE_IDLE_US", KIND_LONG, OFF(inline_idle_us),
   0, 60000000, "5000", "with no other request in flight, run requests "
   "up to this on their HTTP thread too"},
  {"max-queue", "ATTND_MAX_QUEUE", KIND_INT, OFF(max_queue), 1, 1000000,
   "1024", "queued requests beyond which attnd answers 503"},
  {"max-inflight-mb", "ATTND_MAX_INFLIGHT_MB", KIND_LONG, OFF(max_inflight_mb),
   1, 1048576, "1024", "memory budget of requests, MiB: bodies as they "
   "arrive, then tensors and answers"},
  {"max-body-mb", "ATTND_MAX_BODY_MB", KIND_LONG, OFF(max_body_mb), 1, 4096,
   "64", "request bodies above this get 413, MiB"},
  /* 200 GFLOP admits every shape in the docs and benchmarks, the
   * largest (1,16,2048,2048,64) with weights at 27; it is about a second
   * of both cores of a two-core machine (docs/api.md, "Cost limit"). */
  {"max-request-gflop", "ATTND_MAX_REQUEST_GFLOP", KIND_LONG,
   OFF(max_request_gflop), 0, 1000000000, "200",
   "requests estimated to cost more than this many GFLOP get 413 "
   "(0 = no limit)"},
  /* From the end of the headers: a client that declares a body holds
   * its share of --max-inflight-mb until the body is in. */
  {"body-timeout-s", "ATTND_BODY_TIMEOUT_S", KIND_INT, OFF(body_timeout_s),
   0, 86400, "30", "a request body must arrive within this many seconds "
   "of its headers (0 = no limit)"},
  {"timeout-ms", "ATTND_TIMEOUT_MS", KIND_LONG, OFF(timeout_ms), 0,
   86400000, "0", "answer 504, and stop its work, if a request has not "
   "finished by then (0 = none)"},
  {"drain-delay-ms", "ATTND_DRAIN_DELAY_MS", KIND_LONG, OFF(drain_delay_ms),
   0, 3600000, "0", "on SIGTERM, keep accepting this long after /readyz 503"},
  {"drain-s", "ATTND_DRAIN_S", KIND_LONG, OFF(drain_s), 1, 86400, "30",
   "on SIGTERM, finish work within this many seconds, then cancel it (503)"},
  {"max-conns", "ATTND_MAX_CONNS", KIND_INT, OFF(max_conns), 1, 1000000,
   "1000", "simultaneous connections"},
  /* 0 by default: behind a proxy or a Kubernetes Service every client
   * may arrive from the same address. */
  {"max-conns-per-ip", "ATTND_MAX_CONNS_PER_IP", KIND_INT,
   OFF(max_conns_per_ip), 0, 1000000, "0",
   "simultaneous connections from one client address (0 = no limit)"},
  /* libmicrohttpd's memory per connection, up to three quarters of it
   * the read buffer (http.c): more means fewer, larger reads for clients
   * that keep their connections, and a fresh mapping (faulted in,
   * unmapped at the close) for every connection (docs/decisions.md). */
  {"conn-memory-kb", "ATTND_CONN_MEMORY_KB", KIND_INT, OFF(conn_memory_kb),
   32, 4096, "32", "memory per connection, KiB: reads of up to three "
   "quarters of it; 256 suits clients that keep their connections"},
  {"conn-timeout-s", "ATTND_CONN_TIMEOUT_S", KIND_INT, OFF(conn_timeout_s), 0,
   86400, "60", "close idle connections after this many seconds (0 = never)"},
  /* JSON decoding runs on these threads, so they scale with the cores
   * like the workers do. */
  {"http-threads", "ATTND_HTTP_THREADS", KIND_INT, OFF(http_threads), 1, 1024,
   "cores", "HTTP (libmicrohttpd) threads, which also decode requests"},
  {"log", "ATTND_LOG", KIND_LOG, OFF(log_json), 0, 0, "text",
   "log format: text or json"},
  {"access-log", "ATTND_ACCESS_LOG", KIND_INT, OFF(access_log), 0, 1, "1",
   "1: one log line per request; 0: none (errors are still logged)"},
  {"token", "ATTND_TOKEN", KIND_STR, OFF(token), 0, 255, "",
   "require 'Authorization: Bearer TOKEN' on inference and v2 routes "
   "(\"\" = off)"},
  {"token-file", "ATTND_TOKEN_FILE", KIND_STR, OFF(token_file), 0, 255, "",
   "read the bearer token from this file (first line); wins over --token"},
  {"token-protect-metrics", "ATTND_TOKEN_PROTECT_METRICS", KIND_INT,
   OFF(token_metrics), 0, 1, "0",
   "1: /metrics needs the bearer token too (health stays open)"},
  {"tls-cert", "ATTND_TLS_CERT", KIND_STR, OFF(tls_cert), 0, 255, "",
   "serve HTTPS with this PEM certificate (chain) file; needs --tls-key"},
  {"tls-key", "ATTND_TLS_KEY", KIND_STR, OFF(tls_key), 0, 255, "",
   "PEM private key file of --tls-cert"},
  {"unix-socket", "ATTND_UNIX_SOCKET", KIND_STR, OFF(unix_socket), 0, 107, "",
   "also serve the HTTP API on this Unix socket path; a stale socket there "
   "is replaced, and the file is removed at exit", "PATH"},
  /* Owner and group by default: a sidecar shares the pod's user or its
   * fsGroup. */
  {"unix-socket-mode", "ATTND_UNIX_SOCKET_MODE", KIND_MODE,
   OFF(unix_socket_mode), 0, 0777, "0660",
   "permission bits of --unix-socket, in octal"},
  /* Triton's system shared memory extension: off by default, as in
   * Triton since 2.69 (a client then names objects attnd opens). */
  {"allow-client-shm", "ATTND_ALLOW_CLIENT_SHM", KIND_INT,
   OFF(allow_client_shm), 0, 1, "0",
   "1: clients may register shared memory regions (same host only)"},
  {"shm-max-regions", "ATTND_SHM_MAX_REGIONS", KIND_INT,
   OFF(shm_max_regions), 1, 65536, "64",
   "most shared memory regions registered at once"},
  {"shm-max-mb", "ATTND_SHM_MAX_MB", KIND_LONG, OFF(shm_max_mb), 1, 1048576,
   "1024", "total size of the registered shared memory regions, MiB"},
  /* KServe passes the InferenceService's name ({{.Name}}), which clients
   * then use in /v2/models/<name>/infer. */
  {"model-name", "ATTND_MODEL_NAME", KIND_STR, OFF(model_name), 0,
   PROTO_MODEL_NAME_MAX, "attention",
   "serve the dot-product v2 model under this name instead of attention "
   "(additive_attention keeps its own)", "NAME"},
};

#define N_OPTS (sizeof config_opts / sizeof config_opts[0])

/* Parses a whole decimal number in [min, max]; 0 or ATTND_EINVAL. */
static int config_number(const char *s, long min, long max, long *out) {
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < min || v > max)
    return ATTND_EINVAL;
  *out = v;
  return 0;
}

/* Parses whole octal permission bits in [0, max] ("0660", "660"); 0 or
 * ATTND_EINVAL. */
static int config_octal(const char *s, long max, long *out) {
  char *end;
  long v;
  if (*s < '0' || *s > '7')
    return ATTND_EINVAL;
  errno = 0;
  v = strtol(s, &end, 8);
  if (errno || *end != '\0' || v < 0 || v > max)
    return ATTND_EINVAL;
  *out = v;
  return 0;
}

static long config_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : n;
}

/* Stores one value into cfg; on error writes a message naming `who`. */
static int config_set(struct config *cfg, const struct config_opt *o,
                      const char *val, const char *who, FILE *err) {
  char *field = (char *)cfg + o->off;
  unsigned char addr[16];
  long v;

  switch (o->kind) {
  case KIND_HOST:
    if (strlen(val) >= sizeof cfg->host ||
        (inet_pton(AF_INET, val, addr) != 1 &&
         inet_pton(AF_INET6, val, addr) != 1))
      goto bad;
    strcpy(field, val);
    return 0;
  case KIND_LOG:
    if (strcmp(val, "text") && strcmp(val, "json"))
      goto bad;
    *(int *)field = strcmp(val, "json") == 0;
    return 0;
  case KIND_STR:
    if (strlen(val) > (size_t)o->max)
      goto bad;
    strcpy(field, val);
    return 0;
  case KIND_MODE:
    if (config_octal(val, o->max, &v))
      goto bad;
    *(unsigned *)field = (unsigned)v;
    return 0;
  case KIND_INT:
  case KIND_LONG:
    if (strcmp(o->def, "cores") == 0 && strcmp(val, "cores") == 0)
      v = config_cores();
    else if (config_number(val, o->min, o->max, &v))
      goto bad;
    if (o->kind == KIND_INT)
      *(int *)field = (int)v;
    else
      *(long *)field = v;
    return 0;
  }
bad:
  if (o->kind == KIND_INT || o->kind == KIND_LONG)
    fprintf(err, "attnd: %s: invalid value '%s' (expected an integer in "
            "[%ld, %ld])\n", who, val, o->min, o->max);
  else if (o->kind == KIND_LOG)
    fprintf(err, "attnd: %s: invalid value '%s' (expected text or json)\n",
            who, val);
  else if (o->kind == KIND_STR)
    fprintf(err, "attnd: %s: longer than %ld characters\n", who, o->max);
  else if (o->kind == KIND_MODE)
    fprintf(err, "attnd: %s: invalid value '%s' (expected octal permission "
            "bits, 0 to %lo, such as 0660)\n", who, val, o->max);
  else
    fprintf(err, "attnd: %s: invalid value '%s' (expected a numeric IPv4 or "
            "IPv6 address)\n", who, val);
  return ATTND_EINVAL;
}

/* Replaces cfg->token with the first line of cfg->token_file, if set. */
static int config_read_token(struct config *cfg, FILE *err) {
  FILE *f;
  size_t n;
  if (!cfg->token_file[0])
    return 0;
  f = fopen(cfg->token_file, "r");
  if (!f || !fgets(cfg->token, sizeof cfg->token, f)) {
    fprintf(err, "attnd: --token-file: cannot read '%s'\n", cfg->token_file);
    if (f)
      fclose(f);
    return ATTND_EINVAL;
  }
  fclose(f);
  n = strcspn(cfg->token, "\r\n");
  cfg->token[n] = '\0';
  if (n == 0) {
    fprintf(err, "attnd: --token-file: '%s' holds no token\n",
            cfg->token_file);
    return ATTND_EINVAL;
  }
  return 0;
}

/* Rules that involve more than one option. */
static int config_check(const struct config *cfg, FILE *err) {
  char why[PROTO_ERR_MAX];
  if (!cfg->tls_cert[0] != !cfg->tls_key[0]) {
    fprintf(err, "attnd: --tls-cert and --tls-key: give both or neither\n");
    return ATTND_EINVAL;
  }
  /* A thread that no connection could ever reach is a mistake. */
  if (cfg->max_conns < cfg->http_threads) {
    fprintf(err, "attnd: --max-conns: %d is fewer than --http-threads %d\n",
            cfg->max_conns, cfg->http_threads);
    return ATTND_EINVAL;
  }
  if (proto_v2_model_name_check(cfg->model_name, why)) {
    fprintf(err, "attnd: --model-name: %s\n", why);
    return ATTND_EINVAL;
  }
  if (cfg->token_metrics && !cfg->token[0]) {
    fprintf(err, "attnd: --token-protect-metrics: needs --token or "
            "--token-file\n");
    return ATTND_EINVAL;
  }
  return 0;
}

static int config_defaults_and_env(struct config *cfg, FILE *err) {
  char who[64];
  size_t i;
  for (i = 0; i < N_OPTS; i++) {
    const char *env = getenv(config_opts[i].env);
    snprintf(who, sizeof who, "default of --%s", config_opts[i].name);
    if (config_set(cfg, &config_opts[i], config_opts[i].def, who, err))
      return ATTND_EINVAL;
    if (env && config_set(cfg, &config_opts[i], env, config_opts[i].env, err))
      return ATTND_EINVAL;
  }
  return 0;
}

/* Help columns: option names from column 2, their text from column 25,
 * wrapped at CONFIG_HELP_WIDTH.  A name too long to leave two spaces
 * before column 25 has its text start on the next line. */
#define CONFIG_HELP_WIDTH 100
#define CONFIG_HELP_NAME 22

/* Writes one option: its name, then text wrapped at word boundaries. */
static void config_usage_item(FILE *out, const char *name, const char *text) {
  int col;
  int indent = CONFIG_HELP_NAME + 3;
  if (strlen(name) > CONFIG_HELP_NAME - 1)
    fprintf(out, "  %s\n", name);
  col = fprintf(out, "  %-*s", CONFIG_HELP_NAME,
                strlen(name) > CONFIG_HELP_NAME - 1 ? "" : name);
  while (*text) {
    size_t word = strcspn(text, " ");
    if (col + 1 + (int)word > CONFIG_HELP_WIDTH && col > indent) {
      fprintf(out, "\n%*s", indent - 1, "");
      col = indent - 1;
    }
    col += fprintf(out, " %.*s", (int)word, text);
    text += word;
    while (*text == ' ')
      text++;
  }
  fputc('\n', out);
}

void config_usage(FILE *out) {
  size_t i;
  char line[160];
  fprintf(out,
          "usage: attnd [options]\n"
          "attnd serves masked scaled-dot-product attention over HTTP.\n"
          "Every option can also be set by its environment variable; the\n"
          "flag wins.\n\n");
  for (i = 0; i < N_OPTS; i++) {
    const struct config_opt *o = &config_opts[i];
    const char *arg = o->arg                ? o->arg
                      : o->kind == KIND_HOST ? "ADDR"
                      : o->kind == KIND_STR  ? "STR"
                      : o->kind == KIND_LOG  ? "FMT"
                      : o->kind == KIND_MODE ? "MODE"
                                             : "N";
    char flag[48];
    snprintf(flag, sizeof flag, "--%s %s", o->name, arg);
    config_usage_item(out, flag, o->help);
    snprintf(line, sizeof line, "default %s, env %s",
             o->def[0] ? o->def : "none", o->env);
    config_usage_item(out, "", line);
  }
  config_usage_item(out, "--probe",
                    "GET /healthz of the attnd at --host/--port (https "
                    "with --tls-cert); exit 0 if healthy");
  config_usage_item(out, "--help", "print this and exit");
  config_usage_item(out, "--version", "print the versions (attnd, its libraries) and exit");
}

/* --version: attnd's own, then the libraries it runs with, as each
 * reports itself at run time (Debian 12 and 13 ship different ones),
 * then the core's matrix-product kernels on this CPU per precision, with
 * AMX's permission asked for as attnd asks at start. */
static void config_print_version(FILE *out) {
  char why[160];
  int amx = amx_request(why, sizeof why);
  fprintf(out, "attnd %s\n", ATTND_VERSION);
  fprintf(out, "libmicrohttpd %s, libuv %s, cJSON %s\n", MHD_get_version(),
          uv_version_string(), cJSON_Version());
  fprintf(out, "%s\n", openblas_get_config());
  fprintf(out, "kernels: fp32 %s, bf16 %s\n",
          attn_kernel_name(ATTN_PRECISION_FP32, amx),
          attn_kernel_name(ATTN_PRECISION_BF16, amx));
}

int config_parse(struct config *cfg, int argc, char **argv, FILE *out,
                 FILE *err) {
  struct option longopts[N_OPTS + 4];
  int probe = 0;
  char who[64];
  size_t i;
  int c, idx;

  memset(cfg, 0, sizeof *cfg);
  if (config_defaults_and_env(cfg, err))
    return ATTND_EINVAL;
  for (i = 0; i < N_OPTS; i++)
    longopts[i] = (struct option){config_opts[i].name, required_argument,
                                  NULL, (int)i};
  longopts[N_OPTS] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[N_OPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
  longopts[N_OPTS + 2] = (struct option){"probe", no_argument, NULL, 'P'};
  longopts[N_OPTS + 3] = (struct option){NULL, 0, NULL, 0};
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "hV", longopts, &idx)) != -1) {
    if (c == 'h') {
      config_usage(out);
      return CONFIG_EXIT;
    }
    if (c == 'V') {
      config_print_version(out);
      return CONFIG_EXIT;
    }
    if (c == 'P') {
      probe = 1;
      continue;
    }
    if (c < 0 || (size_t)c >= N_OPTS) {
      fprintf(err, "attnd: unknown option or missing value: '%s' (see "
              "--help)\n", argv[optind - 1]);
      return ATTND_EINVAL;
    }
    snprintf(who, sizeof who, "--%s", config_opts[c].name);
    if (config_set(cfg, &config_opts[c], optarg, who, err))
      return ATTND_EINVAL;
  }
  if (optind < argc) {
    fprintf(err, "attnd: unexpected argument '%s' (see --help)\n",
            argv[optind]);
    return ATTND_EINVAL;
  }
  if (config_read_token(cfg, err) || config_check(cfg, err))
    return ATTND_EINVAL;
  cfg->probe = probe;
  return probe ? CONFIG_PROBE : CONFIG_RUN;
}
