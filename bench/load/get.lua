-- wrk script: pass-through GET (static request, built once by wrk).
-- Usage: wrk -s get.lua URL -- PATH
-- Prints one line "WRKJSON {...}" with the summary and latency percentiles
-- (microseconds) for bench/load/run.py.

function init(args)
  wrk.method = "GET"
  wrk.path = args[1] or "/objects/static"
end

-- Same reporter in put.lua and idem.lua: keep them identical.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p99.9":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
