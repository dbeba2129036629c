-- wrk script: POST with an Idempotency-Key header, to a route with
-- idempotency keys (/pay/).
-- Usage: wrk -s idem.lua URL -- MODE BASE NKEYS BODY_BYTES
--   MODE new:    every request a new key (BASE-<thread>-<n>), so every one
--                runs at the backend and stores its response; the paths
--                cycle over NKEYS per thread (/pay/t<thread>/k<n>).
--   MODE replay: every request one of NKEYS keys (replay-<n>), all on
--                /pay/replay with the same body: each is a repeat of a
--                request run before the timed run (run.py stores them), so
--                each gets the stored response without reaching the backend.
-- BASE must differ between runs against the same store (run.py passes the
-- time): a key used again with another path would be refused (422).
-- Prints "WRKJSON {...}" like get.lua.

local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end

local mode, base, nkeys, body
local counter = 0
local headers = {}

function init(args)
  mode = args[1] or "new"
  base = tonumber(args[2] or "1")
  nkeys = tonumber(args[3] or "10000")
  body = string.rep("x", tonumber(args[4] or "16"))
  headers["Content-Type"] = "application/octet-stream"
end

function request()
  counter = counter + 1
  local path
  if mode == "replay" then
    path = "/pay/replay"
    headers["Idempotency-Key"] = string.format("replay-%d", counter % nkeys)
  else
    path = string.format("/pay/t%d/k%d", id, counter % nkeys)
    headers["Idempotency-Key"] = string.format("%.0f-%d-%d", base, id, counter)
  end
  return wrk.format("POST", path, headers, body)
end

-- Same reporter in get.lua: keep them identical.
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
