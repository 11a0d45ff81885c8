"""deploy/openapi.json against the real build/attnd.

The document is checked three ways:
  * it is a well-formed OpenAPI 3.1 document: the required objects and keys
    (a structural JSON Schema checked with Debian's python3-jsonschema, since
    bookworm has no openapi-spec-validator), every $ref resolves, every
    schema is a valid JSON Schema 2020-12, every templated path declares its
    path parameters, operationIds are unique;
  * it matches the routes: GET /openapi.json serves it byte for byte; every
    documented path and method is answered (never 404/405); the methods in a
    405's Allow header are exactly the documented ones; every route in the
    server's routing table (server/http/http_route.c, server/http/assets.c) is documented;
    undocumented paths are 404;
  * real responses (200s and every kind of error attnd can be made to send)
    validate against the schema documented for their status and content
    type, with the documented headers (X-Request-ID on every one); the
    documented examples validate against their schemas; and broken
    documents and bodies are rejected, so the checks can fail.

The checks use Debian's python3-jsonschema, so the script re-runs itself
under Debian's /usr/bin/python3 whatever python3 started it.
"""

import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
if os.path.exists(SYSTEM_PYTHON) and sys.executable != SYSTEM_PYTHON:
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)

import copy
import http.client
import json
import re
import signal
import time

import harness
import jsonschema
from jsonschema import Draft202012Validator, RefResolver

DOC_PATH = os.path.join(harness.ROOT, "deploy", "openapi.json")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

# What the OpenAPI 3.1 specification requires of the objects attnd's
# document uses (OpenAPI Object, Info, Paths, Path Item, Operation,
# Parameter, Request Body, Media Type, Responses, Response, Header,
# Components).  Unknown keys are refused except the x- extensions, so a
# typo such as "response" or "requestbody" fails.
REF = {"type": "object", "required": ["$ref"], "properties": {"$ref": {"type": "string"}}}


def _obj(required, props, extra_ok=False):
    s = {"type": "object", "required": required, "properties": props,
         "patternProperties": {"^x-": {}}}
    if not extra_ok:
        s["additionalProperties"] = False
    return s


MEDIA = _obj([], {"schema": {"type": ["object", "boolean"]}, "example": {},
                  "examples": {"type": "object", "additionalProperties": {
                      "type": "object", "properties": {"summary": {"type": "string"},
                                                       "description": {"type": "string"},
                                                       "value": {}}}},
                  "encoding": {"type": "object"}})
CONTENT = {"type": "object", "minProperties": 1,
           "propertyNames": {"pattern": r"^[a-z*]+/[-a-z0-9.+*]+(;.*)?$"},
           "additionalProperties": MEDIA}
HEADER = _obj(["schema"], {"description": {"type": "string"}, "required": {"type": "boolean"},
                           "deprecated": {"type": "boolean"},
                           "schema": {"type": ["object", "boolean"]}})
PARAM = _obj(["name", "in", "schema"], {
    "name": {"type": "string", "minLength": 1},
    "in": {"enum": ["query", "header", "path", "cookie"]},
    "description": {"type": "string"}, "required": {"type": "boolean"},
    "deprecated": {"type": "boolean"}, "schema": {"type": ["object", "boolean"]},
    "example": {}})
RESPONSE = _obj(["description"], {"description": {"type": "string"},
                                  "headers": {"type": "object", "additionalProperties": {
                                      "oneOf": [REF, HEADER]}},
                                  "content": CONTENT, "links": {"type": "object"}})
OPERATION = _obj(["responses"], {
    "operationId": {"type": "string"}, "summary": {"type": "string"},
    "description": {"type": "string"}, "deprecated": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "parameters": {"type": "array", "items": {"oneOf": [REF, PARAM]}},
    "requestBody": {"oneOf": [REF, _obj(["content"], {
        "description": {"type": "string"}, "required": {"type": "boolean"},
        "content": CONTENT})]},
    "responses": {"type": "object", "minProperties": 1,
                  "propertyNames": {"pattern": "^([1-5][0-9X]{2}|default)$"},
                  "additionalProperties": {"oneOf": [REF, RESPONSE]}},
    "security": {"type": "array"}, "servers": {"type": "array"}})
PATH_ITEM = _obj([], dict({m: OPERATION for m in METHODS},
                          summary={"type": "string"}, description={"type": "string"},
                          parameters={"type": "array"}, servers={"type": "array"}))
OPENAPI_31 = _obj(["openapi", "info", "paths"], {
    "openapi": {"type": "string", "pattern": r"^3\.1\.\d+$"},
    "info": _obj(["title", "version"], {
        "title": {"type": "string"}, "version": {"type": "string"},
        "summary": {"type": "string"}, "description": {"type": "string"},
        "termsOfService": {"type": "string"}, "contact": {"type": "object"},
        "license": {"type": "object"}}),
    "jsonSchemaDialect": {"type": "string"},
    "servers": {"type": "array", "items": _obj(["url"], {
        "url": {"type": "string"}, "description": {"type": "string"},
        "variables": {"type": "object"}})},
    "paths": {"type": "object", "propertyNames": {"pattern": "^/"},
              "additionalProperties": PATH_ITEM},
    "webhooks": {"type": "object"},
    "components": _obj([], {
        "schemas": {"type": "object", "additionalProperties": {"type": ["object", "boolean"]}},
        "responses": {"type": "object", "additionalProperties": {"oneOf": [REF, RESPONSE]}},
        "parameters": {"type": "object", "additionalProperties": {"oneOf": [REF, PARAM]}},
        "headers": {"type": "object", "additionalProperties": {"oneOf": [REF, HEADER]}},
        "requestBodies": {"type": "object"}, "examples": {"type": "object"},
        "securitySchemes": {"type": "object"}, "links": {"type": "object"},
        "callbacks": {"type": "object"}, "pathItems": {"type": "object"}}),
    "security": {"type": "array"},
    "tags": {"type": "array", "items": _obj(["name"], {
        "name": {"type": "string"}, "description": {"type": "string"},
        "externalDocs": {"type": "object"}})},
    "externalDocs": {"type": "object"}})


def resolve(doc, ref):
    """The object a local $ref ("#/a/b") points at; KeyError if none."""
    if not ref.startswith("#/"):
        raise KeyError("not a local reference: " + ref)
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def deref(doc, node):
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        node = resolve(doc, node["$ref"])
    return node


def walk(node, path=""):
    """Yields (json path, dict) for every object in node."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, path + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, "%s/%d" % (path, i))


def schema_objects(doc):
    """(where, schema) of every Schema Object: components and inline ones."""
    for name, s in doc.get("components", {}).get("schemas", {}).items():
        yield "components/schemas/" + name, s
    for where, obj in walk({k: v for k, v in doc.items() if k != "components"}):
        if "schema" in obj and isinstance(obj["schema"], dict):
            yield where + "/schema", obj["schema"]
    for kind in ("parameters", "headers"):
        for name, obj in doc.get("components", {}).get(kind, {}).items():
            if "schema" in obj:
                yield "components/%s/%s/schema" % (kind, name), obj["schema"]
    for kind in ("responses",):
        for where, obj in walk(doc.get("components", {}).get(kind, {}), "components/" + kind):
            if "schema" in obj and isinstance(obj["schema"], dict):
                yield where + "/schema", obj["schema"]


def check_document(doc):
    """Every problem found in doc, as a list of strings (empty = valid)."""
    problems = []
    for e in Draft202012Validator(OPENAPI_31).iter_errors(doc):
        problems.append("structure at /%s: %s" % ("/".join(map(str, e.absolute_path)),
                                                  e.message))
    for where, obj in walk(doc):
        ref = obj.get("$ref")
        if isinstance(ref, str):
            try:
                resolve(doc, ref)
            except (KeyError, IndexError, ValueError, TypeError):
                problems.append("%s: $ref %s does not resolve" % (where, ref))
    for where, s in schema_objects(doc):
        try:
            Draft202012Validator.check_schema(s)
        except jsonschema.SchemaError as e:
            problems.append("%s: not a JSON Schema: %s" % (where, e.message))
    seen = {}
    for path, item in doc.get("paths", {}).items():
        if not isinstance(item, dict):
            continue
        wanted = set(re.findall(r"{([^}]+)}", path))
        for m in METHODS:
            op = item.get(m)
            if not isinstance(op, dict):
                continue
            oid = op.get("operationId")
            if oid in seen:
                problems.append("operationId %s used by %s and %s %s" % (oid, seen[oid], m, path))
            seen[oid] = "%s %s" % (m, path)
            declared = set()
            for p in op.get("parameters", []) + item.get("parameters", []):
                try:
                    p = deref(doc, p)
                except KeyError:
                    continue
                if p.get("in") == "path":
                    declared.add(p.get("name"))
                    if p.get("required") is not True:
                        problems.append("%s %s: path parameter %s must be required" %
                                        (m, path, p.get("name")))
            if declared != wanted:
                problems.append("%s %s: path parameters %s, template has %s" %
                                (m, path, sorted(declared), sorted(wanted)))
    return problems


def load_doc():
    with open(DOC_PATH, "rb") as f:
        raw = f.read()
    return raw, json.loads(raw)


def concrete(doc, path, op):
    """The template path with each path parameter set to its first enum
    value (its first example when any value goes)."""
    for p in op.get("parameters", []):
        p = deref(doc, p)
        if p["in"] == "path":
            values = p["schema"].get("enum") or p["schema"]["examples"]
            path = path.replace("{%s}" % p["name"], str(values[0]))
    return path


SHM = "/v2/systemsharedmemory/"


def with_variants(path):
    """A route of http_route.c and the paths it also answers: a model route under
    /versions/{version}, a shared memory route under /region/{region}."""
    paths = {path}
    if path.startswith("/v2/models/{model}"):
        paths.add(path.replace("{model}", "{model}/versions/{version}", 1))
    if path.startswith(SHM) and "/region/" not in path:
        paths.add(path.replace(SHM, SHM + "region/{region}/", 1))
    return paths


def routing_source():
    """The text of attnd's routing: server/http/http_route.c (the route table and the
    other struct http_route definitions) and server/http/http_impl.h (struct
    http_route itself)."""
    return "".join(open(os.path.join(harness.ROOT, "server", "http", f)).read()
                   for f in ("http_route.c", "http_impl.h"))


def server_routes():
    """Path templates of attnd's routing: http_routes[] and the other
    struct http_route definitions in server/http/http_route.c ({m} is the model; the
    model routes also answer under /versions/{v}), and the embedded files
    of server/http/assets.c."""
    src = routing_source()
    table = re.search(r"http_routes\[\]\s*=\s*{(.*?)\n};", src, re.S)
    assert table, "no http_routes[] table in server/http/http_route.c"
    paths = set(re.findall(r'{\s*"(/[^"]*)"', table.group(1)))
    for p in re.findall(r'static const struct http_route \w+\s*=\s*{\s*"(/[^"]*)"', src):
        paths |= with_variants(p.replace("{m}", "{model}"))
    assets = open(os.path.join(harness.ROOT, "server", "http", "assets.c")).read()
    paths |= set(re.findall(r'{\s*"(/[^"]*)",\s*attnd_asset_', assets))
    return paths


class DocumentTest(harness.unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.raw, cls.doc = load_doc()

    def test_document_is_valid_openapi_31(self):
        self.assertEqual(check_document(self.doc), [])

    def test_checker_rejects_broken_documents(self):
        breakages = {
            "no info": lambda d: d.pop("info"),
            "openapi 2.0": lambda d: d.__setitem__("openapi", "2.0"),
            "response without description":
                lambda d: d["paths"]["/healthz"]["get"]["responses"]["200"].pop("description"),
            "typo in a key":
                lambda d: d["paths"]["/v1/attention"]["post"].__setitem__(
                    "response", d["paths"]["/v1/attention"]["post"].pop("responses")),
            "dangling $ref":
                lambda d: d["components"]["schemas"].pop("Error"),
            "bad schema":
                lambda d: d["components"]["schemas"]["Error"].__setitem__("type", "strnig"),
            "undeclared path parameter":
                lambda d: d["paths"]["/v2/models/{model}"]["get"].pop("parameters"),
            "duplicate operationId":
                lambda d: d["paths"]["/readyz"]["get"].__setitem__("operationId", "healthz"),
        }
        for what, breakit in breakages.items():
            broken = copy.deepcopy(self.doc)
            breakit(broken)
            self.assertNotEqual(check_document(broken), [], what)

    def test_servers_are_relative_so_a_path_prefix_works(self):
        # a proxy may serve attnd under /attnd/; a server pinned to
        # http://127.0.0.1:8000 would send clients past it
        self.assertTrue(self.doc["servers"])
        for server in self.doc["servers"]:
            url = server["url"]
            self.assertNotRegex(url, r"^[a-z][a-z0-9+.-]*:|^//", "absolute server URL")
            self.assertNotIn("127.0.0.1", url)

    def test_examples_validate_against_their_schemas(self):
        n = 0
        for where, obj in walk(self.doc):
            if "schema" not in obj or not ({"example", "examples"} & set(obj)):
                continue
            v = validator(self.doc, obj["schema"])
            values = [obj["example"]] if "example" in obj else []
            values += [e["value"] for e in obj.get("examples", {}).values()]
            for value in values:
                errors = [e.message for e in v.iter_errors(value)]
                self.assertEqual(errors, [], where)
                n += 1
        self.assertGreaterEqual(n, 5)

    def test_only_inference_and_metadata_routes_take_the_token(self):
        """server/http/http_route.c marks the routes that check --token; the document
        must say the same (security on exactly those operations)."""
        src = routing_source()
        if not re.search(r"\bint auth;", src):  # before per-route flags: /v1 only
            protected = {"/v1/attention"}
        else:
            protected = set()
            for path, auth in re.findall(r'{\s*"(/[^"]*)",[^{}]*?(\d)}', src):
                if auth == "1":
                    protected |= with_variants(path.replace("{m}", "{model}"))
        self.assertIn("/v1/attention", protected)
        v2 = "/v2" in server_routes()
        documented = {p for p, item in self.doc["paths"].items()
                      if any("security" in item[m] for m in METHODS if m in item)
                      and (v2 or not p.startswith("/v2"))}
        self.assertEqual(sorted(documented), sorted(protected))
        for p in documented:
            for m in METHODS:
                if m in self.doc["paths"][p]:
                    self.assertIn("401", self.doc["paths"][p][m]["responses"], (m, p))

    def test_server_routing_table_is_documented(self):
        routes = server_routes()
        self.assertIn("/v1/attention", routes)
        self.assertIn("/", routes)
        documented = set(self.doc["paths"])
        self.assertEqual(sorted(routes - documented), [])

    def test_every_status_the_server_can_send_is_documented_somewhere(self):
        codes = set()
        for item in self.doc["paths"].values():
            for m in METHODS:
                if m in item:
                    codes |= set(item[m]["responses"])
        status_c = open(os.path.join(harness.ROOT, "server", "http", "status.c")).read()
        sent = set(re.findall(r"return (\d{3});", status_c))
        self.assertTrue(sent)
        self.assertEqual(sorted(sent - codes), [])


def validator(doc, schema):
    return Draft202012Validator(schema, resolver=RefResolver.from_schema(doc))


class LiveCase(harness.ServerTestCase):
    server_args = ("--workers", "2")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.raw, cls.doc = load_doc()

    def operations(self):
        """(template path, method, operation) of every documented operation."""
        for path, item in self.doc["paths"].items():
            for m in METHODS:
                if m in item:
                    yield path, m, item[m]

    def documented_response(self, path, method, status):
        op = self.doc["paths"][path][method]
        r = op["responses"].get(str(status))
        self.assertIsNotNone(r, "%s %s: status %d is not documented" % (method, path, status))
        return deref(self.doc, r)

    def check_response(self, path, method, status, hdrs, body):
        """The response matches what the document says for this status."""
        r = self.documented_response(path, method, status)
        for name, h in r.get("headers", {}).items():
            h = deref(self.doc, h)
            value = hdrs.get(name.lower())
            if name in ("Retry-After", "Allow", "X-Request-ID"):
                self.assertIsNotNone(value, "%s %s %d: no %s" % (method, path, status, name))
            if value is not None and h["schema"].get("type") == "integer":
                self.assertRegex(value, r"^\d+$", name)
            if value is not None and "pattern" in h["schema"]:
                self.assertRegex(value, h["schema"]["pattern"], name)
                self.assertLessEqual(len(value), h["schema"].get("maxLength", len(value)), name)
        if method == "head" or status == 204 or "content" not in r:
            self.assertEqual(body, b"", "%s %s %d: documented without a body" %
                             (method, path, status))
            return None
        ctype = hdrs.get("content-type", "")
        content = r.get("content", {})
        self.assertIn(ctype, content, "%s %s %d: content type %r not documented (%s)" %
                      (method, path, status, ctype, sorted(content)))
        schema = content[ctype]["schema"]
        if ctype == "application/octet-stream":
            return body
        if ctype.startswith("application/json"):
            obj = json.loads(body)
        else:
            obj = body.decode("utf-8")
        errors = ["%s: %s" % ("/".join(map(str, e.absolute_path)), e.message)
                  for e in validator(self.doc, schema).iter_errors(obj)]
        self.assertEqual(errors, [], "%s %s %d: %r" % (method, path, status, body[:300]))
        return obj


V1_REQUEST = {"query": [[[1, 0], [0, 2]]], "key": [[[1, 1], [2, 0], [0, 3]]],
              "value": [[[1, 0], [0, 1], [1, 1]]], "valid_lens": [2], "id": "r1"}


def v2_request(binary_out=False):
    return {"id": "o1", "parameters": {"causal": True},
            "inputs": [{"name": n, "shape": [1, 2, 2], "datatype": "FP32",
                        "data": [1, 0, 0, 2]} for n in ("query", "key", "value")],
            "outputs": [{"name": "output", "parameters": {"binary_data": binary_out}},
                        {"name": "weights"}]}


class RoutesTest(LiveCase):
    def test_openapi_json_is_served(self):
        status, hdrs, body = self.srv.get("/openapi.json")
        self.assertEqual(status, 200)
        self.assertEqual(hdrs["content-type"], "application/json")
        self.assertEqual(body, self.raw, "GET /openapi.json differs from deploy/openapi.json")

    def test_every_documented_operation_is_answered(self):
        n = 0
        for path, method, op in self.operations():
            url = concrete(self.doc, path, op)
            body = b"{}" if method == "post" else None
            status, hdrs, data = self.srv.request(method.upper(), url, body)
            if status == 404 and path == SHM + "region/{region}/status":
                # routed, but no region is registered on this server
                if method == "get":
                    self.assertIn(b"Unable to find system shared memory region", data)
            else:
                self.assertNotIn(status, (404, 405), "%s %s: %d %r" % (method, url, status, data))
            self.assertIn(str(status), op["responses"], "%s %s: %d" % (method, url, status))
            n += 1
        self.assertEqual(n, 52)

    def test_allow_header_lists_exactly_the_documented_methods(self):
        for path, item in self.doc["paths"].items():
            op = next(item[m] for m in METHODS if m in item)
            url = concrete(self.doc, path, op)
            status, hdrs, body = self.srv.request("PATCH", url, b"")
            self.assertEqual(status, 405, url)
            allowed = {m.strip().lower() for m in hdrs["allow"].split(",")}
            self.assertEqual(allowed, {m for m in METHODS if m in item}, url)
            self.assertNotIn("patch", item)
            self.check_response(path, next(iter(sorted(allowed))), 405, hdrs, body)

    def test_undocumented_paths_are_404(self):
        documented = set(self.doc["paths"])
        for url in ("/v3", "/v1", "/v1/attention/x", "/healthz/", "/openapi.yaml",
                    "/docs", "/v2/models/attention/trace/setting", "/v2/health/dead",
                    "/v2/models", "/metrics/x", "/index.htm", "/V1/attention"):
            self.assertNotIn(url, documented)
            status, hdrs, body = self.srv.get(url)
            self.assertEqual(status, 404, url)
            self.assertEqual(json.loads(body).keys(), {"error"})


class ResponsesTest(LiveCase):
    def test_get_routes_validate(self):
        for path, method, op in self.operations():
            if method not in ("get", "head"):
                continue
            url = concrete(self.doc, path, op)
            status, hdrs, body = self.srv.request(method.upper(), url)
            # no region is registered on this server (ShmTest registers one)
            want = 404 if path == SHM + "region/{region}/status" else 200
            self.assertEqual(status, want, url)
            self.check_response(path, method, status, hdrs, body)

    def test_v1_attention_ok_and_errors_validate(self):
        p = "/v1/attention"
        status, hdrs, body = self.srv.request("POST", p, json.dumps(V1_REQUEST).encode())
        self.assertEqual(status, 200)
        obj = self.check_response(p, "post", status, hdrs, body)
        self.assertEqual(obj["id"], "r1")
        flat = dict(V1_REQUEST, query={"shape": [1, 2, 2], "data": [1, 0, 0, 2]},
                    return_weights=False, causal="lower_right", window=[1, None],
                    dropout={"p": 0.25, "seed": 3}, id=5)
        status, hdrs, body = self.srv.request("POST", p, json.dumps(flat).encode())
        obj = self.check_response(p, "post", status, hdrs, body)
        self.assertEqual(obj.keys(), {"id", "output"})
        for bad in (b"{", b'{"query": [[[1]]]}', b'{"query": [[[1, 0]]], "key": [[[1, 1, 3]]],'
                    b' "value": [[[1, 0]]]}', b'{"query": 1, "extra": 2}'):
            status, hdrs, body = self.srv.request("POST", p, bad)
            self.assertEqual(status, 400)
            self.check_response(p, "post", status, hdrs, body)

    def test_request_schema_agrees_with_the_server(self):
        """Bodies the schema accepts get 200; bodies it refuses get 400."""
        schema = self.doc["paths"]["/v1/attention"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]
        v = validator(self.doc, schema)
        good = [V1_REQUEST, dict(V1_REQUEST, mask=[[[True, False, True]]], bias=None,
                                 scale=-0.5, causal=True),
                dict(V1_REQUEST, scoring="additive", w_q=[[1, 0]], w_k=[[0, 1]], w_v=[1])]
        bad = [dict(V1_REQUEST, extra=1), dict(V1_REQUEST, scale=0),
               dict(V1_REQUEST, causal="sideways"), {"query": V1_REQUEST["query"]},
               dict(V1_REQUEST, query=[[[True, False]]]), dict(V1_REQUEST, window=[1])]
        for req in good:
            self.assertEqual([e.message for e in v.iter_errors(req)], [], req)
            status, _, body = self.srv.request("POST", "/v1/attention", json.dumps(req).encode())
            self.assertEqual(status, 200, body)
        for req in bad:
            self.assertNotEqual([e.message for e in v.iter_errors(req)], [], req)
            status, _, body = self.srv.request("POST", "/v1/attention", json.dumps(req).encode())
            self.assertEqual(status, 400, (req, body))

    def test_validation_can_fail(self):
        p = "/v1/attention"
        hdrs = {"content-type": "application/json", "x-request-id": "r1"}
        self.check_response(p, "post", 400, hdrs, b'{"error": "x"}')
        with self.assertRaises(AssertionError):  # no X-Request-ID
            self.check_response(p, "post", 400, {"content-type": "application/json"},
                                b'{"error": "x"}')
        with self.assertRaises(AssertionError):  # not an id attnd would send
            self.check_response(p, "post", 400, dict(hdrs, **{"x-request-id": "a b"}),
                                b'{"error": "x"}')
        with self.assertRaises(AssertionError):
            self.check_response(p, "post", 200, hdrs, b'{"output": [[["x"]]]}')
        with self.assertRaises(AssertionError):
            self.check_response(p, "post", 400, hdrs, b'{"error": "x", "code": 3}')
        with self.assertRaises(AssertionError):
            self.check_response(p, "post", 200, {"content-type": "text/plain",
                                                 "x-request-id": "r1"}, b"{}")
        with self.assertRaises(AssertionError):
            self.check_response(p, "post", 503, hdrs, b'{"error": "x"}')  # no Retry-After
        with self.assertRaises(AssertionError):
            self.documented_response("/healthz", "get", 418)

    def test_v2_ok_and_errors_validate(self):
        base = "/v2/models/{model}/infer"
        for path, url in ((base, "/v2/models/attention/infer"),
                          ("/v2/models/{model}/versions/{version}/infer",
                           "/v2/models/attention/versions/1/infer")):
            status, hdrs, body = self.srv.request("POST", url, json.dumps(v2_request()).encode())
            self.assertEqual(status, 200, body)
            obj = self.check_response(path, "post", status, hdrs, body)
            self.assertEqual([o["name"] for o in obj["outputs"]], ["output", "weights"])
        status, hdrs, body = self.srv.request("POST", "/v2/models/attention/infer",
                                              json.dumps(v2_request(True)).encode())
        self.assertEqual(status, 200, body)
        self.assertEqual(hdrs["content-type"], "application/octet-stream")
        self.check_response(base, "post", status, hdrs, body)
        n = int(hdrs["inference-header-content-length"])
        header = json.loads(body[:n])
        self.assertEqual([e.message for e in validator(self.doc, {
            "$ref": "#/components/schemas/InferenceResponse"}).iter_errors(header)], [])
        self.assertEqual(len(body) - n, header["outputs"][0]["parameters"]["binary_data_size"])
        for url, body_, want in (("/v2/models/attention/infer", b"{", 400),
                                 ("/v2/models/bert/infer", b"{}", 404),
                                 ("/v2/models/attention/infer",
                                  json.dumps(dict(v2_request(), parameters={"timeout": 1}))
                                  .encode(), 504)):
            status, hdrs, data = self.srv.request("POST", url, body_)
            self.assertEqual(status, want, data)
            self.check_response(base, "post", status, hdrs, data)
        for path, url in (("/v2/models/{model}", "/v2/models/bert"),
                          ("/v2/models/{model}/versions/{version}",
                           "/v2/models/attention/versions/2"),
                          ("/v2/models/{model}/ready", "/v2/models/bert/ready")):
            status, hdrs, data = self.srv.get(url)
            self.assertEqual(status, 404, url)
            self.check_response(path, "get", status, hdrs, data)


def v2_inputs(**change):
    """query, key and value (1, 3, 2) as v2 JSON inputs; change replaces
    one input's entry by name (a dict of fields to set or, as None, drop)."""
    out = []
    for n in ("query", "key", "value"):
        e = {"name": n, "shape": [1, 3, 2], "datatype": "FP32", "data": [1, 0, 0, 2, 1, 1]}
        for k, v in change.get(n, {}).items():
            if v is None:
                e.pop(k)
            else:
                e[k] = v
        out.append(e)
    return out


NAN_DATA = "[1, 0, 0, 2, 1, NaN]"

# The request behind each documented 400 example: (path, body, headers).
ERROR_EXAMPLES = {
    ("BadRequest", "shapes"): (
        "/v1/attention", b'{"query": [[[1, 0], [0, 2]]], "key": [[[1, 1, 3]]], '
        b'"value": [[[1, 0]]]}', {}),
    ("BadRequest", "unknown_field"): (
        "/v1/attention", b'{"querry": [[[1, 0]]], "key": [[[1, 1]]], "value": [[[1]]]}', {}),
    ("BadRequest", "nan"): (
        "/v1/attention", b'{"query": [[[1, NaN]]], "key": [[[1, 1]]], "value": [[[1]]]}', {}),
    ("BadRequest", "nul_bytes"): ("/v1/attention", b"\0" * 16, {}),
    ("V2BadRequest", "unknown_parameter"): (
        "/v2/models/attention/infer",
        json.dumps({"parameters": {"causl": True}, "inputs": v2_inputs()}).encode(), {}),
    ("V2BadRequest", "unknown_field"): (
        "/v2/models/attention/infer",
        json.dumps({"inputs": v2_inputs(value={"data": None, "dat": [1] * 6})}).encode(), {}),
    ("V2BadRequest", "not_supported"): (
        "/v2/models/attention/infer",
        json.dumps({"parameters": {"sequence_id": 3, "sequence_start": True},
                    "inputs": v2_inputs()}).encode(), {}),
    ("V2BadRequest", "datatype"): (
        "/v2/models/attention/infer",
        json.dumps({"inputs": v2_inputs(query={"datatype": "fp32"})}).encode(), {}),
    ("V2BadRequest", "nan"): (
        "/v2/models/attention/infer",
        json.dumps({"inputs": v2_inputs()}).encode().replace(
            b"[1, 0, 0, 2, 1, 1]", NAN_DATA.encode(), 1), {}),
    ("V2BadRequest", "binary_size"): (
        "/v2/models/attention/infer",
        json.dumps({"inputs": v2_inputs(key={"data": None,
                                             "parameters": {"binary_data_size": 20}})}
                   ).encode() + b"\0" * 20, None),
}


class ErrorExamplesTest(LiveCase):
    def test_documented_400_examples_are_what_attnd_says(self):
        seen = set()
        for name in ("BadRequest", "V2BadRequest"):
            examples = self.doc["components"]["responses"][name]["content"][
                "application/json"]["examples"]
            for ex, value in examples.items():
                self.assertIn((name, ex), ERROR_EXAMPLES, "no request for example %s" % ex)
                path, body, headers = ERROR_EXAMPLES[(name, ex)]
                if headers is None:  # binary: the JSON part ends at the last '}'
                    headers = {"Inference-Header-Content-Length": str(body.rindex(b"}") + 1)}
                status, hdrs, data = self.srv.request("POST", path, body, headers)
                self.assertEqual(status, 400, (ex, data))
                self.assertEqual(json.loads(data)["error"], value["value"]["error"], ex)
                seen.add((name, ex))
        self.assertEqual(seen, set(ERROR_EXAMPLES))
        self.assertEqual(self.doc["paths"]["/v2/models/{model}/infer"]["post"]["responses"]
                         ["400"], {"$ref": "#/components/responses/V2BadRequest"})
class ShmTest(harness.unittest.TestCase):
    """The system shared memory routes' answers, from a server that allows
    them and one that does not."""

    def test_shared_memory_answers_validate(self):
        from multiprocessing import shared_memory
        obj = shared_memory.SharedMemory(create=True, size=8192)
        srv = harness.Attnd(["--workers", "1", "--allow-client-shm", "1"])
        try:
            case = LiveCase("run")
            case.doc = load_doc()[1]
            reg = SHM + "region/{region}/register"
            body = json.dumps({"key": "/" + obj.name, "offset": 0, "byte_size": 8192}).encode()
            for path, url, method, data, want in (
                    (reg, SHM + "region/input0/register", "post", body, 200),
                    (reg, SHM + "region/input0/register", "post", body, 400),
                    (reg, SHM + "region/other/register", "post", b'{"key": 1}', 400),
                    (SHM + "status", SHM + "status", "get", None, 200),
                    (SHM + "region/{region}/status", SHM + "region/input0/status", "get",
                     None, 200),
                    (SHM + "region/{region}/status", SHM + "region/x/status", "get", None, 404),
                    (SHM + "region/{region}/unregister", SHM + "region/input0/unregister",
                     "post", b"", 200),
                    (SHM + "unregister", SHM + "unregister", "post", b"", 200)):
                status, hdrs, got = srv.request(method.upper(), url, data)
                self.assertEqual(status, want, (url, got))
                self.assertEqual(hdrs["content-type"], "application/json")
                obj_ = case.check_response(path, method, status, hdrs, got)
                if url.endswith("input0/status"):
                    self.assertEqual(obj_[0]["key"], "/" + obj.name)
        finally:
            self.assertEqual(srv.stop(), 0)
            obj.close()
            obj.unlink()
        srv = harness.Attnd(["--workers", "1"])
        try:
            status, hdrs, got = srv.request("POST", SHM + "unregister", b"")
            self.assertEqual(status, 501)
            case.check_response(SHM + "unregister", "post", status, hdrs, got)
        finally:
            self.assertEqual(srv.stop(), 0)


def post_chunked(srv, path, body, headers=None):
    """POSTs body with chunked transfer coding (no Content-Length, so attnd
    reads it all before it answers 413); returns (status, headers, body)."""
    conn = srv.connection()
    try:
        step = 64 << 10
        conn.request("POST", path, body=(body[i:i + step] for i in range(0, len(body), step)),
                     headers=headers or {}, encode_chunked=True)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class LimitsTest(harness.unittest.TestCase):
    """401, 413 and the 503s of a draining server, from a server of its own."""

    def test_401_413_and_draining_503_validate(self):
        srv = harness.Attnd(["--workers", "1", "--max-body-mb", "1",
                             "--drain-delay-ms", "3000", "--token", "s3cret"])
        try:
            case = LiveCase("run")
            case.doc = load_doc()[1]
            body = json.dumps(V1_REQUEST).encode()
            status, hdrs, data = srv.request("POST", "/v1/attention", body)
            self.assertEqual(status, 401)
            self.assertEqual(hdrs.get("www-authenticate"), 'Bearer realm="attnd"')
            case.check_response("/v1/attention", "post", status, hdrs, data)
            status, hdrs, data = srv.request("POST", "/v1/attention", body,
                                             {"Authorization": "Bearer s3cret"})
            self.assertEqual(status, 200)
            case.check_response("/v1/attention", "post", status, hdrs, data)
            doc = case.doc
            self.assertIn({"bearerToken": []}, doc["paths"]["/v1/attention"]["post"]["security"])
            status, hdrs, body = post_chunked(srv, "/v1/attention", b" " * (2 << 20),
                                              {"Authorization": "Bearer s3cret"})
            self.assertEqual(status, 413)
            case.check_response("/v1/attention", "post", status, hdrs, body)
            auth = {"Authorization": "Bearer s3cret"}
            for path, url in (("/v2", "/v2"), ("/v2/models/{model}/infer",
                                               "/v2/models/attention/infer")):
                method = "post" if url.endswith("infer") else "get"
                status, hdrs, data = srv.request(method.upper(), url,
                                                 b"{}" if method == "post" else None)
                self.assertEqual(status, 401, url)
                self.assertEqual(hdrs.get("www-authenticate"), 'Bearer realm="attnd"')
                case.check_response(path, method, status, hdrs, data)
                self.assertIn({"bearerToken": []}, doc["paths"][path][method]["security"])
            status, hdrs, data = srv.request("GET", "/v2", None, auth)
            self.assertEqual(status, 200)
            case.check_response("/v2", "get", status, hdrs, data)
            srv.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 10
            while time.time() < deadline and srv.get("/readyz")[0] != 503:
                time.sleep(0.05)
            checks = [("/readyz", "/readyz", "get"), ("/readyz", "/readyz", "head"),
                      ("/v2/health/ready", "/v2/health/ready", "get"),
                      ("/v2/models/{model}/ready", "/v2/models/attention/ready", "get")]
            for path, url, method in checks:
                status, hdrs, body = srv.request(method.upper(), url, None, auth)
                self.assertEqual(status, 503, url)
                self.assertEqual(hdrs.get("retry-after"), "1")
                case.check_response(path, method, status, hdrs, body)
            status, hdrs, body = srv.get("/healthz")
            self.assertEqual(status, 200)
            srv.proc.wait(30)  # the drain delay, then a clean exit
        finally:
            # stop() sends nothing once the process has exited; a second
            # SIGTERM would make attnd exit at once with 1.
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    harness.main()
