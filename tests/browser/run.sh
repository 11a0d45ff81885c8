#!/bin/sh
# Browser test of the playground page served by the real attnd.
#
#   sh tests/browser/run.sh
#
# Installs Debian's chromium when it is missing (as root), installs
# playwright-core from package-lock.json when node_modules is missing,
# builds attnd (make), starts build/attnd on an ephemeral port, runs
# playground.test.mjs against it, stops attnd with SIGTERM.  Writes
# docs/playground.png and docs/playground-phone.png.  Prints
# "browser: N passed, N failed" and exits non-zero on a failure.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN="$ROOT/build/attnd"

fail() {
  echo "browser: $*" >&2
  echo "browser: 0 passed, 1 failed"
  exit 1
}

if [ ! -x /usr/bin/chromium ]; then
  [ "$(id -u)" = 0 ] || fail "needs Debian's chromium: apt-get install -y chromium (as root)"
  echo "browser: installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq chromium; } >/dev/null ||
    fail "apt-get install chromium failed"
fi
command -v node >/dev/null 2>&1 || fail "node is missing (Debian: apt-get install -y nodejs npm)"
command -v npm >/dev/null 2>&1 || fail "npm is missing (Debian: apt-get install -y npm)"

if [ ! -d "$HERE/node_modules/playwright-core" ]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed"
fi

make --no-print-directory -s -C "$ROOT" all || fail "make failed"
[ -x "$BIN" ] || fail "$BIN was not built"

WORK=$(mktemp -d)
LOG="$WORK/attnd.log"
"$BIN" --host 127.0.0.1 --port 0 </dev/null >"$LOG" 2>&1 &
PID=$!
cleanup() {
  if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null
    i=0
    while kill -0 "$PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$PID" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

PORT=""
i=0
while [ $i -lt 200 ]; do
  PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$LOG" | head -n 1)
  [ -n "$PORT" ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
  i=$((i + 1))
done
if [ -z "$PORT" ]; then
  cat "$LOG" >&2
  fail "attnd did not print 'listening on 127.0.0.1:PORT'"
fi

ATTND_URL="http://127.0.0.1:$PORT" ATTND_BROWSER_RESULT="$WORK/result" \
  node "$HERE/playground.test.mjs"
rc=$?

kill -TERM "$PID" 2>/dev/null
wait "$PID"
code=$?
if [ "$code" != 0 ]; then
  echo "browser: attnd exited $code after SIGTERM" >&2
  cat "$LOG" >&2
  # Count the unclean exit as one more failure in the closing line.
  set -- $(cat "$WORK/result" 2>/dev/null || echo "0 0")
  echo "browser: $1 passed, $(($2 + 1)) failed"
  rc=1
fi
exit $rc
