#!/usr/bin/python3
"""HTTP checks of a running attnd (in a container, a pod or on the host).

Standard library only.  Each check prints "ok   - name" or "FAIL - name: why";
the exit status is the number of failures (tests/deploy/lib.sh counts lines).

    attnd_check.py wait   HOST:PORT [SECONDS]     until GET /healthz is 200
    attnd_check.py smoke  HOST:PORT               healthz, readyz, metrics,
                                                  /v1/attention vs float64
    attnd_check.py drain  HOST:PORT -- STOP CMD   a request in flight while
                                                  STOP CMD (e.g. docker stop)
                                                  runs must be answered, and
                                                  STOP CMD must exit 0
    attnd_check.py prom   PROM_HOST:PORT JOB [SECONDS]
                                                  Prometheus scraped attnd:
                                                  up{job}==1, attnd_build_info
"""

import http.client
import json
import math
import random
import socket
import subprocess
import sys
import time
import urllib.parse

FAILURES = 0


def ok(name):
    print("ok   - " + name, flush=True)


def fail(name, why):
    global FAILURES
    FAILURES += 1
    print("FAIL - %s: %s" % (name, why), flush=True)


def split_hostport(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def request(addr, method, path, body=None, timeout=30, headers=None):
    host, port = split_hostport(addr)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


# ---------------------------------------------------------------- reference

def reference(query, key, value, valid_lens=None, scale=None):
    """float64 masked scaled-dot-product attention on nested lists (B, L, D)."""
    outs, weights = [], []
    for b, (q, k, v) in enumerate(zip(query, key, value)):
        d = len(q[0])
        s = scale if scale is not None else 1.0 / math.sqrt(d)
        vl = len(k) if valid_lens is None else valid_lens[b]
        ob, wb = [], []
        for qi in q:
            scores = [sum(a * c for a, c in zip(qi, kj)) * s for kj in k]
            allowed = [j < vl for j in range(len(k))]
            if not any(allowed):
                wb.append([0.0] * len(k))
                ob.append([0.0] * len(v[0]))
                continue
            m = max(sc for sc, a in zip(scores, allowed) if a)
            e = [math.exp(sc - m) if a else 0.0 for sc, a in zip(scores, allowed)]
            tot = sum(e)
            w = [x / tot for x in e]
            wb.append(w)
            ob.append([sum(w[j] * v[j][c] for j in range(len(k))) for c in range(len(v[0]))])
        outs.append(ob)
        weights.append(wb)
    return outs, weights


def flatten(x):
    if isinstance(x, dict) and "data" in x:
        return [float(t) for t in x["data"]]
    if isinstance(x, list):
        r = []
        for t in x:
            r.extend(flatten(t))
        return r
    return [float(x)]


def compare(name, got, ref, atol, rtol):
    g, r = flatten(got), flatten(ref)
    if len(g) != len(r):
        fail(name, "%d numbers, expected %d" % (len(g), len(r)))
        return False
    worst = 0.0
    for a, b in zip(g, r):
        if not (abs(a - b) <= atol + rtol * abs(b)):
            worst = max(worst, abs(a - b)) if a == a else float("inf")
    if worst:
        fail(name, "max abs error %.3g over tolerance %g + %g*|ref|" % (worst, atol, rtol))
        return False
    ok(name)
    return True


def random_case(rng, b, lq, lk, d, dv, with_lens):
    def t(n1, n2, n3):
        return [[[round(rng.uniform(-1, 1), 6) for _ in range(n3)] for _ in range(n2)]
                for _ in range(n1)]
    req = {"query": t(b, lq, d), "key": t(b, lk, d), "value": t(b, lk, dv)}
    lens = None
    if with_lens:
        lens = [rng.randint(1, lk) for _ in range(b)]
        req["valid_lens"] = lens
    return req, reference(req["query"], req["key"], req["value"], lens)


def check_attention(name, addr, req, ref):
    status, _, body = request(addr, "POST", "/v1/attention", json.dumps(req).encode(),
                              headers={"Content-Type": "application/json"})
    if status != 200:
        fail(name, "status %d: %s" % (status, body[:300]))
        return
    try:
        obj = json.loads(body)
    except ValueError as e:
        fail(name, "response is not JSON (%s): %r" % (e, body[:200]))
        return
    if "output" not in obj or "weights" not in obj:
        fail(name, "no output/weights in %r" % body[:200])
        return
    compare(name + " output", obj["output"], ref[0], 1e-5, 1e-5)
    compare(name + " weights", obj["weights"], ref[1], 1e-5, 0.0)


# ------------------------------------------------------------------ commands

def cmd_wait(addr, seconds=60):
    deadline = time.time() + float(seconds)
    last = None
    while time.time() < deadline:
        try:
            status, _, _ = request(addr, "GET", "/healthz", timeout=2)
            if status == 200:
                ok("GET /healthz answers 200 at %s" % addr)
                return
            last = "status %d" % status
        except OSError as e:
            last = str(e)
        time.sleep(0.3)
    fail("GET /healthz answers 200 at %s" % addr, "not within %ss (%s)" % (seconds, last))


def cmd_smoke(addr):
    for path in ("/healthz", "/readyz"):
        try:
            status, _, body = request(addr, "GET", path)
            if status == 200:
                ok("GET %s 200" % path)
            else:
                fail("GET %s 200" % path, "status %d %r" % (status, body[:200]))
        except OSError as e:
            fail("GET %s 200" % path, e)
    try:
        status, headers, body = request(addr, "GET", "/metrics")
        text = body.decode("utf-8", "replace")
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if status != 200:
            fail("GET /metrics", "status %d" % status)
        elif not ctype.startswith("text/plain"):
            fail("GET /metrics", "content-type %r, expected text/plain" % ctype)
        elif "attnd_build_info" not in text or "# TYPE" not in text:
            fail("GET /metrics", "no attnd_build_info / # TYPE lines")
        elif "\nprocess_resident_memory_bytes " not in text:
            fail("GET /metrics", "no process_resident_memory_bytes (read from /proc)")
        else:
            ok("GET /metrics Prometheus text with attnd_build_info and process_*")
    except OSError as e:
        fail("GET /metrics", e)

    simple = {"query": [[[1, 0], [0, 2]]],
              "key": [[[1, 1], [2, 0], [0, 3]]],
              "value": [[[1, 0], [0, 1], [1, 1]]]}
    try:
        check_attention("POST /v1/attention (design example)", addr, simple,
                        reference(simple["query"], simple["key"], simple["value"]))
        rng = random.Random(20261129)
        req, ref = random_case(rng, 3, 5, 7, 8, 4, with_lens=True)
        check_attention("POST /v1/attention (B=3 Lq=5 Lk=7 D=8 Dv=4, valid_lens)", addr, req, ref)
    except OSError as e:
        fail("POST /v1/attention", e)


def read_http_response(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines or not lines[0].startswith("HTTP/"):
        raise ValueError("no HTTP response (%d bytes)" % len(data))
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "chunked" in headers.get("transfer-encoding", ""):
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out += rest[:size]
            rest = rest[size + 2:]
        body = out
    return status, body


def cmd_drain(addr, stop_cmd):
    """Send half a request, start STOP CMD, wait for /readyz 503 (SIGTERM
    arrived, drain started), send the rest: the answer must be complete and
    right, and STOP CMD must succeed before its timeout."""
    host, port = split_hostport(addr)
    rng = random.Random(7)
    req, ref = random_case(rng, 2, 64, 96, 16, 8, with_lens=False)
    body = json.dumps(req).encode()
    head = ("POST /v1/attention HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\nConnection: close\r\n\r\n" % (addr, len(body))).encode()
    sock = socket.create_connection((host, port), timeout=60)
    half = len(body) // 2
    sock.sendall(head + body[:half])
    time.sleep(0.3)
    t0 = time.time()
    stopper = subprocess.Popen(stop_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    seen_503 = None
    deadline = time.time() + 10
    while time.time() < deadline and stopper.poll() is None:
        try:
            status, headers, _ = request(addr, "GET", "/readyz", timeout=2)
            if status == 503:
                seen_503 = time.time() - t0
                break
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    if seen_503 is not None:
        ok("GET /readyz turns 503 after SIGTERM (%.2fs)" % seen_503)
    else:
        fail("GET /readyz turns 503 after SIGTERM", "not seen within 10s")

    try:
        sock.sendall(body[half:])
        status, rbody = read_http_response(sock)
        if status != 200:
            fail("in-flight request answered during stop", "status %d %r" % (status, rbody[:200]))
        else:
            obj = json.loads(rbody)
            ok("in-flight request answered 200 during stop")
            compare("in-flight request output", obj.get("output"), ref[0], 1e-5, 1e-5)
            compare("in-flight request weights", obj.get("weights"), ref[1], 1e-5, 0.0)
    except (OSError, ValueError) as e:
        fail("in-flight request answered during stop", e)
    finally:
        sock.close()

    try:
        out, _ = stopper.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        stopper.kill()
        out, _ = stopper.communicate()
    took = time.time() - t0
    if stopper.returncode == 0:
        ok("%s exits 0 (%.1fs)" % (" ".join(stop_cmd[:2]), took))
    else:
        fail("%s exits 0" % " ".join(stop_cmd[:2]),
             "rc %d: %s" % (stopper.returncode, out.decode("utf-8", "replace")[-300:]))
    print("drain: stop took %.1fs" % took)


def prom_query(addr, q):
    status, _, body = request(addr, "GET", "/api/v1/query?query=" + urllib.parse.quote(q), timeout=5)
    if status != 200:
        raise OSError("status %d" % status)
    return json.loads(body)["data"]["result"]


def cmd_prom(addr, job, seconds=60):
    deadline = time.time() + float(seconds)
    up = info = rss = None
    last = None
    while time.time() < deadline:
        try:
            up = prom_query(addr, 'up{job="%s"}' % job)
            info = prom_query(addr, 'attnd_build_info{job="%s"}' % job)
            rss = prom_query(addr, 'process_resident_memory_bytes{job="%s"} > 0' % job)
            if up and up[0]["value"][1] == "1" and info and rss:
                break
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    if up and up[0]["value"][1] == "1":
        ok('Prometheus: up{job="%s"} == 1' % job)
    else:
        fail('Prometheus: up{job="%s"} == 1' % job, "got %r (%s)" % (up, last))
    if info:
        ok("Prometheus: attnd_build_info scraped (%s)" % info[0]["metric"].get("version"))
    else:
        fail("Prometheus: attnd_build_info scraped", "no series (%s)" % last)
    if rss:
        ok("Prometheus: process_resident_memory_bytes scraped (%s bytes)" % rss[0]["value"][1])
    else:
        fail("Prometheus: process_resident_memory_bytes > 0 scraped", "no series (%s)" % last)


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    cmd, addr = argv[1], argv[2]
    if cmd == "wait":
        cmd_wait(addr, *argv[3:4])
    elif cmd == "smoke":
        cmd_smoke(addr)
    elif cmd == "drain":
        if "--" not in argv:
            print(__doc__)
            return 2
        cmd_drain(addr, argv[argv.index("--") + 1:])
    elif cmd == "prom":
        cmd_prom(addr, *argv[3:5])
    else:
        print(__doc__)
        return 2
    return min(FAILURES, 100)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
