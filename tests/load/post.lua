-- post.lua - POSTs one prepared body over and over (wrk -s).
--
-- Environment:
--   LOAD_BODY   file holding the request body (make_bodies.py writes them)
--   LOAD_PATH   request path, e.g. /v1/attention
--   LOAD_HLEN   optional Inference-Header-Content-Length (v2 binary body)
-- The body is read once per wrk thread, so the loop itself only sends.

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local report = dofile(dir .. "report.lua")

local function slurp(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
  local s = f:read("*a")
  f:close()
  return s
end

wrk.method = "POST"
wrk.path = os.getenv("LOAD_PATH") or "/v1/attention"
wrk.body = slurp(os.getenv("LOAD_BODY"))
wrk.headers["Content-Type"] = "application/json"
local hlen = os.getenv("LOAD_HLEN")
if hlen and hlen ~= "" then
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = hlen
end

done = report.done
