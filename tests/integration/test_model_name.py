"""--model-name / ATTND_MODEL_NAME against the real build/attnd.

KServe starts a runtime with the InferenceService's name ({{.Name}}) and
clients call /v2/models/<that name>/infer.  attnd then serves its
dot-product model under that name everywhere v2 names a model (the path,
model_name in answers, metadata, ready, config, stats), no longer as
"attention"; additive_attention keeps its own name; /v1/attention and the
metric labels (routes, not models) do not change.  A name that cannot be
one path segment, or that is the additive model's, stops attnd at start
with a message naming the flag.
"""

import json
import os
import subprocess
import unittest

import harness
from reference import attention, flatten, rand_request, shape_of

NAME = "attnd-prod.v2_1"


def v2_body(req, extra=()):
    inputs = []
    for name in ("query", "key", "value") + tuple(extra):
        t = req[name]
        inputs.append({"name": name, "datatype": "FP32", "shape": shape_of(t),
                       "data": flatten(t)})
    return json.dumps({"inputs": inputs}).encode()


class ModelNameTest(harness.CloseChecks, harness.ServerTestCase):
    server_args = ("--workers", "2", "--model-name", NAME)

    def get_json(self, path):
        status, _, body = self.srv.request("GET", path)
        return status, json.loads(body)

    def infer(self, path, body):
        status, _, data = self.srv.request("POST", path, body)
        return status, json.loads(data)

    def test_infer_under_the_chosen_name_answers_with_it(self):
        req = rand_request(5, B=2, H=2)
        ref_out, ref_w = attention(req)
        for path in ("/v2/models/%s/infer" % NAME, "/v2/models/%s/versions/1/infer" % NAME):
            status, ans = self.infer(path, v2_body(req))
            self.assertEqual(status, 200, ans)
            self.assertEqual(ans["model_name"], NAME)
            self.assertEqual(ans["model_version"], "1")
            outs = {o["name"]: o for o in ans["outputs"]}
            self.assertEqual(outs["output"]["shape"], shape_of(ref_out))
            self.assert_close(outs["output"]["data"], ref_out, path + " output")
            self.assert_close(outs["weights"]["data"], ref_w, path + " weights")

    def test_the_default_name_is_no_longer_served(self):
        status, ans = self.infer("/v2/models/attention/infer", v2_body(rand_request(6)))
        self.assertEqual(status, 404)
        self.assertEqual(ans["error"], "unknown model 'attention' (models: %s, "
                         "additive_attention)" % NAME)
        status, ans = self.get_json("/v2/models/attention")
        self.assertEqual(status, 404)
        self.assertIn("unknown model 'attention'", ans["error"])

    def test_metadata_ready_and_config_carry_the_name(self):
        status, meta = self.get_json("/v2/models/" + NAME)
        self.assertEqual(status, 200)
        self.assertEqual(meta["name"], NAME)
        self.assertEqual([i["name"] for i in meta["inputs"]],
                         ["query", "key", "value", "valid_lens", "mask", "bias", "sinks",
                          "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k"])
        self.assertEqual(self.get_json("/v2/models/%s/ready" % NAME),
                         (200, {"name": NAME, "ready": True}))
        status, cfg = self.get_json("/v2/models/%s/config" % NAME)
        self.assertEqual(status, 200)
        self.assertEqual(cfg["name"], NAME)
        self.assertEqual(cfg["instance_group"][0]["name"], NAME)

    def test_stats_list_the_chosen_name_and_the_additive_model(self):
        self.assertEqual(self.infer("/v2/models/%s/infer" % NAME,
                                    v2_body(rand_request(7)))[0], 200)
        status, st = self.get_json("/v2/models/stats")
        self.assertEqual(status, 200)
        self.assertEqual([m["name"] for m in st["model_stats"]], [NAME, "additive_attention"])
        status, one = self.get_json("/v2/models/%s/stats" % NAME)
        self.assertEqual(status, 200)
        self.assertEqual(one["model_stats"][0]["name"], NAME)
        self.assertGreaterEqual(one["model_stats"][0]["inference_stats"]["success"]["count"], 1)

    def test_additive_attention_keeps_its_own_name(self):
        status, meta = self.get_json("/v2/models/additive_attention")
        self.assertEqual((status, meta["name"]), (200, "additive_attention"))
        req = rand_request(8, B=1, Lq=2, Lk=3, D=2, Dv=2)
        req.update({"w_q": [[0.5, -1.0], [1.0, 0.25]], "w_k": [[1.0, 0.0], [-0.5, 1.0]],
                    "w_v": [1.0, -2.0]})
        status, ans = self.infer("/v2/models/additive_attention/infer",
                                 v2_body(req, ("w_q", "w_k", "w_v")))
        self.assertEqual(status, 200, ans)
        self.assertEqual(ans["model_name"], "additive_attention")
        ref_out, _ = attention(dict(req, scoring="additive"))
        outs = {o["name"]: o for o in ans["outputs"]}
        self.assert_close(outs["output"]["data"], ref_out, "additive output")

    def test_v1_is_unchanged(self):
        req = rand_request(9)
        status, ans = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, ans)
        self.assert_close(ans["output"], attention(req)[0], "/v1 output")

    def test_metrics_label_routes_not_model_names(self):
        self.infer("/v2/models/%s/infer" % NAME, v2_body(rand_request(10)))
        _, _, body = self.srv.request("GET", "/metrics")
        text = body.decode()
        self.assertIn('route="/v2/models/:m/infer"', text)
        self.assertNotIn(NAME, text)


class ModelNameFromEnvironmentTest(unittest.TestCase):
    def test_the_variable_names_the_model_and_the_flag_wins(self):
        with harness.Attnd(["--workers", "1"], env={"ATTND_MODEL_NAME": "from-env"}) as srv:
            status, _, body = srv.request("GET", "/v2/models/from-env/ready")
            self.assertEqual((status, json.loads(body)), (200, {"name": "from-env", "ready": True}))
        with harness.Attnd(["--workers", "1", "--model-name", "from-flag"],
                           env={"ATTND_MODEL_NAME": "from-env"}) as srv:
            self.assertEqual(srv.request("GET", "/v2/models/from-flag")[0], 200)
            self.assertEqual(srv.request("GET", "/v2/models/from-env")[0], 404)

    def test_help_lists_the_flag_and_its_variable(self):
        out = subprocess.run([harness.BINARY, "--help"], capture_output=True, text=True).stdout
        self.assertRegex(out, r"--model-name NAME")
        self.assertIn("default attention, env ATTND_MODEL_NAME", " ".join(out.split()))


class BadModelNameTest(unittest.TestCase):
    def start(self, args, env=None):
        full = dict(os.environ)
        full.update(env or {})
        return subprocess.run([harness.BINARY, "--port", "0"] + args, capture_output=True,
                              text=True, timeout=20, env=full)

    def test_names_that_cannot_be_served_stop_attnd_at_start(self):
        for name, why in (("", "empty"), ("a/b", "character 2 is not allowed"),
                          ("-lead", "character 1 is not allowed"),
                          ("two words", "character 4 is not allowed"),
                          ('q"uote', "character 2 is not allowed"),
                          ("additive_attention", "the additive model's name")):
            r = self.start(["--model-name", name])
            self.assertEqual(r.returncode, 2, (name, r.stderr))
            self.assertIn("--model-name: ", r.stderr)
            self.assertIn(why, r.stderr, name)
        r = self.start(["--model-name", "m" * 65])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--model-name: longer than 64 characters", r.stderr)
        r = self.start([], env={"ATTND_MODEL_NAME": "a b"})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("not allowed", r.stderr)


if __name__ == "__main__":
    harness.main()
