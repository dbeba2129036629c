#!/usr/bin/env python3
"""Disk use of idempotency records whose keys only grow, through the real
binary, over more than the store's records-compaction interval (an hour).

    python3 bench/load/records_disk.py [--minutes 75] [--rate 200] [--window 60]
                                       [--sample 30] [--fencegate PATH] [--out FILE.json]

Starts fencegate (embedded store, durability async, a route /pay/ with
idempotency keys whose window is --window seconds) in front of a backend in
this process that answers each POST with a 64-byte body, then POSTs at
--rate requests a second, each with a new Idempotency-Key that sorts after
every earlier one (a millisecond clock, then a counter: the order of ULIDs,
UUIDv7 and order numbers), on one kept-alive connection. Every --sample
seconds it records the store directory's bytes (every file: tables, WAL,
MANIFEST) and the keys sent so far.

Such keys land in table files that newer writes never overlap, which
RocksDB's own compactions leave alone for days; the store compacts the
records' key range every hour when records were written, and the
compaction filter drops the expired ones. So the store grows for an hour,
then falls back to about the window's worth of records, and grows again
for at most an hour: the bound docs/contract.md states (the rate of new
keys times the window plus an hour). The report gives the peak, the least
after the first hour, and bytes per record at the peak.

Writes JSON (the samples and the summary) to --out, by default
build/bench-results/records_disk-<time>.json under the repository root.
Every process it starts is stopped by its PID when it ends.
"""

import argparse
import datetime
import http.client
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from fencegate_proc import Fencegate, Processes, TempDir, write_config  # noqa: E402

COMPACTION_INTERVAL_S = 3600  # the store's records_compaction_interval
ANSWER = b"x" * 64


class Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # The head and the body go in two writes: without this, Nagle's
        # algorithm holds the body for the delayed ACK (40 ms a request).
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def dir_bytes(path):
    total = 0
    for name in os.listdir(path):
        try:
            total += os.stat(os.path.join(path, name)).st_size
        except FileNotFoundError:
            pass  # a file RocksDB deleted between listing and sizing
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=75)
    ap.add_argument("--rate", type=float, default=200, help="new keys a second")
    ap.add_argument("--window", type=int, default=60, help="the records' window, seconds")
    ap.add_argument("--sample", type=float, default=30, help="seconds between samples")
    ap.add_argument("--fencegate", default=os.environ.get(
        "FENCEGATE_BIN", os.path.join(ROOT, "build", "app", "fencegate")))
    ap.add_argument("--out")
    args = ap.parse_args()
    out = args.out or os.path.join(
        ROOT, "build", "bench-results",
        f"records_disk-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)

    backend = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    backend.daemon_threads = True
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    tmp = TempDir("fencegate-records-disk-")
    procs = Processes()
    samples = []
    try:
        data = os.path.join(tmp.path, "data")
        config = write_config(os.path.join(tmp.path, "fencegate.yaml"), {
            "listen": "127.0.0.1:0",
            "threads": 1,
            "upstream": {"url": f"http://127.0.0.1:{backend.server_address[1]}"},
            "routes": [{"name": "pay", "path_prefix": "/pay/", "mode": "off",
                        "idempotency": {"window": f"{args.window}s",
                                        "in_flight_timeout": "30s"}}],
            "storage": {"path": data, "durability": "async"},
            "admin": {"listen": "127.0.0.1:0"},
            "log": {"level": "warn", "access_log": False},
        })
        gate = Fencegate(args.fencegate, config, tmp.path, procs=procs).start()
        conn = http.client.HTTPConnection(*gate.proxy, timeout=10)
        start = time.monotonic()
        end = start + args.minutes * 60
        next_sample = start
        sent = 0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                samples.append({"s": round(now - start, 1), "keys": sent,
                                "bytes": dir_bytes(data)})
                print(f"{samples[-1]['s']:8.0f} s  {sent:9d} keys  "
                      f"{samples[-1]['bytes'] / (1 << 20):8.1f} MiB", flush=True)
                next_sample += args.sample
            if now >= end:
                break
            due = start + sent / args.rate
            if due > now:
                time.sleep(due - now)
            key = f"{int(time.time() * 1000):013d}-{sent:010d}"
            conn.request("POST", f"/pay/a{sent % 16}", body=b"{}",
                         headers={"Idempotency-Key": key, "Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit(f"POST {key}: {r.status}")
            sent += 1
        conn.close()
    finally:
        procs.stop_all(timeout=10)
        backend.shutdown()
        tmp.remove()

    first_hour = [s for s in samples if s["s"] <= COMPACTION_INTERVAL_S]
    after = [s for s in samples if s["s"] > COMPACTION_INTERVAL_S + args.sample]
    peak = max(samples, key=lambda s: s["bytes"])
    summary = {
        "rate": args.rate, "window_s": args.window, "minutes": args.minutes,
        "keys": sent, "peak_bytes": peak["bytes"], "peak_at_s": peak["s"],
        "bytes_per_record_at_peak": round(peak["bytes"] / max(1, peak["keys"]), 1),
        "first_hour_last_bytes": first_hour[-1]["bytes"] if first_hour else None,
        "least_after_first_hour_bytes": min((s["bytes"] for s in after), default=None),
        "last_bytes": samples[-1]["bytes"],
    }
    with open(out, "w") as f:
        json.dump({"summary": summary, "samples": samples}, f, indent=1)
    print(json.dumps(summary), flush=True)
    print(f"written to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
