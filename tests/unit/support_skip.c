/* support_skip.c - see support_skip.h. */
#include "support_skip.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void support_skip(const char *test, const char *fmt, ...) {
  va_list ap;
  printf("%s: skipped %s: ", program_invocation_short_name, test);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}
