/* support_suite.c - see support_suite.h. */
#include "support_suite.h"

#include <stdlib.h>

int support_run(const char *suite, const support_case *cases, size_t n) {
  Suite *s = suite_create(suite);
  for (size_t c = 0; c < n; c++) {
    TCase *tc = tcase_create(cases[c].name);
    tcase_set_timeout(tc, 120);
    for (int t = 0; cases[c].tests[t]; t++)
      tcase_add_test(tc, cases[c].tests[t]);
    suite_add_tcase(s, tc);
  }
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
