"""`promtool check metrics` (Debian package prometheus) on a live /metrics.

Traffic first goes to every route, with successes and errors, so that every
labelled series, every histogram and summary has samples (the process_*
family is always there); then the exposition is piped to promtool, which
must exit 0 and report no problem.
"""

import json
import shutil
import subprocess

import harness

V1 = {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
      "value": [[[1, 0], [0, 1], [1, 1]]], "return_weights": True}
V2 = {"inputs": [
    {"name": "query", "shape": [1, 2, 2], "datatype": "FP32", "data": [1, 0, 0, 2]},
    {"name": "key", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 1, 2, 0, 0, 3]},
    {"name": "value", "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 0, 0, 1, 1, 1]}]}


class PromtoolTest(harness.ServerTestCase):
    server_args = ("--workers", "2", "--max-body-mb", "1")

    def test_live_exposition_passes_promtool_check_metrics(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool missing: make deps installs prometheus")
        srv = self.srv
        gets = ["/healthz", "/readyz", "/metrics", "/", "/v2", "/v2/health/live",
                "/v2/health/ready", "/v2/models/attention", "/v2/models/attention/ready",
                "/v2/models/additive_attention", "/v2/models/attention/config",
                "/v2/models/stats", "/v2/models/attention/stats", "/v2/models/nope",
                "/v2/systemsharedmemory/status", "/nowhere"]
        seen = set()
        for path in gets:
            status, _, _ = srv.get(path)
            seen.add(status)
        for path, body, want in [
                ("/v1/attention", json.dumps(V1).encode(), 200),
                ("/v1/attention", b"not json", 400),
                ("/v2/models/attention/infer", json.dumps(V2).encode(), 200),
                ("/v2/models/attention/infer", b"{}", 400),
                # 501: this server does not take client shared memory
                ("/v2/systemsharedmemory/region/r/register", b"{}", 501),
                ("/v2/systemsharedmemory/unregister", b"", 501)]:
            status, _, data = srv.request("POST", path, body)
            self.assertEqual(status, want, data[:200])
        # 413: announced over the limit, answered before any body is sent.
        conn = srv.connection()
        conn.putrequest("POST", "/v1/attention")
        conn.putheader("Content-Length", str(2 << 20))
        conn.endheaders()
        resp = conn.getresponse()
        self.assertEqual(resp.status, 413)
        conn.close()
        self.assertEqual(srv.request("DELETE", "/healthz")[0], 405)
        self.assertTrue({200, 404} <= seen, seen)

        status, hdrs, text = srv.get("/metrics")
        self.assertEqual(status, 200)
        # Every route's counter shows up, so every label set was checked.
        for route in ("/v1/attention", "/healthz", "/readyz", "/metrics", "static",
                      "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/:m",
                      "/v2/models/:m/ready", "/v2/models/:m/infer",
                      "/v2/models/:m/config", "/v2/models[/:m]/stats",
                      "/v2/systemsharedmemory[/region/:r]/status",
                      "/v2/systemsharedmemory/region/:r/register",
                      "/v2/systemsharedmemory[/region/:r]/unregister", "other"):
            self.assertIn('route="%s"' % route, text.decode())
        for code in ("200", "400", "404", "405", "413", "501"):
            self.assertIn('code="%s"' % code, text.decode())
        # Both latency forms and the process family are there to check.
        for line in ('attnd_request_duration_seconds_bucket{route="/v1/attention",le="+Inf"} ',
                     'attnd_other_request_duration_seconds_count{route="/healthz"} ',
                     "process_cpu_seconds_total ", "process_resident_memory_bytes ",
                     "process_virtual_memory_bytes ", "process_open_fds ",
                     "process_max_fds ", "process_start_time_seconds "):
            self.assertIn("\n" + line, text.decode())
        p = subprocess.run([promtool, "check", "metrics"], input=text,
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, (p.stdout + p.stderr).decode())
        self.assertEqual((p.stdout + p.stderr).strip(), b"",
                         (p.stdout + p.stderr).decode())


if __name__ == "__main__":
    harness.main()
