#!/bin/sh
# soak.sh - saturate a real build/attnd with valid mixed requests for a
# long time and check that it neither leaks nor fails.
#
#   sh tests/load/soak.sh                 10 minutes
#   SOAK_MINUTES=1 sh tests/load/soak.sh  a quick run
#
# wrk (installed from Debian if missing and we are root) runs soak.lua,
# which rotates v1 and v2 requests of several shapes over SOAK_CONNS
# connections.  Every SOAK_SAMPLE_S seconds the daemon's RSS and open file
# descriptors are read from /proc.  The run fails (exit 1) when
#   - any request got a non-2xx answer, an answer without its output, or
#     a socket error (connect, read, write, timeout): an answer was lost;
#   - RSS at the end grew more than SOAK_RSS_PCT (5) percent over RSS
#     after the warm-up (SOAK_WARMUP_S, default 60 s or a fifth of a short
#     run).  Each is the median of a minute of samples (a third of the
#     samples in a short run): malloc's arenas swing RSS by 10% from one
#     sample to the next, a leak moves the median;
#   - the descriptor count once wrk has gone is not back to the idle count
#     from before the load, or exceeded idle + connections + slack during
#     the load;
#   - attnd does not exit 0 on SIGTERM.
# It prints the figures either way; samples go to $SOAK_DIR/samples.csv.
# Knobs: SOAK_MINUTES (10), SOAK_CONNS (64), SOAK_THREADS (2),
# SOAK_SAMPLE_S (5), SOAK_WARMUP_S, SOAK_RSS_PCT (5), SOAK_ARGS (extra
# attnd flags), SOAK_DIR (a fresh temporary directory).
set -eu
cd "$(dirname "$0")/../.."

MINUTES=${SOAK_MINUTES:-10}
CONNS=${SOAK_CONNS:-64}
THREADS=${SOAK_THREADS:-2}
SAMPLE_S=${SOAK_SAMPLE_S:-5}
RSS_PCT=${SOAK_RSS_PCT:-5}
SECONDS_TOTAL=$((MINUTES * 60))
WARMUP_S=${SOAK_WARMUP_S:-$((SECONDS_TOTAL / 5 < 60 ? SECONDS_TOTAL / 5 : 60))}
DIR=${SOAK_DIR:-$(mktemp -d /tmp/attnd-soak.XXXXXX)}
mkdir -p "$DIR"
PID=""
WRK_PID=""

log() { echo "soak: $*"; }
die() { log "FAIL: $*"; exit 1; }

cleanup() {
  if [ -n "$WRK_PID" ]; then kill "$WRK_PID" 2>/dev/null || true; fi
  if [ -n "$PID" ]; then kill -9 "$PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

need_wrk() {
  command -v wrk >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "wrk is missing; run as root: apt-get install -y wrk"
  log "installing wrk"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk \
    >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends wrk >/dev/null; }
  command -v wrk >/dev/null 2>&1 || die "could not install wrk"
}

# Starts build/attnd on a free loopback port; sets PID and PORT.
start_attnd() {
  [ -x build/attnd ] || die "build/attnd is missing: run make"
  # shellcheck disable=SC2086
  build/attnd --host 127.0.0.1 --port 0 ${SOAK_ARGS:-} >"$DIR/attnd.log" 2>&1 &
  PID=$!
  i=0
  while ! grep -q "listening on" "$DIR/attnd.log"; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 "$PID" 2>/dev/null; then
      die "attnd did not start: $(cat "$DIR/attnd.log")"
    fi
    sleep 0.1
  done
  PORT=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$DIR/attnd.log" | head -n 1)
  [ -n "$PORT" ] || die "no port in: $(cat "$DIR/attnd.log")"
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"; }
fd_count() { find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }

# The idle descriptor count, once the connections of earlier requests
# have closed (MHD closes a connection when the client's FIN arrives).
settled_fds() {
  prev=-1; n=$(fd_count); i=0
  while [ "$n" != "$prev" ] && [ $i -lt 20 ]; do
    prev=$n; sleep 0.5; n=$(fd_count); i=$((i + 1))
  done
  echo "$n"
}

need_wrk
start_attnd
# One request of each kind first, so that the idle count includes what a
# first request sets up once (nothing should, but then it is not a leak).
curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null || true
FD_IDLE=$(settled_fds)
RSS_IDLE=$(rss_kb)
log "attnd pid $PID on port $PORT; idle: rss ${RSS_IDLE} kB, ${FD_IDLE} fds"
log "wrk -t$THREADS -c$CONNS for $MINUTES min; warm-up ${WARMUP_S}s; samples every ${SAMPLE_S}s"

wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_TOTAL}s" --timeout 30s --latency \
  -s tests/load/soak.lua "http://127.0.0.1:$PORT" >"$DIR/wrk.out" 2>&1 &
WRK_PID=$!

echo "elapsed_s,rss_kb,fds" >"$DIR/samples.csv"
START=$(date +%s)
FD_MAX=0
RSS_MAX=0
while kill -0 "$WRK_PID" 2>/dev/null; do
  sleep "$SAMPLE_S"
  kill -0 "$PID" 2>/dev/null || die "attnd died during the soak: $(tail -n 20 "$DIR/attnd.log")"
  t=$(($(date +%s) - START))
  r=$(rss_kb); f=$(fd_count)
  echo "$t,$r,$f" >>"$DIR/samples.csv"
  [ "$f" -gt "$FD_MAX" ] && FD_MAX=$f
  if [ "$t" -ge "$WARMUP_S" ] && [ "$t" -lt "$SECONDS_TOTAL" ]; then
    [ "$r" -gt "$RSS_MAX" ] && RSS_MAX=$r
    echo "$r" >>"$DIR/rss_after_warmup"
  fi
done
wait "$WRK_PID" || die "wrk failed: $(cat "$DIR/wrk.out")"
WRK_PID=""
FD_AFTER=$(settled_fds)
RESULT=$(grep '^SOAK_RESULT ' "$DIR/wrk.out") || die "no result from wrk: $(cat "$DIR/wrk.out")"
field() { echo "$RESULT" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

[ -s "$DIR/rss_after_warmup" ] || die "no sample after the warm-up (run longer)"
# median FIRST|LAST: the median of the first or last window of samples.
median() {
  awk -v which="$1" -v per_min=$((60 / SAMPLE_S)) '
    { v[NR] = $1 }
    END {
      w = int(NR / 3); if (w > per_min) w = per_min; if (w < 1) w = 1
      lo = which == "first" ? 1 : NR - w + 1
      n = 0; for (i = lo; i < lo + w; i++) s[++n] = v[i]
      for (i = 2; i <= n; i++) for (j = i; j > 1 && s[j - 1] > s[j]; j--) {
        t = s[j]; s[j] = s[j - 1]; s[j - 1] = t }
      print s[int((n + 1) / 2)]
    }' "$DIR/rss_after_warmup"
}
RSS_WARM=$(median first)
RSS_END=$(median last)
GROWTH=$(awk -v a="$RSS_WARM" -v b="$RSS_END" 'BEGIN {printf "%.2f", (b - a) * 100 / a}')
log "requests $(field requests) in $(field seconds) s: $(field rps) req/s;" \
  "latency p50 $(field p50_ms) ms, p99 $(field p99_ms) ms, max $(field max_ms) ms"
log "non-2xx $(field non2xx), bad bodies $(field bad_body); socket errors: connect" \
  "$(field connect), read $(field read), write $(field write), timeout $(field timeout)"
log "rss (medians): idle $RSS_IDLE kB, after warm-up $RSS_WARM kB, end" \
  "$RSS_END kB (${GROWTH}%); max sample $RSS_MAX kB"
log "fds: idle $FD_IDLE, max under load $FD_MAX, after the load $FD_AFTER"

kill -TERM "$PID"
code=0
wait "$PID" || code=$?
PID=""
log "attnd exited $code"

fail=""
[ "$(field non2xx)" = 0 ] && [ "$(field bad_body)" = 0 ] || fail="$fail non-2xx-answers"
[ "$(($(field connect) + $(field read) + $(field write) + $(field timeout)))" = 0 ] ||
  fail="$fail socket-errors"
[ "$(field requests)" -gt 0 ] || fail="$fail no-requests"
awk -v g="$GROWTH" -v p="$RSS_PCT" 'BEGIN {exit !(g > p)}' && fail="$fail rss-growth"
[ "$FD_AFTER" -le "$FD_IDLE" ] || fail="$fail fd-leak"
[ "$FD_MAX" -le $((FD_IDLE + CONNS + 16)) ] || fail="$fail fds-beyond-connections"
[ "$code" = 0 ] || fail="$fail exit-$code"
[ -z "$fail" ] || die "$fail (details in $DIR)"
log "PASS (details in $DIR)"
