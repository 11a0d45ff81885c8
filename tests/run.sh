#!/bin/sh
# Runs every attnd test: the check unit suites in build/tests, then the
# integration suites that start the real build/attnd.  Prints one closing
# line "N passed, N failed" over all suites and exits non-zero on a failure.
# ATTND_VALGRIND=1 runs the unit tests and the daemon under valgrind.
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
count() {  # count SUITE STATUS
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAILED: $1"; fi
}

VG=""
if [ "${ATTND_VALGRIND:-0}" = 1 ]; then
  VG="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect"
  export CK_FORK=no
fi

for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  # shellcheck disable=SC2086
  CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} $VG "$t"
  count "$t" $?
done

for t in tests/integration/test_*.py; do
  [ -f "$t" ] || continue
  echo "== $t"
  python3 "$t"
  count "$t" $?
done

# libFuzzer harnesses, a few seconds each (make fuzz runs them longer).
# ASan builds: not under valgrind.  Exit 77: clang is not installed.
if [ "${ATTND_VALGRIND:-0}" = 1 ]; then
  echo "== tests/fuzz: skipped under valgrind (the harnesses are ASan builds)"
else
  echo "== tests/fuzz"
  FUZZ_SECONDS=${FUZZ_SECONDS:-3} sh tests/fuzz/run.sh
  rc=$?
  [ "$rc" = 77 ] || count tests/fuzz "$rc"
fi

echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
