# Shared helpers for tests/deploy/*.sh, tests/fresh/run.sh and
# tests/bench/peers.sh (POSIX sh; sourced, not run).
#
# Everything these tests install comes from Debian's mirror (apt-get) or the
# npm registry; everything they cache lives under $ATTND_CI_CACHE
# (default /var/cache/attnd-ci) so a second run is fast:
#   trixie-slim-rootfs.tar debootstrapped trixie minbase, slimmed like the
#                          debian:trixie-slim of Docker Hub (the image's base;
#                          bookworm-slim-rootfs.tar likewise for Debian 12)
#   fresh/                 minbase rootfs tarballs and the fresh test's podman
#                          storage (tests/fresh/run.sh)
#   bench-peers/           the Debian 13 chroot of make bench-peers
#   node/                  kubernetes-models + yaml for validate_k8s.mjs
#   dockerd-data/          data root of the dockerd docker_test.sh starts

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${ATTND_CI_CACHE:-/var/cache/attnd-ci}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
PASSED=0
FAILED=0
SKIPPED=0
FAILED_NAMES=""

log() { printf '%s  %s\n' "$(date +%H:%M:%S)" "$*"; }

pass() { PASSED=$((PASSED + 1)); printf 'ok   - %s\n' "$*"; }

fail() {
  FAILED=$((FAILED + 1)); FAILED_NAMES="$FAILED_NAMES
  $*"
  printf 'FAIL - %s\n' "$*"
}

# skip WHY: a check that cannot run here; counted as skipped, never passed.
skip() { SKIPPED=$((SKIPPED + 1)); printf 'skip - %s\n' "$*"; }

# check NAME CMD...: runs CMD, pass when it exits 0.  Output is shown on failure.
check() {
  _name=$1; shift
  if _out=$("$@" 2>&1); then pass "$_name"; else
    fail "$_name"; printf '%s\n' "$_out" | tail -n 30 | sed 's/^/    | /'
  fi
}

# check_fails NAME CMD...: pass when CMD exits non-zero (negative tests:
# the checker must reject a broken input).
check_fails() {
  _name=$1; shift
  if _out=$("$@" 2>&1); then
    fail "$_name (was accepted)"; printf '%s\n' "$_out" | tail -n 10 | sed 's/^/    | /'
  else pass "$_name"; fi
}

# py_checks CMD...: runs a python checker that prints "ok - x" / "FAIL - x"
# lines and adds its counts to ours.
py_checks() {
  _out=$("$@" 2>&1)
  _rc=$?
  printf '%s\n' "$_out"
  _p=$(printf '%s\n' "$_out" | grep -c '^ok   - ')
  _f=$(printf '%s\n' "$_out" | grep -c '^FAIL - ')
  PASSED=$((PASSED + _p)); FAILED=$((FAILED + _f))
  [ "$_f" -gt 0 ] && FAILED_NAMES="$FAILED_NAMES
$(printf '%s\n' "$_out" | grep '^FAIL - ' | sed 's/^FAIL - /  /')"
  if [ "$_rc" -ne 0 ] && [ "$_f" -eq 0 ]; then fail "$1 exited $_rc"; fi
  return 0
}

# finish NAME: the closing line; exit status 1 on any failure.
finish() {
  [ -n "$FAILED_NAMES" ] && printf 'failed:%s\n' "$FAILED_NAMES"
  if [ "$SKIPPED" -gt 0 ]; then
    echo "$1: $PASSED passed, $FAILED failed, $SKIPPED skipped"
  else
    echo "$1: $PASSED passed, $FAILED failed"
  fi
  [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]
}

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# need_pkgs PKG...: apt-get install whatever is missing (root only).
need_pkgs() {
  _missing=""
  for _p in "$@"; do is_installed "$_p" || _missing="$_missing $_p"; done
  [ -z "$_missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "need Debian packages:$_missing (run as root: apt-get install -y$_missing)" >&2
    return 1
  fi
  log "apt-get install$_missing"
  export DEBIAN_FRONTEND=noninteractive
  # apt's lock is shared with the other deploy test when both run at once.
  _try=0
  until { apt-get update -qq && apt-get install -y -qq --no-install-recommends $_missing; } >"$SCRATCH/apt.log" 2>&1; do
    _try=$((_try + 1))
    if [ "$_try" -ge 5 ]; then tail -n 20 "$SCRATCH/apt.log" >&2; return 1; fi
    sleep 5
  done
}

# The Debian mirror apt already uses (deb822 or one-line format): the first
# source of the main archive (not the security one), whatever its release.
debian_mirror() {
  _m=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    _m=$(awk '
      function emit() { if (uri != "" && suite != "" && suite !~ /-security/) { print uri; exit } }
      /^[[:space:]]*$/ { emit(); uri=""; suite=""; next }
      /^URIs:/ { uri=$2 }
      /^Suites:/ { $1=""; suite=$0 " " }
      END { emit() }' \
      /etc/apt/sources.list.d/debian.sources | head -n 1)
  fi
  if [ -z "$_m" ] && [ -r /etc/apt/sources.list ]; then
    _m=$(awk '$1 == "deb" && $3 !~ /-security/ { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp):/) { print $i; exit } }' \
      /etc/apt/sources.list | head -n 1)
  fi
  echo "${_m:-http://deb.debian.org/debian}"
}

# slim_rootfs DIR: what Docker Hub's debian:*-slim images do to their
# debootstrapped rootfs (debuerreotype's slimify and docker-* settings): no
# docs, man pages or translations, and apt keeps no package caches or lists,
# in this layer and in the layers built on it.  DIR must be a scratch rootfs.
slim_rootfs() {
  _r=$1
  case "$_r" in
    /tmp/*/rootfs) ;;
    *) echo "slim_rootfs: refusing '$_r' (not a scratch rootfs)" >&2; return 1 ;;
  esac
  [ -d "$_r/etc/apt/apt.conf.d" ] && [ -d "$_r/etc/dpkg/dpkg.cfg.d" ] || return 1
  printf '%s\n' \
    'path-exclude /usr/share/doc/*' \
    'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' \
    'path-exclude /usr/share/groff/*' \
    'path-exclude /usr/share/info/*' \
    'path-exclude /usr/share/lintian/*' \
    'path-exclude /usr/share/linda/*' \
    'path-exclude /usr/share/locale/*' \
    'path-include /usr/share/locale/locale.alias' >"$_r/etc/dpkg/dpkg.cfg.d/docker"
  _clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
  printf '%s\n' \
    "DPkg::Post-Invoke { \"$_clean\"; };" \
    "APT::Update::Post-Invoke { \"$_clean\"; };" \
    'Dir::Cache::pkgcache "";' \
    'Dir::Cache::srcpkgcache "";' >"$_r/etc/apt/apt.conf.d/docker-clean"
  printf '%s\n' 'Acquire::Languages "none";' >"$_r/etc/apt/apt.conf.d/docker-no-languages"
  printf '%s\n' 'Acquire::GzipIndexes "true";' >"$_r/etc/apt/apt.conf.d/docker-gzip-indexes"
  printf '%s\n' 'Apt::AutoRemove::SuggestsImportant "false";' >"$_r/etc/apt/apt.conf.d/docker-autoremove-suggests"
  find "$_r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$_r/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$_r/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  for _d in man groff info lintian linda; do
    [ -d "$_r/usr/share/$_d" ] && find "$_r/usr/share/$_d" -mindepth 1 -delete
  done
  rm -f "$_r"/var/cache/apt/archives/*.deb "$_r"/var/cache/apt/*.bin
  rm -rf "$_r"/var/lib/apt/lists/*
  return 0
}

# debootstrap_tarball TAR LOCK SUITE FINISH: prints TAR, a tarball of
# debootstrap --variant=minbase SUITE from the mirror apt uses here after
# `FINISH ROOTFS MIRROR SUITE` has run on it, building it on first use
# (about a minute) under flock LOCK, so that concurrent runs build it once.
debootstrap_tarball() {
  _tar=$1 _lock=$2 _suite=$3 _finish=$4
  mkdir -p "$(dirname "$_tar")"
  (
    flock 9
    [ -s "$_tar" ] && exit 0
    need_pkgs debootstrap || exit 1
    _mirror=$(debian_mirror)
    _rootfs="$SCRATCH/rootfs"
    log "debootstrap --variant=minbase $_suite from $_mirror (cached afterwards)" >&2
    debootstrap --variant=minbase "$_suite" "$_rootfs" "$_mirror" >"$SCRATCH/debootstrap.log" 2>&1 ||
      { tail -n 20 "$SCRATCH/debootstrap.log" >&2; exit 1; }
    "$_finish" "$_rootfs" "$_mirror" "$_suite" || exit 1
    tar -C "$_rootfs" -cf "$_tar.tmp.$$" . && mv "$_tar.tmp.$$" "$_tar" || exit 1
    rm -rf "$_rootfs"
  ) 9>"$_lock" >&2 || return 1
  echo "$_tar"
}

# base_tarball [SUITE]: prints the path of a debootstrapped, slimmed rootfs
# tarball of SUITE (default trixie, the image's base), building and caching
# it on first use.
base_tarball() {
  debootstrap_tarball "$CACHE/${1:-trixie}-slim-rootfs.tar" \
    "$CACHE/.base-${1:-trixie}.lock" "${1:-trixie}" slim_rootfs
}

sources_stanza() {  # sources_stanza URI SUITES: one deb822 entry
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$1" "$2"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
}

# hub_rootfs ROOTFS MIRROR SUITE: what Docker Hub's debian:13 (and 12)
# add to a debootstrapped minbase: deb822 sources with SUITE, SUITE-updates
# and SUITE-security, no apt lists, apt keeping no .debs.
hub_rootfs() {
  _r=$1
  rm -f "$_r/etc/apt/sources.list"
  {
    sources_stanza "$2" "$3 $3-updates"
    case "$2" in  # the security archive beside a mirror of debian/
      */debian | */debian/) sources_stanza "${2%/}-security" "$3-security" ;;
    esac
  } >"$_r/etc/apt/sources.list.d/debian.sources"
  _clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
  printf '%s\n' "DPkg::Post-Invoke { \"$_clean\"; };" "APT::Update::Post-Invoke { \"$_clean\"; };" \
    'Dir::Cache::pkgcache "";' 'Dir::Cache::srcpkgcache "";' >"$_r/etc/apt/apt.conf.d/docker-clean"
  printf '%s\n' 'Acquire::Languages "none";' >"$_r/etc/apt/apt.conf.d/docker-no-languages"
  rm -f "$_r"/var/cache/apt/archives/*.deb "$_r"/var/cache/apt/*.bin
  rm -rf "$_r"/var/lib/apt/lists/*
  : >"$_r/etc/resolv.conf"
}

# minbase_tarball SUITE: prints the path of a minbase rootfs tarball of
# SUITE configured as Docker Hub's debian:13 (or 12) is (hub_rootfs),
# cached as $CACHE/fresh/SUITE-minbase-rootfs.tar.  The fresh test's images
# and the peers benchmark's chroot start from it.
minbase_tarball() {
  debootstrap_tarball "$CACHE/fresh/$1-minbase-rootfs.tar" \
    "$CACHE/fresh/.minbase-$1.lock" "$1" hub_rootfs
}

# The base image of the Dockerfile, and the suite it is debootstrapped from.
BASE_SUITE=trixie
BASE_IMAGE_NAME=debian:trixie-slim

# The image config a `docker import`ed rootfs lacks compared with Docker
# Hub's debian:trixie-slim (and bookworm-slim).
IMPORT_CHANGES_ENV='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
IMPORT_CHANGES_CMD='CMD ["bash"]'

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# build/attnd exists and runs (the daemon may still be in progress).
attnd_binary_ok() {
  [ -x "$ROOT/build/attnd" ] && "$ROOT/build/attnd" --help >/dev/null 2>&1
}
