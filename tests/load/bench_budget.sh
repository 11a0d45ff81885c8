#!/bin/sh
# bench_budget.sh - what attnd adds to the attention for a same-host client
# (make budget-bench, and the last part of make bench).  A benchmark, not a
# test: it prints figures.
#
# budget.py (run by Debian's python3, which has python3-numpy) starts
# build/attnd on loopback TCP and a Unix socket, with client shared memory
# allowed, and compares attnd's CPU per request (every
# thread, from /proc) with the in-process core's CPU per call on one thread
# (core_rate.c) for the same problem: Triton system shared memory, v2
# binary over TCP and over the Unix socket, small and large.
#
# Knobs: BUDGET_ROUNDS (5): rounds alternating the paths; the best of them
# (see budget.py for why), and the ratio of the medians beside it.
# BUDGET_PATHS: a comma-separated subset of the paths ("shm small,tcp small").
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/load/lib.sh"

load_need python3-numpy
[ -x "$ROOT/build/attnd" ] && [ -f "$ROOT/build/libattnd.a" ] ||
  make -C "$ROOT" --no-print-directory all
cp "$ROOT/build/attnd" "$LOAD_TMP/attnd"
cc -std=c11 -D_GNU_SOURCE -O2 -I"$ROOT" -o "$LOAD_TMP/core_rate" \
  "$LOAD_DIR/core_rate.c" "$ROOT/build/libattnd.a" \
  $(pkg-config --libs openblas) -lpthread -lm
/usr/bin/python3 "$LOAD_DIR/budget.py" "$LOAD_TMP/attnd" "$LOAD_TMP/core_rate" \
  "${BUDGET_ROUNDS:-5}"
