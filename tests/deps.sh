#!/bin/sh
# Installs the Debian packages attnd needs to build, run and test, on
# Debian 13 (trixie) or Debian 12 (bookworm).
#   sh tests/deps.sh          install what is missing (as root), else print
#                             the apt-get line to run
#   sh tests/deps.sh --check  exit 1 with the apt-get line if any is missing
set -eu

# g++, libfast-float-dev and libdragonbox-dev build proto/text/fpread.cc and
# proto/text/fpprint.cc (JSON numbers: fast_float reads them, Dragonbox prints
# them; both header only).
PKGS="gcc g++ make pkg-config libc6-dev libmicrohttpd-dev libcjson-dev
libfast-float-dev libdragonbox-dev libopenblas-dev libuv1-dev zlib1g-dev check python3 python3-jsonschema
python3-yaml python3-numpy curl valgrind groff-base man-db systemd
prometheus"
# Test-only tools, kept apart from PKGS (the list the image build mirrors):
# clang with its compiler-rt for the libFuzzer harnesses (tests/fuzz):
# libclang-rt-dev is the compiler-rt of the release's default clang (14 on
# Debian 12, 19 on Debian 13), so one name serves both;
# openssl for the TLS tests' certificate; python3-pip, python3-setuptools,
# python3-wheel and python3-venv for the Python client's offline install
# (`make venv`: pip install --no-index --no-build-isolation into a venv, as
# test_client.py does too: setuptools is its build backend and needs wheel);
# mypy, which checks that the installed client's signatures type-check;
# strace, with which test_v2 sees how much libmicrohttpd reads at a time.
# (The Makefile's gnutls, for the HTTPS probe, is libgnutls28-dev, which
# libmicrohttpd-dev brings.)
TEST_PKGS="clang libclang-rt-dev openssl python3-pip python3-setuptools
python3-wheel python3-venv mypy strace"

missing=""
for p in $PKGS $TEST_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "${1:-}" = "--check" ]; then
  echo "missing Debian packages:$missing" >&2
  echo "run: make deps   (or: apt-get install -y$missing)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "attnd needs:$missing" >&2
  echo "run as root: apt-get install -y$missing" >&2
  exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
