-- report.lua - wrk's done() for every load script: one machine-readable
-- line that the benchmark scripts parse (times in milliseconds).
--
--   WRK_RESULT {"requests":N,"seconds":S,"rps":R,"p50_ms":..,"p90_ms":..,
--               "p99_ms":..,"max_ms":..,"non2xx":N,"socket_errors":N,
--               "cpu_s":C}
--
-- cpu_s is wrk's own CPU time, all its threads, user and system
-- (os.clock() is the C library's clock(), the process's CPU time): on a
-- machine where wrk shares the cores with the server, what the load
-- generator takes from it.

local M = {}

function M.done(summary, latency, requests)
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"seconds":%.3f,"rps":%.1f,' ..
    '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,' ..
    '"non2xx":%d,"socket_errors":%d,"cpu_s":%.3f}\n',
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000,
    e.status, e.connect + e.read + e.write + e.timeout, os.clock()))
end

return M
