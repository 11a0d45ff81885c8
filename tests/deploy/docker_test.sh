#!/bin/sh
# make docker-test: build the attnd image with a real Docker engine, run it,
# probe it over loopback, stop it with a request in flight.
#
# Installs Debian's docker.io (and debootstrap) when missing, starts its own
# dockerd (socket, data and exec roots under a scratch/cache dir) unless one
# already answers, and provides debian:trixie-slim (the Dockerfile's base)
# from a debootstrapped rootfs when the engine lacks it (no registry is needed).  The dockerd it
# started is stopped again.  Closing line: "docker-test: N passed, N failed".
#
# Knobs: ATTND_CI_CACHE (default /var/cache/attnd-ci), ATTND_IMAGE
# (default attnd:ci), KEEP=1 keeps the container and dockerd for a look.
set -u
. "$(dirname "$0")/lib.sh"

IMAGE=${ATTND_IMAGE:-attnd:ci}
NAME=attnd-docker-test-$$
SCRATCH=$(mktemp -d /tmp/attnd-docker.XXXXXX)
STARTED_DOCKERD=""
DOCKERD_PID=""
T0=$(date +%s)

cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    docker rm -f "$NAME" >/dev/null 2>&1
    docker rm -f "$NAME-probe" >/dev/null 2>&1
    if [ -n "$STARTED_DOCKERD" ] && [ -s "$DOCKERD_PID" ]; then
      _pid=$(cat "$DOCKERD_PID")
      kill "$_pid" 2>/dev/null
      _i=0
      while kill -0 "$_pid" 2>/dev/null && [ $_i -lt 60 ]; do sleep 0.5; _i=$((_i + 1)); done
      kill -9 "$_pid" 2>/dev/null
    fi
    rm -rf "$SCRATCH"
  else
    echo "KEEP=1: container $NAME, DOCKER_HOST=${DOCKER_HOST:-default}, scratch $SCRATCH"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

cd "$ROOT" || exit 1

# The build stage must install every -dev package the host build needs
# (tests/deps.sh is the list the Makefile's pkg-config line relies on).
dev_pkgs_in_dockerfile() {
  _miss=""
  for _p in $(sed -n '/^PKGS="/,/"/p' tests/deps.sh | tr -d '"' | sed 's/^PKGS=//' | tr ' ' '\n' | grep -- '-dev$'); do
    grep -Eq "(^|[[:space:]])$_p([[:space:]]|\$)" Dockerfile || _miss="$_miss $_p"
  done
  [ -z "$_miss" ] || { echo "Dockerfile lacks:$_miss"; return 1; }
}
check "Dockerfile installs the -dev packages of tests/deps.sh" dev_pkgs_in_dockerfile

# --------------------------------------------------------------- the engine
if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
  if ! docker info >/dev/null 2>&1; then
    need_pkgs docker.io || { fail "install docker.io"; finish docker-test; exit 1; }
  fi
fi

if docker info >/dev/null 2>&1; then
  log "using the running Docker engine (${DOCKER_HOST:-default socket})"
else
  STARTED_DOCKERD=1
  mkdir -p "$CACHE/dockerd-data"
  # One dockerd per data root: runs of this test take turns, and a dockerd
  # left behind by an interrupted run (its pidfile names it) is stopped.
  exec 8>"$CACHE/.dockerd.lock"
  flock 8
  DOCKERD_PID="$CACHE/dockerd.pid"
  if [ -s "$DOCKERD_PID" ]; then
    _old=$(cat "$DOCKERD_PID")
    if tr '\0' ' ' <"/proc/$_old/cmdline" 2>/dev/null | grep -q "^dockerd .*--data-root $CACHE/dockerd-data"; then
      log "stopping dockerd $_old left by an interrupted run"
      kill "$_old"
      _i=0
      while kill -0 "$_old" 2>/dev/null && [ $_i -lt 60 ]; do sleep 0.5; _i=$((_i + 1)); done
    fi
    rm -f "$DOCKERD_PID"
  fi
  export DOCKER_HOST="unix://$SCRATCH/docker.sock"
  log "starting dockerd (data root $CACHE/dockerd-data)"
  dockerd --host "$DOCKER_HOST" --data-root "$CACHE/dockerd-data" \
    --exec-root "$SCRATCH/exec" --pidfile "$DOCKERD_PID" \
    >"$SCRATCH/dockerd.log" 2>&1 8>&- &
  _i=0
  until docker info >/dev/null 2>&1; do
    _i=$((_i + 1))
    if [ $_i -gt 120 ] || ! kill -0 $! 2>/dev/null; then
      tail -n 30 "$SCRATCH/dockerd.log"
      fail "dockerd starts"; finish docker-test; exit 1
    fi
    sleep 0.5
  done
fi
pass "Docker engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"

# ---------------------------------------------------------- the base image
if docker image inspect "$BASE_IMAGE_NAME" >/dev/null 2>&1; then
  pass "$BASE_IMAGE_NAME present"
else
  TAR=$(base_tarball "$BASE_SUITE") || { fail "debootstrap $BASE_SUITE minbase"; finish docker-test; exit 1; }
  check "docker import $(basename "$TAR") as $BASE_IMAGE_NAME" \
    docker import --change "$IMPORT_CHANGES_ENV" --change "$IMPORT_CHANGES_CMD" \
      "$TAR" "$BASE_IMAGE_NAME"
fi
check "the Dockerfile builds both stages FROM $BASE_IMAGE_NAME" sh -c \
  "[ \"\$(grep -c '^FROM $BASE_IMAGE_NAME AS ' Dockerfile)\" = 2 ] && [ \"\$(grep -c '^FROM ' Dockerfile)\" = 2 ]"
check "$BASE_IMAGE_NAME is Debian 13" docker run --rm --entrypoint /bin/sh "$BASE_IMAGE_NAME" -c \
  'grep -q "^VERSION_CODENAME=trixie$" /etc/os-release'

# ------------------------------------------------------------------ build it
B0=$(date +%s)
# The legacy builder resolves FROM from local images and never contacts a
# registry; BuildKit would look for a frontend and for base image metadata.
# The build stage is tagged too, so that replacing the images of an earlier
# run (removed below once untagged) keeps the compiler layer cached.
OLD_IDS="$(docker image inspect -f '{{.Id}}' "$IMAGE" "$IMAGE-build" 2>/dev/null)"
if DOCKER_BUILDKIT=0 docker build --target build -t "$IMAGE-build" . >"$SCRATCH/build.log" 2>&1 &&
   DOCKER_BUILDKIT=0 docker build -t "$IMAGE" . >>"$SCRATCH/build.log" 2>&1; then
  pass "docker build -t $IMAGE . ($(($(date +%s) - B0)) s)"
  for _id in $OLD_IDS; do
    [ -z "$(docker image inspect -f '{{.RepoTags}}' "$_id" 2>/dev/null | tr -d '[]')" ] &&
      docker rmi "$_id" >/dev/null 2>&1
  done
else
  fail "docker build -t $IMAGE ."; tail -n 40 "$SCRATCH/build.log" | sed 's/^/    | /'
  finish docker-test; exit 1
fi
SIZE=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "image size: $SIZE bytes ($((SIZE / 1000000)) MB)"

# The image's configuration, as built.
cfg() { docker image inspect -f "$1" "$IMAGE"; }
check "image runs as uid 10001" test "$(cfg '{{.Config.User}}')" = "10001:10001"
check "image exposes 8000/tcp" sh -c "docker image inspect -f '{{json .Config.ExposedPorts}}' $IMAGE | grep -q '8000/tcp'"
check "image sets ATTND_HOST=0.0.0.0 ATTND_PORT=8000" sh -c \
  "docker image inspect -f '{{json .Config.Env}}' $IMAGE | grep -q 'ATTND_HOST=0.0.0.0' &&
   docker image inspect -f '{{json .Config.Env}}' $IMAGE | grep -q 'ATTND_PORT=8000'"
check "image HEALTHCHECK is attnd --probe" sh -c \
  "docker image inspect -f '{{json .Config.Healthcheck.Test}}' $IMAGE | grep -q 'attnd\",\"--probe'"
check "image STOPSIGNAL SIGTERM" test "$(cfg '{{.Config.StopSignal}}')" = SIGTERM
check "image ENTRYPOINT /usr/local/bin/attnd" test "$(cfg '{{json .Config.Entrypoint}}')" = '["/usr/local/bin/attnd"]'
check "runtime image has no compiler or -dev headers" docker run --rm --entrypoint /bin/sh "$IMAGE" -c \
  '! command -v gcc && ! command -v cc && ! test -e /usr/include/microhttpd.h'
check "all shared libraries of attnd resolve" docker run --rm --entrypoint /bin/sh "$IMAGE" -c \
  '! ldd /usr/local/bin/attnd | grep "not found"'
# The probe must be able to fail: nothing listens on port 1.
check_fails "attnd --probe fails when nothing listens" \
  docker run --rm --name "$NAME-probe" -e ATTND_PORT=1 "$IMAGE" --probe

# -------------------------------------------------------------------- run it
PORT=$(free_port)
R0=$(date +%s)
if docker run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" \
     -e ATTND_DRAIN_DELAY_MS=3000 -e ATTND_DRAIN_S=25 "$IMAGE" >/dev/null 2>"$SCRATCH/run.err"; then
  pass "docker run -p 127.0.0.1:$PORT:8000 $IMAGE"
else
  fail "docker run $IMAGE"; cat "$SCRATCH/run.err"; finish docker-test; exit 1
fi

# HEALTHCHECK: first probe after the 10 s interval.
_status=""
_i=0
while [ $_i -lt 90 ]; do
  _status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$NAME" 2>/dev/null)
  [ "$_status" = healthy ] && break
  [ "$_status" = unhealthy ] && break
  [ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ] || break
  sleep 0.5; _i=$((_i + 1))
done
if [ "$_status" = healthy ]; then
  pass "HEALTHCHECK reports healthy ($(($(date +%s) - R0)) s after start)"
else
  fail "HEALTHCHECK reports healthy (status '${_status}')"
  docker inspect -f '{{json .State}}' "$NAME"; docker logs "$NAME" 2>&1 | tail -n 20
fi
check "container process runs as uid 10001" sh -c "docker exec $NAME cat /proc/1/status | grep -Eq '^Uid:[[:space:]]+10001[[:space:]]'"
check "the process listens on 0.0.0.0:8000 inside" docker exec "$NAME" /bin/sh -c \
  'grep -q "00000000:1F40 00000000:0000 0A" /proc/net/tcp'

py_checks "$PY" tests/deploy/attnd_check.py wait "127.0.0.1:$PORT" 30
py_checks "$PY" tests/deploy/attnd_check.py smoke "127.0.0.1:$PORT"

# ------------------------------------------------- stop with work in flight
py_checks "$PY" tests/deploy/attnd_check.py drain "127.0.0.1:$PORT" -- docker stop -t 30 "$NAME"
_state=$(docker inspect -f '{{.State.Status}} exit={{.State.ExitCode}} oom={{.State.OOMKilled}}' "$NAME")
check "container exited 0 after SIGTERM ($_state)" test "$_state" = "exited exit=0 oom=false"
if [ "$FAILED" -gt 0 ]; then
  echo "container log (tail):"; docker logs "$NAME" 2>&1 | tail -n 30 | sed 's/^/    | /'
fi

# ------------------------------------------- deploy/compose.yaml, for real
# Only the attnd service: the Prometheus image comes from a registry.
# docker-compose v1 builds with the engine's own (legacy) builder.
if need_pkgs docker-compose; then
  COMPOSE_PROJECT=attnd-ci-$$
  export ATTND_HOST_PORT
  ATTND_HOST_PORT=$(free_port)
  if docker-compose -p "$COMPOSE_PROJECT" -f deploy/compose.yaml up -d --build attnd \
       >"$SCRATCH/compose.log" 2>&1; then
    pass "docker-compose -f deploy/compose.yaml up -d --build attnd"
    py_checks "$PY" tests/deploy/attnd_check.py wait "127.0.0.1:$ATTND_HOST_PORT" 30
    py_checks "$PY" tests/deploy/attnd_check.py smoke "127.0.0.1:$ATTND_HOST_PORT"
    CCTR=$(docker-compose -p "$COMPOSE_PROJECT" -f deploy/compose.yaml ps -q attnd)
    check "compose: read-only root, tmpfs /tmp, all capabilities dropped" test \
      "$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}} {{json .HostConfig.Tmpfs}} {{json .HostConfig.CapDrop}}' "$CCTR")" \
      = 'true {"/tmp":""} ["ALL"]'
  else
    fail "docker-compose up -d --build attnd"; tail -n 20 "$SCRATCH/compose.log" | sed 's/^/    | /'
  fi
  check "docker-compose down" docker-compose -p "$COMPOSE_PROJECT" -f deploy/compose.yaml down -v --rmi all
else
  fail "install docker-compose"
fi

echo "docker-test took $(($(date +%s) - T0)) s"
finish docker-test
