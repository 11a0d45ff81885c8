#!/bin/sh
# make fresh-test [RELEASE=13|12]: the README's two commands on a fresh
# Debian container of that release (13, trixie, by default; 12, bookworm)
# with nothing but make installed, as root, each container new:
#
#   1. `make test` alone; then, in the same container, `make run` and the
#      README's POST (the order test, run)
#   2. `make run` alone and the README's POST from a second shell (podman
#      exec), answered 200 with the README's JSON byte for byte; then
#      `make test` in the same container while it serves (the order run,
#      test); the POST again; Ctrl-C (SIGINT to make's process group)
#
# The source is `git archive HEAD` (commit first: uncommitted changes are
# not tested).  The base is debootstrap --variant=minbase <suite> from the
# Debian mirror apt uses here, configured like Docker Hub's debian:13 and
# debian:12 (deb822 sources with <suite>, <suite>-updates and
# <suite>-security, no apt lists, apt keeping no .debs); a container from it
# installs make and is committed as the make-only image.  FRESH_BASE=slim
# starts from the debian:<suite>-slim rootfs of tests/deploy/lib.sh instead.
#
# Podman (with runc, which unlike crun runs on cgroup v1 "hybrid" hosts,
# and ulimits no higher than this shell's hard limits) keeps its own
# storage under $ATTND_CI_CACHE/fresh (default /var/cache/attnd-ci/fresh):
# the rootfs tarballs and the images are built once per release and reused
# (FRESH_REBUILD=1 rebuilds those of the release tested).  Logs of the last
# run: $ATTND_CI_CACHE/fresh/logs-<suite>-minbase (or -slim).
#
# What the containers get is what `docker run -it debian:13` gives on a
# Debian host: bridge network (apt reaches the mirror through NAT), 64 MB
# /dev/shm, the default capabilities and nothing more.  A Kubernetes pod
# gets no more either, so `make test` has to pass without CAP_NET_ADMIN.
#
# Closing line "fresh-test: N passed, N failed".  KEEP=1 keeps the
# containers.  About 10 minutes per release on a 2-core machine with the
# images cached, most of it the two `make test` runs.
set -u
. "$(dirname "$0")/../deploy/lib.sh"

RELEASE=${RELEASE:-13}
case "$RELEASE" in
  13 | trixie) RELEASE=13 SUITE=trixie ;;
  12 | bookworm) RELEASE=12 SUITE=bookworm ;;
  *) echo "fresh-test: RELEASE=$RELEASE: 13 (trixie) or 12 (bookworm)" >&2; exit 2 ;;
esac
FRESH=$CACHE/fresh
STORE=$FRESH/storage
# podman's run and tmp directories belong on a filesystem a reboot clears.
STATE=/tmp/attnd-fresh-$(printf '%s' "$FRESH" | cksum | cut -d' ' -f1)
LOGS=$FRESH/logs-$SUITE-${FRESH_BASE:-minbase}
BASE_IMAGE=localhost/attnd-fresh:$SUITE-${FRESH_BASE:-minbase}
MAKE_IMAGE=$BASE_IMAGE-make
NAME=attnd-fresh-$$
SCRATCH=$(mktemp -d /tmp/attnd-fresh.XXXXXX)
T0=$(date +%s)
TIMES=""

pm() { podman --root "$STORE" --runroot "$STATE/run" --tmpdir "$STATE/tmp" "$@"; }

cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: containers $NAME-1 $NAME-2; podman --root $STORE --runroot $STATE/run --tmpdir $STATE/tmp (CONTAINERS_CONF=$FRESH/containers.conf)"
  else
    # --ignore: without it podman 4.3 removes none when one is gone already
    pm rm -f -i -t 0 "$NAME-1" "$NAME-2" "$NAME-make" >/dev/null 2>&1
  fi
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

since() { echo $(($(date +%s) - $1)); }
timed() { TIMES="$TIMES
  $(printf '%-48s %5s s' "$1" "$2")"; }

cd "$ROOT" || exit 1
mkdir -p "$FRESH" "$STATE"
rm -rf "$LOGS"; mkdir -p "$LOGS"

# ----------------------------------------------------------- what we test
# The README's commands and its curl example with the answer it shows.
readme_block() {  # readme_block LANG: the first ```LANG block after "## Try it"
  awk -v lang="$1" '/^## Try it/ { on = 1 } on && $0 == "```" lang { inb = 1; next }
                    inb && /^```/ { exit } inb { print }' README.md
}
README_POST=$(readme_block sh)
README_ANSWER=$(readme_block json)
check "README shows 'make run' and 'make test' as root's commands" sh -c \
  "sed -n '/^\`\`\`sh/,/^\`\`\`/p' README.md | head -n 5 | grep -q 'make run' &&
   sed -n '/^\`\`\`sh/,/^\`\`\`/p' README.md | head -n 5 | grep -q '^make test'"
check "README has a curl example for /v1/attention and its answer" sh -c \
  "printf '%s' \"\$1\" | grep -q '^curl .*localhost:8000/v1/attention' && [ -n \"\$2\" ]" \
  _ "$README_POST" "$README_ANSWER"

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  fail "git archive HEAD (not a git checkout)"; finish fresh-test; exit 1
fi
[ -n "$(git status --porcelain --untracked-files=no)" ] &&
  log "note: uncommitted changes are not in the test (git archive HEAD)"
git archive --prefix=attnd/ HEAD >"$SCRATCH/src.tar" ||
  { fail "git archive HEAD"; finish fresh-test; exit 1; }
log "Debian $RELEASE ($SUITE); source: $(git rev-parse --short HEAD) $(git log -1 --format=%s | cut -c1-60)"

# ------------------------------------------------------------------ podman
S0=$(date +%s)
need_pkgs podman runc catatonit netavark aardvark-dns iptables debootstrap ||
  { fail "install podman runc catatonit netavark iptables debootstrap"; finish fresh-test; exit 1; }
# Podman asks for more open files than root may have when it lacks
# CAP_SYS_RESOURCE, and lowers its own process limit to 32768: the
# containers get this shell's hard limits, no more.
hard_limit() {  # hard_limit "Max open files": from /proc/self/limits
  awk -v what="$1" 'index($0, what) == 1 { sub(what, ""); print $2 }' /proc/self/limits
}
NOFILE=$(hard_limit "Max open files")
NPROC=$(hard_limit "Max processes")
case "$NOFILE" in unlimited | "" | *[!0-9]*) NOFILE=1048576 ;; esac
case "$NPROC" in unlimited | "" | *[!0-9]*) NPROC=32768 ;; esac
[ "$NPROC" -gt 32768 ] && NPROC=32768
cat >"$FRESH/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]

[network]
network_backend = "netavark"

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$FRESH/containers.conf"

# -------------------------------------------------------------- the images
if [ "${FRESH_REBUILD:-0}" = 1 ]; then
  pm rmi -f -i "$MAKE_IMAGE" "$BASE_IMAGE" >/dev/null 2>&1
  rm -f "$FRESH/$SUITE-minbase-rootfs.tar"
  [ "${FRESH_BASE:-minbase}" = slim ] && rm -f "$CACHE/$SUITE-slim-rootfs.tar"
fi

if ! pm image exists "$BASE_IMAGE"; then
  B0=$(date +%s)
  if [ "${FRESH_BASE:-minbase}" = slim ]; then TAR=$(base_tarball "$SUITE"); else TAR=$(minbase_tarball "$SUITE"); fi
  [ -n "${TAR:-}" ] || { fail "debootstrap $SUITE"; finish fresh-test; exit 1; }
  check "podman import $(basename "$TAR") as $BASE_IMAGE" \
    pm import --change "$IMPORT_CHANGES_ENV" --change "$IMPORT_CHANGES_CMD" "$TAR" "$BASE_IMAGE"
  timed "debootstrap + import (cached afterwards)" "$(since "$B0")"
fi
if ! pm image exists "$MAKE_IMAGE"; then
  B0=$(date +%s)
  pm rm -f -i "$NAME-make" >/dev/null 2>&1
  if pm run --name "$NAME-make" "$BASE_IMAGE" sh -c \
       'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make &&
        rm -rf /var/lib/apt/lists/*' >"$LOGS/make-image.log" 2>&1 &&
     pm commit -q "$NAME-make" "$MAKE_IMAGE" >/dev/null; then
    pass "apt-get install make in a container of $BASE_IMAGE, committed as $MAKE_IMAGE"
  else
    fail "make-only image"; tail -n 20 "$LOGS/make-image.log" | sed 's/^/    | /'
    pm rm -f -i "$NAME-make" >/dev/null 2>&1; finish fresh-test; exit 1
  fi
  pm rm -f -i "$NAME-make" >/dev/null 2>&1
  timed "the make-only image (cached afterwards)" "$(since "$B0")"
fi
check "the make-only image has make and no compiler, curl or python3" pm run --rm "$MAKE_IMAGE" sh -c \
  'command -v make && ! command -v cc && ! command -v gcc && ! command -v curl && ! command -v python3'
log "base image built $(pm image inspect -f '{{.Created}}' "$MAKE_IMAGE" | cut -c1-19)"

# Does this kernel let a process without CAP_NET_ADMIN attach a socket
# filter to a TCP socket?  (perl-base is in minbase.)  Said for the
# reader of a failed drain test; the containers get no extra capability.
PROBE='use Socket; socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
my $ret_all = pack("SCCL", 6, 0, 0, 0xffffffff);
setsockopt($s, SOL_SOCKET, 26, pack("S x![P] P", 1, $ret_all)) or do { print "$!\n"; exit 1 };'
if ! _why=$(pm run --rm "$BASE_IMAGE" perl -e "$PROBE" 2>&1); then
  log "note: this kernel ($(uname -r)) refuses a socket filter on a TCP socket without CAP_NET_ADMIN ($_why);"
  log "  the containers run with the default capabilities all the same"
fi
timed "podman, images, probes" "$(since "$S0")"

# ------------------------------------------------------------- containers
# start_container N: a new container from the make-only image with the
# source in /root/attnd.
start_container() {
  pm run -d --name "$NAME-$1" --init "$MAKE_IMAGE" sleep infinity >/dev/null &&
    pm cp "$SCRATCH/src.tar" "$NAME-$1:/root/src.tar" &&
    pm exec "$NAME-$1" sh -c 'cd /root && tar -xf src.tar && rm src.tar'
}

# make_test N LOG: `make test` in container N; pass when it exits 0 and its
# last line is "suites: N passed, 0 failed".
make_test() {
  _m0=$(date +%s)
  pm exec -w /root/attnd "$NAME-$1" make test >"$LOGS/$2" 2>&1
  _rc=$?
  _last=$(grep '^suites: ' "$LOGS/$2" | tail -n 1)
  timed "make test ($2)" "$(since "$_m0")"
  if [ "$_rc" = 0 ] && printf '%s' "$_last" | grep -q ', 0 failed$'; then
    pass "make test in container $1: ${_last#suites: } ($(since "$_m0") s)"
    # (unittest's progress dots share the line when the streams interleave)
    grep ': skipped ' "$LOGS/$2" | sed 's/^[.sFE]*/    note: /'
  else
    fail "make test in container $1 (exit $_rc, '${_last:-no closing line}')"
    grep -E '^FAILED|: [0-9]+ passed, [1-9]|^[0-9]+%: Checks' "$LOGS/$2" | grep -v '100%' | sed 's/^/    | /'
    echo "    full log: $LOGS/$2"
  fi
}

# make_run N: `make run` in container N in its own process group (a
# terminal's foreground job), logging to /root/run.log; pass once
# /healthz answers 200 on port 8000 (deps and the build first).
make_run() {
  _m0=$(date +%s)
  pm exec -d -w /root/attnd "$NAME-$1" setsid sh -c \
    'echo $$ >/root/run.pid; exec make run >/root/run.log 2>&1' >/dev/null
  _code=""
  _i=0
  while [ $_i -lt 900 ]; do
    _code=$(pm exec "$NAME-$1" sh -c '[ -s /root/run.pid ] || exit 0
      kill -0 "$(cat /root/run.pid)" 2>/dev/null || { echo exited; exit 0; }
      command -v curl >/dev/null && curl -s -o /dev/null -w "%{http_code}" localhost:8000/healthz' 2>/dev/null)
    [ "$_code" = 200 ] || [ "$_code" = exited ] && break
    sleep 2; _i=$((_i + 1))
  done
  timed "make run until /healthz answers (container $1)" "$(since "$_m0")"
  pm exec "$NAME-$1" cat /root/run.log >"$LOGS/run-$1.log" 2>&1
  if [ "$_code" = 200 ]; then
    pass "make run in container $1 serves on 127.0.0.1:8000 ($(since "$_m0") s)"
  else
    fail "make run in container $1 (${_code:-no answer})"; tail -n 30 "$LOGS/run-$1.log" | sed 's/^/    | /'
    return 1
  fi
}

# readme_post N: the README's curl example, verbatim, from a second shell;
# the answer must be 200 and the README's JSON.
readme_post() {
  _out=$(pm exec "$NAME-$1" sh -c "$README_POST -w '\\n%{http_code}'" 2>&1)
  _status=$(printf '%s\n' "$_out" | tail -n 1)
  _body=$(printf '%s\n' "$_out" | sed '$d')
  if [ "$_status" = 200 ] && [ "$_body" = "$README_ANSWER" ]; then
    pass "README's POST /v1/attention in container $1: 200 $_body"
  else
    fail "README's POST /v1/attention in container $1: status '$_status'"
    printf '    got:      %s\n    expected: %s\n' "$_body" "$README_ANSWER"
  fi
}

# stop_run N: Ctrl-C, i.e. SIGINT to make run's process group; attnd must
# say it stopped and the whole group be gone within 30 s.
stop_run() {
  pm exec "$NAME-$1" sh -c 'kill -s INT -- -"$(cat /root/run.pid)"'
  _left=1
  _i=0
  while [ $_i -lt 60 ]; do
    if ! pm exec "$NAME-$1" sh -c 'kill -0 -- -"$(cat /root/run.pid)" 2>/dev/null'; then
      _left=0; break
    fi
    sleep 0.5; _i=$((_i + 1))
  done
  pm exec "$NAME-$1" cat /root/run.log >"$LOGS/run-$1.log" 2>&1
  check "Ctrl-C stops make run in container $1 (attnd: stopped, no process left)" sh -c \
    "[ $_left = 0 ] && grep -q '^attnd: stopped' '$LOGS/run-$1.log'"
}

# ------------------------------------- 1: make test alone, then make run
log "container 1: make test alone (logs in $LOGS)"
C0=$(date +%s)
if start_container 1; then
  pass "container 1 from $MAKE_IMAGE, source copied"
  make_test 1 test-alone.log
  if make_run 1; then
    readme_post 1
    stop_run 1
  fi
else
  fail "start container 1"
fi
timed "container 1 in all" "$(since "$C0")"
[ "${KEEP:-0}" = 1 ] || pm rm -f -i -t 0 "$NAME-1" >/dev/null 2>&1

# ------------------- 2: make run alone, the POST, make test while it serves
log "container 2: make run alone, then make test beside it"
C0=$(date +%s)
if start_container 2; then
  pass "container 2 from $MAKE_IMAGE, source copied"
  if make_run 2; then
    readme_post 2
    make_test 2 test-after-run.log
    readme_post 2
    stop_run 2
  fi
else
  fail "start container 2"
fi
timed "container 2 in all" "$(since "$C0")"

echo "durations:$TIMES"
echo "fresh-test (Debian $RELEASE) took $(since "$T0") s"
finish fresh-test
