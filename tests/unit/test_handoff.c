/* test_handoff.c - which libmicrohttpd thread serves a connection, with
 * the real library.
 *
 * attnd's accept thread picks a lane for each connection and gives it to
 * that lane's daemon, one daemon of one thread per lane (handoff.h).
 * Here real daemons, started as attnd starts them (HANDOFF_MHD_FLAGS,
 * handoff_daemon_options), and a real acceptor serve real loopback
 * clients; the request handler answers with the number of the thread it
 * runs on (in the order threads were first seen), and the hand-off
 * records the lane it gave each client (by its port).  Every connection
 * of a lane must be served by one thread, for all its requests, and
 * different lanes by different threads.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/conn/acceptor.h"
#include "server/conn/handoff.h"
#include "server/conn/net.h"

#define MAX_CLIENTS 64
#define MAX_THREADS 8

struct rig {
  struct MHD_Daemon *d[MAX_THREADS];  /* one per lane */
  struct lane_ref {
    struct rig *r;
    unsigned lane;
  } ref[MAX_THREADS];
  struct acceptor *a;
  unsigned threads;
  pthread_mutex_t mu;
  pthread_t seen[MAX_THREADS];  /* the threads the handler ran on */
  int nseen;
  int port_lane[65536];         /* client port -> lane, -1 unknown */
  int unix_lanes;               /* Unix clients handed over */
  int logged;                   /* libmicrohttpd messages */
  char last_log[256];
};

/* The number of the calling thread among those seen. */
static int thread_number(struct rig *r) {
  pthread_t self = pthread_self();
  int i;
  pthread_mutex_lock(&r->mu);
  for (i = 0; i < r->nseen; i++)
    if (pthread_equal(r->seen[i], self))
      break;
  if (i == r->nseen) {
    ck_assert_int_lt(r->nseen, MAX_THREADS);
    r->seen[r->nseen++] = self;
  }
  pthread_mutex_unlock(&r->mu);
  return i;
}

static enum MHD_Result serve(void *cls, struct MHD_Connection *c,
                             const char *url, const char *method,
                             const char *version, const char *upload,
                             size_t *upload_size, void **con_cls) {
  static int first_call;
  struct rig *r = cls;
  struct MHD_Response *resp;
  enum MHD_Result ret;
  char body[16];
  int n;
  (void)url, (void)method, (void)version, (void)upload, (void)upload_size;
  if (*con_cls == NULL) { /* headers only: answer on the next call */
    *con_cls = &first_call;
    return MHD_YES;
  }
  n = snprintf(body, sizeof body, "%d", thread_number(r));
  resp = MHD_create_response_from_buffer((size_t)n, body,
                                         MHD_RESPMEM_MUST_COPY);
  ret = MHD_queue_response(c, 200, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* As attnd's HTTP layer reports to the acceptor (http.c): cls names the
 * lane. */
static void notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                   enum MHD_ConnectionNotificationCode toe) {
  struct lane_ref *l = cls;
  const union MHD_ConnectionInfo *i;
  (void)socket_ctx;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    acceptor_started(l->r->a);
    acceptor_served(l->r->a);
  } else {
    i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    acceptor_closed(l->r->a, l->lane, 1, i ? i->client_addr : NULL);
  }
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  struct rig *r = cls;
  pthread_mutex_lock(&r->mu);
  r->logged++;
  vsnprintf(r->last_log, sizeof r->last_log, fmt, ap);
  pthread_mutex_unlock(&r->mu);
}

static int hand(void *arg, int fd, const struct sockaddr *sa, socklen_t len,
                unsigned lane) {
  struct rig *r = arg;
  pthread_mutex_lock(&r->mu);
  if (sa->sa_family == AF_INET)
    r->port_lane[net_port(sa)] = (int)lane;
  else
    r->unix_lanes++;
  pthread_mutex_unlock(&r->mu);
  return handoff_add(r->d[lane], fd, sa, len);
}

/* A daemon for each of threads lanes, started as attnd starts its own,
 * and an acceptor of as many lanes handing connections to them, at most
 * per_ip (0: any number) from one address. */
static struct rig *rig_start(unsigned threads, unsigned per_ip,
                             const char *unix_path) {
  struct rig *r = calloc(1, sizeof *r);
  struct MHD_OptionItem limit[2];
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr("127.0.0.1", 0, &ss, NULL);
  ck_assert_ptr_nonnull(r);
  ck_assert_uint_le(threads, MAX_THREADS);
  r->threads = threads;
  pthread_mutex_init(&r->mu, NULL);
  memset(r->port_lane, -1, sizeof r->port_lane);
  handoff_daemon_options(100, limit);
  r->a = acceptor_listen((struct sockaddr *)&ss, len, threads);
  ck_assert_ptr_nonnull(r->a);
  if (unix_path)
    ck_assert_int_eq(acceptor_listen_unix(r->a, unix_path, 0600), 0);
  ck_assert_int_eq(acceptor_limit_per_address(r->a, per_ip), 0);
  for (unsigned i = 0; i < threads; i++) {
    r->ref[i] = (struct lane_ref){r, i};
    r->d[i] = MHD_start_daemon(HANDOFF_MHD_FLAGS, 0, NULL, NULL, serve, r,
                               MHD_OPTION_EXTERNAL_LOGGER, mhd_log, r,
                               MHD_OPTION_ARRAY, limit,
                               MHD_OPTION_NOTIFY_CONNECTION, notify,
                               &r->ref[i], MHD_OPTION_END);
    ck_assert_ptr_nonnull(r->d[i]);
  }
  ck_assert_int_eq(acceptor_run(r->a, 100, hand, NULL, r), 0);
  return r;
}

static void rig_stop(struct rig *r) {
  acceptor_quiesce(r->a);
  for (unsigned i = 0; i < r->threads; i++)
    MHD_stop_daemon(r->d[i]);
  acceptor_stop(r->a);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* Sends a GET on c and returns the number in the answer's body. */
static int ask(int c) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  char buf[1024], *body;
  size_t got = 0;
  ck_assert_int_eq(send(c, req, sizeof req - 1, MSG_NOSIGNAL),
                   (ssize_t)(sizeof req - 1));
  for (;;) {
    ssize_t n = recv(c, buf + got, sizeof buf - 1 - got, 0);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
    buf[got] = '\0';
    body = strstr(buf, "\r\n\r\n");
    /* the body is one or two digits; the header says how many */
    if (body) {
      const char *cl = strstr(buf, "Content-Length: ");
      ck_assert_ptr_nonnull(cl);
      if (strlen(body + 4) >= (size_t)atoi(cl + 16))
        return atoi(body + 4);
    }
  }
}

static int tcp_client(int port) {
  struct sockaddr_storage ss;
  socklen_t len = net_sockaddr("127.0.0.1", port, &ss, NULL);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_eq(connect(c, (struct sockaddr *)&ss, len), 0);
  return c;
}

static int local_port(int c) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  ck_assert_int_eq(getsockname(c, (struct sockaddr *)&ss, &len), 0);
  return net_port((struct sockaddr *)&ss);
}

/* Opens n connections at once (the acceptor deals them out over the
 * lanes: see test_acceptor), asks twice on each, and checks that lanes
 * and threads correspond one to one. */
static void lanes_are_threads(unsigned threads, int n) {
  struct rig *r = rig_start(threads, 0, NULL);
  int c[MAX_CLIENTS], thread_of_lane[MAX_THREADS], lane_of_thread[MAX_THREADS];
  int lanes_used = 0;
  ck_assert_int_le(n, MAX_CLIENTS);
  for (unsigned i = 0; i < MAX_THREADS; i++)
    thread_of_lane[i] = lane_of_thread[i] = -1;
  for (int i = 0; i < n; i++)
    c[i] = tcp_client(acceptor_port(r->a));
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < n; i++) {
      int t = ask(c[i]), lane;
      pthread_mutex_lock(&r->mu);
      lane = r->port_lane[local_port(c[i])];
      pthread_mutex_unlock(&r->mu);
      ck_assert_int_ge(lane, 0);
      ck_assert_int_lt(lane, (int)threads);
      if (thread_of_lane[lane] < 0) {
        /* a thread serves one lane only */
        ck_assert_msg(lane_of_thread[t] < 0,
                      "thread %d serves lanes %d and %d", t,
                      lane_of_thread[t], lane);
        thread_of_lane[lane] = t;
        lane_of_thread[t] = lane;
        lanes_used++;
      }
      ck_assert_msg(thread_of_lane[lane] == t,
                    "lane %d: served by thread %d and thread %d", lane,
                    thread_of_lane[lane], t);
    }
  }
  ck_assert_int_eq(lanes_used, (int)threads);
  ck_assert_int_eq(r->nseen, (int)threads);
  for (int i = 0; i < n; i++)
    close(c[i]);
  rig_stop(r);
}

START_TEST(each_lane_is_served_by_its_own_thread_of_4) {
  /* 64 / 4 = 16 stay on the lane of the clients' CPU, then the others
   * take turns: 40 reach all four lanes */
  lanes_are_threads(4, 40);
}
END_TEST

START_TEST(each_lane_is_served_by_its_own_thread_of_2) {
  /* 64 / 2 = 32 on the first lane, the rest on the other */
  lanes_are_threads(2, 40);
}
END_TEST

START_TEST(one_http_thread_serves_all_without_a_warning) {
  struct rig *r = rig_start(1, 0, NULL);
  int c[3];
  for (int i = 0; i < 3; i++)
    c[i] = tcp_client(acceptor_port(r->a));
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(ask(c[i]), 0);
  ck_assert_int_eq(r->nseen, 1);
  /* started as attnd starts it, libmicrohttpd has nothing to say */
  ck_assert_msg(r->logged == 0, "libmicrohttpd said: %s", r->last_log);
  for (int i = 0; i < 3; i++)
    close(c[i]);
  rig_stop(r);
}
END_TEST

/* A Unix client bound to a path of 13 bytes has an address as long as
 * an IPv4 one; two such paths agree in the bytes libmicrohttpd would
 * read as the IPv4 address. */
static int bound_unix_client(const char *server, const char *self) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                              strlen(self) + 1);
  ck_assert_uint_eq(len, sizeof(struct sockaddr_in));
  snprintf(a.sun_path, sizeof a.sun_path, "%s", self);
  unlink(self);
  ck_assert_int_eq(bind(c, (struct sockaddr *)&a, len), 0);
  snprintf(a.sun_path, sizeof a.sun_path, "%s", server);
  ck_assert_int_eq(connect(c, (struct sockaddr *)&a, sizeof a), 0);
  return c;
}

START_TEST(unix_clients_are_not_taken_for_ip_addresses) {
  char path[64], self[2][32]; /* self: 13 bytes, checked when bound */
  struct rig *r;
  int c[2];
  snprintf(path, sizeof path, "/tmp/attnd-handoff-%d.sock", (int)getpid());
  unlink(path);
  /* one connection per address: two Unix clients would be one "IPv4
   * address" if their addresses were read as such */
  r = rig_start(2, 1, path);
  for (int i = 0; i < 2; i++) {
    snprintf(self[i], sizeof self[i], "/tmp/ahx%04d%d", (int)getpid() % 10000,
             i);
    c[i] = bound_unix_client(path, self[i]);
  }
  for (int i = 0; i < 2; i++) {
    int t = ask(c[i]);
    ck_assert_int_ge(t, 0);
    ck_assert_int_lt(t, 2);
  }
  ck_assert_int_eq(r->unix_lanes, 2);
  for (int i = 0; i < 2; i++) {
    close(c[i]);
    unlink(self[i]);
  }
  rig_stop(r);
}
END_TEST

static Suite *handoff_suite(void) {
  Suite *s = suite_create("handoff");
  TCase *tc = tcase_create("libmicrohttpd");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, each_lane_is_served_by_its_own_thread_of_4);
  tcase_add_test(tc, each_lane_is_served_by_its_own_thread_of_2);
  tcase_add_test(tc, one_http_thread_serves_all_without_a_warning);
  tcase_add_test(tc, unix_clients_are_not_taken_for_ip_addresses);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(handoff_suite());
  int failed;
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
