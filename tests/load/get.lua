-- get.lua - GETs wrk's URL over and over and prints report.lua's line.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local report = dofile(dir .. "report.lua")
done = report.done
