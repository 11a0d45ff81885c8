#!/bin/sh
# bench_shm.sh - what attnd costs a same-host client that passes its tensors
# through shared memory (Triton's system shared memory extension), against
# the in-process core on the same shape (make shm-bench; make http-bench
# runs it too).  A benchmark, not a test: it prints figures.
#
# Shape 1x8x128x128x64 FP32, output only, as bench_http.sh's v2bin row:
# query, key and value (768 KiB) are read from one registered region and
# the output (256 KiB) written into another, so that the HTTP request is a
# 1 KiB JSON body and the answer a 150-byte one.  For each round, wrk at 1
# and 8 connections against attnd (--allow-client-shm 1, no access log),
# the same shape as v2 binary tensors for comparison (v2bin), and again
# against a second attnd run with --conn-memory-kb 256 for clients that
# keep their connections, as wrk does (v2b256), then core_rate.c on one
# thread and on one per core.  Prints, per run, attnd's CPU time per
# request (from /proc) beside the core's CPU time per call (its own CPU
# time over its calls) and their ratio, which the feature aims to keep at
# 1.5 at most, and the client's (wrk's) CPU time per request.
#
# Knobs: BENCH_SECONDS (5) per run, BENCH_ROUNDS (3), BENCH_ATTND_ARGS
# (more flags for attnd, e.g. "--inline-us 10000").
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/load/lib.sh"

SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
load_need wrk curl python3
[ -x "$ROOT/build/attnd" ] && [ -f "$ROOT/build/libattnd.a" ] ||
  make -C "$ROOT" --no-print-directory all
load_bodies
B="$LOAD_TMP/bodies"
cc -std=c11 -D_GNU_SOURCE -O2 -I"$ROOT" -o "$LOAD_TMP/core_rate" \
  "$LOAD_DIR/core_rate.c" "$ROOT/build/libattnd.a" \
  $(pkg-config --libs openblas) -lpthread -lm

# shellcheck disable=SC2086
load_attnd shm --access-log 0 --allow-client-shm 1 ${BENCH_ATTND_ARGS:-}
URL=$ATTND_URL_shm
# shellcheck disable=SC2086
load_attnd big --access-log 0 --conn-memory-kb 256 ${BENCH_ATTND_ARGS:-}

# The objects live in /dev/shm under this script's pid; removed on exit
# with everything else.
OBJ=attnd-bench-$$
trap 'rm -f /dev/shm/$OBJ-in /dev/shm/$OBJ-out; load_cleanup' EXIT
python3 - "$OBJ" "$B/shm.json" <<'EOF'
import json, random, struct, sys
obj, body = sys.argv[1:3]
n = 8 * 128 * 64
rng = random.Random(1)
with open("/dev/shm/%s-in" % obj, "wb") as f:
    for _ in range(3):
        f.write(struct.pack("<%df" % n, *[rng.gauss(0, 1) for _ in range(n)]))
with open("/dev/shm/%s-out" % obj, "wb") as f:
    f.write(bytes(4 * n))
def inp(name, i):
    return {"name": name, "datatype": "FP32", "shape": [1, 8, 128, 64],
            "parameters": {"shared_memory_region": "in", "shared_memory_offset": 4 * n * i,
                           "shared_memory_byte_size": 4 * n}}
json.dump({"inputs": [inp("query", 0), inp("key", 1), inp("value", 2)],
           "outputs": [{"name": "output", "parameters": {
               "binary_data": False, "shared_memory_region": "out",
               "shared_memory_byte_size": 4 * n}}]}, open(body, "w"))
EOF
for r in in out; do
  size=$(stat -c %s "/dev/shm/$OBJ-$r")
  code=$(curl -s -o /dev/null -w '%{http_code}' -d "{\"key\":\"/$OBJ-$r\",\"byte_size\":$size}" \
           "$URL/v2/systemsharedmemory/region/$r/register")
  [ "$code" = 200 ] || { echo "register $r: HTTP $code" >&2; exit 1; }
done
code=$(curl -s -o "$LOAD_TMP/answer" -w '%{http_code}' --data-binary @"$B/shm.json" \
         "$URL/v2/models/attention/infer")
[ "$code" = 200 ] || { echo "shm request: HTTP $code: $(cat "$LOAD_TMP/answer")" >&2; exit 1; }

HLEN=$(cat "$B/v2_small.hlen")
echo "shared memory benchmark: $ROUNDS round(s) x ${SECS}s, $(nproc) cores" >&2
for round in $(seq "$ROUNDS"); do
  echo "round $round" >&2
  for c in 1 8; do
    load_wrk_cpu "$ATTND_PID_shm" shm "$c" "$SECS" "$URL" post.lua \
      LOAD_BODY="$B/shm.json" LOAD_PATH=/v2/models/attention/infer
    load_wrk_cpu "$ATTND_PID_shm" v2bin "$c" "$SECS" "$URL" post.lua \
      LOAD_BODY="$B/v2_small.bin" LOAD_PATH=/v2/models/attention/infer LOAD_HLEN="$HLEN"
    load_wrk_cpu "$ATTND_PID_big" v2b256 "$c" "$SECS" "$ATTND_URL_big" post.lua \
      LOAD_BODY="$B/v2_small.bin" LOAD_PATH=/v2/models/attention/infer LOAD_HLEN="$HLEN"
  done
  # The core on one thread, and on as many as attnd has workers; each
  # time its own CPU time over its calls (core_rate's cpu_s), not threads
  # / its rate: on a shared machine a thread is not on a core all the
  # time.
  for t in 1 "$(nproc)"; do
    load_settle
    python3 -c 'import json, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout
r = json.loads(out.split("CORE_RESULT ", 1)[1])
r["threads"] = int(sys.argv[-2])
print(json.dumps(r))' "$LOAD_TMP/core_rate" 1 8 128 128 64 "$SECS" "$t" 0 >>"$LOAD_TMP/core"
    echo "  core, $t thread(s): $(tail -1 "$LOAD_TMP/core")" >&2
  done
done

# results: one JSON line per wrk run, in order; cpu: "TAG CONNS TICKS HZ"
# in the same order; core: one JSON line per round.
python3 - "$LOAD_TMP/results" "$LOAD_TMP/cpu" "$LOAD_TMP/core" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
cpu = [l.split() for l in open(sys.argv[2])]
core = [json.loads(l) for l in open(sys.argv[3])]
by_threads = {}
for c in core:
    by_threads.setdefault(c["threads"], []).append(1e6 * c["cpu_s"] / c["calls"])
per = {}
for run, (tag, conns, ticks, hz) in zip(runs, cpu):
    us = 1e6 * int(ticks) / int(hz) / max(run["requests"], 1)
    per.setdefault((tag, int(conns)), []).append((us, run))
meds = {}
for t, us in sorted(by_threads.items()):
    meds[t] = statistics.median(us)
    print("in-process core, %d thread(s): %.0f us of CPU per call (median of %s)"
          % (t, meds[t], ", ".join("%.0f" % x for x in us)))
one, most = meds[min(meds)], meds[max(meds)]
for (tag, conns), xs in sorted(per.items()):
    us = statistics.median(x[0] for x in xs)
    rps = statistics.median(x[1]["rps"] for x in xs)
    bad = sum(x[1]["non2xx"] + x[1]["socket_errors"] for x in xs)
    client = statistics.median(1e6 * x[1]["cpu_s"] / max(x[1]["requests"], 1) for x in xs)
    print("%-6s c=%d: attnd %4.0f us of CPU per request (%s): %.2fx the core's on %d "
          "thread(s), %.2fx on 1; %.0f req/s; the client (wrk) %.0f us%s"
          % (tag, conns, us, ", ".join("%.0f" % x[0] for x in xs), us / most, max(meds),
             us / one, rps, client, "; %d errors" % bad if bad else ""))
print("target: shm at most 1.5x the core's CPU per call")
EOF
