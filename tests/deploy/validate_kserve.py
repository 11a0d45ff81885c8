"""Offline validation of the KServe and KEDA manifests in deploy/kserve/.

    /usr/bin/python3 tests/deploy/validate_kserve.py --crds DIR [--attnd build/attnd] file.yaml...

DIR holds the CustomResourceDefinitions as KServe and KEDA ship them
(../shared/specs/kubernetes beside the checkout).  Two layers:
  1. schema: every document validates against the openAPIV3Schema of the
     CRD version its apiVersion names (python3-jsonschema).  A cluster
     prunes fields a structural schema does not declare, so a typo would
     vanish silently there; here every object that declares its properties
     is closed (unless it says x-kubernetes-preserve-unknown-fields), and
     so a misspelt field is an error, as with kubectl --validate=strict;
  2. project rules: the runtime speaks v2 on port 8080 from a container
     named kserve-container, passes {{.Name}} to --model-name, and points
     the prometheus.kserve.io annotations at attnd's /metrics; the
     InferenceService runs in Standard mode on a runtime and format that
     exist, with Prometheus scraping and an external autoscaler; the
     ScaledObject scales that InferenceService's predictor Deployment on a
     Prometheus query of a metric attnd exports.
With --run (and --attnd), also 3. the runtime's container as KServe starts
it for each InferenceService: its env and args, {{.Name}} replaced by the
InferenceService's name, on a free loopback port: the model is ready and
answers under that name, and the annotated metrics path serves attnd's
metrics.
Prints one "ok"/"FAIL" line per document and rule; exit status 1 on failure.
"""

import argparse
import glob
import http.client
import json
import math
import os
import re
import socket
import subprocess
import sys
import time

import jsonschema
import yaml

# libyaml's loader when python3-yaml has it: the InferenceService CRD is 2 MB.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSES = 0
FAILURES = 0


def ok(msg):
    global PASSES
    PASSES += 1
    print("ok   - " + msg)


def bad(msg):
    global FAILURES
    FAILURES += 1
    print("FAIL - " + msg)


def rule(cond, what, msg):
    (ok if cond else bad)("%s: %s" % (what, msg))


# ------------------------------------------------------------------ schemas
def strict(node):
    """The CRD schema as JSON Schema with undeclared fields refused."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("properties", "patternProperties", "definitions"):
            out[k] = {name: strict(s) for name, s in v.items()}
        elif k in ("items", "additionalProperties", "not", "anyOf", "allOf", "oneOf"):
            out[k] = strict(v)
        else:
            out[k] = v
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


# ObjectMeta, which the CRDs leave as a bare object.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {"type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN},
                           "namespace": {"type": "string"},
                           "labels": STRING_MAP, "annotations": STRING_MAP}}


def load_crds(crd_dir):
    """{(group, kind): {version: schema}} from every CRD in crd_dir."""
    crds = {}
    for path in sorted(glob.glob(os.path.join(crd_dir, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.load_all(f, Loader=LOADER):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                versions = {}
                for v in spec["versions"]:
                    schema = strict(v["schema"]["openAPIV3Schema"])
                    schema.setdefault("properties", {})["metadata"] = METADATA
                    versions[v["name"]] = schema
                crds[(spec["group"], spec["names"]["kind"])] = (os.path.basename(path), versions)
    return crds


def where(err):
    return "." + ".".join(str(p) for p in err.absolute_path) if err.absolute_path else "(top)"


def check_schema(crds, obj, what):
    api = str(obj.get("apiVersion", ""))
    group, _, version = api.rpartition("/")
    found = crds.get((group, obj.get("kind")))
    if not found or version not in found[1]:
        bad("%s: no CRD for apiVersion %s kind %s" % (what, api, obj.get("kind")))
        return
    crd_file, versions = found
    validator = jsonschema.Draft7Validator(versions[version])
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        bad("%s: schema (%s %s): %s" % (what, crd_file, version,
            "; ".join("%s: %s" % (where(e), e.message) for e in errors[:5])))
    else:
        ok("%s: schema (%s %s)" % (what, crd_file, version))


# --------------------------------------------------------------- the rules
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # proto_v2_model_name_check


def known_env(attnd):
    """The ATTND_* variables: from `attnd --help`, else server/config.c."""
    if attnd:
        text = subprocess.run([attnd, "--help"], capture_output=True, text=True).stdout
        return set(re.findall(r"\benv (ATTND_[A-Z0-9_]+)", text))
    with open(os.path.join(ROOT, "server", "config.c")) as f:
        return set(re.findall(r'"(ATTND_[A-Z0-9_]+)"', f.read()))


def attnd_metrics():
    """The series names attnd exports (server/obs/metrics.c), with the
    _bucket, _sum and _count of its histograms and summaries."""
    with open(os.path.join(ROOT, "server", "obs", "metrics.c")) as f:
        src = f.read()
    names = set()
    for name, kind in re.findall(r'metrics_head\(\w+,\s*"([a-z_]+)",\s*"(\w+)"', src):
        names.add(name)
        if kind in ("histogram", "summary"):
            names.update(name + s for s in ("_bucket", "_sum", "_count"))
    return names


def cores(q):
    q = str(q)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def runtime_rules(obj, what, env_names):
    spec = obj.get("spec") or {}
    rule("v2" in (spec.get("protocolVersions") or []), what, "protocolVersions lists v2")
    formats = [f.get("name") for f in spec.get("supportedModelFormats") or []]
    rule("attnd" in formats, what, "supportedModelFormats names attnd")
    containers = spec.get("containers") or []
    rule([c.get("name") for c in containers] == ["kserve-container"], what,
         "one container, named kserve-container")
    c = containers[0] if containers else {}
    cw = "%s container %s" % (what, c.get("name"))
    args = [str(a) for a in c.get("args") or []]
    joined = " ".join(args)
    rule(re.search(r"(^| )--model-name(=| )\{\{\.Name\}\}( |$)", joined) is not None, cw,
         "passes the InferenceService's name: --model-name={{.Name}}")
    env = {e.get("name"): e.get("value") for e in c.get("env") or []}
    unknown = sorted(k for k in env if k and k.startswith("ATTND_") and k not in env_names)
    rule(not unknown, cw, "ATTND_* variables are attnd's own%s" %
         (" (unknown: %s)" % ", ".join(unknown) if unknown else ""))
    m = re.search(r"(?:^| )--port[= ](\d+)", joined)
    port = int(m.group(1)) if m else int(env.get("ATTND_PORT") or 8000)
    rule(port == 8080, cw, "attnd listens on KServe's HTTP port 8080 (ATTND_PORT %s)" % port)
    rule(env.get("ATTND_HOST", "0.0.0.0") in ("0.0.0.0", "::"), cw,
         "attnd listens on the pod IP (ATTND_HOST unset or a wildcard)")
    ports = [p.get("containerPort") for p in c.get("ports") or []]
    rule(ports == [port], cw, "declares containerPort %d, and only it" % port)
    ann = spec.get("annotations") or {}
    rule(ann.get("prometheus.kserve.io/port") == str(port), what,
         "prometheus.kserve.io/port is attnd's port (%s)" % ann.get("prometheus.kserve.io/port"))
    rule(ann.get("prometheus.kserve.io/path") == "/metrics", what,
         "prometheus.kserve.io/path is /metrics")
    for kind, paths in (("startupProbe", ("/healthz",)), ("livenessProbe", ("/healthz",)),
                        ("readinessProbe", ("/readyz", "/v2/health/ready"))):
        probe = c.get(kind)
        if probe and "httpGet" in probe:
            rule(probe["httpGet"].get("path") in paths and probe["httpGet"].get("port") == port,
                 cw, "%s GETs %s on port %d" % (kind, " or ".join(paths), port))
    lim = (c.get("resources") or {}).get("limits") or {}
    if "cpu" in lim:
        w = env.get("ATTND_WORKERS")
        rule(w is not None and 1 <= int(w) <= max(1, int(-(-cores(lim["cpu"]) // 1))), cw,
             "ATTND_WORKERS (%s) set and within the cpu limit (%s)" % (w, lim["cpu"]))
    sc = c.get("securityContext") or {}
    rule(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
         and "ALL" in ((sc.get("capabilities") or {}).get("drop") or [])
         and sc.get("runAsNonRoot") is True, cw,
         "non-root, read-only root, no privilege escalation, all capabilities dropped")
    return port


def isvc_rules(obj, what, runtimes):
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name = meta.get("name", "")
    rule(ann.get("serving.kserve.io/deploymentMode") == "Standard", what,
         "serving.kserve.io/deploymentMode: Standard")
    rule(ann.get("serving.kserve.io/enable-prometheus-scraping") == "true", what,
         'serving.kserve.io/enable-prometheus-scraping: "true"')
    rule(ann.get("serving.kserve.io/autoscalerClass") == "external", what,
         "serving.kserve.io/autoscalerClass: external (the ScaledObject is the one autoscaler)")
    rule(bool(MODEL_NAME.match(name)) and name != "additive_attention", what,
         "its name (%s) is a name attnd's --model-name takes" % name)
    pred = (obj.get("spec") or {}).get("predictor") or {}
    model = pred.get("model") or {}
    rt = runtimes.get(model.get("runtime"))
    rule(rt is not None, what, "predictor.model.runtime names a ServingRuntime here (%s)" %
         model.get("runtime"))
    fmt = (model.get("modelFormat") or {}).get("name")
    rule(rt is not None and fmt in [f.get("name") for f in rt["spec"].get("supportedModelFormats") or []],
         what, "modelFormat %s is one the runtime supports" % fmt)
    rule(model.get("protocolVersion", "v2") == "v2", what, "protocolVersion v2")
    rule("storageUri" not in model and "storage" not in model, what,
         "no model storage (attnd loads no files)")
    if rt is not None:
        env = {e.get("name"): e.get("value") for c in rt["spec"].get("containers") or []
               for e in c.get("env") or []}
        drain = float(env.get("ATTND_DRAIN_DELAY_MS") or 0) / 1000 + float(env.get("ATTND_DRAIN_S") or 30)
        grace = pred.get("terminationGracePeriodSeconds", 30)
        rule(grace > drain, what, "terminationGracePeriodSeconds (%s) > drain delay + drain (%g s)"
             % (grace, drain))


def scaledobject_rules(obj, what, isvcs, metrics):
    spec = obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    targets = {i["metadata"]["name"] + "-predictor": i for i in isvcs}
    isvc = targets.get(ref.get("name"))
    rule(ref.get("apiVersion", "apps/v1") == "apps/v1" and ref.get("kind", "Deployment") == "Deployment"
         and isvc is not None, what,
         "scaleTargetRef is the predictor Deployment of an InferenceService here (%s)" % ref.get("name"))
    lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    rule(isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi, what,
         "1 <= minReplicaCount (%s) <= maxReplicaCount (%s)" % (lo, hi))
    if isvc is not None:
        want = (isvc["spec"].get("predictor") or {}).get("minReplicas")
        rule(want is None or want == lo, what,
             "minReplicaCount matches the InferenceService's minReplicas (%s)" % want)
    triggers = spec.get("triggers") or []
    rule(len(triggers) > 0 and all(t.get("type") == "prometheus" for t in triggers), what,
         "triggers are Prometheus queries")
    for t in triggers:
        md = t.get("metadata") or {}
        q = md.get("query", "")
        used = set(re.findall(r"\b(attnd_[a-z_]+)\b", q))
        rule(used and used <= metrics, what, "query reads attnd's own metrics (%s)" %
             ", ".join(sorted(used)) if used else "query reads attnd's own metrics (none named)")
        if ref.get("name"):
            rule(ref["name"] in q, what, "query selects the pods of %s" % ref["name"])
        try:
            th = float(md.get("threshold", ""))
        except ValueError:
            th = 0
        rule(th > 0, what, "threshold is a positive number (%s)" % md.get("threshold"))
        rule(md.get("serverAddress", "").startswith(("http://", "https://")), what,
             "serverAddress is an http(s) URL")
        rule(t.get("metricType", "AverageValue") == "AverageValue", what,
             "metricType AverageValue (the threshold is per pod)")


# ------------------------------------------------- 3. the runtime, for real
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def run_runtime(attnd, rt, isvc, what):
    """Starts attnd with the runtime container's env and args for isvc,
    then asks it what a KServe client and Prometheus would."""
    c = rt["spec"]["containers"][0]
    name = isvc["metadata"]["name"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTND_")}
    env.update({e["name"]: str(e.get("value", "")) for e in c.get("env") or []})
    args = [str(a).replace("{{.Name}}", name) for a in c.get("args") or []]
    port = free_port()
    # Flags win over the environment: loopback, a free port, no drain delay.
    cmd = [attnd] + args + ["--host", "127.0.0.1", "--port", str(port), "--drain-delay-ms", "0"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 20
        status = None
        while time.time() < deadline and proc.poll() is None:
            try:
                status, body = request(port, "GET", "/v2/models/%s/ready" % name)
                break
            except OSError:
                time.sleep(0.1)
        rule(status == 200 and json.loads(body) == {"name": name, "ready": True}, what,
             "runtime started for it: GET /v2/models/%s/ready is 200 and ready" % name)
        if status != 200:
            return
        q, k, v = [[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]], [[[1, 0], [0, 1], [1, 1]]]
        req = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, len(t[0]), 2],
                           "data": [x for row in t[0] for x in row]}
                          for n, t in (("query", q), ("key", k), ("value", v))],
               "outputs": [{"name": "output"}]}
        status, body = request(port, "POST", "/v2/models/%s/infer" % name, json.dumps(req).encode())
        ans = json.loads(body) if status == 200 else {}
        want = []
        for qi in q[0]:
            sc = [sum(a * b for a, b in zip(qi, kj)) / math.sqrt(2) for kj in k[0]]
            e = [math.exp(x - max(sc)) for x in sc]
            w = [x / sum(e) for x in e]
            want += [sum(w[j] * v[0][j][col] for j in range(3)) for col in range(2)]
        got = (ans.get("outputs") or [{}])[0].get("data") or []
        rule(ans.get("model_name") == name and len(got) == 4 and
             all(abs(a - b) <= 1e-5 for a, b in zip(got, want)), what,
             "POST /v2/models/%s/infer answers model_name %s with the reference's output" % (name, name))
        path = rt["spec"].get("annotations", {}).get("prometheus.kserve.io/path", "/metrics")
        status, body = request(port, "GET", path)
        rule(status == 200 and b"attnd_request_duration_seconds_sum" in body, what,
             "the annotated metrics path %s serves attnd's metrics" % path)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        err = proc.stderr.read().decode(errors="replace")
        rule(rc == 0, what, "the runtime's attnd exits 0 on SIGTERM (rc %s)%s" %
             (rc, "" if rc == 0 else ": " + err.strip()[-300:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crds", required=True)
    ap.add_argument("--attnd")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    crds = load_crds(a.crds)
    if not crds:
        bad("no CustomResourceDefinition in " + a.crds)
    objects = []
    for path in a.files:
        try:
            with open(path) as f:
                docs = [d for d in yaml.load_all(f, Loader=LOADER) if d]
        except yaml.YAMLError as e:
            bad("%s: YAML error: %s" % (path, str(e).splitlines()[0]))
            continue
        for obj in docs:
            if not isinstance(obj, dict):
                bad("%s: not a mapping" % path)
                continue
            what = "%s: %s %s" % (os.path.basename(path), obj.get("kind"),
                                  (obj.get("metadata") or {}).get("name"))
            check_schema(crds, obj, what)
            objects.append((obj, what))
    env_names = known_env(a.attnd)
    metrics = attnd_metrics()
    runtimes = {}
    for obj, what in objects:
        if obj.get("kind") in ("ServingRuntime", "ClusterServingRuntime"):
            runtime_rules(obj, what, env_names)
            runtimes[(obj.get("metadata") or {}).get("name")] = obj
    isvcs = [o for o, _ in objects if o.get("kind") == "InferenceService"]
    for obj, what in objects:
        if obj.get("kind") == "InferenceService":
            isvc_rules(obj, what, runtimes)
        elif obj.get("kind") == "ScaledObject":
            scaledobject_rules(obj, what, isvcs, metrics)
    if a.run and a.attnd:
        for obj, what in objects:
            if obj.get("kind") == "InferenceService":
                rt = runtimes.get((((obj.get("spec") or {}).get("predictor") or {})
                                   .get("model") or {}).get("runtime"))
                if rt is not None and rt["spec"].get("containers"):
                    run_runtime(a.attnd, rt, obj, what)
    kinds = sorted({o.get("kind") for o, _ in objects})
    for k in ("ServingRuntime", "InferenceService", "ScaledObject"):
        if k not in kinds and not (k == "ServingRuntime" and "ClusterServingRuntime" in kinds):
            bad("no %s among the files" % k)
    print("validate_kserve: %d ok, %d failed" % (PASSES, FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
