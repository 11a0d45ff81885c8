/* support_skip.h - a unit test that cannot run on this machine.
 *
 * support_skip(test, fmt, ...) writes "<suite>: skipped <test>: <reason>"
 * on standard output, the line the Python suites write for theirs, which
 * tests/run.sh counts as skipped (and not as passed) in its closing line.
 * The test then returns without asserting anything more. */
#ifndef ATTND_TESTS_SUPPORT_SKIP_H
#define ATTND_TESTS_SUPPORT_SKIP_H

void support_skip(const char *test, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
