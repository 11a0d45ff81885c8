#!/bin/sh
# make venv: a Python virtual environment at $1 (default .venv) that sees
# Debian's numpy (--system-site-packages), with attnd_client installed into
# it offline (pip --no-index, setuptools from Debian as the build backend).
#
# pip builds from a copy in a temporary directory: building in
# deploy/clients/python would leave setuptools' build/ and *.egg-info there,
# owned by whoever ran it first (root, say), and a later install as another
# user would trip over them.  PYTHON picks the interpreter (/usr/bin/python3).
# An environment already at $1 is kept, and the client (re)installed in it.
set -eu
venv=${1:-.venv}
python=${PYTHON:-/usr/bin/python3}
src=$(cd "$(dirname "$0")" && pwd)

if ! "$python" -c 'import setuptools, wheel, venv, ensurepip, numpy' 2>/dev/null; then
  echo "make venv: $python needs numpy, venv, setuptools and wheel:" >&2
  echo "run as root: apt-get install -y python3-numpy python3-venv python3-setuptools python3-wheel" >&2
  echo "(or: make deps)" >&2
  exit 1
fi
if [ -e "$venv" ] && ! [ -w "$venv" ]; then
  echo "make venv: $venv belongs to $(stat -c %U "$venv"), not to $(id -un):" \
       "remove it first (rm -rf $venv, as its owner)" >&2
  exit 1
fi

# An environment that exists already (a project's own): the client goes
# into it alone, built with that environment's setuptools and wheel.
if [ -x "$venv/bin/python" ] &&
   ! "$venv/bin/python" -c 'import setuptools, wheel, pip, numpy' 2>/dev/null; then
  echo "make venv: $venv exists but lacks numpy, pip, setuptools or wheel;" \
       "install them into it first ($venv/bin/python -m pip install numpy setuptools wheel)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir "$tmp/src"
cp -R "$src/attnd_client" "$src/pyproject.toml" "$src/README.md" "$tmp/src/"
rm -rf "$tmp/src/attnd_client/__pycache__"

[ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
# --no-deps --force-reinstall: numpy stays Debian's; the client is
# replaced by the tree's even when its version has not changed.
PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$venv/bin/python" -m pip install -q --no-index --no-build-isolation --no-deps \
  --force-reinstall "$tmp/src"
"$venv/bin/python" -c 'import attnd_client, numpy' >/dev/null
echo "$venv: attnd_client $("$venv/bin/python" -c 'import attnd_client; print(attnd_client.__version__)')," \
     "numpy $("$venv/bin/python" -c 'import numpy; print(numpy.__version__)');" \
     "activate it with: . $venv/bin/activate"
