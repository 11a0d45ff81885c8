#!/bin/sh
# make bench: runs attnd's benchmarks and prints one table of figures and
# ratios against the targets.  Each piece writes JSON lines into
# $ATTND_BENCH_DIR (build/bench by default); report.py reads them all.
# To add a piece (the HTTP benchmarks, say): write a function that puts
# its JSON lines into "$dir/<name>.jsonl" and call it below; report.py
# prints the kinds it knows and lists the rest.
#
# attnd's own benchmark runs with the machine's environment as it is.
# Only the numpy peer is run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# unset (set on some machines for older OpenBLAS builds, they slow a
# current numpy down); it prints which OpenBLAS kernel it then runs.
set -eu
cd "$(dirname "$0")/../.."

dir=${ATTND_BENCH_DIR:-build/bench}
workers=${ATTND_BENCH_WORKERS:-$(nproc)}
mkdir -p "$dir"
rm -f "$dir"/*.jsonl

env_line() {
  printf '{"kind":"env","cpu":"%s","nproc":%s,"workers":%s,' \
    "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)" \
    "$(nproc)" "$workers"
  printf '"OPENBLAS_CORETYPE":"%s","OPENBLAS_L2_SIZE":"%s","loadavg":"%s"}\n' \
    "${OPENBLAS_CORETYPE-(unset)}" "${OPENBLAS_L2_SIZE-(unset)}" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
}

core_bench() {
  echo "bench: core (build/attnd-bench, $workers workers)..." >&2
  build/attnd-bench --threads "$workers" > "$dir/core.jsonl"
}

# The no-weights path at Lq = Lk = 16384 in a process of its own, so its
# peak resident set is its own.
core_memory() {
  echo "bench: no-weights memory at 16384..." >&2
  build/attnd-bench mem 16384 64 --threads "$workers" > "$dir/mem.jsonl"
}

# One mode of build/attnd-bench, its lines into "$dir/<mode>.jsonl".
core_mode() {
  echo "bench: $2..." >&2
  build/attnd-bench "$1" > "$dir/$1.jsonl"
}

numpy_peer() {
  if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    echo "bench: /usr/bin/python3 has no numpy (apt-get install" \
         "python3-numpy); the numpy column stays empty" >&2
    return 0
  fi
  # as numpy runs by default (its OpenBLAS on every core), then on one
  # BLAS thread, whose CPU seconds compare with attnd's CPU seconds
  echo "bench: numpy peer..." >&2
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    /usr/bin/python3 tests/bench/numpy_peer.py > "$dir/numpy.jsonl"
  echo "bench: numpy peer, one BLAS thread..." >&2
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
    /usr/bin/python3 tests/bench/numpy_peer.py > "$dir/numpy1.jsonl"
}

# The Python client against the real build/attnd: attention() and infer(),
# binary and JSON, small and large (tests/bench/client_bench.py).
client_bench() {
  if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    echo "bench: /usr/bin/python3 has no numpy; no client table" >&2
    return 0
  fi
  [ -x build/attnd ] || make --no-print-directory all
  echo "bench: Python client..." >&2
  /usr/bin/python3 tests/bench/client_bench.py > "$dir/client.jsonl"
}

env_line > "$dir/env.jsonl"
core_bench
core_memory
# Sinks + softcap + ALiBi against plain, packed against square; BF16 mode
# against float32 on its three target shapes; the float32 core against
# one core's FMA peak, measured in the same run by a short FMA loop: one
# thread, no weights, rounds alternating the cases so that noise hurts
# each alike.  Then one large request on one worker and split over two,
# as the server splits it: wall times, each worker's CPU time and tasks.
# Then the cost estimate against the CPU time it stands for, additive
# scoring's grid and two dot-product problems, one thread.
core_mode variants "attention variants, one thread"
core_mode precision "BF16 mode against float32, one thread"
core_mode peak "float32 core against the FMA peak, one thread"
core_mode split "one large request on one worker and on two"
core_mode estimate "the cost estimate against CPU time, one thread"
numpy_peer
client_bench
python3 tests/bench/report.py "$dir"/*.jsonl | tee "$dir/report.txt"
