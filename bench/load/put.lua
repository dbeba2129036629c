-- wrk script: PUT with a Fencing-Token header.
-- Usage: wrk -s put.lua URL -- MODE BASE NKEYS BODY_BYTES [START]
--   MODE keys: each wrk thread cycles over its own NKEYS keys
--              (/objects/t<thread>/k<n>), tokens BASE+1, BASE+2, ... strictly
--              increasing per thread, so a key never sees a lower token than
--              the one it already holds (no 409 expected).
--   MODE hot:  every request goes to /objects/hot with the token BASE
--              (one lock holder writing many times: equal tokens are accepted).
--   MODE plain: as keys, under /plain/ (no fenced route: pass-through), to
--              measure the same PUT without fencing.
--   MODE deep: as keys, with 4-segment paths (/objects/t<thread>/d<n % 16>/k<n>):
--              the tree of paths reads and writes a node per segment.
-- BASE must grow between runs against the same store (run.py passes one).
-- START (default 0): the first key number of each thread, so that a run can
-- go on with the keys where an earlier one stopped.
-- Prints "WRKJSON {...}" like get.lua.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local mode, base, nkeys, body
counter = 0  -- global, so that done() can read each thread's (thread:get)
local headers = {}

function init(args)
  mode = args[1] or "keys"
  base = tonumber(args[2] or "1")
  nkeys = tonumber(args[3] or "10000")
  local size = tonumber(args[4] or "16")
  body = string.rep("x", size)
  counter = tonumber(args[5] or "0")
  headers["Content-Type"] = "application/octet-stream"
end

function request()
  counter = counter + 1
  local path
  if mode == "hot" then
    path = "/objects/hot"
    headers["Fencing-Token"] = string.format("%.0f", base)
  else
    local prefix = mode == "plain" and "/plain" or "/objects"
    local n = counter % nkeys
    if mode == "deep" then
      path = string.format("%s/t%d/d%d/k%d", prefix, id, n % 16, n)
    else
      path = string.format("%s/t%d/k%d", prefix, id, n)
    end
    headers["Fencing-Token"] = string.format("%.0f", base + counter)
  end
  return wrk.format("PUT", path, headers, body)
end

-- Same reporter in get.lua: keep them identical (plus the WRKKEYS line).
function done(summary, latency, requests)
  -- The lowest key counter of all threads: every thread wrote (or has in
  -- flight) its keys up to it; run.py --keys starts the next run there.
  local low
  for _, t in ipairs(threads) do
    local c = t:get("counter")
    if c and (not low or c < low) then low = c end
  end
  io.write(string.format("WRKKEYS %.0f\n", low or 0))
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
