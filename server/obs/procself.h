/* procself.h - this process's resources, read from /proc at scrape time.
 *
 * What every Prometheus client library exports as process_*: resident
 * and virtual memory, CPU time, open and allowed file descriptors, start
 * time.  Linux only (/proc/self/stat, /proc/self/fd, /proc/stat).  Reads
 * with open(2)/read(2) into stack buffers: no allocation, no lock, safe
 * from any thread.
 */
#ifndef ATTND_PROCSELF_H
#define ATTND_PROCSELF_H

/* Each value is < 0 when it could not be read. */
struct procself {
  double rss_bytes;          /* resident set size */
  double vm_bytes;           /* virtual memory size */
  double cpu_seconds;        /* user + system CPU time, all threads */
  double start_time_seconds; /* since the Unix epoch */
  double open_fds;           /* not counting the one used to count */
  double max_fds;            /* the soft RLIMIT_NOFILE */
};

/* Fills *p; the values that cannot be read are set to -1. */
void procself_read(struct procself *p);

#endif /* ATTND_PROCSELF_H */
