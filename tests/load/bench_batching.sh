#!/bin/sh
# bench_batching.sh - attnd's three ways of running a tiny /v1/attention
# request (1x1x16x16x32 with weights) under wrk, at 1 and 64 connections:
#   on      queued and batched (--inline-us 0, default --max-batch)
#   off     queued, one request per batch (--inline-us 0 --max-batch 1)
#   inline  the default: a request this cheap runs on its HTTP thread
# and prints requests/s and latency percentiles side by side and the
# ratios.  A benchmark, not a test.
#
#   sh tests/load/bench_batching.sh            (or: make http-bench)
#
# Knobs (environment): BENCH_SECONDS (5) per run, BENCH_ROUNDS (3): the
# on/off runs alternate, round after round, and the table shows each
# figure's median, so that a noisy neighbour hurts both sides alike.
# The servers run for the whole benchmark on their own loopback ports,
# with the default --workers (cores) and no access log (as the peers of
# bench_http.sh); only one is loaded at a time.
# Besides wrk's figures, the CPU time attnd itself used per request (from
# /proc) is shown: it is what batching saves, and it is far less at the
# mercy of other processes on the machine than requests/s.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/load/lib.sh"

SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}

load_need wrk curl
[ -x "$ROOT/build/attnd" ] || make -C "$ROOT" --no-print-directory all
load_bodies
load_attnd on --inline-us 0 --access-log 0
load_attnd off --inline-us 0 --max-batch 1 --access-log 0
load_attnd inline --access-log 0
BODY="$LOAD_TMP/bodies/tiny.json"

echo "batching benchmark: $ROUNDS rounds x ${SECS}s, tiny JSON, $(nproc) cores" >&2
for c in 1 64; do
  # A short warm-up of each server at this concurrency.
  load_wrk warm $c 1 "$ATTND_URL_on" post.lua LOAD_BODY="$BODY" 2>/dev/null
  load_wrk warm $c 1 "$ATTND_URL_off" post.lua LOAD_BODY="$BODY" 2>/dev/null
  load_wrk warm $c 1 "$ATTND_URL_inline" post.lua LOAD_BODY="$BODY" 2>/dev/null
done
before_on=$(curl -s "$ATTND_URL_on/metrics")
r=1
while [ $r -le "$ROUNDS" ]; do
  for c in 1 64; do
    for side in on off inline; do
      eval "url=\$ATTND_URL_$side pid=\$ATTND_PID_$side"
      load_wrk_cpu "$pid" $side $c "$SECS" "$url" post.lua LOAD_BODY="$BODY"
    done
  done
  r=$((r + 1))
done
after_on=$(curl -s "$ATTND_URL_on/metrics")
after_off=$(curl -s "$ATTND_URL_off/metrics")
printf '%s\n' "$before_on" >"$LOAD_TMP/metrics_on_before"
printf '%s\n' "$after_on" >"$LOAD_TMP/metrics_on_after"
printf '%s\n' "$after_off" >"$LOAD_TMP/metrics_off_after"
python3 "$LOAD_DIR/report.py" batching "$LOAD_TMP"
