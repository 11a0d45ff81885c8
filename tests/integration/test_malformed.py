"""A corpus of malformed POST /v1/attention bodies against the real attnd.

Every body must get a 4xx answer whose body is JSON {"error": "..."} with a
non-empty message; where the problem belongs to a field, the message names
that field (and, where it matters, the problem).  Between and after the
corpus a valid request must still get 200: a bad client never takes the
server down or poisons later requests.
"""

import json
import socket

import harness

# A valid rank-3 request: B=2, Lq=2, Lk=3, D=2, Dv=1.
BASE = {
    "query": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]],
    "key": [[[1, 0], [0, 1], [1, 1]], [[2, 0], [0, 2], [1, 0]]],
    "value": [[[1], [2], [3]], [[4], [5], [6]]],
}

ADD = {
    "query": [[[1, 2]]],
    "key": [[[1, 2, 3], [4, 5, 6]]],
    "value": [[[1], [2]]],
    "scoring": "additive",
    "w_q": [[1, 0], [0, 1]],
    "w_k": [[1, 0, 0], [0, 1, 0]],
    "w_v": [1, -1],
}


def with_(base=BASE, **fields):
    """base with fields replaced (a value of ... removes the field)."""
    req = dict(base)
    for k, v in fields.items():
        if v is ...:
            req.pop(k, None)
        else:
            req[k] = v
    return req


def flat(shape, data):
    return {"shape": shape, "data": data}


def cases():
    """(name, body bytes, phrases the error message must contain)."""
    out = []

    def add(name, body, *phrases):
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        out.append((name, body, phrases))

    base_text = json.dumps(BASE)

    # -- the body itself --------------------------------------------------
    add("empty body", b"", "empty")
    add("whitespace body", b"  \r\n\t ", "empty")
    add("not json", b"query=1&key=2", "JSON")
    add("truncated object", base_text[:-5], "JSON")
    add("single quotes", b"{'query': [[[1]]]}", "JSON")
    add("trailing comma", base_text[:-1] + ",}", "JSON")
    add("bare NaN", base_text.replace("[1, 2]", "[NaN, 2]", 1), "JSON")
    add("bare Infinity", base_text.replace("[1, 2]", "[Infinity, 2]", 1),
        "JSON")
    add("array body", b"[1, 2, 3]", "object")
    add("string body", b'"query"', "object")
    add("number body", b"42", "object")
    add("null body", b"null", "object")
    add("true body", b"true", "object")
    add("trailing garbage", base_text + " x", "after the JSON object")
    add("two objects", base_text + base_text, "after the JSON object")
    add("trailing NUL", base_text.encode() + b"\x00", "after the JSON object")
    add("invalid utf8 key", b'{"\xff\xfe":1}', "unknown field")
    add("deep nesting", b"[" * 5000 + b"]" * 5000, "nested 1001 levels deep",
        "the limit is 1000 levels")
    add("unterminated string", b'{"query": "abc', "JSON")
    # \u0000 in any string: cJSON's strings end there, so "causal\u0000zz"
    # would pass for "causal" and an id would be echoed cut short
    nul = "in a string; attnd takes no NUL character in a JSON string"
    add("NUL escape in a field name", base_text[:-1] + ', "causal\\u0000zz": true}',
        "body at byte %d: \\u0000 " % (len(base_text) + 8), nul)
    add("NUL escape in an id", with_(id="ab\0cd"), "\\u0000 " + nul)
    add("NUL escape in scoring", with_(scoring="dot\0x"), "\\u0000 " + nul)
    # half a surrogate pair, which cJSON refuses without a word
    lone = ("is a lone UTF-16 surrogate (a \\uD800-\\uDBFF escape must be "
            "followed by a \\uDC00-\\uDFFF one)")
    add("lone high surrogate in an id", with_(id="\ud800"),
        "id: \\ud800 at byte %d " % (len(json.dumps(BASE)) + 8) + lone)
    add("lone low surrogate in an id", with_(id="ab\udc00"), "id: \\udc00 at byte", lone)
    add("lone surrogate in causal", with_(causal="\udbff"), "causal: \\udbff at byte", lone)
    add("lone surrogate in precision", with_(precision="bf\udfff"),
        "precision: \\udfff at byte", lone)
    add("lone surrogate in a field name", with_(**{"\ud800": 1}),
        "body is not valid JSON: \\ud800 at byte", lone)
    # what Python's json.dumps writes for floats that are not finite (a
    # numpy array with a NaN, through tolist())
    nan, inf = float("nan"), float("inf")
    add("python NaN nested", with_(query=[[[1, 2], [3, nan]], [[5, 6], [7, 8]]]),
        "query[0][1][1]: NaN is not a JSON number; attnd needs finite values")
    add("python Infinity in key", with_(key=set_first(BASE["key"], inf)),
        "key[0][0][0]: Infinity is not a JSON number; attnd needs finite values")
    add("python -Infinity flat", with_(value=flat([2, 3, 1], [1, 2, -inf, 4, 5, 6])),
        "value.data[2]: -Infinity is not a JSON number; attnd needs finite values")
    add("python NaN scale", with_(scale=nan),
        "scale: NaN is not a JSON number; attnd needs finite values")
    add("python Infinity bias", with_(bias=[0, inf, 1]), "bias[1]: Infinity is not")
    add("NUL body", b"\0" * 64,
        "body is not valid JSON: byte 0 is a NUL (0x00)")
    add("float32 bytes as body", b"\0\0\x80?\0\0\0@",
        "body is not valid JSON: byte 0 is a NUL (0x00)")

    # -- fields -------------------------------------------------------------
    add("unknown field", with_(vaild_lens=[1, 1]), "unknown field 'vaild_lens'")
    add("unknown field upper case", with_(Query=1), "unknown field 'Query'")
    add("unknown field empty name", with_(**{"": 1}), "unknown field")
    add("misspelt query", with_(query=..., querry=BASE["query"]),
        "unknown field 'querry' (did you mean 'query'? fields: query, key, "
        "value, valid_lens, mask, bias, causal, scale, return_weights, id, "
        "scoring, w_q, w_k, w_v, dropout, window, diagnostics, sinks, softcap, "
        "alibi_slopes, cu_seqlens_q, cu_seqlens_k, return_lse, window_align, "
        "precision)")
    add("misspelt causal", with_(casual=True),
        "unknown field 'casual' (did you mean 'causal'?")
    add("unknown field nothing near", with_(temperature=0.5),
        "unknown field 'temperature' (fields: query, key,")
    add("duplicate query", base_text[:-1] + ', "query": [[[1, 2]]]}',
        "duplicate field 'query'")
    add("duplicate nulls", base_text[:-1] + ', "mask": null, "mask": null}',
        "duplicate field 'mask'")
    add("duplicate shape", '{"query": {"shape": [1,1,1], "shape": [1,1,1], '
        '"data": [1]}, "key": [[[1]]], "value": [[[1]]]}',
        "query", "duplicate field 'shape'")
    add("duplicate dropout p", base_text[:-1] +
        ', "dropout": {"p": 0.1, "p": 0.2}}', "dropout", "duplicate field 'p'")
    for f in ("query", "key", "value"):
        add("missing " + f, with_(**{f: ...}), f, "missing")
        add("null " + f, with_(**{f: None}), f, "null")

    # -- tensor values ------------------------------------------------------
    for f in ("query", "key", "value"):
        add(f + " boolean element", with_(**{f: bool_at(BASE[f])}), f,
            "expected a number", "true")
        add(f + " string element", with_(**{f: str_at(BASE[f])}), f,
            "expected a number", "a string")
        add(f + " null element", with_(**{f: null_at(BASE[f])}), f,
            "expected a number", "null")
        add(f + " out of float32 range",
            with_(**{f: set_first(BASE[f], 1e39)}), f,
            "out of float32 range")
        add(f + " overflowing literal",
            json.dumps(BASE).replace(json.dumps(BASE[f]),
                                     json.dumps(BASE[f]).replace("1", "1e999", 1),
                                     1), f, "out of float32 range")
        add(f + " ragged", with_(**{f: ragged(BASE[f])}), f, "ragged")
        add(f + " rank 2", with_(**{f: BASE[f][0]}), f, "rank")
        add(f + " rank 5", with_(**{f: [[BASE[f]]]}), f, "rank")
        add(f + " scalar", with_(**{f: 3}), f, "expected a tensor")
        add(f + " string", with_(**{f: "[[[1]]]"}), f, "expected a tensor")
        add(f + " empty", with_(**{f: []}), f, "axis 0 is empty")
        add(f + " empty inner", with_(**{f: [[[]]]}), f, "empty")
    add("query number is object", with_(query=[[[1, {"a": 1}]], [[1, 2]]]), "query",
        "an object")
    add("query element array", with_(query=[[[1, [2]]], [[1, 2]]]), "query",
        "expected a number")
    add("query ragged across items",
        with_(query=[[[1, 2], [3, 4]], [[5, 6]]]), "query", "ragged")
    add("query width 3 vs key 2", with_(query=[[[1, 2, 3]], [[4, 5, 6]]]),
        "key: width 2 does not match query width 3")
    add("key batch mismatch", with_(key=BASE["key"][:1]), "key", "batch")
    add("value batch mismatch", with_(value=BASE["value"][:1]), "value",
        "batch")
    add("value length mismatch", with_(value=[[[1], [2]], [[4], [5]]]),
        "value", "length 2 does not match key length 3")
    add("key rank 4 vs query 3", with_(key=[BASE["key"]]), "key", "rank")
    add("heads not a multiple",
        {"query": [[[[1]], [[1]], [[1]]]], "key": [[[[1]], [[1]]]],
         "value": [[[[1]], [[1]]]]}, "heads")
    add("value heads mismatch",
        {"query": [[[[1]], [[1]]]], "key": [[[[1]], [[1]]]],
         "value": [[[[1]]]]}, "value", "heads")

    # -- the flat form -------------------------------------------------------
    add("flat too few data", with_(query=flat([2, 2, 2], [1] * 7)), "query",
        "needs 8")
    add("flat too many data", with_(query=flat([2, 2, 2], [1] * 9)), "query",
        "needs 8")
    add("flat negative dim", with_(query=flat([2, -2, 2], [1])), "query",
        "negative")
    add("flat zero dim", with_(query=flat([2, 0, 2], [])), "query",
        "axis 1 is empty")
    add("flat fractional dim", with_(query=flat([2, 1.5, 2], [1])), "query",
        "integer")
    add("flat string dim", with_(query=flat([2, "2", 2], [1])), "query",
        "integer")
    add("flat shape not array", with_(query=flat(3, [1, 2, 3])), "query",
        "shape")
    add("flat data not array", with_(query=flat([1, 1, 1], 1)), "query",
        "data")
    add("flat data nested", with_(query=flat([2, 2, 2], [[1] * 4] * 2)),
        "query", "needs 8")
    add("flat missing data", with_(query={"shape": [1, 1, 2]}), "query",
        "\"data\"")
    add("flat missing shape", with_(query={"data": [1, 2]}), "query",
        "\"shape\"")
    add("flat extra field", with_(query={"shape": [2, 2, 2], "data": [1] * 8,
                                         "dtype": "FP32"}),
        "query", "unknown field 'dtype'")
    add("flat boolean element",
        with_(query=flat([2, 2, 2], [1, 2, 3, True, 5, 6, 7, 8])), "query",
        "expected a number at [0][1][1], got true")
    add("flat huge dim", with_(query=flat([2, 2 ** 40, 2], [1])), "query",
        "too large")
    add("flat rank 2", with_(query=flat([4, 2], [1] * 8)), "query", "rank")

    # -- valid_lens -----------------------------------------------------------
    add("valid_lens fractional", with_(valid_lens=[1.5, 1]), "valid_lens",
        "integer")
    add("valid_lens boolean", with_(valid_lens=[True, 1]), "valid_lens",
        "integer")
    add("valid_lens string", with_(valid_lens=["2", 1]), "valid_lens",
        "integer")
    add("valid_lens too long", with_(valid_lens=[1, 9]),
        "valid_lens[1]=9 exceeds key length 3")
    add("valid_lens negative", with_(valid_lens=[-2, 1]),
        "valid_lens[0]=-2 is negative")
    add("valid_lens 2d too long", with_(valid_lens=[[1, 1], [1, 4]]),
        "valid_lens[1][1]=4 exceeds key length 3")
    add("valid_lens wrong length", with_(valid_lens=[1, 1, 1]), "valid_lens",
        "shape")
    add("valid_lens wrong 2d", with_(valid_lens=[[1, 1, 1], [1, 1, 1]]),
        "valid_lens", "shape")
    add("valid_lens scalar", with_(valid_lens=2), "valid_lens")
    add("valid_lens rank 3", with_(valid_lens=[[[1]], [[1]]]), "valid_lens")
    add("valid_lens empty", with_(valid_lens=[]), "valid_lens", "empty")

    # -- mask and bias -----------------------------------------------------------
    add("mask wrong width", with_(mask=[[True, False], [True, True]]), "mask",
        "does not broadcast to [2,2,3]")
    add("mask too many axes", with_(mask=[[[[True, True, True]]]]), "mask",
        "does not broadcast")
    add("mask value 2", with_(mask=[True, 2, False]), "mask",
        "expected true, false, 0 or 1")
    add("mask string", with_(mask=[True, "no", False]), "mask", "a string")
    add("mask null element", with_(mask=[True, None, False]), "mask", "null")
    add("mask scalar", with_(mask=True), "mask", "expected a tensor")
    add("mask ragged", with_(mask=[[True, True, True], [True]]), "mask",
        "ragged")
    add("bias wrong shape", with_(bias=[[0.5, 1], [0, 0]]), "bias",
        "does not broadcast")
    add("bias boolean", with_(bias=[0.5, True, 1]), "bias",
        "expected a number")
    add("bias out of range", with_(bias=[0.5, 1e40, 1]), "bias",
        "out of float32 range")
    add("bias string", with_(bias="zero"), "bias", "expected a tensor")

    # -- options -------------------------------------------------------------------
    add("causal unknown string", with_(causal="lower-right"), "causal",
        "\"upper_left\"", "\"lower_right\"")
    add("causal number", with_(causal=1), "causal", "allowed")
    add("causal array", with_(causal=[True]), "causal")
    add("scale zero", with_(scale=0), "scale: must be non-zero")
    add("scale underflow", with_(scale=1e-60), "scale: must be non-zero")
    add("scale string", with_(scale="0.5"), "scale", "expected a number")
    add("scale boolean", with_(scale=True), "scale", "expected a number")
    add("scale huge", with_(scale=1e39), "scale", "out of float32 range")
    add("return_weights number", with_(return_weights=1), "return_weights")
    add("return_weights string", with_(return_weights="yes"),
        "return_weights")
    add("id boolean", with_(id=True), "id:")
    add("id object", with_(id={"a": 1}), "id:")
    add("id array", with_(id=[1]), "id:")
    add("scoring unknown", with_(scoring="bahdanau"), "scoring",
        "\"additive\"")
    add("scoring number", with_(scoring=1), "scoring")
    add("w_q with dot", with_(w_q=[[1, 0]]),
        "w_q: only valid with scoring \"additive\"")
    add("w_v with dot", with_(w_v=[1]), "w_v: only valid")
    add("additive missing w_k", with_(ADD, w_k=...), "w_k", "required")
    add("additive missing w_v", with_(ADD, w_v=...), "w_v", "required")
    add("additive w_q width", with_(ADD, w_q=[[1, 0, 0], [0, 1, 0]]), "w_q",
        "width")
    add("additive w_k width", with_(ADD, w_k=[[1, 0], [0, 1]]), "w_k", "width")
    add("additive w_k rows", with_(ADD, w_k=[[1, 0, 0]]), "w_k", "rows")
    add("additive w_v length", with_(ADD, w_v=[1, 2, 3]), "w_v", "length")
    add("additive w_v rank", with_(ADD, w_v=[[1, 2]]), "w_v", "rank")
    add("additive with scale", with_(ADD, scale=2), "scale")
    add("dropout p one", with_(dropout={"p": 1, "seed": 1}), "dropout.p")
    add("dropout p negative", with_(dropout={"p": -0.5}), "dropout.p")
    add("dropout p string", with_(dropout={"p": "0.1"}), "dropout.p")
    add("dropout seed fractional", with_(dropout={"p": 0.1, "seed": 1.5}),
        "dropout.seed")
    add("dropout seed negative", with_(dropout={"p": 0.1, "seed": -1}),
        "dropout.seed")
    add("dropout seed too big",
        with_(dropout={"p": 0.1, "seed": 2 ** 53 + 2}), "dropout.seed")
    add("dropout missing p", with_(dropout={"seed": 3}), "dropout", "\"p\"")
    add("dropout unknown field", with_(dropout={"p": 0.1, "sead": 3}),
        "dropout", "unknown field 'sead' (did you mean 'seed'? allowed: p, seed)")
    add("dropout number", with_(dropout=0.1), "dropout")
    add("window negative", with_(window=[-1, 0]), "window[0]")
    add("window fractional", with_(window=[1, 0.5]), "window[1]")
    add("window one side", with_(window=[1]), "window")
    add("window three sides", with_(window=[1, 1, 1]), "window")
    add("window object", with_(window={"left": 1}), "window")
    add("window boolean side", with_(window=[True, 1]), "window[0]")
    return out


def first_leaf_path(t):
    path = []
    while isinstance(t, list):
        path.append(len(t) - 1)
        t = t[-1]
    return path


def replace_last_leaf(t, value):
    t = json.loads(json.dumps(t))
    node = t
    path = first_leaf_path(t)
    for i in path[:-1]:
        node = node[i]
    node[path[-1]] = value
    return t


def bool_at(t):
    return replace_last_leaf(t, True)


def str_at(t):
    return replace_last_leaf(t, "1")


def null_at(t):
    return replace_last_leaf(t, None)


def set_first(t, value):
    t = json.loads(json.dumps(t))
    node = t
    while isinstance(node[0], list):
        node = node[0]
    node[0] = value
    return t


def ragged(t):
    t = json.loads(json.dumps(t))
    t[-1][-1] = t[-1][-1] + t[-1][-1]
    return t


class MalformedTest(harness.ServerTestCase):
    server_args = ("--workers", "2", "--max-body-mb", "1",
                   "--max-inflight-mb", "1")

    def post(self, body):
        status, hdrs, data = self.srv.request(
            "POST", "/v1/attention", body, {"Content-Type": "application/json"})
        return status, hdrs, data

    def assert_valid_still_served(self):
        status, resp = self.srv.post_json("/v1/attention", BASE)
        self.assertEqual(status, 200, resp)
        self.assertEqual(len(resp["output"]), 2)

    def assert_error(self, name, status, data, phrases, want=None):
        if want is not None:
            self.assertEqual(status, want, "%s: %r" % (name, data[:300]))
        else:
            self.assertTrue(400 <= status < 500, "%s: status %d %r"
                            % (name, status, data[:300]))
        try:
            obj = json.loads(data.decode("utf-8"))
        except ValueError:
            self.fail("%s: error body is not UTF-8 JSON: %r" % (name, data[:300]))
        self.assertIsInstance(obj, dict, name)
        self.assertEqual(list(obj), ["error"], name)
        msg = obj["error"]
        self.assertIsInstance(msg, str, name)
        self.assertTrue(msg.strip(), name + ": empty message")
        for p in phrases:
            self.assertIn(p, msg, "%s: %r lacks %r" % (name, msg, p))

    def test_corpus_gets_4xx_with_json_errors(self):
        corpus = cases()
        self.assertGreaterEqual(len(corpus), 100)
        names = set()
        for n, (name, body, phrases) in enumerate(corpus):
            self.assertNotIn(name, names, "duplicate case name")
            names.add(name)
            with self.subTest(case=name):
                status, _, data = self.post(body)
                self.assert_error(name, status, data, phrases, want=400)
            if n % 25 == 0:
                self.assert_valid_still_served()
        self.assert_valid_still_served()

    def test_each_body_is_valid_without_its_defect(self):
        # the corpus is only meaningful if the bodies it mutates are valid
        for req in (BASE, ADD, with_(valid_lens=[1, 2], mask=[True, True, False],
                                     bias=[[0.5, 0, 1], [0, 0, 0]],
                                     causal="lower_right", scale=-0.5,
                                     id="x", dropout={"p": 0.1, "seed": 3},
                                     window=[1, None], return_weights=False)):
            status, resp = self.srv.post_json("/v1/attention", req)
            self.assertEqual(status, 200, resp)

    def test_body_over_limit_gets_413(self):
        # attnd answers from the headers alone and closes; a client still
        # writing the body could see a reset before it reads the 413, so the
        # head announces the 1.2 MB body and the test reads the answer.
        size = 1200 * 1024
        with socket.create_connection(("127.0.0.1", self.srv.port), timeout=30) as s:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % size)
            s.sendall(b'{"query": [1,')
            raw = b""
            while b"\r\n\r\n" not in raw or not raw.endswith(b"}"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
        head, _, data = raw.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        self.assert_error("body over 1 MiB", status, data, (), want=413)
        self.assert_valid_still_served()

    def test_element_budget_gets_413(self):
        # 3 x 1000 inputs but 1,000,000 weights: over the 1 MiB budget
        n = 1000
        req = {"query": flat([1, n, 1], [1] * n),
               "key": flat([1, n, 1], [1] * n),
               "value": flat([1, n, 1], [1] * n)}
        status, _, data = self.post(json.dumps(req).encode())
        self.assert_error("element budget", status, data, ("limit",),
                          want=413)
        self.assert_valid_still_served()

    def test_flt_max_as_printed_reads_back(self):
        # attnd prints FLT_MAX as its shortest float32 text, 3.4028235e38;
        # that decimal is past FLT_MAX as a double but rounds to FLT_MAX,
        # so the answer's own text must be accepted as input again
        body = ('{"query":[[[0,0]]],"key":[[[0,0]]],'
                '"value":[[[3.4028235e38,-3.4028235e38]]]}')
        status, _, data = self.post(body.encode())
        self.assertEqual(status, 200, data[:300])
        raw = data.decode()
        at = raw.index('"output":') + len('"output":')
        out = raw[at:raw.index("]]]", at) + 3]
        self.assertEqual(out, "[[[3.4028235e38,-3.4028235e38]]]")
        for again in (
                '{"query":[[[0,0]]],"key":[[[0,0]]],"value":%s,'
                '"scale":3.4028235e38,"bias":[[-3.4028235e38]]}' % out,
                '{"query":[[[0,0]]],"key":[[[0,0]]],"value":{"shape":[1,1,2],'
                '"data":%s}}' % out.replace("[", "").replace("]", "").join("[]")):
            status, _, data = self.post(again.encode())
            self.assertEqual(status, 200, data[:300])
            self.assertIn(b"3.4028235e38,-3.4028235e38", data)
        v2 = ('{"inputs":[{"name":"query","datatype":"FP32","shape":[1,1,2],'
              '"data":[0,0]},{"name":"key","datatype":"FP64","shape":[1,1,2],'
              '"data":[0,3.4028235e38]},{"name":"value","datatype":"FP32",'
              '"shape":[1,1,2],"data":%s}],"parameters":{"scale":'
              '-3.4028235e38}}' % out)
        status, _, data = self.srv.request(
            "POST", "/v2/models/attention/infer", v2.encode(),
            {"Content-Type": "application/json"})
        self.assertEqual(status, 200, data[:300])
        self.assertIn(b"3.4028235e38,-3.4028235e38", data)

    def test_past_flt_max_is_refused_showing_the_value(self):
        for text, shown in (
                ("3.4028236e38", "3.4028236e38 is out of float32 range "
                 "(the largest is 3.4028235e38)"),
                ("340282356779733661637539395458142568448",
                 "340282356779733661637539395458142568448 is out of float32 "
                 "range (decimals "
                 "from 3.40282356779733661637539395458142568448e38 on round "
                 "to infinity")):
            for field, body in (
                    ("value[0][0][0]", '{"query":[[[0,0]]],"key":[[[0,0]]],'
                     '"value":[[[%s]]]}' % text),
                    ("scale", '{"query":[[[0,0]]],"key":[[[0,0]]],'
                     '"value":[[[1]]],"scale":%s}' % text)):
                status, _, data = self.post(body.encode())
                self.assert_error(field, status, data,
                                  ("%s: %s" % (field, shown),), want=400)
        self.assert_valid_still_served()

    def test_messages_echo_client_text_safely(self):
        # a field name with quotes, control characters and invalid UTF-8
        status, _, data = self.post(b'{"a\\"b\\u0001\xff": 1}')
        self.assert_error("odd name", status, data, ("unknown field",),
                          want=400)


if __name__ == "__main__":
    harness.main()
