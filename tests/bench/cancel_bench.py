"""make bench: how long attnd takes to stop a request whose client left.

Starts the real build/attnd (2 workers), and ROUNDS times sends a v2
binary request of q, k, v shaped (1, 1, N, 1), output only (seconds of
work on both workers), closes the connection a random 0.3-0.8 s into the
computation, and measures the time from the close until the request has
stopped: until attnd_cancelled_total{reason="disconnect"} counts it, which
happens once every worker it occupied has returned from the core.  Prints
p50 and max, and attnd's CPU time from the close until then.
"""

import os
import random
import re
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
import harness  # noqa: E402
from test_cancel import N, cpu_seconds, long_request  # noqa: E402

ROUNDS = int(os.environ.get("CANCEL_ROUNDS", "10"))


def disconnects(srv):
    _, _, body = srv.get("/metrics")
    return int(re.search(r'^attnd_cancelled_total\{reason="disconnect"\} (\d+)$',
                         body.decode(), re.M).group(1))


def main():
    rng = random.Random(1)
    stops, cpus = [], []
    with harness.Attnd(["--workers", "2", "--inline-idle-us", "0", "--max-request-gflop", "0", "--max-body-mb", "8",
                        "--access-log", "0"]) as srv:
        for _ in range(ROUNDS):
            before = disconnects(srv)
            s = socket.create_connection((srv.host, srv.port))
            s.sendall(long_request())
            time.sleep(rng.uniform(0.3, 0.8))
            c0 = cpu_seconds(srv.proc.pid)
            t0 = time.perf_counter()
            s.close()
            while disconnects(srv) == before:
                time.sleep(0.001)
            stops.append((time.perf_counter() - t0) * 1e3)
            cpus.append((cpu_seconds(srv.proc.pid) - c0) * 1e3)
            time.sleep(0.2)
    print("cancellation: a client leaving a (1, 1, %d, 1) request mid-compute, "
          "%d rounds, 2 workers" % (N, ROUNDS))
    print("  close -> stopped: p50 %.1f ms, max %.1f ms" %
          (statistics.median(stops), max(stops)))
    print("  attnd CPU after the close: p50 %.0f ms, max %.0f ms (10 ms ticks)" %
          (statistics.median(cpus), max(cpus)))


if __name__ == "__main__":
    main()
