#!/bin/sh
# make deploy-test: check deploy/ offline, then run it for real.
#
#   1. Kubernetes manifests: schemas (npm kubernetes-models@5.1.0), unknown
#      fields and project rules (tests/deploy/validate_k8s.mjs); broken
#      copies must be rejected.
#   1b. KServe and KEDA manifests (deploy/kserve/): the CRDs' schemas in
#      ../shared/specs/kubernetes beside the checkout and project rules
#      (tests/deploy/validate_kserve.py); broken copies must be rejected.
#      Without that folder these checks are skipped, and say so.
#   2. Prometheus configs: promtool check config (Debian prometheus).
#   3. deploy/compose.yaml: docker-compose config -q (Debian docker-compose).
#   4. The Deployment, run with `podman kube play` (Debian podman + runc)
#      from an image built from the Dockerfile; /healthz, /readyz, /metrics
#      and /v1/attention over loopback; `podman kube down`.
#   5. With a working build/attnd: a real Prometheus scrapes it using a copy of
#      deploy/prometheus/prometheus.yml retargeted at it.
# Closing line: "deploy-test: N passed, N failed".
#
# Knobs: ATTND_CI_CACHE (default /var/cache/attnd-ci), SKIP_PODMAN=1,
# KEEP=1 (leave the pod and scratch dir for a look).
set -u
. "$(dirname "$0")/lib.sh"

SCRATCH=$(mktemp -d /tmp/attnd-deploy.XXXXXX)
T0=$(date +%s)
PODMAN_IMAGE=localhost/attnd:latest
# (deployment.yaml names the image attnd:latest; podman resolves that
# short name to localhost/attnd:latest)
KUBE_FILE=""
ATTND_PID=""
PROM_PID=""

cleanup() {
  [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  [ -n "$ATTND_PID" ] && kill "$ATTND_PID" 2>/dev/null && wait "$ATTND_PID" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "KEEP=1: scratch $SCRATCH"; return; fi
  [ -n "$KUBE_FILE" ] && podman kube down "$KUBE_FILE" >/dev/null 2>&1
  rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE
cd "$ROOT" || exit 1

HAVE_ATTND=""
if attnd_binary_ok; then HAVE_ATTND=1; else
  log "build/attnd missing or not working: the live Prometheus scrape is skipped"
fi

# ------------------------------------------------- 1. Kubernetes manifests
log "Kubernetes manifests"
command -v node >/dev/null 2>&1 || need_pkgs nodejs npm || fail "install nodejs npm"
command -v npm >/dev/null 2>&1 || need_pkgs npm || fail "install npm"
NODE_DIR="$CACHE/node"
mkdir -p "$NODE_DIR"
(
  flock 9
  [ -f "$NODE_DIR/node_modules/kubernetes-models/package.json" ] &&
    [ -f "$NODE_DIR/node_modules/yaml/package.json" ] && exit 0
  cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error \
    kubernetes-models@5.1.0 yaml@2 >"$SCRATCH/npm.log" 2>&1 ||
    { tail -n 20 "$SCRATCH/npm.log"; exit 1; }
) 9>"$CACHE/.node.lock" || fail "npm install kubernetes-models@5.1.0 yaml@2"

ATTND_ARG=""
[ -n "$HAVE_ATTND" ] && ATTND_ARG="--attnd $ROOT/build/attnd"
validate() { node tests/deploy/validate_k8s.mjs --modules "$NODE_DIR" $ATTND_ARG "$@"; }
if validate deploy/k8s/*.yaml >"$SCRATCH/validate.out" 2>&1; then
  pass "deploy/k8s/*.yaml: $(tail -n 1 "$SCRATCH/validate.out")"
else
  fail "deploy/k8s/*.yaml: $(tail -n 1 "$SCRATCH/validate.out")"
  grep -v '^ok ' "$SCRATCH/validate.out" | sed 's/^/    | /'
fi

# The validator must reject each of these broken copies.
# mutate NAME FILE FROM TO: copy deploy/k8s to a scratch dir, replace the
# first FROM (a python regex) in FILE by TO, validate, expect a failure.
mutate() {
  _d="$SCRATCH/mut"; rm -rf "$_d"; mkdir -p "$_d"; cp deploy/k8s/*.yaml "$_d/"
  if ! "$PY" - "$_d/$2" "$3" "$4" <<'EOF'
import re, sys
path, old, new = sys.argv[1:4]
text = open(path).read()
out, n = re.subn(old, new, text, count=1, flags=re.M)
if n != 1:
    sys.exit("pattern %r not in %s" % (old, path))
open(path, "w").write(out)
EOF
  then fail "rejects $1 (mutation did not apply)"; return; fi
  check_fails "validator rejects $1" validate "$_d"/*.yaml
}
mutate "a string replica count" deployment.yaml '^  replicas: 2$' '  replicas: two'
mutate "an unknown container field (portz)" deployment.yaml '^          ports:$' '          portz:'
mutate "an HPA typo (averageUtilisation)" hpa.yaml 'averageUtilization: 70' 'averageUtilisation: 70'
mutate "a selector that misses the pod labels" deployment.yaml '^      app.kubernetes.io/name: attnd$' '      app.kubernetes.io/name: attnd-v2'
mutate "a Service targetPort no container has" service.yaml 'targetPort: http' 'targetPort: 9000'
mutate "a port out of range" service.yaml 'port: 8000' 'port: 80000'
mutate "a readiness probe on /healthz" deployment.yaml 'path: /readyz' 'path: /healthz'
mutate "an HPA aimed at another Deployment" hpa.yaml '    name: attnd$' '    name: attnd-old'
mutate "a misspelt ATTND_ variable" deployment.yaml 'name: ATTND_DRAIN_DELAY_MS' 'name: ATTND_DRAIN_DELAY'
mutate "a grace period shorter than the drain" deployment.yaml 'terminationGracePeriodSeconds: 40' 'terminationGracePeriodSeconds: 10'
mutate "a writable root filesystem" deployment.yaml 'readOnlyRootFilesystem: true' 'readOnlyRootFilesystem: false'
mutate "more workers than the cpu limit" deployment.yaml '(name: ATTND_WORKERS\n\s+value: )"2"' '\g<1>"8"'
mutate "an HTTP probe on a loopback-only sidecar" sidecar.yaml \
  'exec:\n(\s+)command: \["/usr/local/bin/attnd", "--probe"\]\n(\s+)periodSeconds: 5' \
  'httpGet:\n\1path: /readyz\n\1port: http\n\2periodSeconds: 5'
mutate "client shared memory on a disk-backed /dev/shm" sidecar.yaml \
  '(name: dshm\n\s+emptyDir:\n\s+)medium: Memory' '\g<1>medium: ""'
mutate "client shared memory the app container cannot see" sidecar.yaml \
  'mountPath: /dev/shm' 'mountPath: /tmp/shm'
mutate "client shared memory on the pod IP" sidecar.yaml \
  '(name: ATTND_HOST\n\s+value: )"127.0.0.1"' '\g<1>"0.0.0.0"'

# ------------------------------------------- 1b. KServe and KEDA manifests
# The CRDs as KServe and KEDA ship them, beside the checkout (the shared
# specs folder); ATTND_CRDS names another copy.
log "KServe and KEDA manifests"
CRDS=${ATTND_CRDS:-$ROOT/../shared/specs/kubernetes}
if [ ! -d "$CRDS" ] || ! ls "$CRDS"/*.yaml >/dev/null 2>&1; then
  skip "deploy/kserve/*.yaml against the KServe and KEDA CRDs: no CRDs in $CRDS"
else
  CRDS=$(cd "$CRDS" && pwd)
  need_pkgs python3-jsonschema python3-yaml || fail "install python3-jsonschema python3-yaml"
  validate_kserve() { /usr/bin/python3 tests/deploy/validate_kserve.py --crds "$CRDS" $ATTND_ARG "$@"; }
  # With a working build/attnd the runtime's container also runs, as
  # KServe would start it for the InferenceService (--run).
  if validate_kserve ${ATTND_ARG:+--run} deploy/kserve/*.yaml >"$SCRATCH/kserve.out" 2>&1; then
    pass "deploy/kserve/*.yaml: $(tail -n 1 "$SCRATCH/kserve.out") (CRDs in $CRDS)"
  else
    fail "deploy/kserve/*.yaml: $(tail -n 1 "$SCRATCH/kserve.out")"
    grep -v '^ok ' "$SCRATCH/kserve.out" | sed 's/^/    | /'
  fi
  # mutate_kserve NAME FILE FROM TO: as mutate, on a copy of deploy/kserve.
  mutate_kserve() {
    _d="$SCRATCH/mutk"; rm -rf "$_d"; mkdir -p "$_d"; cp deploy/kserve/*.yaml "$_d/"
    if ! "$PY" - "$_d/$2" "$3" "$4" <<'EOF'
import re, sys
path, old, new = sys.argv[1:4]
text = open(path).read()
out, n = re.subn(old, new, text, count=1, flags=re.M)
if n != 1:
    sys.exit("pattern %r not in %s" % (old, path))
open(path, "w").write(out)
EOF
    then fail "rejects $1 (mutation did not apply)"; return; fi
    check_fails "KServe validator rejects $1" validate_kserve "$_d"/*.yaml
  }
  # The schemas: a wrong type, misspelt fields, a missing required field.
  mutate_kserve "protocolVersions as a string" servingruntime.yaml \
    '^  protocolVersions:\n    - v2$' '  protocolVersions: v2'
  mutate_kserve "a number where KEDA wants a string (threshold: 4)" scaledobject.yaml \
    'threshold: "4"' 'threshold: 4'
  mutate_kserve "a misspelt runtime field (supportedModelFormat)" servingruntime.yaml \
    '^  supportedModelFormats:$' '  supportedModelFormat:'
  mutate_kserve "a misspelt predictor field (minReplica)" inferenceservice.yaml \
    '^    minReplicas: 2$' '    minReplica: 2'
  mutate_kserve "a misspelt container field (imagePullPolice)" servingruntime.yaml \
    'imagePullPolicy: IfNotPresent' 'imagePullPolice: IfNotPresent'
  mutate_kserve "a ScaledObject without triggers (required)" scaledobject.yaml \
    '^  triggers:\n(    .*\n)+' ''
  mutate_kserve "a modelFormat without its name (required)" inferenceservice.yaml \
    '^        name: attnd\n' ''
  mutate_kserve "a port number as text" servingruntime.yaml \
    'containerPort: 8080' 'containerPort: http'
  # The project's rules.
  mutate_kserve "a container not named kserve-container" servingruntime.yaml \
    'name: kserve-container' 'name: attnd'
  mutate_kserve "a runtime without v2" servingruntime.yaml '^    - v2$' '    - v1'
  mutate_kserve "a runtime that ignores the InferenceService's name" servingruntime.yaml \
    '^        - --model-name=\{\{\.Name\}\}$' '        - --model-name=attention'
  mutate_kserve "attnd on a port other than 8080" servingruntime.yaml \
    '(name: ATTND_PORT\n\s+value: )"8080"' '\g<1>"8000"'
  mutate_kserve "metrics annotated on another port" servingruntime.yaml \
    'prometheus.kserve.io/port: "8080"' 'prometheus.kserve.io/port: "8002"'
  mutate_kserve "a misspelt ATTND_ variable" servingruntime.yaml \
    'name: ATTND_DRAIN_S$' 'name: ATTND_DRAIN_SECONDS'
  mutate_kserve "Serverless mode" inferenceservice.yaml \
    'deploymentMode: Standard' 'deploymentMode: Serverless'
  mutate_kserve "a second autoscaler (no autoscalerClass external)" inferenceservice.yaml \
    '^    serving.kserve.io/autoscalerClass: external\n' ''
  mutate_kserve "no Prometheus scraping" inferenceservice.yaml \
    'enable-prometheus-scraping: "true"' 'enable-prometheus-scraping: "false"'
  mutate_kserve "a model format the runtime does not serve" inferenceservice.yaml \
    '^        name: attnd$' '        name: triton'
  mutate_kserve "a ScaledObject aimed at the InferenceService, not its predictor" scaledobject.yaml \
    '^    name: sdpa-predictor$' '    name: sdpa'
  mutate_kserve "a query on a metric attnd does not export" scaledobject.yaml \
    'query: sum\(rate\(attnd_request_duration_seconds_sum' 'query: sum(rate(attnd_requests_in_progress'
fi

# ------------------------------------------------------------ 2. Prometheus
log "Prometheus configs"
need_pkgs prometheus || fail "install prometheus"
check "promtool check config deploy/prometheus/prometheus.yml" \
  promtool check config deploy/prometheus/prometheus.yml
# Debian's prometheus is built without Kubernetes service discovery, so its
# promtool rejects kubernetes_sd_configs as an unknown field.  Check the rest
# of that file (relabel rules, regexes) with the discovery swapped for a
# static target.
sed -e 's/^\(\s*\)kubernetes_sd_configs:/\1static_configs:/' \
    -e 's/^\(\s*\)- role: pod$/\1- targets: ["127.0.0.1:8000"]/' \
  deploy/prometheus/prometheus-kubernetes.yml >"$SCRATCH/prometheus-kubernetes-static.yml"
check "prometheus-kubernetes.yml: kubernetes_sd_configs with role pod" \
  grep -Eq '^\s+- role: pod$' deploy/prometheus/prometheus-kubernetes.yml
check "promtool check config prometheus-kubernetes.yml (relabelling, static discovery)" \
  promtool check config "$SCRATCH/prometheus-kubernetes-static.yml"
sed 's/regex: attnd$/regex: "attnd(["/' "$SCRATCH/prometheus-kubernetes-static.yml" >"$SCRATCH/prom-bad.yml"
check_fails "promtool rejects a broken relabel regex" promtool check config "$SCRATCH/prom-bad.yml"

# --------------------------------------------------------------- 3. compose
log "compose file"
need_pkgs docker-compose || fail "install docker-compose"
check "docker-compose -f deploy/compose.yaml config -q" docker-compose -f deploy/compose.yaml config -q
sed 's/^    ports:$/    portz:/' deploy/compose.yaml >"$SCRATCH/compose-bad.yaml"
check_fails "docker-compose config rejects an unknown key (portz)" \
  docker-compose -f "$SCRATCH/compose-bad.yaml" config -q

# ------------------------------------------------ 4. podman kube play
if [ "${SKIP_PODMAN:-0}" = 1 ]; then
  log "SKIP_PODMAN=1: podman kube play skipped"
else
  log "podman kube play deploy/k8s/deployment.yaml"
  need_pkgs podman runc catatonit netavark aardvark-dns iptables || fail "install podman runc catatonit netavark iptables"
  # Podman's defaults fail on these machines (nofile above the hard limit,
  # crun refuses cgroup v1 hybrid); nothing under /etc/containers is changed.
  cat >"$SCRATCH/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
  export CONTAINERS_CONF="$SCRATCH/containers.conf"
  if ! podman image exists "localhost/$BASE_IMAGE_NAME"; then
    TAR=$(base_tarball "$BASE_SUITE") || fail "debootstrap $BASE_SUITE minbase"
    [ -n "${TAR:-}" ] && check "podman import $(basename "$TAR") as $BASE_IMAGE_NAME" \
      podman import --change "$IMPORT_CHANGES_ENV" --change "$IMPORT_CHANGES_CMD" \
        "$TAR" "localhost/$BASE_IMAGE_NAME"
  fi
  podman tag "localhost/$BASE_IMAGE_NAME" "docker.io/library/$BASE_IMAGE_NAME" 2>/dev/null
  B0=$(date +%s)
  OLD_IDS="$(podman image inspect -f '{{.Id}}' "$PODMAN_IMAGE" "$PODMAN_IMAGE-build" 2>/dev/null)"
  if podman build --pull=never --target build -t "$PODMAN_IMAGE-build" . >"$SCRATCH/podman-build.log" 2>&1 &&
     podman build --pull=never -t "$PODMAN_IMAGE" . >>"$SCRATCH/podman-build.log" 2>&1; then
    pass "podman build -t $PODMAN_IMAGE . ($(($(date +%s) - B0)) s)"
    # Images of an earlier run that the new build untagged.
    for _id in $OLD_IDS; do
      [ -z "$(podman image inspect -f '{{.RepoTags}}' "$_id" 2>/dev/null | tr -d '[]')" ] &&
        podman rmi "$_id" >/dev/null 2>&1
    done
    # The manifest as written, except that the container port is published
    # on a loopback host port so this machine can reach the pod, and one
    # replica (podman plays every replica; they cannot share the host port).
    KPORT=$(free_port)
    KUBE_FILE="$SCRATCH/deployment.yaml"
    "$PY" - deploy/k8s/deployment.yaml "$KUBE_FILE" "$KPORT" <<'EOF'
import re, sys
src, dst, port = sys.argv[1:4]
text = open(src).read()
text, n = re.subn(r"^(\s+)containerPort: 8000$",
                  r"\g<0>\n\1hostPort: %s\n\1hostIP: 127.0.0.1" % port, text, count=1, flags=re.M)
if n != 1:
    sys.exit("no containerPort: 8000 in " + src)
text, n = re.subn(r"^  replicas: \d+$", "  replicas: 1", text, count=1, flags=re.M)
if n != 1:
    sys.exit("no spec.replicas in " + src)
open(dst, "w").write(text)
EOF
    podman kube down "$KUBE_FILE" >/dev/null 2>&1
    if podman kube play "$KUBE_FILE" >"$SCRATCH/kube-play.log" 2>&1; then
      pass "podman kube play deployment.yaml"
      POD=$(podman pod ps --filter name=attnd --format '{{.Name}}' | head -n 1)
      CTR=$(podman ps --filter "pod=$POD" --format '{{.Names}}' | grep -v -- '-infra$' | head -n 1)
      F0=$FAILED
      py_checks "$PY" tests/deploy/attnd_check.py wait "127.0.0.1:$KPORT" 30
      py_checks "$PY" tests/deploy/attnd_check.py smoke "127.0.0.1:$KPORT"
      check "pod container runs as uid 10001" sh -c \
        "podman exec $CTR cat /proc/1/status | grep -Eq '^Uid:[[:space:]]+10001[[:space:]]'"
      check "pod container root filesystem is read-only" test \
        "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$CTR")" = true
      check "pod container got the manifest's ATTND_DRAIN_DELAY_MS" sh -c \
        "podman exec $CTR cat /proc/1/environ | tr '\\0' '\\n' | grep -qx ATTND_DRAIN_DELAY_MS=5000"
      check "pod container memory limit applied (640Mi)" test \
        "$(podman inspect -f '{{.HostConfig.Memory}}' "$CTR")" = $((640 * 1024 * 1024))
      if [ "$FAILED" -gt "$F0" ]; then podman logs "$CTR" 2>&1 | tail -n 20 | sed 's/^/    | /'; fi
      check "podman kube down" podman kube down "$KUBE_FILE"
      KUBE_FILE=""
    else
      fail "podman kube play deployment.yaml"; tail -n 20 "$SCRATCH/kube-play.log" | sed 's/^/    | /'
    fi

    # The sidecar pod: the application image is a placeholder, so the app
    # container runs the base image instead and talks to attnd over the
    # pod's loopback with bash's /dev/tcp (the base image has no curl).
    log "podman kube play deploy/k8s/sidecar.yaml"
    KUBE_FILE="$SCRATCH/sidecar.yaml"
    "$PY" - deploy/k8s/sidecar.yaml "$KUBE_FILE" <<'EOF'
import re, sys
src, dst = sys.argv[1:3]
text = open(src).read()
text, n = re.subn(r"^(\s+)image: registry\.example\.com/my-app:1\.0$",
                  r'\1image: localhost/debian:trixie-slim\n\1command: ["sleep", "infinity"]',
                  text, count=1, flags=re.M)
if n != 1:
    sys.exit("no placeholder app image in " + src)
open(dst, "w").write(text)
EOF
    podman kube down "$KUBE_FILE" >/dev/null 2>&1
    if podman kube play "$KUBE_FILE" >"$SCRATCH/kube-play-sidecar.log" 2>&1; then
      pass "podman kube play sidecar.yaml"
      POD=$(podman pod ps --filter name=app-with-attnd --format '{{.Name}}' | head -n 1)
      APP=$(podman ps --filter "pod=$POD" --format '{{.Names}}' | grep -- '-app$' | head -n 1)
      SIDE=$(podman ps --filter "pod=$POD" --format '{{.Names}}' | grep -- '-attnd$' | head -n 1)
      _i=0
      until podman exec "$SIDE" /usr/local/bin/attnd --probe >/dev/null 2>&1 || [ $_i -ge 40 ]; do
        sleep 0.25; _i=$((_i + 1))
      done
      check "sidecar: attnd --probe (the exec probe) succeeds" podman exec "$SIDE" /usr/local/bin/attnd --probe
      BODY='{"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]], "value": [[[1, 0], [0, 1], [1, 1]]]}'
      podman exec "$APP" bash -c '
        exec 3<>/dev/tcp/127.0.0.1/8000
        printf "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" "${#1}" "$1" >&3
        cat <&3' sh "$BODY" >"$SCRATCH/sidecar-answer.txt" 2>&1
      check "sidecar: the app container gets 200 from attnd on 127.0.0.1:8000" \
        grep -q '^HTTP/1.1 200' "$SCRATCH/sidecar-answer.txt"
      # Same numbers as the float64 reference of the design example.
      check "sidecar: the answer carries the design example's weights" "$PY" - "$SCRATCH/sidecar-answer.txt" <<'EOF'
import json, math, sys
body = open(sys.argv[1], "rb").read().split(b"\r\n\r\n", 1)[1]
w = json.loads(body)["weights"][0]
q, k = [[1, 0], [0, 2]], [[1, 1], [2, 0], [0, 3]]
for qi, row in zip(q, w):
    s = [sum(a * b for a, b in zip(qi, kj)) / math.sqrt(2) for kj in k]
    e = [math.exp(x - max(s)) for x in s]
    ref = [x / sum(e) for x in e]
    assert all(abs(a - b) <= 1e-5 for a, b in zip(row, ref)), (row, ref)
EOF
      # The same API on the Unix socket in the shared emptyDir: the base
      # image has no client for it, so check the socket is there for the app.
      check "sidecar: attnd's unix socket is in the app container's /run/attnd" \
        podman exec "$APP" test -S /run/attnd/attnd.sock
      # Tensors through the shared /dev/shm: the app container writes the
      # design example's query, key and value (float32) into a shared memory
      # object, registers it and asks for the output at byte 4096 of it;
      # attnd reads and writes the object through its own /dev/shm mount.
      # podman 4.3 makes the emptyDir a root-owned directory on disk (0755;
      # it ignores medium: Memory and fsGroup), where Kubernetes makes it
      # world-writable: open it up as Kubernetes would.
      podman exec --user 0 "$APP" chmod 1777 /dev/shm
      podman exec "$APP" bash -c '
        f=/dev/shm/attnd-deploy-test
        post() {
          exec 3<>/dev/tcp/127.0.0.1/8000
          printf "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" "$1" "${#2}" "$2" >&3
          head -n 1 <&3
          exec 3<&-
        }
        shm() { echo "{\"shared_memory_region\": \"t\", \"shared_memory_offset\": $1, \"shared_memory_byte_size\": $2}"; }
        head -c 8192 /dev/zero >"$f"
        z="\x00\x00\x00\x00" one="\x00\x00\x80\x3f" two="\x00\x00\x00\x40" three="\x00\x00\x40\x40"
        printf "$one$z$z$two$one$one$two$z$z$three$one$z$z$one$one$one" |
          dd of="$f" conv=notrunc 2>/dev/null
        post /v2/systemsharedmemory/region/t/register "{\"key\": \"/attnd-deploy-test\", \"byte_size\": 8192}"
        post /v2/models/attention/infer "{\"inputs\": [
          {\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1, 2, 2], \"parameters\": $(shm 0 16)},
          {\"name\": \"key\", \"datatype\": \"FP32\", \"shape\": [1, 3, 2], \"parameters\": $(shm 16 24)},
          {\"name\": \"value\", \"datatype\": \"FP32\", \"shape\": [1, 3, 2], \"parameters\": $(shm 40 24)}],
          \"outputs\": [{\"name\": \"output\", \"parameters\": $(shm 4096 16)}]}"
        od -An -tf4 -j 4096 -N 16 "$f"
        rm -f "$f"' >"$SCRATCH/sidecar-shm.txt" 2>&1
      check "sidecar: the app registers a region in the shared /dev/shm (200)" \
        sh -c "sed -n 1p '$SCRATCH/sidecar-shm.txt' | grep -q '^HTTP/1.1 200'"
      check "sidecar: attnd writes the output into the app's object, as the reference says" \
        "$PY" - "$SCRATCH/sidecar-shm.txt" <<'EOF'
import math, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[1].startswith("HTTP/1.1 200"), lines
got = [float(x) for x in " ".join(lines[2:]).split()]
q, k, v = [[1, 0], [0, 2]], [[1, 1], [2, 0], [0, 3]], [[1, 0], [0, 1], [1, 1]]
want = []
for qi in q:
    s = [sum(a * b for a, b in zip(qi, kj)) / math.sqrt(2) for kj in k]
    e = [math.exp(x - max(s)) for x in s]
    w = [x / sum(e) for x in e]
    want += [sum(w[j] * v[j][c] for j in range(3)) for c in range(2)]
assert len(got) == 4 and all(abs(a - b) <= 1e-5 for a, b in zip(got, want)), (got, want)
EOF
      check "podman kube down sidecar" podman kube down "$KUBE_FILE"
      podman volume rm dshm >/dev/null 2>&1  # the emptyDir, which podman keeps
      KUBE_FILE=""
    else
      fail "podman kube play sidecar.yaml"; tail -n 20 "$SCRATCH/kube-play-sidecar.log" | sed 's/^/    | /'
    fi
  else
    fail "podman build -t $PODMAN_IMAGE ."; tail -n 30 "$SCRATCH/podman-build.log" | sed 's/^/    | /'
  fi
fi

# --------------------------------------- 5. a real Prometheus scrapes attnd
if [ -n "$HAVE_ATTND" ]; then
  log "Prometheus scraping build/attnd"
  APORT=$(free_port)
  "$ROOT/build/attnd" --host 127.0.0.1 --port "$APORT" --workers 1 >"$SCRATCH/attnd.log" 2>&1 &
  ATTND_PID=$!
  py_checks "$PY" tests/deploy/attnd_check.py wait "127.0.0.1:$APORT" 20
  "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$APORT/metrics" >"$SCRATCH/metrics.txt"
  check "promtool check metrics < attnd /metrics" sh -c "grep -q '^attnd_build_info' '$SCRATCH/metrics.txt' && promtool check metrics <'$SCRATCH/metrics.txt'"
  # deploy/prometheus/prometheus.yml, retargeted and with a 1 s interval.
  sed -e "s/\"attnd:8000\"/\"127.0.0.1:$APORT\"/" \
      -e 's/^\(  scrape_interval:\).*/\1 1s/' -e 's/^\(  scrape_timeout:\).*/\1 1s/' \
      deploy/prometheus/prometheus.yml >"$SCRATCH/prometheus.yml"
  check "the retargeted prometheus.yml scrapes 127.0.0.1:$APORT" grep -q "127.0.0.1:$APORT" "$SCRATCH/prometheus.yml"
  PPORT=$(free_port)
  prometheus --config.file="$SCRATCH/prometheus.yml" --storage.tsdb.path="$SCRATCH/prom-data" \
    --web.listen-address="127.0.0.1:$PPORT" >"$SCRATCH/prometheus.log" 2>&1 &
  PROM_PID=$!
  P0=$(date +%s)
  F0=$FAILED
  py_checks "$PY" tests/deploy/attnd_check.py prom "127.0.0.1:$PPORT" attnd 60
  echo "prometheus scrape seen $(($(date +%s) - P0)) s after start"
  if [ "$FAILED" -gt "$F0" ]; then tail -n 15 "$SCRATCH/prometheus.log" | sed 's/^/    | /'; fi
  kill "$PROM_PID"; wait "$PROM_PID" 2>/dev/null; PROM_PID=""
  kill "$ATTND_PID"; wait "$ATTND_PID"; _rc=$?
  ATTND_PID=""
  check "build/attnd exits 0 on SIGTERM (rc $_rc)" test "$_rc" = 0
fi

echo "deploy-test took $(($(date +%s) - T0)) s"
finish deploy-test
