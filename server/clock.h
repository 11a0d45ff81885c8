/* clock.h - the one monotonic clock the server measures with.
 *
 * Header-only; safe from any thread.  Every latency, deadline and age in
 * server/ is a uint64_t count of nanoseconds from clock_now_ns(), so that
 * values taken on different threads compare directly.
 */
#ifndef ATTND_CLOCK_H
#define ATTND_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC; never fails on Linux. */
static inline uint64_t clock_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* ATTND_CLOCK_H */
