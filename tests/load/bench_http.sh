#!/bin/sh
# bench_http.sh - attnd's HTTP path against its peers, in one run, on this
# machine (make http-bench).  A benchmark, not a test: it prints figures.
#
# Starts, each on its own loopback port:
#   attnd    build/attnd with its defaults (workers = HTTP threads = cores)
#            but no access log, like the two peers (nginx access_log off,
#            uvicorn --no-access-log)
#   nginx    a static 20-byte file (tests/load/nginx.conf): the ceiling of
#            an HTTP server on this machine
#   fastapi  tests/load/peer_fastapi.py on uvicorn, two workers, numpy
# checks that they give the same answers (check_answers.py), then runs wrk
# at 1, 8 and 64 connections on:
#   static   GET of nginx's 20-byte file
#   tiny     POST /v1/attention JSON 1x1x16x16x32 with weights (attnd, fastapi)
#   small    POST /v1/attention JSON 1x1x128x128x64 with weights (attnd, fastapi)
#   v2bin    POST /v2/models/attention/infer, binary FP32 1x8x128x128x64,
#            output only (attnd)
# and times the core in-process on the v2bin shape (core_rate.c, one thread
# per worker).  Prints one table (requests/s, p50, p99) and the ratios
# against their targets, attnd's and wrk's CPU time per request (the two
# share the cores), and plots throughput and p99 against connections
# to docs/bench-http.png (gnuplot).
#
# Knobs: BENCH_SECONDS (5) per wrk run; BENCH_ROUNDS (1): with more, every
# run is repeated round after round and the table shows medians;
# BENCH_PNG (docs/bench-http.png).
# The peer's numpy gets OPENBLAS_NUM_THREADS=1 (two worker processes on
# two cores); nothing else about OpenBLAS is changed for anyone.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/load/lib.sh"

SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-1}
PNG=${BENCH_PNG:-$ROOT/docs/bench-http.png}
CONNS="1 8 64"

load_need wrk curl nginx gnuplot-nox python3-fastapi python3-uvicorn python3-numpy
[ -x "$ROOT/build/attnd" ] && [ -f "$ROOT/build/libattnd.a" ] ||
  make -C "$ROOT" --no-print-directory all
load_bodies
B="$LOAD_TMP/bodies"

# The in-process figure's program, against the same library attnd uses.
cc -std=c11 -D_GNU_SOURCE -O2 -I"$ROOT" -o "$LOAD_TMP/core_rate" \
  "$LOAD_DIR/core_rate.c" "$ROOT/build/libattnd.a" \
  $(pkg-config --libs openblas) -lpthread -lm

# nginx
NGX="$LOAD_TMP/nginx"
mkdir -p "$NGX/www"
printf '0123456789abcdefghi\n' >"$NGX/www/static"   # 20 bytes
NGX_PORT=$(load_port)
sed -e "s|@PREFIX@|$NGX|g" -e "s|@PORT@|$NGX_PORT|g" "$LOAD_DIR/nginx.conf" >"$NGX/nginx.conf"
nginx -p "$NGX" -c "$NGX/nginx.conf" 2>"$NGX/stderr" &
LOAD_PIDS="$LOAD_PIDS $!"
NGINX_URL="http://127.0.0.1:$NGX_PORT"
load_wait_http "$NGINX_URL/static" 30

# attnd
load_attnd main --access-log 0

# FastAPI + numpy peer (Debian's python3 and packages)
PEER_PORT=$(load_port)
OPENBLAS_NUM_THREADS=1 /usr/bin/python3 -m uvicorn --app-dir "$LOAD_DIR" \
  peer_fastapi:app --host 127.0.0.1 --port "$PEER_PORT" --workers 2 \
  --no-access-log --log-level warning 2>"$LOAD_TMP/peer.log" &
LOAD_PIDS="$LOAD_PIDS $!"
PEER_URL="http://127.0.0.1:$PEER_PORT"
load_wait_http "$PEER_URL/healthz" 60

python3 "$LOAD_DIR/check_answers.py" "$B" "$ATTND_URL_main" "$PEER_URL" >&2

HLEN=$(cat "$B/v2_small.hlen")
echo "HTTP benchmark: $ROUNDS round(s) x ${SECS}s per run, $(nproc) cores, conns $CONNS" >&2
for c in $CONNS; do
  load_wrk warm "$c" 1 "$ATTND_URL_main" post.lua LOAD_BODY="$B/tiny.json" 2>/dev/null
done
r=1
while [ $r -le "$ROUNDS" ]; do
  for c in $CONNS; do
    load_wrk nginx_static "$c" "$SECS" "$NGINX_URL/static" get.lua
    load_wrk_cpu "$ATTND_PID_main" attnd_tiny "$c" "$SECS" "$ATTND_URL_main" post.lua LOAD_BODY="$B/tiny.json"
    load_wrk fastapi_tiny "$c" "$SECS" "$PEER_URL" post.lua LOAD_BODY="$B/tiny.json"
    load_wrk_cpu "$ATTND_PID_main" attnd_small "$c" "$SECS" "$ATTND_URL_main" post.lua LOAD_BODY="$B/small.json"
    load_wrk fastapi_small "$c" "$SECS" "$PEER_URL" post.lua LOAD_BODY="$B/small.json"
    load_wrk_cpu "$ATTND_PID_main" attnd_v2bin "$c" "$SECS" "$ATTND_URL_main" post.lua \
      LOAD_BODY="$B/v2_small.bin" LOAD_PATH=/v2/models/attention/infer LOAD_HLEN="$HLEN"
  done
  # The in-process figure right after the v2bin runs, so that both see
  # the same machine.
  "$LOAD_TMP/core_rate" 1 8 128 128 64 "$SECS" "$(nproc)" 0 |
    sed -n 's/^CORE_RESULT //p' >>"$LOAD_TMP/core"
  echo "  core 1x8x128x128x64 in-process: $(tail -1 "$LOAD_TMP/core")" >&2
  r=$((r + 1))
done
python3 "$LOAD_DIR/report.py" http "$LOAD_TMP" "$PNG"
