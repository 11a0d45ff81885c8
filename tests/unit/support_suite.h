/* support_suite.h - a check suite built from a table of test cases, and
 * run.
 *
 * support_run(suite, cases, n) builds the suite named suite with a TCase
 * for each of the n cases (its tests up to the first NULL, each with a
 * 120 s timeout, long enough under valgrind), runs it with CK_NORMAL
 * output and returns the exit status for main: EXIT_FAILURE when a test
 * failed, else EXIT_SUCCESS. */
#ifndef ATTND_TESTS_SUPPORT_SUITE_H
#define ATTND_TESTS_SUPPORT_SUITE_H

#include <check.h>
#include <stddef.h>

typedef struct support_case {
  const char *name;
  const TTest *tests[24];
} support_case;

int support_run(const char *suite, const support_case *cases, size_t n);

#endif
