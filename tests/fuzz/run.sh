#!/bin/sh
# Runs every libFuzzer harness in build/fuzz for FUZZ_SECONDS seconds
# (default 60) on a scratch copy of its seed corpus tests/fuzz/corpus/<name>
# (the committed seeds are never rewritten).  A crash, leak, sanitizer
# report or invariant failure stops that harness; its input is saved as
# build/fuzz/artifacts/<name>/crash-* and the run fails.  Prints, per
# harness, the executions run and the corpus it ended with.
#   FUZZ_SECONDS=N sh tests/fuzz/run.sh [harness...]
# Build first with `make fuzz-build` (`make fuzz` does both).  Exits 77
# with a message, skipping, only when clang is not installed at all.
set -u
cd "$(dirname "$0")/../.."

secs=${FUZZ_SECONDS:-60}
dir=build/fuzz
if [ $# -gt 0 ]; then names="$*"; else
  names=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/||; s|\.c$||'); fi

if ! command -v "${FUZZ_CC:-clang}" >/dev/null 2>&1 && [ ! -x "$dir/fuzz_v1" ]; then
  echo "fuzz: SKIPPED - clang is not installed (sh tests/deps.sh installs it)"
  exit 77
fi

fail=0
for n in $names; do
  bin=$dir/$n
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (make fuzz-build)"
    fail=1
    continue
  fi
  work=$dir/work/$n
  art=$dir/artifacts/$n
  rm -rf "$work"
  mkdir -p "$work" "$art"
  [ -d "tests/fuzz/corpus/$n" ] && cp tests/fuzz/corpus/"$n"/* "$work"/ 2>/dev/null
  log=$dir/$n.log
  # One worker, so that a loaded 2-core machine keeps up; -timeout and
  # -rss_limit_mb make a slow or greedy input a finding too.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$art/" "$work" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corp=$(ls "$work" | wc -l)
  if [ "$rc" = 0 ]; then
    echo "fuzz: $n ok: ${runs:-?} executions in ${secs} s, corpus $corp"
  else
    echo "fuzz: $n FAILED (exit $rc) after ${runs:-?} executions; log $log:"
    grep -E "ERROR|invariant|SUMMARY|runtime error|Test unit written" "$log" | head -20
    fail=1
  fi
done
exit $fail
