"""The numbers attnd returns over HTTP, checked against a float64 reference.

Every case goes through the real build/attnd: JSON in, JSON out.  Outputs
must be within 1e-5 + 1e-5*|ref| and weights within 1e-5 of the float64
reference (design.md "Numerics"); masked weights and fully masked rows must
be exactly 0, and every unmasked weight row must sum to 1.
"""

import copy
import math
import random

import harness
from reference import attention, flatten, nest, rand_request, rand_tensor, shape_of


class NumericTest(harness.ServerTestCase):
    server_args = ("--workers", "2")

    # -- helpers ---------------------------------------------------------
    def run_case(self, req, check_weights=True):
        """POSTs req, checks output (and weights) against the reference,
        then the same request without weights (the online path)."""
        ref_out, ref_w = attention(req)
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        self.assert_close(resp["output"], ref_out, "output")
        if check_weights:
            self.assert_weights(resp["weights"], ref_w)
        lean = dict(req, return_weights=False)
        status, resp2 = self.srv.post_json("/v1/attention", lean)
        self.assertEqual(status, 200, resp2)
        self.assertNotIn("weights", resp2)
        self.assert_close(resp2["output"], ref_out, "output (no weights)")
        return resp

    def assert_close(self, got, ref, what):
        self.assertEqual(shape_of(got), shape_of(ref), what + " shape")
        for n, (g, r) in enumerate(zip(flatten(got), flatten(ref))):
            tol = 1e-5 + 1e-5 * abs(r)
            self.assertTrue(abs(g - r) <= tol, "%s[%d]: got %r, want %r" % (what, n, g, r))

    def assert_weights(self, got, ref):
        self.assertEqual(shape_of(got), shape_of(ref), "weights shape")
        Lk = shape_of(ref)[-1]
        g, r = flatten(got), flatten(ref)
        for row in range(len(r) // Lk):
            gr, rr = g[row * Lk:(row + 1) * Lk], r[row * Lk:(row + 1) * Lk]
            for j, (x, y) in enumerate(zip(gr, rr)):
                if y == 0.0:
                    self.assertEqual(x, 0.0, "weight row %d key %d must be exactly 0" % (row, j))
                else:
                    self.assertLessEqual(abs(x - y), 1e-5, "weight row %d key %d" % (row, j))
            if any(y != 0.0 for y in rr):
                self.assertLessEqual(abs(sum(gr) - 1.0), 1e-5, "row %d sums to 1" % row)

    # -- worked examples ---------------------------------------------------
    def test_design_example_matches_reference(self):
        req = {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
               "value": [[[1, 0], [0, 1], [1, 1]]], "valid_lens": [2], "causal": False,
               "scale": 0.7071, "mask": None, "bias": None, "return_weights": True,
               "id": "optional"}
        resp = self.run_case(req)
        self.assertEqual(resp["id"], "optional")
        self.assertEqual(resp["weights"][0][0][2], 0.0)

    def test_two_weights_on_two_values_give_five(self):
        # weights [0.25, 0.75] on scalar values [2, 6] -> 5: scores log(1), log(3)
        req = {"query": [[[1.0]]], "key": [[[0.0], [math.log(3.0)]]],
               "value": [[[2.0], [6.0]]], "scale": 1.0}
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        self.assertAlmostEqual(resp["weights"][0][0][0], 0.25, delta=1e-6)
        self.assertAlmostEqual(resp["output"][0][0][0], 5.0, delta=1e-5)

    def test_d2l_dot_product_attention_with_valid_lens(self):
        rng = random.Random(1)
        queries = rand_tensor(rng, [2, 1, 2])
        keys = [[[1.0, 1.0] for _ in range(10)] for _ in range(2)]
        values = [[[float(4 * r + c) for c in range(4)] for r in range(10)] for _ in range(2)]
        req = {"query": queries, "key": keys, "value": values, "valid_lens": [2, 6]}
        resp = self.run_case(req)
        self.assert_close(resp["output"], [[[2, 3, 4, 5]], [[10, 11, 12, 13]]], "d2l output")

    def test_d2l_additive_attention_with_valid_lens(self):
        rng = random.Random(2)
        queries = rand_tensor(rng, [2, 1, 20])
        keys = [[[1.0, 1.0] for _ in range(10)] for _ in range(2)]
        values = [[[float(4 * r + c) for c in range(4)] for r in range(10)] for _ in range(2)]
        req = {"query": queries, "key": keys, "value": values, "valid_lens": [2, 6],
               "scoring": "additive", "w_q": rand_tensor(rng, [8, 20], 0.3),
               "w_k": rand_tensor(rng, [8, 2], 0.3), "w_v": rand_tensor(rng, [8], 0.3)}
        resp = self.run_case(req)
        self.assert_close(resp["output"], [[[2, 3, 4, 5]], [[10, 11, 12, 13]]], "d2l additive")

    def test_d2l_masked_softmax_rows_beyond_length_are_zero(self):
        req = rand_request(3, B=2, Lq=2, Lk=4, D=4, Dv=4)
        req["valid_lens"] = [[1, 3], [2, 4]]
        resp = self.run_case(req)
        self.assertEqual(resp["weights"][0][0][1:], [0, 0, 0])
        self.assertEqual(resp["weights"][1][0][2:], [0, 0])

    # -- every mask kind, both paths ---------------------------------------
    def test_random_unmasked_rank3(self):
        for seed, (Lq, Lk) in enumerate([(1, 1), (3, 7), (9, 4), (17, 33)]):
            self.run_case(rand_request(100 + seed, B=2, Lq=Lq, Lk=Lk, D=5, Dv=3))

    def test_random_rank4_grouped_query_heads(self):
        self.run_case(rand_request(11, B=2, H=4, Hkv=2, Lq=6, Lk=9, D=4, Dv=5))
        self.run_case(rand_request(12, B=1, H=3, Hkv=1, Lq=5, Lk=5, D=3, Dv=2))

    def test_valid_lens_per_item_including_zero(self):
        req = rand_request(13, B=3, Lq=4, Lk=6)
        req["valid_lens"] = [0, 3, 6]
        resp = self.run_case(req)
        self.assertEqual(flatten(resp["output"][0]), [0.0] * (4 * 3))
        self.assertEqual(flatten(resp["weights"][0]), [0.0] * (4 * 6))

    def test_valid_lens_per_query(self):
        req = rand_request(14, B=2, Lq=3, Lk=5)
        req["valid_lens"] = [[1, 0, 5], [2, 4, 3]]
        resp = self.run_case(req)
        self.assertEqual(resp["output"][0][1], [0.0, 0.0, 0.0])

    def test_causal_upper_left_and_lower_right(self):
        for causal in (True, "upper_left", "lower_right"):
            for Lq, Lk in ((5, 5), (3, 7), (7, 3)):
                req = rand_request(15, B=1, H=2, Lq=Lq, Lk=Lk)
                req["causal"] = causal
                self.run_case(req)

    def test_lower_right_with_more_queries_than_keys_leaves_empty_rows(self):
        req = rand_request(16, B=1, Lq=6, Lk=3)
        req["causal"] = "lower_right"
        resp = self.run_case(req)
        # query i sees keys j <= i - 3: rows 0..2 see nothing
        for i in range(3):
            self.assertEqual(resp["output"][0][i], [0.0, 0.0, 0.0])
            self.assertEqual(resp["weights"][0][i], [0.0, 0.0, 0.0])

    def test_boolean_mask_broadcast_by_trailing_axes(self):
        rng = random.Random(17)
        for mshape in ([7], [1, 7], [5, 7], [3, 1, 7], [3, 5, 7], [2, 1, 1, 7], [1, 1, 5, 7],
                       [2, 3, 5, 7]):
            req = rand_request(17, B=2, H=3, Lq=5, Lk=7)
            n = 1
            for d in mshape:
                n *= d
            req["mask"] = nest([rng.random() < 0.6 for _ in range(n)], mshape)
            self.run_case(req)

    def test_mask_that_does_not_broadcast_is_rejected(self):
        req = rand_request(17, B=2, H=3, Lq=5, Lk=7)
        req["mask"] = [[[True] * 7] for _ in range(2)]  # (2, 1, 7) vs (3, 5, 7)
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 400, resp)
        self.assertIn("mask", resp["error"])

    def test_mask_composes_with_causal_and_valid_lens(self):
        rng = random.Random(18)
        req = rand_request(18, B=2, Lq=6, Lk=6)
        req["mask"] = nest([rng.random() < 0.7 for _ in range(36)], [6, 6])
        req["causal"] = True
        req["valid_lens"] = [4, 6]
        self.run_case(req)

    def test_fully_masked_rows_are_zero_not_uniform(self):
        req = rand_request(19, B=1, Lq=3, Lk=4)
        req["mask"] = [[[True, True, False, False], [False] * 4, [True, False, True, False]]]
        resp = self.run_case(req)
        self.assertEqual(resp["output"][0][1], [0.0, 0.0, 0.0])
        self.assertEqual(resp["weights"][0][1], [0.0] * 4)

    def test_additive_bias_broadcast(self):
        rng = random.Random(20)
        req = rand_request(20, B=2, H=2, Lq=4, Lk=5)
        req["bias"] = rand_tensor(rng, [1, 4, 5])
        self.run_case(req)
        req["bias"] = rand_tensor(rng, [5])
        req["causal"] = "lower_right"
        self.run_case(req)

    def test_sliding_window(self):
        for window in ([1, 1], [2, 0], [0, None], [None, 1]):
            req = rand_request(21, B=1, Lq=6, Lk=6)
            req["window"] = window
            self.run_case(req)

    def test_negative_and_custom_scale(self):
        for scale in (-0.5, 2.0, 1e-3):
            req = rand_request(22, B=1, Lq=4, Lk=5)
            req["scale"] = scale
            self.run_case(req)

    def test_dropout_is_reproducible_and_matches_reference(self):
        req = rand_request(23, B=2, H=2, Lq=5, Lk=6)
        req["dropout"] = {"p": 0.25, "seed": 7}
        ref_out, ref_w = attention(req)
        s1, r1 = self.srv.post_json("/v1/attention", req)
        s2, r2 = self.srv.post_json("/v1/attention", req)
        self.assertEqual((s1, s2), (200, 200))
        self.assertEqual(r1, r2)
        self.assert_close(r1["output"], ref_out, "dropout output")
        self.assert_weights(r1["weights"], ref_w)
        req2 = copy.deepcopy(req)
        req2["dropout"]["seed"] = 8
        _, r3 = self.srv.post_json("/v1/attention", req2)
        self.assertNotEqual(r1["output"], r3["output"])

    def test_flat_tensors_in_flat_tensors_out(self):
        req = rand_request(24, B=2, H=2, Hkv=1, Lq=3, Lk=4, D=2, Dv=3)
        ref_out, ref_w = attention(req)
        flat = {}
        for name in ("query", "key", "value"):
            flat[name] = {"shape": shape_of(req[name]), "data": flatten(req[name])}
        status, resp = self.srv.post_json("/v1/attention", flat)
        self.assertEqual(status, 200, resp)
        self.assertEqual(resp["output"]["shape"], [2, 2, 3, 3])
        self.assertEqual(resp["weights"]["shape"], [2, 2, 3, 4])
        self.assert_close(nest(resp["output"]["data"], [2, 2, 3, 3]), ref_out, "flat output")
        self.assert_weights(nest(resp["weights"]["data"], [2, 2, 3, 4]), ref_w)

    def test_long_rows_cross_block_boundaries(self):
        # lengths that are not multiples of any plausible block size
        req = rand_request(25, B=1, Lq=67, Lk=131, D=8, Dv=3)
        req["causal"] = "lower_right"
        req["valid_lens"] = [129]
        self.run_case(req)

    def test_large_inputs_stay_finite(self):
        req = rand_request(26, B=1, Lq=2, Lk=3, D=2, Dv=2)
        req["query"] = [[[1e30, -1e30], [3e38, 3e38]]]
        req["key"] = [[[1e30, 1e30], [-1e30, 2e30], [3e38, -3e38]]]
        status, resp = self.srv.post_json("/v1/attention", req)
        self.assertEqual(status, 200, resp)
        for x in flatten(resp["output"]) + flatten(resp["weights"]):
            self.assertTrue(math.isfinite(x))

    def test_huge_values_average_without_overflow(self):
        # The output is a weighted mean of value rows, no larger than the
        # largest value, though the sums behind it reach Lk * max|v|.
        for values in ([2e38, 2e38], [3e38, 3e38, -3e38, -3e38], [1e36] * 400,
                       [1e37] * 40, [-3e38] * 3):
            req = {"query": [[[0.0]]], "key": [[[0.0]] * len(values)],
                   "value": [[[x] for x in values]]}
            self.run_case(req)
        # grouped heads, per-item lengths (0 gives empty rows), one sign so
        # that no cancellation hides an error
        rng = random.Random(27)
        req = rand_request(27, B=2, H=2, Hkv=1, Lq=3, Lk=600, D=4, Dv=2)
        req["value"] = [[[[rng.uniform(1e37, 3e38) for _ in range(2)]
                          for _ in range(600)]] for _ in range(2)]
        req["valid_lens"] = [600, 0]
        self.run_case(req)


if __name__ == "__main__":
    harness.main()
