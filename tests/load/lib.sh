# lib.sh - shared by the load benchmarks (bench_http.sh, bench_batching.sh).
# Sourced, not run.  Everything listens on 127.0.0.1 only; every process a
# script starts is recorded by pid and stopped by pid on exit.
#
# Needs: ROOT (the repository) set by the caller.

LOAD_DIR="$ROOT/tests/load"
LOAD_TMP=$(mktemp -d /tmp/attnd-load.XXXXXX)
LOAD_PIDS=""

load_cleanup() {
  for _pid in $LOAD_PIDS; do
    kill "$_pid" 2>/dev/null || true
  done
  for _pid in $LOAD_PIDS; do
    # Bounded wait, then make sure.
    _n=0
    while kill -0 "$_pid" 2>/dev/null && [ $_n -lt 50 ]; do
      sleep 0.1
      _n=$((_n + 1))
    done
    kill -9 "$_pid" 2>/dev/null || true
  done
  rm -rf "$LOAD_TMP"
}
trap load_cleanup EXIT
trap 'exit 130' INT TERM HUP

# load_need PKG... : installs missing Debian packages when root, else
# says what to install and exits.
load_need() {
  _missing=""
  for _p in "$@"; do
    dpkg-query -W -f='${Status}' "$_p" 2>/dev/null | grep -q "install ok installed" ||
      _missing="$_missing $_p"
  done
  [ -z "$_missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "the benchmark needs:$_missing (apt-get install -y$_missing)" >&2
    exit 1
  fi
  echo "installing:$_missing" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $_missing >&2 ||
    exit 1
}

# load_port: prints a free TCP port on 127.0.0.1.
load_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# load_wait_http URL [SECONDS]: waits until URL answers 200.
load_wait_http() {
  _end=$(( $(date +%s) + ${2:-30} ))
  while [ "$(date +%s)" -le $_end ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" = 200 ] && return 0
    sleep 0.1
  done
  echo "no answer from $1" >&2
  return 1
}

# load_bodies: writes the request bodies into $LOAD_TMP/bodies.
load_bodies() {
  python3 "$LOAD_DIR/make_bodies.py" "$LOAD_TMP/bodies"
}

# load_attnd NAME ARGS...: starts a copy of build/attnd (so that a rebuild
# during the run changes nothing) on a free port; sets ATTND_URL_<NAME>.
load_attnd() {
  _name=$1
  shift
  [ -x "$LOAD_TMP/attnd" ] || cp "$ROOT/build/attnd" "$LOAD_TMP/attnd"
  _port=$(load_port)
  "$LOAD_TMP/attnd" --host 127.0.0.1 --port "$_port" "$@" \
    2>"$LOAD_TMP/attnd-$_name.log" &
  LOAD_PIDS="$LOAD_PIDS $!"
  eval "ATTND_PID_$_name=$!"
  eval "ATTND_URL_$_name=http://127.0.0.1:$_port"
  load_wait_http "http://127.0.0.1:$_port/readyz" 30
}

# load_cpu PID: prints the CPU time (user + system, clock ticks) the
# process has used so far.
load_cpu() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# load_wrk TAG CONNS SECONDS URL SCRIPT [VAR=VALUE...]: runs wrk and
# appends {"tag":..,"conns":..,<report.lua's fields>} to $LOAD_TMP/results.
# One wrk thread per connection, at most two (the machine's cores).
# All CPUs' busy (user, nice, system, irq, softirq) and total jiffies.
load_jiffies() {
  awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat
}

# The machine's busy share over the next 0.2 s, in %.
load_busy() {
  _a=$(load_jiffies)
  sleep 0.2
  _b=$(load_jiffies)
  echo "$_a $_b" | awk '{d = $4 - $2; print (d > 0 ? int(100 * ($3 - $1) / d) : 0)}'
}

# Waits (up to 10 s) until the machine is idle: a server keeps working
# through the requests still queued when wrk stops (FastAPI's small
# answers at 64 connections take most of a second), which would
# otherwise be charged to the next measurement.
load_settle() {
  _n=0
  while [ "$(load_busy)" -ge 15 ] && [ $_n -lt 50 ]; do _n=$((_n + 1)); done
  [ $_n -gt 1 ] && echo "  (waited $((_n * 2 / 10)).$((_n * 2 % 10)) s for the machine to go idle)" >&2
  return 0
}

# load_wrk_cpu PID TAG CONNS ...: load_wrk, and the CPU time the server
# PID used over the run as a line "TAG CONNS TICKS CLK_TCK" in
# $LOAD_TMP/cpu (report.py's cpu_per_request reads them).
load_wrk_cpu() {
  _pid=$1
  shift
  _t0=$(load_cpu "$_pid")
  load_wrk "$@"
  echo "$1 $2 $(( $(load_cpu "$_pid") - _t0 )) $(getconf CLK_TCK)" >>"$LOAD_TMP/cpu"
}

load_wrk() {
  _tag=$1 _c=$2 _s=$3 _url=$4 _script=$5
  shift 5
  load_settle
  _t=$_c
  [ "$_t" -gt 2 ] && _t=2
  _line=$(env "$@" wrk -t "$_t" -c "$_c" -d "${_s}s" --timeout 10s \
            -s "$LOAD_DIR/$_script" "$_url" | grep '^WRK_RESULT ')
  if [ -z "$_line" ]; then
    echo "wrk printed no result for $_tag c=$_c" >&2
    return 1
  fi
  echo "{\"tag\":\"$_tag\",\"conns\":$_c,${_line#WRK_RESULT \{}" >>"$LOAD_TMP/results"
  echo "  $_tag c=$_c: ${_line#WRK_RESULT }" >&2
}
