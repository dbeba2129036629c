#!/usr/bin/env python3
"""The GC-pause story, told live with real processes and real clocks.

    python3 locks/demo/gc_pause_demo.py                 # both lock services
    python3 locks/demo/gc_pause_demo.py --lock etcd     # or: --lock fencegate

Client 1 acquires a lock (TTL 2 s) and gets token N. It is frozen with
SIGSTOP just before its write, for longer than the TTL. Client 2 acquires
the lock (its acquire returns when client 1's lease has expired: the demo
waits on that, not on a timer), gets a higher token and writes. Client 1 is
resumed with SIGCONT and writes with its old token N.

Each story runs twice: once with the clients writing straight to the
backend, where client 1's stale write lands and overwrites client 2's data,
and once through fencegate, which refuses it with 409. The two timelines are
printed side by side. The lock comes from fencegate's own lock service
(locks.listen) or from a real etcd (lease + lock, token = the lock key's
create revision).

Everything listens on 127.0.0.1 with free ports, in a temporary directory;
every process the demo starts is stopped by its PID at the end. Exit status
0 when both stories ran as described.
"""

import argparse
import base64
import json
import threading
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from fencegate_proc import (START_TIMEOUT, Etcd, Fencegate, Processes, TempDir,  # noqa: E402
                            free_ports, read_first_line, write_config)

BACKEND = os.path.join(ROOT, "tests", "integration", "recording_backend.py")
TTL_S = 2
STEP_TIMEOUT = 20.0
COLUMN = 60


# --------------------------------------------------------------------------
# Client side: one process per client (run as `gc_pause_demo.py client ...`)
# --------------------------------------------------------------------------

def http_json(method, url, body=None, headers=None, timeout=STEP_TIMEOUT):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def acquire_fencegate(url, name, ttl_s):
    """fencegate's lock service: the token comes with the grant."""
    status, body = http_json("POST", f"{url}/v1/locks/{name}/acquire",
                             {"ttl": f"{ttl_s}s", "wait": "30s"})
    if status != 200:
        raise SystemExit(f"acquire: {status} {body!r}")
    return json.loads(body)["token"]


def b64(text):
    return base64.b64encode(text.encode()).decode()


def acquire_etcd(url, name, ttl_s):
    """etcd v3 (HTTP/JSON gateway): a lease with the TTL, the lock held by
    that lease; the token is the lock key's create revision, which etcd
    makes strictly greater for every later holder."""
    status, body = http_json("POST", f"{url}/v3/lease/grant", {"TTL": ttl_s})
    if status != 200:
        raise SystemExit(f"lease grant: {status} {body!r}")
    lease = json.loads(body)["ID"]
    # While we wait for the lock our own lease must stay alive (as etcdctl
    # keeps it alive), or it could expire before the lock is granted.
    waiting = threading.Event()

    def keep_alive():
        while not waiting.wait(max(ttl_s / 3, 0.2)):
            http_json("POST", f"{url}/v3/lease/keepalive", {"ID": lease})

    keeper = threading.Thread(target=keep_alive, daemon=True)
    keeper.start()
    # Blocks until the lock is ours (the previous holder's key is deleted).
    try:
        status, body = http_json("POST", f"{url}/v3/lock/lock",
                                 {"name": b64(name), "lease": lease}, timeout=60)
    finally:
        waiting.set()
        keeper.join()
    if status != 200:
        raise SystemExit(f"lock: {status} {body!r}")
    key = json.loads(body)["key"]
    status, body = http_json("POST", f"{url}/v3/kv/range", {"key": key})
    kvs = json.loads(body).get("kvs", [])
    if status != 200 or not kvs:
        raise SystemExit(f"range of the lock key: {status} {body!r}")
    return int(kvs[0]["create_revision"])


def emit(event, **fields):
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


def client_main(args):
    acquire = acquire_fencegate if args.lock == "fencegate" else acquire_etcd
    token = acquire(args.lock_url, args.lock_name, args.ttl)
    emit("acquired", token=token)
    if args.gate:
        # The work between the lock and the write; the demo freezes the
        # process here. It resumes when told to write.
        sys.stdin.readline()
    data = f"written by {args.client} holding token {token}".encode()
    status, body = http_json("PUT", args.write_url, data,
                             {"Fencing-Token": str(token), "Content-Type": "text/plain"})
    emit("wrote", status=status, body=body.decode("utf-8", "replace")[:200])
    return 0


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

class Lines:
    """Reads JSON lines from a child's stdout with a deadline (select, no sleep)."""

    def __init__(self, proc, what):
        self.proc, self.what, self.buf = proc, what, b""

    def next(self, timeout=STEP_TIMEOUT):
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{self.what}: no output within {timeout}s")
                if sel.select(left):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        raise RuntimeError(f"{self.what} exited ({self.proc.wait()}) early")
                    self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()


class Environment:
    """Backend + fencegate (+ etcd) for one run of the demo."""

    def __init__(self, fencegate_bin, workdir, procs, with_etcd):
        self.procs, self.workdir = procs, workdir
        self.backend_log = open(os.path.join(workdir, "backend.stderr"), "wb")
        backend = procs.start([sys.executable, BACKEND, "--port", "0"], stdout=subprocess.PIPE,
                              stderr=self.backend_log, stdin=subprocess.DEVNULL)
        port = int(read_first_line(backend, START_TIMEOUT, "backend")[0])
        self.backend = f"http://127.0.0.1:{port}"
        cfg = write_config(os.path.join(workdir, "fencegate.yaml"), {
            "listen": "127.0.0.1:0",
            "threads": 2,
            "upstream": {"url": self.backend},
            "routes": [{"name": "objects", "path_prefix": "/objects/"}],
            "storage": {"path": os.path.join(workdir, "fencegate-data")},
            "admin": {"listen": ""},
            "locks": {"listen": "127.0.0.1:0"},
            "log": {"level": "warn", "access_log": False},
        })
        self.gate = Fencegate(fencegate_bin, cfg, workdir, stderr_name="fencegate.stderr",
                              procs=procs).start()
        self.proxy = self.gate.url("proxy")
        self.locks = self.gate.url("locks")
        self.etcd = self._start_etcd() if with_etcd else None

    def _start_etcd(self):
        self.etcd_log_path = os.path.join(self.workdir, "etcd.stderr")
        etcd = Etcd(self.procs, os.path.join(self.workdir, "etcd"),
                        self.etcd_log_path, name="demo")
        return etcd.start().url

    def close(self):
        if hasattr(self, "gate"):
            self.gate.stop()
        for f in ("backend_log",):
            if hasattr(self, f):
                getattr(self, f).close()


def run_story(env, procs, lock, through_gate, story):
    """One timeline. Returns a dict with the events and the outcome."""
    lock_url = env.locks if lock == "fencegate" else env.etcd
    path = f"/objects/{story}"
    write_url = (env.proxy if through_gate else env.backend) + path
    lock_name = f"demo-{story}"
    events = []
    t0 = time.monotonic()

    def note(text, t=None):
        events.append(((t if t is not None else time.monotonic()) - t0, text))

    def client(name, gate):
        argv = [sys.executable, os.path.abspath(__file__), "client", "--client", name,
                "--lock", lock, "--lock-url", lock_url, "--lock-name", lock_name,
                "--write-url", write_url, "--ttl", str(TTL_S)]
        if gate:
            argv.append("--gate")
        p = procs.start(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return p, Lines(p, name)

    c1, c1_out = client("client 1", gate=True)
    ev = json.loads(c1_out.next())
    n = ev["token"]
    note(f"client 1 acquires (ttl {TTL_S}s): token {n}", ev["t"])
    os.kill(c1.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    note("client 1 frozen (SIGSTOP) before its write")

    c2, c2_out = client("client 2", gate=False)
    ev = json.loads(c2_out.next())  # returns once client 1's lease expired
    m = ev["token"]
    note(f"client 1's lease expired; client 2 acquires: token {m}", ev["t"])
    ev = json.loads(c2_out.next())
    c2_status = ev["status"]
    note(f"client 2 PUT token {m} -> {c2_status}", ev["t"])
    c2.wait(timeout=STEP_TIMEOUT)

    # The pause being simulated is "longer than the TTL" from the freeze on;
    # the lease already ran out (client 2 holds the lock), so this only
    # tops up the freeze if client 2 was quicker than that.
    remaining = TTL_S + 0.1 - (time.monotonic() - stopped_at)
    if remaining > 0:
        time.sleep(remaining)
    c1.stdin.write(b"write\n")
    c1.stdin.flush()
    frozen = time.monotonic() - stopped_at
    os.kill(c1.pid, signal.SIGCONT)
    note(f"client 1 resumed (SIGCONT) after {frozen:.1f}s frozen")
    ev = json.loads(c1_out.next())
    c1_status = ev["status"]
    if c1_status == 409:
        note(f"client 1 PUT token {n} -> 409 stale_token (refused)", ev["t"])
    else:
        note(f"client 1 PUT token {n} -> {c1_status} (stale write lands)", ev["t"])
    c1.wait(timeout=STEP_TIMEOUT)

    status, body = http_json("GET", env.backend + path)
    final = body.decode("utf-8", "replace")
    lost = "client 1" in final
    note(f"backend holds: '{final}'" + ("  <- client 2's data LOST" if lost else ""))
    return {"events": events, "c1_token": n, "c2_token": m, "c1_status": c1_status,
            "c2_status": c2_status, "final": final, "frozen_s": frozen, "lost_update": lost}


def side_by_side(title, left, right):
    rows = [title, "=" * len(title),
            f"{'straight to the backend (no fencegate)':<{COLUMN}} | through fencegate", "-" * (COLUMN * 2 + 3)]
    for i in range(max(len(left["events"]), len(right["events"]))):
        cells = []
        for story in (left, right):
            if i < len(story["events"]):
                t, text = story["events"][i]
                cells.append(f"{t:5.2f}s  {text}")
            else:
                cells.append("")
        # Long cells wrap onto continuation lines.
        l, r = cells
        first = True
        while l or r or first:
            rows.append(f"{l[:COLUMN]:<{COLUMN}} | {r[:COLUMN]}")
            l, r = ("        " + l[COLUMN:]) if len(l) > COLUMN else "", \
                   ("        " + r[COLUMN:]) if len(r) > COLUMN else ""
            first = False
    return "\n".join(rows)


def run_demo(fencegate_bin, lock, workdir=None, out=sys.stdout):
    """Runs both stories for one lock service; prints them; returns them."""
    procs = Processes()
    tmp = None if workdir else TempDir("fencegate-gc-demo-")
    env = None
    try:
        env = Environment(fencegate_bin, workdir or tmp.path, procs, with_etcd=(lock == "etcd"))
        direct = run_story(env, procs, lock, through_gate=False, story=f"{lock}-direct")
        fenced = run_story(env, procs, lock, through_gate=True, story=f"{lock}-fenced")
    finally:
        procs.stop_all(timeout=10)
        if env:
            env.close()
        if tmp:
            tmp.remove()
    source = ("fencegate's lock service (locks.listen)" if lock == "fencegate"
              else "etcd (lease + lock; token = the lock key's create revision)")
    print(side_by_side(f"GC pause, lock from {source}", direct, fenced), file=out)
    print(file=out)
    return direct, fenced


def check(direct, fenced):
    """The story as docs/locks.md tells it; returns a list of what went wrong."""
    problems = []
    for name, s in (("direct", direct), ("fenced", fenced)):
        if not s["c2_token"] > s["c1_token"]:
            problems.append(f"{name}: client 2's token {s['c2_token']} is not above {s['c1_token']}")
        if s["frozen_s"] <= TTL_S:
            problems.append(f"{name}: client 1 was frozen only {s['frozen_s']:.2f}s")
        if s["c2_status"] not in (200, 201, 204):
            problems.append(f"{name}: client 2's write got {s['c2_status']}")
    if direct["c1_status"] not in (200, 201, 204) or not direct["lost_update"]:
        problems.append(f"direct: the stale write should land and overwrite: {direct}")
    if fenced["c1_status"] != 409 or fenced["lost_update"] or "client 2" not in fenced["final"]:
        problems.append(f"fenced: the stale write should be refused with 409: {fenced}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    c = sub.add_parser("client", help="(internal) one lock client")
    c.add_argument("--client", required=True)
    c.add_argument("--lock", choices=["fencegate", "etcd"], required=True)
    c.add_argument("--lock-url", required=True)
    c.add_argument("--lock-name", required=True)
    c.add_argument("--write-url", required=True)
    c.add_argument("--ttl", type=int, default=TTL_S)
    c.add_argument("--gate", action="store_true")
    parser.add_argument("--fencegate", default=os.environ.get(
        "FENCEGATE_BIN", os.path.join(ROOT, "build", "app", "fencegate")))
    parser.add_argument("--lock", choices=["fencegate", "etcd", "both"], default="both")
    args = parser.parse_args()
    if args.cmd == "client":
        return client_main(args)
    if not os.access(args.fencegate, os.X_OK):
        print(f"no fencegate binary at {args.fencegate}: build it (bash tests/run.sh) or pass "
              "--fencegate PATH", file=sys.stderr)
        return 2
    failed = []
    for lock in (["fencegate", "etcd"] if args.lock == "both" else [args.lock]):
        failed += check(*run_demo(args.fencegate, lock))
    for p in failed:
        print("UNEXPECTED:", p, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
