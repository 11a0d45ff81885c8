// Offline validation of the Kubernetes manifests in deploy/k8s/.
//
//   node tests/deploy/validate_k8s.mjs --modules DIR [--attnd build/attnd] file.yaml...
//
// DIR holds node_modules with kubernetes-models@5.1.0 (Kubernetes 1.27
// OpenAPI schemas compiled to ajv validators) and yaml@2; manifests_test.sh
// installs them under /var/cache/attnd-ci/node.  Three layers:
//   1. schema: every document validates against its kind's schema;
//   2. unknown fields: the upstream schemas allow any extra property, so a
//      typo ("portz", "averageUtilisation") would pass 1.  Every field is
//      looked up in the typed interfaces (.d.ts) shipped with the models;
//   3. project rules: selectors match template labels, the Service and the
//      HPA point at the Deployment, ports are in range and match, probes hit
//      /healthz and /readyz, limits and the shutdown timing fit attnd,
//      client shared memory only on loopback with a shared in-memory
//      /dev/shm.
// Prints one "ok"/"FAIL" line per file and rule; exit status 1 on failure.

import { readFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { execFileSync } from "node:child_process";

const args = process.argv.slice(2);
let modules = process.env.ATTND_NODE_MODULES || "/var/cache/attnd-ci/node/node_modules";
const files = [];
let attnd = null;
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--modules") modules = join(args[++i], "node_modules");
  else if (args[i] === "--attnd") attnd = args[++i];
  else files.push(args[i]);
}
const { parseAllDocuments } = await import(pathToFileURL(join(modules, "yaml/dist/index.js")).href);

let failures = 0;
let passes = 0;
const ok = (msg) => { passes++; console.log(`ok   - ${msg}`); };
const bad = (msg) => { failures++; console.log(`FAIL - ${msg}`); };

// ---------------------------------------------------------- 2. unknown fields
const KM = join(modules, "kubernetes-models");
const ifaceCache = new Map();

function dtsPath(spec, fromFile) {
  let p;
  if (spec.startsWith(".")) p = resolve(dirname(fromFile), spec);
  else p = join(modules, spec);
  p = p.replace(/\.js$/, "");
  return existsSync(p + ".d.ts") ? p + ".d.ts" : null;
}

// The properties of interface `name` declared in (or aliased by) `file`:
// Map prop -> {kind: "leaf"|"ref"|"array"|"map", ref, file}.
function loadInterface(file, name) {
  const key = file + "#" + name;
  if (ifaceCache.has(key)) return ifaceCache.get(key);
  const src = readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of src.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g))
    for (const n of m[1].split(",").map((s) => s.trim()).filter(Boolean)) imports.set(n, m[2]);
  let local = name;
  const alias = src.match(new RegExp(`export type \\{[^}]*\\b(\\w+) as ${name}\\b`));
  if (alias) local = alias[1];
  const start = src.search(new RegExp(`export interface ${local}\\b[^{]*\\{`));
  if (start < 0) { ifaceCache.set(key, null); return null; }
  const props = new Map();
  let depth = 0, i = src.indexOf("{", start), body = "";
  for (; i < src.length; i++) {
    const c = src[i];
    if (c === "{") depth++;
    if (c === "}") { depth--; if (depth === 0) break; }
    body += c;
  }
  body = body.slice(1).replace(/\/\*\*[\s\S]*?\*\//g, "");
  // Split the body on ";" at brace depth 0.
  let d = 0, cur = "";
  const members = [];
  for (const c of body) {
    if (c === "{") d++;
    if (c === "}") d--;
    if (c === ";" && d === 0) { members.push(cur.trim()); cur = ""; } else cur += c;
  }
  for (const mem of members) {
    const m = mem.match(/^"([^"]+)"\??:\s*([\s\S]*)$/);
    if (!m) continue;
    props.set(m[1], typeOf(m[2].trim(), imports, file));
  }
  ifaceCache.set(key, props);
  return props;
}

function typeOf(t, imports, file) {
  let m;
  if ((m = t.match(/^Array<([\s\S]*)>$/))) return { kind: "array", of: typeOf(m[1].trim(), imports, file) };
  if ((m = t.match(/^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/))) return { kind: "map", of: typeOf(m[1].trim(), imports, file) };
  if (/^\w+$/.test(t) && imports.has(t)) {
    const f = dtsPath(imports.get(t), file);
    if (f) return { kind: "ref", name: t, file: f };
  }
  return { kind: "leaf" };
}

function unknownFields(value, type, path, out) {
  if (value === null || value === undefined || !type) return;
  if (type.kind === "array" && Array.isArray(value)) value.forEach((v, i) => unknownFields(v, type.of, `${path}[${i}]`, out));
  else if (type.kind === "map" && typeof value === "object") for (const [k, v] of Object.entries(value)) unknownFields(v, type.of, `${path}.${k}`, out);
  else if (type.kind === "ref" && typeof value === "object" && !Array.isArray(value)) {
    const props = loadInterface(type.file, type.name);
    if (!props || props.size === 0) return;
    for (const [k, v] of Object.entries(value)) {
      if (!props.has(k)) out.push(`${path}.${k}`);
      else unknownFields(v, props.get(k), `${path}.${k}`, out);
    }
  }
}

// ------------------------------------------------------------- 1. schemas
const objects = [];
for (const file of files) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) { bad(`${file}: YAML error: ${doc.errors[0].message}`); continue; }
    const obj = doc.toJS();
    if (!obj) continue;
    const what = `${file}: ${obj.kind} ${obj.metadata?.name}`;
    const dir = join(KM, String(obj.apiVersion));
    const modFile = join(dir, "index.js");
    const mod = existsSync(modFile) ? await import(pathToFileURL(modFile).href) : null;
    const Cls = mod && mod[obj.kind];
    if (!Cls) { bad(`${what}: unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`); continue; }
    try {
      new Cls(obj).validate();
      ok(`${what}: schema (Kubernetes 1.27)`);
    } catch (e) {
      bad(`${what}: schema: ${e.message}`);
    }
    const unknown = [];
    unknownFields(obj, { kind: "ref", name: `I${obj.kind}`, file: join(dir, `${obj.kind}.d.ts`) }, "", unknown);
    if (unknown.length) bad(`${what}: unknown field(s) ${unknown.join(", ")}`);
    else ok(`${what}: no unknown fields`);
    objects.push({ file, obj, what });
  }
}

// ------------------------------------------------------- 3. project rules
// The ATTND_* variables: from `attnd --help` when a built attnd is given,
// else the list in docs/design.md.
let KNOWN_ENV = new Set(["HOST", "PORT", "WORKERS", "MAX_BATCH", "MAX_DELAY_US", "MAX_QUEUE",
  "MAX_INFLIGHT_MB", "MAX_BODY_MB", "TIMEOUT_MS", "DRAIN_DELAY_MS", "DRAIN_S", "MAX_CONNS",
  "CONN_MEMORY_KB", "CONN_TIMEOUT_S", "LOG", "TOKEN", "TOKEN_FILE", "TLS_CERT", "TLS_KEY",
  "UNIX_SOCKET", "UNIX_SOCKET_MODE", "ALLOW_CLIENT_SHM", "SHM_MAX_REGIONS", "SHM_MAX_MB", "MODEL_NAME"].map((s) => "ATTND_" + s));
if (attnd) {
  const help = execFileSync(attnd, ["--help"], { encoding: "utf8" });
  const names = [...help.matchAll(/\benv (ATTND_[A-Z0-9_]+)/g)].map((m) => m[1]);
  if (names.length === 0) bad(`${attnd} --help names no ATTND_* variables`);
  else KNOWN_ENV = new Set(names);
}

function cpuCores(q) {
  if (q === undefined) return undefined;
  const s = String(q);
  return s.endsWith("m") ? Number(s.slice(0, -1)) / 1000 : Number(s);
}
function bytes(q) {
  if (q === undefined) return undefined;
  const m = String(q).match(/^([0-9.]+)([KMGT]i?|[kmgt])?$/);
  if (!m) return NaN;
  const mult = { Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Number(m[1]) * (m[2] ? mult[m[2]] : 1);
}
const labelsMatch = (sel, labels) =>
  sel && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels?.[k] === v);
const isAttnd = (c) => /(^|\/)attnd(:|@|$)/.test(c.image || "") || c.name === "attnd";

function rule(cond, what, msg) { if (cond) ok(`${what}: ${msg}`); else bad(`${what}: ${msg}`); }

const deployments = objects.filter((o) => o.obj.kind === "Deployment");
for (const { obj, what } of deployments) {
  const spec = obj.spec || {};
  const tpl = spec.template || {};
  const pod = tpl.spec || {};
  rule(labelsMatch(spec.selector?.matchLabels, tpl.metadata?.labels), what,
    "selector.matchLabels match the pod template labels");
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  for (const c of pod.containers || []) {
    const cw = `${what} container ${c.name}`;
    const ports = c.ports || [];
    rule(ports.every((p) => Number.isInteger(p.containerPort) && p.containerPort >= 1 && p.containerPort <= 65535 &&
      (p.hostPort === undefined || (p.hostPort >= 1 && p.hostPort <= 65535))), cw, "ports within 1..65535");
    const names = ports.map((p) => p.name).filter(Boolean);
    rule(new Set(names).size === names.length && names.every((n) => n.length <= 15), cw, "port names unique, at most 15 characters");
    const req = c.resources?.requests || {}, lim = c.resources?.limits || {};
    rule(req.cpu !== undefined && req.memory !== undefined && lim.memory !== undefined, cw,
      "resources: cpu and memory requests, memory limit");
    if (lim.cpu !== undefined) rule(cpuCores(req.cpu) <= cpuCores(lim.cpu), cw, "cpu request <= limit");
    rule(bytes(req.memory) <= bytes(lim.memory), cw, "memory request <= limit");
    const sc = c.securityContext || {};
    rule(sc.allowPrivilegeEscalation === false && sc.readOnlyRootFilesystem === true &&
      (sc.capabilities?.drop || []).includes("ALL"), cw,
      "securityContext: no privilege escalation, read-only root, all capabilities dropped");
    rule((sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot) === true &&
      (sc.runAsUser ?? pod.securityContext?.runAsUser ?? 1) !== 0, cw, "runs as non-root");
    if (!isAttnd(c)) continue;

    const env = Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
    const unknownEnv = Object.keys(env).filter((k) => k.startsWith("ATTND_") && !KNOWN_ENV.has(k));
    rule(unknownEnv.length === 0, cw, `ATTND_* variables are attnd's own${attnd ? " (attnd --help)" : ""}${unknownEnv.length ? " (unknown: " + unknownEnv.join(", ") + ")" : ""}`);
    const port = Number(env.ATTND_PORT ?? 8000);
    rule(ports.some((p) => p.containerPort === port), cw, `containerPort matches ATTND_PORT (${port})`);
    const workers = env.ATTND_WORKERS;
    if (lim.cpu !== undefined)
      rule(workers !== undefined && Number(workers) >= 1 && Number(workers) <= Math.max(1, Math.ceil(cpuCores(lim.cpu))), cw,
        `ATTND_WORKERS (${workers}) set and within the cpu limit (${lim.cpu})`);
    if (env.ATTND_MAX_INFLIGHT_MB !== undefined)
      rule(Number(env.ATTND_MAX_INFLIGHT_MB) * 1024 ** 2 < bytes(lim.memory), cw,
        `memory limit (${lim.memory}) above ATTND_MAX_INFLIGHT_MB (${env.ATTND_MAX_INFLIGHT_MB} MiB)`);
    const drain = Number(env.ATTND_DRAIN_DELAY_MS ?? 0) / 1000 + Number(env.ATTND_DRAIN_S ?? 30);
    rule(env.ATTND_DRAIN_DELAY_MS !== undefined && grace > drain, cw,
      `terminationGracePeriodSeconds (${grace}) > drain delay + drain (${drain} s)`);

    const host = env.ATTND_HOST ?? "127.0.0.1";
    // Client shared memory (Triton's extension): only for clients in the
    // pod, which must see the objects attnd opens: /dev/shm a memory-backed
    // emptyDir that another container mounts at /dev/shm too.
    if (env.ATTND_ALLOW_CLIENT_SHM === "1") {
      const shmMount = (ct) => (ct.volumeMounts || []).find((m) => m.mountPath === "/dev/shm");
      const mine = shmMount(c);
      const vol = (pod.volumes || []).find((v) => mine && v.name === mine.name);
      rule(["127.0.0.1", "::1", "localhost"].includes(host), cw,
        `ATTND_ALLOW_CLIENT_SHM with attnd on the pod's loopback only (ATTND_HOST=${host})`);
      rule(vol?.emptyDir?.medium === "Memory", cw,
        "ATTND_ALLOW_CLIENT_SHM: /dev/shm is an emptyDir with medium Memory");
      rule((pod.containers || []).some((o) => o !== c && mine && shmMount(o)?.name === mine.name), cw,
        "ATTND_ALLOW_CLIENT_SHM: another container mounts the same volume at /dev/shm");
    }
    const resolvePort = (p) => (typeof p === "string" ? ports.find((x) => x.name === p)?.containerPort : p);
    const probes = { livenessProbe: "/healthz", readinessProbe: "/readyz", startupProbe: "/healthz" };
    rule(c.livenessProbe && c.readinessProbe, cw, "liveness and readiness probes present");
    for (const [kind, path] of Object.entries(probes)) {
      const p = c[kind];
      if (!p) continue;
      if (p.httpGet) {
        rule(p.httpGet.path === path, cw, `${kind} GETs ${path}`);
        rule(resolvePort(p.httpGet.port) === port, cw, `${kind} port is attnd's port`);
        rule(host !== "127.0.0.1" && host !== "localhost", cw,
          `${kind} over HTTP needs attnd on the pod IP (ATTND_HOST=${host})`);
      } else if (p.exec) {
        rule(JSON.stringify(p.exec.command) === JSON.stringify(["/usr/local/bin/attnd", "--probe"]), cw,
          `${kind} runs attnd --probe`);
      } else bad(`${cw}: ${kind} is neither httpGet nor attnd --probe`);
    }
  }
}

for (const { obj, what } of objects.filter((o) => o.obj.kind === "Service")) {
  const target = deployments.find((d) => labelsMatch(obj.spec?.selector, d.obj.spec?.template?.metadata?.labels));
  rule(target, what, "selector matches a Deployment's pod labels");
  for (const p of obj.spec?.ports || []) {
    rule(p.port >= 1 && p.port <= 65535, what, `port ${p.port} within 1..65535`);
    if (!target) continue;
    const cports = (target.obj.spec.template.spec.containers || []).flatMap((c) => c.ports || []);
    const tp = p.targetPort ?? p.port;
    rule(cports.some((c) => (typeof tp === "string" ? c.name === tp : c.containerPort === tp)), what,
      `targetPort ${tp} is a container port of Deployment ${target.obj.metadata.name}`);
  }
}

for (const { obj, what } of objects.filter((o) => o.obj.kind === "HorizontalPodAutoscaler")) {
  const ref = obj.spec?.scaleTargetRef || {};
  rule(ref.apiVersion === "apps/v1" && ref.kind === "Deployment" &&
    deployments.some((d) => d.obj.metadata?.name === ref.name), what, `scaleTargetRef is Deployment ${ref.name}`);
  rule((obj.spec?.minReplicas ?? 1) <= obj.spec?.maxReplicas, what, "minReplicas <= maxReplicas");
  for (const m of obj.spec?.metrics || []) {
    if (m.type === "Resource" && m.resource?.target?.type === "Utilization") {
      const target = deployments.find((d) => d.obj.metadata?.name === ref.name);
      const cs = target?.obj.spec.template.spec.containers || [];
      rule(cs.every((c) => c.resources?.requests?.[m.resource.name] !== undefined), what,
        `${m.resource.name} utilization target: every container requests ${m.resource.name}`);
      const u = m.resource.target.averageUtilization;
      rule(Number.isInteger(u) && u > 0 && u <= 100, what, `averageUtilization ${u} in 1..100`);
    }
  }
}

for (const { obj, what } of objects.filter((o) => o.obj.kind === "PodDisruptionBudget")) {
  rule(deployments.some((d) => labelsMatch(obj.spec?.selector?.matchLabels, d.obj.spec?.template?.metadata?.labels)),
    what, "selector matches a Deployment's pod labels");
}

console.log(`validate_k8s: ${passes} ok, ${failures} failed`);
process.exit(failures ? 1 : 0);
