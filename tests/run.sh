#!/bin/sh
# Runs every attnd test: the check unit suites in build/tests, then the
# integration suites that start the real build/attnd, then the fuzzers for
# a few seconds.  Each suite prints its own closing line; at the end come
# the tests that could not run here, each with its reason, and two closing
# lines: "suites: N passed, N failed" over suites, and last
# "tests: N passed, N failed, N skipped" over single tests.  A test that
# cannot run where it runs (no IPv6, no AVX-512, no capability) says so
# ("<suite>: skipped <test>: <reason>") and counts as skipped, never as
# passed.  Exits non-zero on a failure.
# ATTND_VALGRIND=1 runs the unit tests and the daemon under valgrind.
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
t_passed=0
t_failed=0
t_skipped=0
SKIPS=$(mktemp /tmp/attnd-skips.XXXXXX)
OUT=$(mktemp /tmp/attnd-suite.XXXXXX)
RC=$(mktemp /tmp/attnd-rc.XXXXXX)
trap 'rm -f "$SKIPS" "$OUT" "$RC"' EXIT

# run CMD...: runs it with its output shown as it comes and kept in $OUT;
# sets rc to its exit status.
run() {
  { "$@"; echo $? >"$RC"; } 2>&1 | tee "$OUT"
  rc=$(cat "$RC")
}

count() {  # count SUITE STATUS
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAILED: $1"; fi
}

# skips NAME: the "NAME: skipped ..." lines of the suite's output, kept
# for the end; prints how many.
skips() {
  grep "^$1: skipped " "$OUT" | tee -a "$SKIPS" | wc -l
}

# A check suite: "N%: Checks: C, Failures: F, Errors: E".  A suite that
# died before its summary counts as one failed test.
count_check() {  # count_check NAME STATUS
  _sum=$(grep -E '^[0-9]+%: Checks: ' "$OUT" | tail -n 1)
  _s=$(skips "$1")
  if [ -z "$_sum" ]; then
    t_failed=$((t_failed + 1))
    return
  fi
  _c=$(echo "$_sum" | sed 's/.*Checks: \([0-9]*\).*/\1/')
  _f=$(echo "$_sum" | sed 's/.*Failures: \([0-9]*\).*/\1/')
  _e=$(echo "$_sum" | sed 's/.*Errors: \([0-9]*\).*/\1/')
  t_failed=$((t_failed + _f + _e))
  t_skipped=$((t_skipped + _s))
  t_passed=$((t_passed + _c - _f - _e - _s))
}

# A Python suite: "NAME: N passed, N failed[, N skipped]" (harness.main).
count_py() {  # count_py NAME STATUS
  _sum=$(grep -E "^$1: [0-9]+ passed, [0-9]+ failed" "$OUT" | tail -n 1)
  skips "$1" >/dev/null
  if [ -z "$_sum" ]; then
    t_failed=$((t_failed + 1))
    return
  fi
  _p=$(echo "$_sum" | sed 's/.*: \([0-9]*\) passed.*/\1/')
  _f=$(echo "$_sum" | sed 's/.* \([0-9]*\) failed.*/\1/')
  _s=$(echo "$_sum" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
  t_passed=$((t_passed + _p))
  t_failed=$((t_failed + _f))
  t_skipped=$((t_skipped + ${_s:-0}))
}

export CK_DEFAULT_TIMEOUT="${CK_DEFAULT_TIMEOUT:-120}"
export FUZZ_SECONDS="${FUZZ_SECONDS:-3}"
VG=""
if [ "${ATTND_VALGRIND:-0}" = 1 ]; then
  VG="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect"
  export CK_FORK=no
fi

for t in build/tests/test_*; do
  [ -x "$t" ] || continue
  echo "== $t"
  # shellcheck disable=SC2086
  run $VG "$t"
  count "$t" $rc
  count_check "$(basename "$t")" $rc
done

for t in tests/structure/test_*.py tests/integration/test_*.py; do
  [ -f "$t" ] || continue
  echo "== $t"
  run python3 "$t"
  count "$t" $rc
  count_py "$(basename "$t" .py)" $rc
done

# libFuzzer harnesses, a few seconds each (make fuzz runs them longer).
# ASan builds: not under valgrind.  Exit 77: clang is not installed.
if [ "${ATTND_VALGRIND:-0}" = 1 ]; then
  echo "== tests/fuzz"
  echo "fuzz: skipped harnesses: under valgrind (they are ASan builds)" | tee -a "$SKIPS"
  t_skipped=$((t_skipped + 1))
else
  echo "== tests/fuzz"
  run sh tests/fuzz/run.sh
  if [ "$rc" = 77 ]; then
    echo "fuzz: skipped harnesses: clang is not installed" | tee -a "$SKIPS"
    t_skipped=$((t_skipped + 1))
  else
    count tests/fuzz "$rc"
    t_passed=$((t_passed + $(grep -c '^fuzz: .* ok: ' "$OUT")))
    t_failed=$((t_failed + $(grep -c '^fuzz: .* FAILED\|^fuzz: .* is missing' "$OUT")))
  fi
fi

if [ -s "$SKIPS" ]; then
  echo "skipped here, with their reasons:"
  sed 's/^/  /' "$SKIPS"
fi
echo "suites: $passed passed, $failed failed"
echo "tests: $t_passed passed, $t_failed failed, $t_skipped skipped"
[ "$failed" = 0 ]
