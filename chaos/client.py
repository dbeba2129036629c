#!/usr/bin/env python3
"""One chaos client: a process of its own, so the nemesis can freeze it.

It loops until its deadline: pick a key, take the key's lock (fencegate's
lock service or etcd), write one to three times with the lock's token, and
usually release the lock (sometimes it lets the lease run out). Between the
grant and each write it does a little "work" (a short random sleep): a
SIGSTOP that lands there makes the client write with a token whose lease
has expired, as a paused garbage collector does.

Every step goes to the history file as one JSON line with CLOCK_MONOTONIC
time:
  {"t":..., "client":"c1", "type":"lease",  "key":"k2", "token":17}
  {"t":..., "client":"c1", "type":"invoke", "key":"k2", "token":17, "write":"c1-5"}
  {"t":..., "client":"c1", "type":"ok",     ..., "status":200}
  {"t":..., "client":"c1", "type":"fail",   ..., "status":409, "error":"stale_token"}
  {"t":..., "client":"c1", "type":"info",   ..., "error":"timed out"}
`ok` is an acknowledged write; `fail` one that certainly did not happen
(fencegate refused it before forwarding); `info` one whose fate is unknown
(time-out, reset, 502/504).
"""

import argparse
import base64
import http.client
import json
import random
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

WRITE_TIMEOUT_S = 3.0
# fencegate's own refusals that are certain: the write was not forwarded.
DEFINITE_REFUSALS = {"stale_token", "token_required", "bad_token", "store_unavailable",
                     "bad_request", "bad_path", "bad_key", "shutting_down", "fence_expired"}


class History:
    def __init__(self, path, client):
        self.f = open(path, "a", buffering=1)
        self.client = client

    def add(self, type_, **fields):
        rec = {"t": time.monotonic(), "client": self.client, "type": type_, **fields}
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return rec


def request(url, method, path, body=b"", headers=None, timeout=WRITE_TIMEOUT_S):
    """One request on a fresh connection. Returns (status, body bytes)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def post_json(url, path, obj, timeout):
    status, body = request(url, "POST", path, json.dumps(obj).encode(),
                           {"Content-Type": "application/json"}, timeout)
    try:
        return status, json.loads(body) if body else {}
    except ValueError:
        return status, {"raw": body[:200].decode("utf-8", "replace")}


class FencegateLocks:
    """fencegate's lock service (docs/contract.md, "Lock service")."""

    def __init__(self, url, ttl_ms):
        self.url, self.ttl_ms = url, ttl_ms

    def acquire(self, name):
        status, body = post_json(self.url, f"/v1/locks/{name}/acquire",
                                 {"ttl": f"{self.ttl_ms}ms", "wait": "2s"}, timeout=4)
        if status != 200:
            return None
        return body["token"], body["lease"]

    def release(self, name, lease):
        post_json(self.url, f"/v1/locks/{name}/release", {"lease": lease}, timeout=2)


def b64(text):
    return base64.b64encode(text.encode()).decode()


class EtcdLocks:
    """etcd v3 through its HTTP/JSON gateway: a lease with the TTL and the lock
    held by that lease; the token is the lock key's create revision."""

    def __init__(self, url, ttl_ms):
        self.url = url
        self.ttl_s = max(2, round(ttl_ms / 1000))  # etcd leases are whole seconds

    def acquire(self, name):
        status, body = post_json(self.url, "/v3/lease/grant", {"TTL": self.ttl_s}, timeout=3)
        if status != 200 or "ID" not in body:
            return None
        lease = body["ID"]
        waiting = threading.Event()

        def keep_alive():  # our lease must live while we wait for the lock
            while not waiting.wait(self.ttl_s / 3):
                try:
                    post_json(self.url, "/v3/lease/keepalive", {"ID": lease}, timeout=1)
                except OSError:
                    pass

        keeper = threading.Thread(target=keep_alive, daemon=True)
        keeper.start()
        try:
            status, body = post_json(self.url, "/v3/lock/lock",
                                     {"name": b64(name), "lease": lease}, timeout=4)
        except OSError:
            status = None
        finally:
            waiting.set()
            keeper.join()
        if status != 200 or "key" not in body:
            self.release(name, lease)
            return None
        status, rng = post_json(self.url, "/v3/kv/range", {"key": body["key"]}, timeout=3)
        kvs = rng.get("kvs", []) if status == 200 else []
        if not kvs:
            self.release(name, lease)
            return None
        return int(kvs[0]["create_revision"]), lease

    def release(self, name, lease):
        post_json(self.url, "/v3/lease/revoke", {"ID": lease}, timeout=2)


def send(hist, url, method, path, fields, body=b"", headers=None, refusals=DEFINITE_REFUSALS,
         backend_refusals=False):
    """One write, recorded: `invoke`, then `ok` (2xx), `fail` (a refusal
    that certainly did not forward: fencegate's error in `refusals`, or with
    `backend_refusals` a 4xx the backend answered itself, whose body is not
    one of fencegate's errors) or `info` (fate unknown). `fields` (key,
    token, write, ...) go into each record; the token, the client and the
    write id go out as headers."""
    hist.add("invoke", **fields)
    headers = {"Fencing-Token": str(fields["token"]), "X-Chaos-Client": hist.client,
               "X-Chaos-Write": fields["write"], **(headers or {})}
    try:
        status, resp = request(url, method, path, body, headers)
    except (OSError, http.client.HTTPException) as e:
        return hist.add("info", **fields, error=str(e) or type(e).__name__)
    if 200 <= status < 300:
        return hist.add("ok", **fields, status=status)
    try:
        error = json.loads(resp).get("error", "")
    except (ValueError, AttributeError):
        error = ""
    certain = error in refusals or (backend_refusals and not error and 400 <= status < 500)
    return hist.add("fail" if certain else "info", **fields, status=status, error=error)


def try_acquire(locks, name):
    """The lock's (token, lease), or None when it was not granted."""
    try:
        return locks.acquire(name)
    except (OSError, http.client.HTTPException, ValueError, KeyError):
        return None


def try_release(locks, name, lease):
    try:
        locks.release(name, lease)
    except (OSError, http.client.HTTPException, ValueError):
        pass


def write(hist, url, key, token, write_id):
    fields = {"key": key, "token": token, "write": write_id}
    body = json.dumps({"client": hist.client, **fields}).encode()
    return send(hist, url, "PUT", f"/objects/{key}", fields, body,
                {"Content-Type": "application/json"})


def client_arguments(description):
    """An argument parser with what every chaos client takes: its id, its
    seed, its CLOCK_MONOTONIC deadline and its history file."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--id", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--until", type=float, required=True, help="CLOCK_MONOTONIC deadline")
    ap.add_argument("--history", required=True)
    return ap


def main():
    ap = client_arguments(__doc__.splitlines()[0])
    ap.add_argument("--lock", choices=["fencegate", "etcd"], required=True)
    ap.add_argument("--lock-url", required=True)
    ap.add_argument("--write-url", required=True)
    ap.add_argument("--keys", required=True, help="comma-separated")
    ap.add_argument("--ttl-ms", type=int, default=1000)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    hist = History(args.history, args.id)
    keys = args.keys.split(",")
    locks = (FencegateLocks if args.lock == "fencegate" else EtcdLocks)(args.lock_url, args.ttl_ms)
    ttl_s = args.ttl_ms / 1000.0
    seq = 0
    while time.monotonic() < args.until:
        key = rng.choice(keys)
        name = f"chaos-{key}"
        grant = try_acquire(locks, name)
        if grant is None:
            hist.add("no-lease", key=key)
            time.sleep(rng.uniform(0.01, 0.1))  # back off before the next try
            continue
        token, lease = grant
        hist.add("lease", key=key, token=token)
        for _ in range(rng.randint(1, 3)):
            time.sleep(rng.uniform(0, 0.25 * ttl_s))  # the work under the lock
            seq += 1
            write(hist, args.write_url, key, token, f"{args.id}-{seq}")
        if rng.random() < 0.8:
            try_release(locks, name, lease)
    return 0


if __name__ == "__main__":
    sys.exit(main())
