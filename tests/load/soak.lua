-- soak.lua - wrk script for tests/load/soak.sh: rotates valid requests of
-- several shapes and routes, and counts every answer that is not a 2xx
-- (or whose body lacks its output), per thread.
--
-- Every wrk thread builds the same bodies at start (deterministic
-- pseudo-random inputs), then sends them round-robin from a different
-- starting point.  done() prints one line soak.sh parses:
--
--   SOAK_RESULT requests=N seconds=S rps=R p50_ms=.. p99_ms=.. max_ms=..
--               non2xx=N bad_body=N connect=N read=N write=N timeout=N

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

-- A deterministic linear congruential generator, so that bodies do not
-- depend on Lua's math.random implementation.
local seed = 1
local function rnd()
  seed = (seed * 1103515245 + 12345) % 2147483648
  return string.format("%.4f", seed / 1073741824 - 1)
end

local function flat(n)
  local t = {}
  for i = 1, n do t[i] = rnd() end
  return "[" .. table.concat(t, ",") .. "]"
end

-- A nested (B, L, D) array.
local function nested(B, L, D)
  local bs = {}
  for b = 1, B do
    local ls = {}
    for l = 1, L do ls[l] = flat(D) end
    bs[b] = "[" .. table.concat(ls, ",") .. "]"
  end
  return "[" .. table.concat(bs, ",") .. "]"
end

local function tensor(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local dims = {}
  for i, s in ipairs(shape) do dims[i] = tostring(s) end
  return '{"shape":[' .. table.concat(dims, ",") .. '],"data":' .. flat(n) .. "}"
end

local function v2_input(name, shape)
  local n = 1
  local dims = {}
  for i, s in ipairs(shape) do n = n * s; dims[i] = tostring(s) end
  return '{"name":"' .. name .. '","datatype":"FP32","shape":[' ..
         table.concat(dims, ",") .. '],"data":' .. flat(n) .. "}"
end

-- The requests, ready to send.
local function bodies()
  local json = { ["Content-Type"] = "application/json" }
  local list = {}
  local function add(path, body)
    table.insert(list, wrk.format("POST", path, json, body))
  end
  -- v1, nested, weights returned
  add("/v1/attention", '{"query":' .. nested(1, 4, 8) .. ',"key":' .. nested(1, 6, 8) ..
      ',"value":' .. nested(1, 6, 4) .. ',"return_weights":true}')
  -- v1, flat, heads, causal, no weights (online-softmax path)
  add("/v1/attention", '{"query":' .. tensor({1, 2, 16, 32}) .. ',"key":' ..
      tensor({1, 2, 16, 32}) .. ',"value":' .. tensor({1, 2, 16, 32}) ..
      ',"causal":true,"return_weights":false}')
  -- v1, per-item valid_lens and a scale
  add("/v1/attention", '{"query":' .. nested(2, 3, 4) .. ',"key":' .. nested(2, 5, 4) ..
      ',"value":' .. nested(2, 5, 2) .. ',"valid_lens":[3,5],"scale":0.5}')
  -- v1, a larger single head with weights
  add("/v1/attention", '{"query":' .. tensor({1, 64, 32}) .. ',"key":' ..
      tensor({1, 64, 32}) .. ',"value":' .. tensor({1, 64, 32}) .. '}')
  -- v2 JSON inference, grouped heads
  add("/v2/models/attention/infer", '{"id":"soak","inputs":[' ..
      v2_input("query", {1, 4, 8, 16}) .. "," .. v2_input("key", {1, 2, 8, 16}) .. "," ..
      v2_input("value", {1, 2, 8, 16}) .. "]}")
  return list
end

local list, n, i

function init(args)
  list = bodies()
  n = #list
  i = id % n
  non2xx = 0
  bad_body = 0
end

function request()
  i = i % n + 1
  return list[i]
end

-- Answers of a thread's connections interleave, so the check is one that
-- every route's success body passes: v1 "output", v2 "outputs".
function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  elseif not string.find(body, '"output', 1, true) then
    bad_body = bad_body + 1
  end
end

function done(summary, latency, requests)
  local non, bad = 0, 0
  for _, t in ipairs(threads) do
    non = non + t:get("non2xx")
    bad = bad + t:get("bad_body")
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "SOAK_RESULT requests=%d seconds=%.1f rps=%.1f p50_ms=%.3f p99_ms=%.3f " ..
    "max_ms=%.3f non2xx=%d bad_body=%d connect=%d read=%d write=%d timeout=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    non, bad, e.connect, e.read, e.write, e.timeout))
end
