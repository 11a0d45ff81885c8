/* procself.c - process resources from /proc (see procself.h).
 *
 * The layout of /proc/self/stat and /proc/stat is proc(5)'s: in stat,
 * fields after the command name (which may hold spaces and parentheses,
 * so parsing starts after its last ')') are numbered from 3; utime (14)
 * and stime (15) and starttime (22) are in clock ticks, starttime counted
 * from boot; vsize (23) is in bytes, rss (24) in pages.  /proc/stat's
 * btime is the boot time in seconds since the epoch.
 */
#include "server/obs/procself.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Reads up to cap - 1 bytes of path into buf, NUL-terminated; the
 * length, or -1. */
static long procself_slurp(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  size_t len = 0;
  ssize_t n;
  if (fd < 0)
    return -1;
  while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
    len += (size_t)n;
  close(fd);
  buf[len] = '\0';
  return (long)len;
}

/* /proc/stat's btime, or -1.  The file can be long (an "intr" line of
 * one count per interrupt), so it is scanned a piece at a time, keeping
 * a piece's tail for a line cut between two reads. */
static double procself_boot_time(void) {
  enum { KEEP = 64 };
  char buf[4096 + 1];
  size_t have = 0;
  double bt = -1;
  ssize_t n;
  int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  while ((n = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
    char *p;
    have += (size_t)n;
    buf[have] = '\0';
    p = strncmp(buf, "btime ", 6) == 0 ? buf : strstr(buf, "\nbtime ");
    if (p && strchr(p + 1, '\n')) {
      bt = strtod(p + (*p == '\n' ? 7 : 6), NULL);
      break;
    }
    if (p) {  /* the line goes on in the next read: keep it whole */
      have = (size_t)(buf + have - p);
      memmove(buf, p, have);
    } else if (have > KEEP) {
      memmove(buf, buf + have - KEEP, KEEP);
      have = KEEP;
    }
    if (have >= sizeof buf - 1)
      break;
  }
  close(fd);
  return bt;
}

static void procself_stat(struct procself *p) {
  char buf[1024], *s, *end;
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  unsigned long long f[25] = {0};
  double bt;
  if (procself_slurp("/proc/self/stat", buf, sizeof buf) <= 0 ||
      !(s = strrchr(buf, ')')) || tick <= 0 || page <= 0)
    return;
  s++;
  /* Field 3 is the one-letter state, then numbers; some may be negative
   * (priority, nice) but none of those read here. */
  while (*s == ' ')
    s++;
  if (!*s)
    return;
  s++;
  for (int i = 4; i <= 24; i++) {
    f[i] = strtoull(s, &end, 10);
    if (end == s)
      return;
    s = end;
  }
  p->cpu_seconds = (double)(f[14] + f[15]) / (double)tick;
  p->vm_bytes = (double)f[23];
  p->rss_bytes = (double)f[24] * (double)page;
  if ((bt = procself_boot_time()) >= 0)
    p->start_time_seconds = bt + (double)f[22] / (double)tick;
}

/* Entries in /proc/self/fd, less the descriptor reading it. */
static void procself_fds(struct procself *p) {
  char buf[4096] __attribute__((aligned(8)));
  int fd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  long count = 0;
  ssize_t n;
  if (fd < 0)
    return;
  while ((n = getdents64(fd, buf, sizeof buf)) > 0)
    for (ssize_t off = 0; off < n;) {
      struct dirent64 *d = (struct dirent64 *)(buf + off);
      if (d->d_name[0] != '.')
        count++;
      off += d->d_reclen;
    }
  close(fd);
  if (n == 0)
    p->open_fds = (double)(count - 1);
}

void procself_read(struct procself *p) {
  struct rlimit rl;
  p->rss_bytes = p->vm_bytes = p->cpu_seconds = -1;
  p->start_time_seconds = p->open_fds = p->max_fds = -1;
  procself_stat(p);
  procself_fds(p);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    p->max_fds = (double)rl.rlim_cur;
}
