#!/bin/sh
# The Debian packages only the benchmarks build with (make bench), kept
# out of tests/deps.sh: make test and the image never need them.  (The
# peers of make bench-peers, Debian 13's, are installed into its chroot by
# tests/bench/peers.sh.)
#   libsimdjson-dev  the simdjson peer of the JSON reader (bench_simdjson.cc)
set -eu
PKGS="libsimdjson-dev"

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "the benchmark needs:$missing (run as root: apt-get install -y$missing)" >&2
  exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
