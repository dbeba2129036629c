#!/usr/bin/env python3
"""fencegate load benchmark: backend direct vs nginx proxy_pass vs fencegate.

    python3 bench/load/run.py [--quick] [--fencegate PATH] [--out FILE.json]
    python3 bench/load/run.py --report FILE.json [FILE.json ...]

Starts everything on 127.0.0.1 with ports chosen by the kernel (bind to port
0), in a temporary directory:
  - direct:    nginx as the backend: GET -> 200 with a small fixed body,
               PUT -> WebDAV (201/204), body read whole, stored on tmpfs;
  - nginx:     nginx proxy_pass in front of that backend (upstream keepalive,
               256 idle per worker by default, so that it does not reconnect
               at 256 client connections; same worker count as fencegate's
               threads, streaming bodies);
  - fencegate: fencegate in front of the same backend, one fenced route
               /objects/, a RocksDB store in the temp dir (not tmpfs: fsync
               is real), restarted per scenario with its durability; for the
               idempotency scenarios (IDEMPOTENT) also a route /pay/ with
               idempotency keys and no fencing, where the backend answers a
               POST with GET's 128-byte body.
Then drives wrk (Lua scripts in this folder) for every scenario and
concurrency, interleaving the targets round by round, A B C then C B A
(--order alternate, the default), so that drift and each target's place in
a round hit all of them alike (in a fixed order fencegate always runs right
after nginx, and put_sync moves by 1-9% with its place: docs/performance.md),
prints a table and writes JSON, by default to build/bench-results/ under the
repository root (--out). Every run records the CPU time per request of the
server under test, and of its neighbours: wrk's and the backend's. Finally
measures fencegate's resident size idle and with many open connections
(/proc/PID/status VmRSS).

--etcd-cluster also drives fenced PUTs through one fencegate on a
three-member etcd cluster on loopback (storage.engine: etcd), with
storage.etcd.max_batch 40 (batched) against 1 (one transaction per write):
two fencegate processes, each its own key prefix on the same cluster,
interleaved round by round like the targets above (put_etcd in the JSON).
With --scenarios "" --no-memory it measures that alone.

--quick runs a few seconds in total and only proves the harness works: it
exits 1 if a run produced no requests, socket errors or non-2xx answers, or
no scheduler figures, or if fencegate did not store the tokens. It
never judges the numbers.
Every process it starts is stopped by its PID when it ends.
"""

import argparse
import datetime
import http.client
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import phases

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import fencegate_proc  # noqa: E402
from fencegate_proc import ProcessError, TempDir, free_ports, write_config  # noqa: E402
# Where results go without --out: the build directory, never the source tree.
DEFAULT_OUT_DIR = os.path.join(ROOT, "build", "bench-results")
TARGETS = ("direct", "nginx", "fencegate")
CLK_TCK = os.sysconf("SC_CLK_TCK")
HAS_SCHEDSTAT = os.path.exists("/proc/self/schedstat")  # CONFIG_SCHED_INFO
GET_BODY = "fencegate-bench " * 8  # 128 bytes

# name -> (wrk script, script args builder, fencegate durability)
SCENARIOS = {
    "get": "pass-through GET, 128-byte body",
    "put_pass": "unfenced PUT (pass-through), distinct paths, same bodies and backend work "
                "as put_async",
    "put_async": "fenced PUT, distinct keys (10k per wrk thread), durability async",
    "put_sync": "fenced PUT, distinct keys (10k per wrk thread), durability sync",
    "put_hot": "fenced PUT, one hot key (serialised by design), async",
    "put_64k": "fenced PUT, 64 KiB body, distinct keys, async",
    "put_1m": "fenced PUT, 1 MiB body, distinct keys, async",
    "idem_post": "POST with a new Idempotency-Key per request (route mode off), 16-byte body, "
                 "async; paired with put_async's fenced PUT through the same process",
    "idem_replay": "POST repeating one of 100 Idempotency-Keys stored before the timed run "
                   "(a replay, never at the backend), async; paired with the pass-through GET "
                   "through the same process",
}
# Scenarios whose target is a ratio to fencegate's own pass-through: they
# also run "fg_pass", the same PUT to an unfenced path (put.lua MODE plain)
# through the same fencegate process, interleaved with the other targets, so
# each round yields one fenced/unfenced pair measured a few seconds apart.
PAIRED_PASS = ("put_async", "put_sync")
# Scenarios whose target is a ratio to one client writing distinct keys
# straight to the backend, one request at a time (the hot-key ratio
# target's reference): they also run "ref_seq", that client (put.lua MODE keys, 1
# connection, whatever the point's concurrency), interleaved with the other
# targets, so each round pairs the hot key with a reference seconds apart.
PAIRED_REF = ("put_hot",)
# Scenarios that compare with another scenario's workload through the same
# fencegate process, interleaved with the other targets round by round:
# scenario -> (target name, the workload it runs). An idempotent POST is
# compared with a fenced PUT (put_async), a replay with a pass-through GET.
PAIRED_SAME = {"idem_post": ("fg_fenced", "put_async"), "idem_replay": ("fg_get", "get")}
# Scenarios whose fencegate has the idempotent route /pay/ (Fencegate);
# the others' config is unchanged.
IDEMPOTENT = ("idem_post", "idem_replay")
# idem_replay's keys, each stored once before the timed runs.
REPLAY_KEYS = 100
# put_reuse: the same keys in every run (1,000 per wrk thread), so that a
# store that takes something once per key (etcd ownership) has taken them.
REUSED_KEYS = 1000
BODY_BYTES = {"put_reuse": 16, "put_pass": 16, "put_async": 16, "put_deep": 16, "put_sync": 16, "put_hot": 16, "put_64k": 64 << 10,
              "put_1m": 1 << 20, "idem_post": 16, "idem_replay": 16}
# The fencegate processes' own targets: their CPU is fencegate's.
FG_TARGETS = ("fencegate", "fg_pass", "fg_fenced", "fg_get")


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Procs(fencegate_proc.Processes):
    """The processes this harness started; stopped by PID, never by name,
    with a grace of 15 s and a line in the log for one that must be killed."""

    def stop(self, p, sig=signal.SIGTERM, timeout=15.0):
        try:
            return super().stop(p, sig, timeout)
        except ProcessError as e:
            log(str(e))
            return p.returncode

    def stop_all(self, timeout=15.0):
        return super().stop_all(timeout)


def wait_until(what, proc, secs, cond):
    deadline = time.monotonic() + secs
    while True:
        if cond():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {secs}s")
        time.sleep(0.05)


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def user_line():
    if os.geteuid() != 0:
        return ""
    import grp
    import pwd
    return f"user {pwd.getpwuid(os.getuid()).pw_name} {grp.getgrgid(os.getgid()).gr_name};"


NGINX_COMMON = """# generated by bench/load/run.py
{user}
daemon off;
worker_processes {workers};
worker_rlimit_nofile 50000;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  client_max_body_size 4m;
  client_body_temp_path {dir}/tmp/body;
  proxy_temp_path {dir}/tmp/proxy;
  fastcgi_temp_path {dir}/tmp/fastcgi;
  uwsgi_temp_path {dir}/tmp/uwsgi;
  scgi_temp_path {dir}/tmp/scgi;
  default_type text/plain;
{body}
}}
"""

# GET: a fixed 128-byte body. PUT: plain WebDAV, which reads the whole body
# (into client_body_temp_path) before it answers, like a real store would;
# every PUT lands in the same file (a regex location without captures makes
# alias the whole path), on tmpfs when /dev/shm exists, so big bodies cost
# memory bandwidth, not disk, and 10k keys x 1 MiB never fill anything.
# POST /pay/ (idempotency scenarios): GET's body, the request body read and
# dropped.
BACKEND_SERVER = """  server {{
    listen 127.0.0.1:{port} backlog=4096;
    client_body_temp_path {www}/tmp;
    client_body_buffer_size 16k;
    location = /objects/static {{
      return 200 "{get_body}";
    }}
    location ~ ^/(objects|plain|flat)/ {{
      alias {www}/blob;
      dav_methods PUT;
      dav_access user:rw;
    }}
    location /pay/ {{
      return 200 "{get_body}";
    }}
  }}"""

PROXY_SERVER = """  upstream backend {{
    server 127.0.0.1:{backend_port};
    keepalive {keepalive};
    keepalive_requests 1000000;
  }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_request_buffering off;
    }}
  }}"""


def start_nginx(procs, work, name, workers, server_block):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_COMMON.format(user=user_line(), workers=workers, dir=d, body=server_block))
    p = procs.start(["nginx", "-p", d + "/", "-c", conf, "-e", os.path.join(d, "error.log")],
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "stderr.log"), "w"))
    return p


class Fencegate(fencegate_proc.Fencegate):
    """fencegate on the bench's config, in work/name, its stderr in
    fencegate.log there; started at once. `port` is its proxy's port."""

    def __init__(self, procs, binary, work, name, threads, backend_port, durability,
                 access_log, max_conns=20000, wrapper=(), ready_secs=30, log_level="warn",
                 idempotent=False, storage=None, nesting=None, flat_route=False):
        # wrapper: argv run in front of the binary (instructions.py: valgrind),
        # which may slow the start: ready_secs bounds the wait for "listening".
        # idempotent: a second route, /pay/, with idempotency keys (1 h
        # window) and no fencing, after the fenced one. storage: the config's
        # storage section instead of RocksDB in the work dir. nesting: the
        # fenced route's (per_key, the default, when None). flat_route: a
        # route /flat/ fenced as /objects/ is, with nesting: off.
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        routes = [{"name": "objects", "path_prefix": "/objects/", "mode": "enforce",
                   **({"nesting": nesting} if nesting else {})}]
        if flat_route:
            routes.append({"name": "flat", "path_prefix": "/flat/", "mode": "enforce",
                           "nesting": "off"})
        if idempotent:
            routes.append({"name": "pay", "path_prefix": "/pay/", "mode": "off",
                           "idempotency": "1h"})
        cfg = write_config(os.path.join(d, "fencegate.yaml"), {
            "listen": "127.0.0.1:0",
            "threads": threads,
            "upstream": {"url": f"http://127.0.0.1:{backend_port}", "timeout": "30s"},
            "fencing": {"token_header": "Fencing-Token"},
            "routes": routes,
            "storage": storage or {"engine": "rocksdb", "path": os.path.join(d, "data"),
                                   "durability": durability},
            "admin": {"listen": "127.0.0.1:0"},
            "limits": {"max_connections": max_conns},
            "log": {"level": log_level, "access_log": bool(access_log),
                    # access_log "file": the lines go to access.log in the
                    # work dir instead of fencegate.log (stderr).
                    **({"access_log_file": os.path.join(d, "access.log")}
                       if access_log == "file" else {})},
        })
        super().__init__(binary, cfg, d, stderr_name="fencegate.log", wrapper=wrapper,
                         start_timeout=ready_secs, procs=procs)
        self.start()
        self.port = self.proxy[1]

    def stored_token(self, key):
        url = f"{self.url('admin')}/v1/keys/" + urllib.request.quote(key, safe="")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["token"]
        except urllib.error.HTTPError as e:
            return None if e.code == 404 else -1

    def post_idempotent(self, path, key, body):
        """POST with an Idempotency-Key: (status, whether it was a replay)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("POST", path, body=body, headers={
                "Idempotency-Key": key, "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            r.read()
            return r.status, r.getheader("Idempotent-Replayed") == "true"
        finally:
            c.close()

    def stop(self, sig=signal.SIGTERM, timeout=15.0):
        try:
            return super().stop(sig, timeout)
        except ProcessError as e:
            log(str(e))
            return self.proc.returncode


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def nginx_rss_kib(master_pid):
    """Master plus its worker processes."""
    total = rss_kib(master_pid)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == master_pid:
                total += rss_kib(int(entry))
    return total


def count_fsyncs_start(pid, secs):
    """perf stat on fdatasync/fsync tracepoints of `pid` for `secs`, or None."""
    if not shutil.which("perf"):
        return None
    try:
        return subprocess.Popen(
            ["perf", "stat", "-x,", "-e", "syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync",
             "-p", str(pid), "--", "sleep", str(secs)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError:
        return None


def count_fsyncs_finish(p):
    if p is None:
        return None
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None
    total = 0
    seen = False
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and "sys_enter_f" in line and parts[0].strip().isdigit():
            total += int(parts[0])
            seen = True
    return total if seen else None


SYSCALLS = ("recvfrom", "recvmsg", "read", "sendto", "sendmsg", "writev", "write",
            "epoll_wait", "epoll_ctl", "futex", "accept4", "connect", "close",
            "fdatasync", "timerfd_settime", "statfs")


def nginx_pids(master_pid):
    pids = [master_pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == master_pid:
                        pids.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return pids


def established_inodes(port):
    """Socket inodes of the established TCP connections whose local port is
    `port` (IPv4 and IPv6, /proc/net/tcp*)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "01" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return inodes


def conns_per_worker(master_pid, port):
    """How many of the clients' connections to `port` each of nginx's
    workers holds, largest first: nginx's workers take what each accepts,
    where fencegate deals connections round-robin to its threads."""
    inodes = established_inodes(port)
    counts = []
    for pid in nginx_pids(master_pid)[1:]:
        n = 0
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    n += 1
        except OSError:
            continue
        counts.append(n)
    return sorted(counts, reverse=True)


def cpu_ticks_and_faults(pids):
    """(utime + stime in clock ticks, minor page faults) of these processes,
    all their threads."""
    ticks = faults = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # stat fields 14 and 15
            faults += int(fields[7])  # stat field 10, minflt
        except (OSError, ValueError, IndexError):
            continue
    return ticks, faults


def idle_ticks():
    """The whole machine's idle + iowait time so far, in clock ticks
    (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[4]) + int(fields[5])
    except (OSError, ValueError, IndexError):
        return None


def schedstat(pids):
    """(times scheduled in, ns runnable but waiting for a CPU) of these
    processes, summed over their threads (/proc/PID/task/TID/schedstat).
    None where the kernel has no schedstat."""
    slices = wait_ns = 0
    found = False
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    _, wait, n = f.read().split()[:3]
            except (OSError, ValueError):
                continue
            slices += int(n)
            wait_ns += int(wait)
            found = True
    return (slices, wait_ns) if found else None


def syscalls_start(pids, secs):
    events = ",".join(f"syscalls:sys_enter_{n}" for n in SYSCALLS)
    return subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-p",
                             ",".join(str(p) for p in pids), "--", "sleep", str(secs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def syscalls_finish(p, requests):
    _, err = p.communicate(timeout=120)
    counts = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit() and "sys_enter_" in parts[2]:
            counts[parts[2].split("sys_enter_")[1]] = int(parts[0])
    if not requests:
        return counts
    return {k: round(v / requests, 2) for k, v in counts.items() if v}


def perf_record_start(out_dir, pid, scenario, conns, secs, target="fencegate"):
    os.makedirs(out_dir, exist_ok=True)
    name = scenario if target == "fencegate" else f"{scenario}-{target}"
    data = os.path.join(out_dir, f"perf-{name}-c{conns}.data")
    return subprocess.Popen(["perf", "record", "-q", "-F", "997", "-g", "-p", str(pid),
                             "-o", data, "--", "sleep", str(secs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_wrk(args, url, scenario, conns, duration):
    threads = max(1, min(args.wrk_threads, conns))
    if scenario == "get":
        script, extra = "get.lua", ["/objects/static"]
    elif scenario in IDEMPOTENT:
        mode, nkeys = ("replay", REPLAY_KEYS) if scenario == "idem_replay" else ("new", 10000)
        base = time.time_ns() // 1000  # new keys in every run
        script, extra = "idem.lua", [mode, str(base), str(nkeys), str(BODY_BYTES[scenario])]
    else:
        mode = {"put_hot": "hot", "put_pass": "plain", "put_deep": "deep"}.get(scenario, "keys")
        base = time.time_ns() // 1000  # grows between runs: tokens never go down
        nkeys = REUSED_KEYS if scenario == "put_reuse" else 10000
        script, extra = "put.lua", [mode, str(base), str(nkeys), str(BODY_BYTES[scenario])]
    argv = ["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{duration}s",
            "--timeout", "10s", "-s", os.path.join(HERE, script), url, "--"] + extra
    # wrk's own CPU time: the children reaped during the run are wrk alone
    # (perf's recorders are reaped after it).
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    except subprocess.TimeoutExpired:
        return {"failed": "wrk did not finish"}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for line in out.stdout.splitlines():
        if line.startswith("WRKJSON "):
            r = json.loads(line[len("WRKJSON "):])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6) if r["duration_us"] else 0.0
            if r["requests"]:
                wrk_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
                r["wrk_cpu_us_per_request"] = round(wrk_s * 1e6 / r["requests"], 2)
            return r
    return {"failed": f"wrk exit {out.returncode}: {out.stderr.strip()[-300:]}"}


def round_order(targets, rnd, order):
    """The targets of round `rnd` (from 0) in the order they run: as given, or
    with --order alternate reversed in every odd round, so that over two
    rounds each target runs once early and once late, after different
    neighbours."""
    if order == "alternate" and rnd % 2 == 1:
        return tuple(reversed(targets))
    return tuple(targets)


def summarize(rounds):
    ok = [r for r in rounds if "failed" not in r]
    if not ok:
        return {"rps": 0.0, "p50_ms": None, "p99_ms": None, "p99.9_ms": None, "errors": None}

    def mean_lat(k):
        return round(statistics.mean(r["latency_us"][k] for r in ok) / 1000.0, 3)
    errors = {k: sum(r["errors"][k] for r in ok) for k in ok[0]["errors"]}
    def mean_of(k, digits):
        values = [r[k] for r in ok if k in r]
        return round(statistics.mean(values), digits) if values else None
    return {"rps": round(statistics.mean(r["rps"] for r in ok), 1),
            "p50_ms": mean_lat("p50"), "p99_ms": mean_lat("p99"),
            "p99.9_ms": mean_lat("p99.9"), "errors": errors,
            "requests": sum(r["requests"] for r in ok),
            "cpu_us_per_request": mean_of("cpu_us_per_request", 2),
            "minor_faults_per_request": mean_of("minor_faults_per_request", 3),
            "sched_in_per_request": mean_of("sched_in_per_request", 2),
            "runq_wait_us_per_request": mean_of("runq_wait_us_per_request", 2),
            "wrk_cpu_us_per_request": mean_of("wrk_cpu_us_per_request", 2),
            "backend_cpu_us_per_request": mean_of("backend_cpu_us_per_request", 2),
            "idle_cores": mean_of("idle_cores", 2)}


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def paired(rounds, num, den, key="rps"):
    """Per-round ratios num/den of `key` (the runs of one round are seconds
    apart, so drift on the shared cores hits both sides of each ratio alike)
    and their median: steadier than the ratio of the means when one run of
    several is disturbed. `key` "p99" (any latency_us percentile) pairs that
    latency: one stalled run of a few seconds would otherwise set the
    ratio of the means alone."""
    def value(r):
        if key in r.get("latency_us", {}):
            return r["latency_us"][key]
        return r.get(key)
    per = []
    for a, b in zip(rounds[num], rounds[den]):
        if "failed" not in a and "failed" not in b:
            per.append(ratio(value(a), value(b)))
    per = [r for r in per if r is not None]
    return {"per_round": per, "median": round(statistics.median(per), 3) if per else None,
            "interval": median_interval(per)}


# The confidence the verdicts ask of an interval (below).
COVERAGE = 0.90


def median_interval(values, coverage=COVERAGE):
    """A distribution-free confidence interval for the median of the
    distribution the values were drawn from (one value per round): the
    narrowest pair of order statistics x(k) <= x(n+1-k) whose probability of
    holding the median, 1 - 2 P(Binomial(n, 1/2) <= k-1), is at least
    `coverage`. It assumes only that rounds are independent draws, which the
    interleaving aims at; no normal distribution. Fewer than 5 rounds cannot
    reach 90%: the interval is then [min, max] with the coverage it has.
    None for no values."""
    xs = sorted(v for v in values if v is not None)
    n = len(xs)
    if n == 0:
        return None

    def cover(k):  # [x(k), x(n+1-k)], 1-based
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and cover(k + 1) >= coverage:
        k += 1
    return {"low": xs[k - 1], "high": xs[n - k], "coverage": round(cover(k), 3), "rounds": n}


def verdict(interval, target, at_least, coverage=COVERAGE):
    """`met` when the whole interval is on the target's side, `missed` when
    it is wholly on the other side, `undecided` when it holds the target (the
    run cannot tell), `too few rounds` when it does not reach `coverage`."""
    if interval is None or interval["coverage"] < coverage:
        return "too few rounds"
    low, high = interval["low"], interval["high"]
    if at_least:
        return "met" if low >= target else "missed" if high < target else "undecided"
    return "met" if high <= target else "missed" if low > target else "undecided"


def target_verdicts(res):
    """The ratio targets (docs/performance.md), point by point, from a run's
    results: the median of the per-round ratios, its interval
    (median_interval) and a verdict. The hot key's reference, one client
    writing distinct keys straight to the backend, is its round's own
    `ref_seq` run (PAIRED_REF); an idempotent POST's, a fenced PUT, and a
    replay's, a pass-through GET, are their round's runs of that workload
    through the same fencegate process (PAIRED_SAME)."""
    rows = []

    def add(name, conns, per, target, at_least):
        interval = median_interval(per)
        rows.append({"target": name, "conns": conns,
                     "median": round(statistics.median(per), 3) if per else None,
                     "interval": interval, "goal": (">= " if at_least else "<= ") + str(target),
                     "verdict": verdict(interval, target, at_least)})

    def per_round(row, num, den, key="rps"):
        return paired(row["rounds"], num, den, key)["per_round"]

    for c, row in res.get("get", {}).items():
        if c.isdigit() and "rounds" in row:
            add("GET r/s, fencegate / nginx", c, per_round(row, "fencegate", "nginx"), 1.0, True)
            add("GET p99, fencegate / nginx", c, per_round(row, "fencegate", "nginx", "p99"),
                1.2, False)
    for sc, goal, only in (("put_async", 0.9, None), ("put_sync", 0.5, "64")):
        for c, row in res.get(sc, {}).items():
            if c.isdigit() and "rounds" in row and "fg_pass" in row["rounds"] and (
                    only is None or c == only):
                add(f"{sc} r/s, fenced / unfenced", c, per_round(row, "fencegate", "fg_pass"),
                    goal, True)
    for c, row in res.get("put_hot", {}).items():
        if c.isdigit() and c != "1" and "ref_seq" in row.get("rounds", {}):
            add("hot key r/s / one client direct", c, per_round(row, "fencegate", "ref_seq"),
                0.8, True)
    # An idempotent POST costs at most 1.3x a fenced PUT at 64 connections:
    # in time per request (the fenced PUT's r/s over the POST's) and in CPU.
    for c, row in res.get("idem_post", {}).items():
        if c == "64" and "fg_fenced" in row.get("rounds", {}):
            add("idem POST time/req, / fenced PUT", c, per_round(row, "fg_fenced", "fencegate"),
                1.3, False)
            add("idem POST CPU/req, / fenced PUT", c,
                per_round(row, "fencegate", "fg_fenced", "cpu_us_per_request"), 1.3, False)
    for c, row in res.get("idem_replay", {}).items():
        if c.isdigit() and "fg_get" in row.get("rounds", {}):
            add("replay r/s / GET through fencegate", c, per_round(row, "fencegate", "fg_get"),
                1.0, True)
    # etcd: with ownership at least 0.9 of without, at 64 connections.
    for c, row in res.get("put_etcd", {}).items():
        if c == OWNERSHIP_GOAL[0] and "unowned" in row.get("rounds", {}):
            add("etcd r/s, owning keys / not", c, per_round(row, "owned", "unowned"),
                OWNERSHIP_GOAL[1], True)
    # etcd: batched at least 5x one transaction per write at 64 connections.
    for c, row in res.get("put_etcd", {}).items():
        if c == ETCD_GOAL[0] and "one_txn" in row.get("rounds", {}):
            add("etcd r/s, batched / one txn per write", c,
                per_round(row, "batched", "one_txn"), ETCD_GOAL[1], True)
    # The tree of paths: at least 0.9 of the flat fence at 64 connections.
    for c, row in res.get("put_tree", {}).items():
        if c == TREE_GOAL[0] and "flat" in row.get("rounds", {}):
            add("tree r/s / nesting: off, 4-segment paths", c, per_round(row, "tree", "flat"),
                TREE_GOAL[1], True)
    return rows


def print_verdicts(rows, markdown=False, each_run=None):
    """`each_run`: (target, conns) -> a note for an extra last column, "each
    run's median" (print_pooled)."""
    if not rows:
        return
    head = ("target", "conns", "goal", "median", f"interval ({COVERAGE:.0%}+)", "rounds",
            "verdict") + (("each run's median",) if each_run is not None else ())
    lines = []
    for r in rows:
        i = r["interval"]
        span = f"{i['low']} - {i['high']} ({i['coverage']:.0%})" if i else "-"
        lines.append((r["target"], r["conns"], r["goal"], str(r["median"]), span,
                      str(i["rounds"] if i else 0), r["verdict"]) +
                     ((each_run.get((r["target"], r["conns"]), "-"),)
                      if each_run is not None else ()))
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|---:|---|---:|---|---:|---|" + ("---|" if each_run is not None else ""))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    for line in (head, *lines):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip())


def hold_connections(port, n, send_request):
    """Opens n connections (optionally one GET each, answer read); returns the sockets."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(s)
    if send_request:
        req = b"GET /objects/static HTTP/1.1\r\nHost: bench\r\n\r\n"
        for s in socks:
            s.sendall(req)
        for s in socks:
            s.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data or len(data) < data.find(b"\r\n\r\n") + 4 + len(GET_BODY):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    return socks


def settle_rss(reader, secs=1.5):
    """RSS after it stops moving (accepts are asynchronous), at most `secs`."""
    last, deadline = reader(), time.monotonic() + secs
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = reader()
        if now == last:
            break
        last = now
    return last


def measure_memory(args, procs, work, backend_port, nginx_proxy, nginx_port):
    n = args.memory_conns
    fg = Fencegate(procs, args.fencegate, work, "fg-memory", args.threads, backend_port,
                   "async", False)
    result = {"connections": n}
    try:
        result["fencegate_idle_kib"] = settle_rss(lambda: rss_kib(fg.pid))
        result["nginx_idle_kib"] = settle_rss(lambda: nginx_rss_kib(nginx_proxy.pid))
        for who, port, reader in (("fencegate", fg.port, lambda: rss_kib(fg.pid)),
                                  ("nginx", nginx_port, lambda: nginx_rss_kib(nginx_proxy.pid))):
            socks = hold_connections(port, n, send_request=False)
            result[f"{who}_open_kib"] = settle_rss(reader)
            for s in socks:
                s.close()
            socks = hold_connections(port, n, send_request=True)
            result[f"{who}_after_request_kib"] = settle_rss(reader)
            for s in socks:
                s.close()
            time.sleep(0.5)
    finally:
        fg.stop()
    return result


# put_etcd's targets: fencegate with storage.etcd.max_batch 40 and 1 (the
# etcd storage of each: extra fields).
ETCD_VARIANTS = (("batched", {"max_batch": 40}), ("one_txn", {"max_batch": 1}))
# With --etcd-ownership instead: replicas that own keys against replicas
# that do not (storage.etcd.ownership), both batched. Keys stay on the one
# fencegate, so the ownership put is once per key; the goal is at least
# 0.9 of the r/s without it at 64 connections.
OWNERSHIP_VARIANTS = (("owned", {"max_batch": 40}),
                      ("unowned", {"max_batch": 40, "ownership": {"enabled": False}}))
OWNERSHIP_GOAL = ("64", 0.9)
# Its goal (docs/performance.md): batched at least 5x one transaction per
# write at 64 connections.
ETCD_GOAL = ("64", 5.0)
# put_tree's targets: fencegate on RocksDB (async) with the tree of paths
# (nesting per_key, the default) and with nesting: off (the flat fence).
TREE_VARIANTS = (("tree", "per_key"), ("flat", "off"))
# Its goal (docs/performance.md): the tree keeps at least 0.9 of the flat
# fence's r/s at 64 connections.
TREE_GOAL = ("64", 0.9)
# A key put.lua's deep mode writes in every run.
DEEP_KEY = "/objects/t0/d5/k5"


def check_run(problems, what, r):
    """A wrk run's problems: no answers, non-2xx, socket errors."""
    if "failed" in r:
        problems.append(f"{what}: {r['failed']}")
        return
    e = r["errors"]
    if r["requests"] == 0:
        problems.append(f"{what}: no requests")
    if e["status"]:
        problems.append(f"{what}: {e['status']} non-2xx/3xx")
    if e["connect"] + e["read"] + e["write"] + e["timeout"]:
        problems.append(f"{what}: socket errors {e}")


def measure_variants(args, label, gates, scenario, concs, problems, num, den, others=()):
    """Runs `scenario` through each fencegate of `gates` (variant -> Fencegate),
    the variants interleaved round by round (round_order) at every point of
    `concs`. Each run records fencegate's CPU per request, and with `others`
    (pids: the etcd members) theirs as others_cpu_us_per_request. Returns the
    rows by connections, as the scenarios' (a summary per variant, the
    rounds, the paired ratio num/den under "paired")."""
    names = tuple(gates)
    results = {}
    for c in concs:
        rounds = {t: [] for t in names}
        for rnd in range(args.rounds):
            for t in round_order(names, rnd, args.order):
                pids = [gates[t].pid]
                ticks, _ = cpu_ticks_and_faults(pids)
                other_ticks, _ = cpu_ticks_and_faults(others) if others else (0, 0)
                # --perf: each variant's first round, recorded.
                recorder = perf_record_start(args.perf, gates[t].pid, f"{label}-{t}", c,
                                             args.duration) if args.perf and rnd == 0 else None
                r = run_wrk(args, f"http://127.0.0.1:{gates[t].port}", scenario, c, args.duration)
                if recorder is not None:
                    recorder.wait()
                if r.get("requests"):
                    ticks_after, _ = cpu_ticks_and_faults(pids)
                    r["cpu_us_per_request"] = round(
                        (ticks_after - ticks) / CLK_TCK * 1e6 / r["requests"], 2)
                    if others:
                        other_after, _ = cpu_ticks_and_faults(others)
                        r["others_cpu_us_per_request"] = round(
                            (other_after - other_ticks) / CLK_TCK * 1e6 / r["requests"], 2)
                rounds[t].append(r)
                check_run(problems, f"{label} c={c} {t}", r)
                log(f"{label}  c={c:<4} round {rnd + 1} {t:<9} "
                    f"{r.get('rps', 0):10.0f} r/s, CPU {r.get('cpu_us_per_request', '-')} "
                    f"us/req" + (f", others {r.get('others_cpu_us_per_request', '-')} us/req"
                                 if others else ""))
        row = {t: summarize(rounds[t]) for t in names}
        for t in names:
            row[t]["others_cpu_us_per_request"] = statistics.mean(
                [r["others_cpu_us_per_request"] for r in rounds[t]
                 if "others_cpu_us_per_request" in r] or [0])
        row["rounds"] = rounds
        row["paired"] = {f"{num}_over_{den}_rps": paired(rounds, num, den)}
        results[str(c)] = row
    return results


def check_stored(problems, label, gates, key):
    """Each gate holds a token for `key` (its runs were fenced and stored)."""
    results = {}
    for t, gate in gates.items():
        tok = gate.stored_token(key)
        results[f"stored_token_check_{t}"] = tok
        if not tok or tok < 1:
            problems.append(f"{label} {t}: no token stored for {key}: {tok}")
    return results


def measure_etcd_cluster(args, procs, work, backend_port, concs, problems):
    """put_etcd: fenced PUTs to distinct keys (put.lua keys, or deep with
    --deep-paths; 16-byte bodies) through one fencegate on a three-member
    etcd cluster (fencegate_proc.EtcdCluster, data in the work dir), for each
    variant of ETCD_VARIANTS, interleaved (measure_variants), with the etcd
    members' CPU per request."""
    os.makedirs(os.path.join(work, "etcd"))
    cluster = fencegate_proc.EtcdCluster(procs, os.path.join(work, "etcd")).start()
    members = [m.proc.pid for m in cluster.members]
    gates = {}
    try:
        variants = OWNERSHIP_VARIANTS if args.etcd_ownership else ETCD_VARIANTS
        for name, extra in variants:
            storage = {"engine": "etcd",
                       "etcd": {"endpoints": cluster.endpoints(), "prefix": f"bench-{name}/",
                                **extra}}
            gates[name] = Fencegate(procs, args.fencegate, work, f"fg-etcd-{name}",
                                    args.threads, backend_port, "sync", args.access_log,
                                    log_level=args.log_level, storage=storage)
        scenario = "put_deep" if args.deep_paths else \
            "put_reuse" if args.etcd_ownership else "put_async"
        results = measure_variants(args, "put_etcd", gates, scenario, concs, problems,
                                   variants[0][0], variants[1][0], others=members)
        results["paths"] = "4 segments" if args.deep_paths else "3 segments"
        results.update(check_stored(problems, "put_etcd", gates,
                                    DEEP_KEY if args.deep_paths else "/objects/t0/k5"))
    finally:
        for gate in gates.values():
            gate.stop()
        for m in cluster.members:
            m.kill()
    return results


def measure_tree(args, procs, work, backend_port, concs, problems):
    """put_tree: fenced PUTs with 4-segment paths (put.lua deep, 16-byte
    bodies) through two fencegates on RocksDB, durability async, one with
    the tree of paths and one with nesting: off (TREE_VARIANTS), interleaved
    (measure_variants)."""
    gates = {}
    try:
        for name, nesting in TREE_VARIANTS:
            gates[name] = Fencegate(procs, args.fencegate, work, f"fg-tree-{name}",
                                    args.threads, backend_port, "async", args.access_log,
                                    log_level=args.log_level, nesting=nesting)
        results = measure_variants(args, "put_tree", gates, "put_deep", concs, problems,
                                   "tree", "flat")
        results.update(check_stored(problems, "put_tree", gates, DEEP_KEY))
    finally:
        for gate in gates.values():
            gate.stop()
    return results


def print_pair_table(rows, concs, num, den, labels, others=None, markdown=False):
    """A measure_variants result: each variant's r/s and p99, fencegate's CPU
    per request (and that of `others`, when named), and the median of the
    per-round ratios num / den with its interval. labels: (num, den) as the
    header names them."""
    ln, ld = labels
    head = ("conns", f"{ld} r/s", f"{ln} r/s", f"{ln} / {ld}, median of rounds [interval]",
            f"p99 ms {ld} / {ln}", f"fencegate CPU us/req {ld} / {ln}") + \
        ((f"{others} CPU us/req {ld} / {ln}",) if others else ())
    lines = []
    for c in concs:
        row = rows.get(str(c))
        if not row:
            continue
        d, n = row[den], row[num]
        pair = row["paired"][f"{num}_over_{den}_rps"]
        iv = pair["interval"]
        span = f" [{iv['low']}, {iv['high']}]" if iv else ""
        lines.append((str(c), f"{d['rps']:.0f}", f"{n['rps']:.0f}", f"{pair['median']}{span}",
                      f"{d['p99_ms']} / {n['p99_ms']}",
                      f"{d.get('cpu_us_per_request')} / {n.get('cpu_us_per_request')}") +
                     ((f"{d.get('others_cpu_us_per_request', 0):.0f} / "
                       f"{n.get('others_cpu_us_per_request', 0):.0f}",) if others else ()))
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * 3 + "---|" * (len(head) - 3))
        for line in lines:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    for line in (head, *lines):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip())


def print_etcd_table(rows, concs, markdown=False):
    if any(isinstance(r, dict) and "unowned" in r for r in rows.values()):
        return print_pair_table(rows, concs, "owned", "unowned", ("owning keys", "not owning"),
                                others="etcd", markdown=markdown)
    print_pair_table(rows, concs, "batched", "one_txn", ("batched", "one txn per write"),
                     others="etcd", markdown=markdown)


def print_tree_table(rows, concs, markdown=False):
    print_pair_table(rows, concs, "tree", "flat", ("tree", "nesting: off"), markdown=markdown)


def measure_keys(args, procs, work, backend_port):
    """RSS with about `args.keys` keys stored, and the restart time on that store."""
    if args.keys_import:
        return measure_keys_imported(args, procs, work, backend_port)
    fg = Fencegate(procs, args.fencegate, work, "fg-keys", args.threads, backend_port,
                   "async", False)
    result = {"keys_wanted": args.keys}
    try:
        threads = max(1, args.wrk_threads)
        per_thread = -(-args.keys // threads)
        # Each wrk thread writes its own keys k<start>..k<per_thread - 1>; a run
        # that ends early is followed by one that starts where it stopped.
        start, stored, secs = 0, 0, 30
        while start < per_thread:
            base = time.time_ns() // 1000
            argv = ["wrk", "-t", str(threads), "-c", str(64), "-d", f"{secs}s", "--timeout",
                    "10s", "-s", os.path.join(HERE, "put.lua"), f"http://127.0.0.1:{fg.port}",
                    "--", "keys", str(base), str(per_thread), "16", str(start)]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 120)
            line = next((l for l in out.stdout.splitlines() if l.startswith("WRKJSON ")), None)
            if not line:
                raise RuntimeError(f"wrk failed: {out.stderr.strip()[-300:]}")
            r = json.loads(line[len("WRKJSON "):])
            # The lowest per-thread key counter (put.lua): a key up to it may
            # have been in flight when wrk stopped, so the next run writes it again.
            low = next((int(l.split()[1]) for l in out.stdout.splitlines()
                        if l.startswith("WRKKEYS ")), start)
            if low - 64 <= start:
                raise RuntimeError(f"keys: no progress in a {secs} s run ({r['requests']} answers)")
            start = min(per_thread, low - 64)
            stored = start * threads
            log(f"keys: {stored} of {args.keys} written")
        result["keys_stored"] = stored
        result["write_errors"] = r["errors"]
        result["rss_kib_after_writes"] = rss_kib(fg.pid)
    finally:
        fg.stop()
    t0 = time.monotonic()
    fg = Fencegate(procs, args.fencegate, work, "fg-keys", args.threads, backend_port,
                   "async", False)
    result["restart_to_listening_s"] = round(time.monotonic() - t0, 3)
    result["rss_kib_after_restart"] = settle_rss(lambda: rss_kib(fg.pid))
    data = os.path.join(work, "fg-keys", "data")
    result["store_bytes"] = sum(os.path.getsize(os.path.join(d, f))
                                for d, _, fs in os.walk(data) for f in fs)
    fg.stop()
    return result


def measure_keys_imported(args, procs, work, backend_port):
    """As measure_keys, but the keys come from `fencegate import` of a generated file
    (much faster than HTTP for millions of keys); then the start-up time to the
    listening line and the RSS on that store."""
    # Start once to write the config and create the store, then stop it: import
    # opens the store directly and refuses while fencegate runs.
    fg = Fencegate(procs, args.fencegate, work, "fg-keys", args.threads, backend_port,
                   "async", False)
    fg.stop()
    d = os.path.join(work, "fg-keys")
    cfg, data = os.path.join(d, "fencegate.yaml"), os.path.join(d, "data")
    src = os.path.join(d, "keys.jsonl")
    with open(src, "w") as f:
        for i in range(args.keys):
            f.write(f'{{"key":"/objects/t{i % 2}/k{i}","token":{i + 1}}}\n')
    result = {"keys_wanted": args.keys, "via": "fencegate import"}
    t0 = time.monotonic()
    with open(os.path.join(d, "import.log"), "w") as err:
        done = subprocess.run([args.fencegate, "import", "--config", cfg, "--input", src],
                              stdout=subprocess.PIPE, stderr=err, text=True, timeout=3600)
    result["import_s"] = round(time.monotonic() - t0, 1)
    result["import_exit"] = done.returncode
    result["import_summary"] = done.stdout.strip()[-300:]
    os.remove(src)
    if done.returncode != 0:
        raise RuntimeError(f"fencegate import failed ({done.returncode}); see {d}/import.log")
    result["keys_stored"] = args.keys
    for attempt in ("first start after import", "restart"):
        t0 = time.monotonic()
        fg = Fencegate(procs, args.fencegate, work, "fg-keys", args.threads, backend_port,
                       "async", False)
        key = "first_start" if attempt.startswith("first") else "restart"
        result[f"{key}_to_listening_s"] = round(time.monotonic() - t0, 3)
        result[f"rss_kib_after_{key}"] = settle_rss(lambda: rss_kib(fg.pid))
        last = args.keys - 1
        result[f"{key}_last_key_token"] = fg.stored_token(f"/objects/t{last % 2}/k{last}")
        fg.stop()
    result["store_bytes"] = sum(os.path.getsize(os.path.join(dd, f))
                                for dd, _, fs in os.walk(data) for f in fs)
    return result


def build_binary():
    build = os.path.join(ROOT, "build")
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.exists(cache):
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=subprocess.DEVNULL)
    else:
        with open(cache) as f:
            m = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", f.read(), re.M)
        if m and m.group(1) not in ("Release", "RelWithDebInfo"):
            log(f"warning: build/ is configured as {m.group(1)!r}, not Release")
    subprocess.run(["cmake", "--build", build, "--target", "fencegate"], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(build, "app", "fencegate")


def print_table(results, scenarios, concs):
    hdr = (f"{'scenario':<10} {'conns':>5} | {'direct r/s':>10} {'nginx r/s':>10} "
           f"{'fg r/s':>10} | {'fg/nginx':>8} {'fg/direct':>9} | "
           f"{'p50 ms d/n/f':>20} | {'p99 ms d/n/f':>20} | {'p99.9 ms d/n/f':>22} | "
           f"{'CPU us/req d/n/f':>20}")
    print(hdr)
    print("-" * len(hdr))

    def lat(row, k):
        return "/".join("-" if row[t][k] is None else f"{row[t][k]:.2f}" for t in TARGETS)
    for sc in scenarios:
        for c in concs:
            row = results[sc][str(c)]
            d, n, f = (row[t]["rps"] for t in TARGETS)
            rn, rd = ratio(f, n), ratio(f, d)
            base = ""
            if "baseline" in row:
                b = row["baseline"]
                base = (f" | baseline {b['rps']:.0f} r/s, fg/baseline {ratio(f, b['rps'])}, "
                        f"p99 {b['p99_ms']}, CPU us/req {b.get('cpu_us_per_request')}")
            pair = row.get("paired", {})
            paired_text = ""
            if pair.get("fg_over_nginx_rps", {}).get("median") is not None:
                paired_text = f" | paired median fg/nginx {pair['fg_over_nginx_rps']['median']}"
            if pair.get("fg_over_nginx_p99", {}).get("median") is not None:
                paired_text += f", p99 {pair['fg_over_nginx_p99']['median']}"
            if "fg_pass" in row:
                p = row["fg_pass"]
                paired_text += (f" | fg_pass {p['rps']:.0f} r/s, CPU us/req "
                                f"{p.get('cpu_us_per_request')}, paired median fg/fg_pass "
                                f"{pair['fg_over_fg_pass_rps']['median']}")
            if "ref_seq" in row:
                paired_text += (f" | ref_seq {row['ref_seq']['rps']:.0f} r/s, paired median "
                                f"fg/ref_seq {pair['fg_over_ref_seq_rps']['median']}")
            same = PAIRED_SAME.get(sc, (None,))[0]
            if same in row:
                p = row[same]
                paired_text += (f" | {same} {p['rps']:.0f} r/s, CPU us/req "
                                f"{p.get('cpu_us_per_request')}, paired median fg/{same} r/s "
                                f"{pair[f'fg_over_{same}_rps']['median']}, CPU/req "
                                f"{pair[f'fg_over_{same}_cpu_us_per_request']['median']}")
            for key, label in (("rps", "r/s"), ("cpu_us_per_request", "CPU/req")):
                ab = pair.get(f"fg_over_baseline_{key}", {})
                if ab.get("median") is not None:
                    iv = ab.get("interval")
                    paired_text += (f" | paired fg/baseline {label} {ab['median']}" +
                                    (f" [{iv['low']}, {iv['high']}]" if iv else ""))
            print(f"{sc:<10} {c:>5} | {d:>10.0f} {n:>10.0f} {f:>10.0f} | "
                  f"{rn if rn is not None else '-':>8} {rd if rd is not None else '-':>9} | "
                  f"{lat(row, 'p50_ms'):>20} | {lat(row, 'p99_ms'):>20} | "
                  f"{lat(row, 'p99.9_ms'):>22} | {lat(row, 'cpu_us_per_request'):>20}{base}"
                  f"{paired_text}")


def print_markdown(path):
    """The ratio table of an earlier run's JSON, as Markdown (for docs/performance.md)."""
    with open(path) as f:
        out = json.load(f)
    res = out["results"]
    has_base = any("baseline" in row for by_c in res.values() for c, row in by_c.items()
                   if c.isdigit() and isinstance(row, dict))
    extra = " baseline/nginx r/s | fg/baseline r/s | fg/baseline CPU/req |" if has_base else ""
    has_main = any(c.isdigit() and isinstance(row, dict) and "fencegate" in row
                   for by_c in res.values() for c, row in by_c.items())
    if has_main:
        print("| scenario | conns | fencegate r/s | fg/nginx r/s | fg/nginx r/s, median of "
              "rounds | fg/direct r/s | fg/nginx p99 | fg/nginx p99, median of rounds | "
              "fencegate p50 / p99 / p99.9 ms | "
              "CPU us/req nginx / fg | scheduled in per request nginx / fg | "
              "fenced/unfenced PUT r/s, median of rounds "
              f"(CPU us/req unfenced) |{extra}")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|" +
              ("---:|---:|---:|" if has_base else ""))
    for sc, by_c in res.items():
        for c, row in by_c.items():
            if not c.isdigit() or "fencegate" not in row:
                continue
            f, n, d = (row[t] for t in ("fencegate", "nginx", "direct"))
            cols = ""
            if has_base:
                b = row.get("baseline", {})
                cols = (f" {ratio(b.get('rps'), n['rps'])} | {ratio(f['rps'], b.get('rps'))} |"
                        f" {ratio(f.get('cpu_us_per_request'), b.get('cpu_us_per_request'))} |")
            pair = row.get("paired", {})
            med = pair.get("fg_over_nginx_rps", {}).get("median", "-")
            med_p99 = pair.get("fg_over_nginx_p99", {}).get("median", "-")
            fenced = "-"
            if "fg_over_fg_pass_rps" in pair:
                fenced = (f"{pair['fg_over_fg_pass_rps']['median']} "
                          f"({row['fg_pass'].get('cpu_us_per_request')})")
            print(f"| {sc} | {c} | {f['rps']:.0f} | {ratio(f['rps'], n['rps'])} | {med} | "
                  f"{ratio(f['rps'], d['rps'])} | {ratio(f['p99_ms'], n['p99_ms'])} | {med_p99} | "
                  f"{f['p50_ms']} / {f['p99_ms']} / {f['p99.9_ms']} | "
                  f"{n.get('cpu_us_per_request')} / {f.get('cpu_us_per_request')} | "
                  f"{n.get('sched_in_per_request', '-')} / {f.get('sched_in_per_request', '-')} | "
                  f"{fenced} |"
                  f"{cols}")
    same_rows = [(sc, c, row) for sc, by_c in res.items() if sc in PAIRED_SAME
                 for c, row in by_c.items() if c.isdigit() and PAIRED_SAME[sc][0] in row]
    if same_rows:
        print()
        print("| scenario | conns | reference | fencegate r/s | reference r/s | "
              "r/s, median of rounds | CPU us/req fg / reference | CPU/req, median of rounds |")
        print("|---|---:|---|---:|---:|---:|---|---:|")
        for sc, c, row in same_rows:
            name, workload = PAIRED_SAME[sc]
            f, ref, pair = row["fencegate"], row[name], row["paired"]
            print(f"| {sc} | {c} | {workload} | {f['rps']:.0f} | {ref['rps']:.0f} | "
                  f"{pair[f'fg_over_{name}_rps']['median']} | "
                  f"{f.get('cpu_us_per_request')} / {ref.get('cpu_us_per_request')} | "
                  f"{pair[f'fg_over_{name}_cpu_us_per_request']['median']} |")
    if "put_etcd" in res:
        print()
        print_etcd_table(res["put_etcd"], sorted(int(c) for c in res["put_etcd"] if c.isdigit()),
                         markdown=True)
    if "put_tree" in res:
        print()
        print_tree_table(res["put_tree"], sorted(int(c) for c in res["put_tree"] if c.isdigit()),
                         markdown=True)
    print()
    print_verdicts(target_verdicts(res), markdown=True)


# Settings that change what a round measures: runs that differ in any of
# them are not draws from one distribution, and pool_runs refuses them.
POOL_SETTINGS = ("threads", "nginx_proxy_workers", "nginx_keepalive", "backend_workers",
                 "wrk_threads", "duration_s", "order", "access_log", "log_level", "cpus",
                 "kernel", "nginx", "quick", "scenarios")


def pool_runs(runs):
    """Several runs' results as one: every point's rounds, per target, one
    run's after another's, for verdicts over all of them. `runs` is a list
    of (name, loaded JSON). The interval over pooled rounds takes every
    round for a draw from one distribution; rounds of one run resemble one
    another more than rounds of runs hours apart do, so it is narrower than
    the spread from run to run warrants (docs/performance.md).

    Only runs of one build belong together, which the JSON cannot tell (it
    has the binary's path); the settings it can tell must match
    (POOL_SETTINGS), and one run (its start time) may come once: else
    ValueError says why. Round i of a run stays round i of every target of
    every point: a target or a point a run lacks (other --conns, no
    --baseline), or has fewer rounds of (other --rounds), is filled with
    failed rounds, which the ratios skip. So a run without one of the
    targets a ratio needs adds no rounds to that ratio."""
    first_name, first = runs[0]
    started = {}
    for name, out in runs:
        date = out["meta"].get("date")
        if date is not None and date in started:
            raise ValueError(f"{name}: the run of {started[date]} (started {date}): pooled "
                             "twice, its rounds would count twice")
        started[date] = name
    for name, out in runs[1:]:
        for k in POOL_SETTINGS:
            a, b = first["meta"].get(k), out["meta"].get(k)
            if a != b:
                raise ValueError(f"{name}: {k} is {b!r}, {first_name} has {a!r}: "
                                 "runs with different settings cannot be pooled")

    def points(out):
        return {(sc, c): row["rounds"] for sc, by_c in out["results"].items()
                for c, row in by_c.items() if c.isdigit() and "rounds" in row}

    targets = {}  # (scenario, conns) -> every target any run has there, in order
    for _, out in runs:
        for point, rounds in points(out).items():
            targets.setdefault(point, {}).update(dict.fromkeys(rounds))
    pooled = {}
    for name, out in runs:
        mine = points(out)
        n = max((len(r) for rounds in mine.values() for r in rounds.values()), default=0)
        filler = {"failed": f"no such round in {name}"}
        for (sc, c), names in targets.items():
            dest = pooled.setdefault(sc, {}).setdefault(c, {"rounds": {}})["rounds"]
            for target in names:
                got = mine.get((sc, c), {}).get(target, [])
                dest.setdefault(target, []).extend(list(got) + [filler] * (n - len(got)))
    return pooled


def print_pooled(paths):
    """The ratio targets' verdicts over the rounds of several runs pooled
    (pool_runs)."""
    runs = []
    try:
        for path in paths:
            try:
                with open(path) as f:
                    out = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}: cannot be read as a run's JSON: {e}") from e
            if not isinstance(out, dict) or not isinstance(out.get("meta"), dict) or \
                    not isinstance(out.get("results"), dict):
                raise ValueError(f"{path}: not a run's JSON (no \"meta\" and \"results\")")
            runs.append((path, out))
        pooled = pool_runs(runs)
    except ValueError as e:
        log(f"--report: {e}")
        return 2
    print(f"{len(runs)} runs pooled: " + ", ".join(
        f"{p} ({out['meta'].get('date', '?')}, {out['meta'].get('rounds', '?')} rounds)"
        for p, out in runs))
    print()
    # Each run's own median beside the pooled one: how far runs differ,
    # which the pooled interval does not account for (pool_runs).
    # A run without a point shows "-" in its place, so each value stays
    # under its own run.
    medians = [{(r["target"], r["conns"]): str(r["median"]) for r in target_verdicts(out["results"])}
               for _, out in runs]
    rows = target_verdicts(pooled)
    print_verdicts(rows, markdown=True, each_run={
        (r["target"], r["conns"]): " / ".join(m.get((r["target"], r["conns"]), "-")
                                             for m in medians) for r in rows})
    print()
    print("The interval takes every round for a draw from one distribution; rounds of one run "
          "resemble one another more than those of runs hours apart, so it is narrower than the "
          "spread from run to run warrants: read it with each run's median.")
    return 0


def self_test():
    """Known answers for median_interval, verdict, target_verdicts and pool_runs."""
    failures = []

    def check(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    # The order of the targets: reversed in odd rounds only with "alternate".
    abc = ("direct", "nginx", "fencegate", "fg_pass")
    check("order r0", round_order(abc, 0, "alternate"), abc)
    check("order r1", round_order(abc, 1, "alternate"), tuple(reversed(abc)))
    check("order r2", round_order(abc, 2, "alternate"), abc)
    check("order fixed", round_order(abc, 1, "fixed"), abc)

    # n = 5: only [min, max] reaches 90% (1 - 2/32 = 93.75%).
    check("n=5", median_interval([3, 1, 5, 2, 4]),
          {"low": 1, "high": 5, "coverage": 0.938, "rounds": 5})
    # n = 10: [x(2), x(9)] holds 97.9%; [x(3), x(8)] only 89.1%.
    check("n=10", median_interval(list(range(10, 0, -1))),
          {"low": 2, "high": 9, "coverage": 0.979, "rounds": 10})
    # n = 20: [x(6), x(15)] holds 95.9%; [x(7), x(14)] 88.5%.
    check("n=20", median_interval(range(1, 21)),
          {"low": 6, "high": 15, "coverage": 0.959, "rounds": 20})
    check("n=3 coverage", median_interval([1, 2, 3])["coverage"], 0.75)
    check("n=0", median_interval([]), None)
    check("n=3 verdict", verdict(median_interval([1.1, 1.2, 1.3]), 1.0, True), "too few rounds")
    five = median_interval([0.95, 1.02, 1.04, 0.99, 1.01])
    check("at least, spans", verdict(five, 1.0, True), "undecided")
    check("at least, above", verdict(five, 0.9, True), "met")
    check("at least, below", verdict(five, 1.1, True), "missed")
    check("at most, below", verdict(five, 1.2, False), "met")
    check("at most, spans", verdict(five, 1.0, False), "undecided")
    check("at most, above", verdict(five, 0.9, False), "missed")

    def get_rounds(rps):  # equal p99s: only r/s differ
        return [{"rps": v, "latency_us": {"p99": 100}} for v in rps]

    hot = [{"rps": v} for v in (900, 700, 850, 880, 860)]
    res = {"get": {"16": {"rounds": {"fencegate": get_rounds([110, 111, 108, 112, 109]),
                                     "nginx": get_rounds([100] * 5)}}},
           "put_async": {"1": {"rounds": {"fencegate": [{"rps": 80}] * 5,
                                          "fg_pass": [{"rps": 100}] * 5}}},
           "put_sync": {"1": {"rounds": {"fencegate": [{"rps": 1}] * 5,
                                         "fg_pass": [{"rps": 100}] * 5}},
                        "64": {"rounds": {"fencegate": [{"rps": 60}] * 5,
                                          "fg_pass": [{"rps": 100}] * 5}}},
           "put_hot": {"1": {"rounds": {"fencegate": hot, "ref_seq": [{"rps": 100}] * 5}},
                       "16": {"rounds": {"fencegate": hot, "ref_seq": [{"rps": 1000}] * 5}},
                       # 0.85-0.95 of its round's reference.
                       "64": {"rounds": {"fencegate": [{"rps": v} for v in (850, 900, 950,
                                                                             900, 880)],
                                         "ref_seq": [{"rps": 1000}] * 5}},
                       # 0.5 of its reference in every round.
                       "256": {"rounds": {"fencegate": [{"rps": 1000}] * 5,
                                          "ref_seq": [{"rps": 2000}] * 5}}}}
    got = {(r["target"].split(" ")[0] + (" p99" if "p99" in r["target"] else ""), r["conns"]):
           r["verdict"] for r in target_verdicts(res)}
    check("target_verdicts", got, {
        ("GET", "16"): "met",            # 1.08-1.12 >= 1.0 in every round
        ("GET p99", "16"): "met",        # 1.0 <= 1.2
        ("put_async", "1"): "missed",    # 0.8 < 0.9 in every round
        ("put_sync", "64"): "met",       # 0.6 >= 0.5; 1 connection has no target
        ("hot", "16"): "undecided",      # 0.70-0.90 spans 0.8; 1 connection has no target
        ("hot", "64"): "met",            # 0.85-0.95 of its own round's reference
        ("hot", "256"): "missed"})       # 0.5 of ref_seq
    # An idempotent POST against the fenced PUT of its rounds (64
    # connections only), a replay against the GET of its rounds.
    idem = {"idem_post": {c: {"rounds": {
                "fencegate": [{"rps": 800, "cpu_us_per_request": 30}] * 5,
                "fg_fenced": [{"rps": 1000, "cpu_us_per_request": 20}] * 5}} for c in ("16", "64")},
            "idem_replay": {"16": {"rounds": {"fencegate": [{"rps": v} for v in (1100, 990, 1050,
                                                                                1080, 1020)],
                                              "fg_get": [{"rps": 1000}] * 5}}}}
    check("target_verdicts: idempotency",
          [(r["target"], r["conns"], r["median"], r["verdict"]) for r in target_verdicts(idem)],
          [("idem POST time/req, / fenced PUT", "64", 1.25, "met"),
           ("idem POST CPU/req, / fenced PUT", "64", 1.5, "missed"),
           ("replay r/s / GET through fencegate", "16", 1.05, "undecided")])
    # Pooling: two runs of a point, each undecided (6 rounds: [min, max],
    # and each has one round under 0.8), whose 12 rounds together are met
    # (12 rounds: [x(3), x(10)], and x(3) is 0.85). The reference moves
    # from round to round, so a round paired with another's is caught.
    refs = [1000, 1250, 800, 1000, 1600, 500]

    def hot_run(ratios, **meta):
        return {"meta": {"duration_s": 1, "rounds": len(ratios), **meta},
                "results": {"put_hot": {"256": {"rounds": {
                    "fencegate": [{"rps": q * r} for q, r in zip(ratios, refs)],
                    "ref_seq": [{"rps": r} for r in refs[:len(ratios)]]}}}}}
    a = hot_run([0.70, 0.85, 0.88, 0.90, 0.92, 0.95], date="a")
    b = hot_run([0.91, 0.76, 0.87, 0.89, 0.86, 0.90], date="b")
    for name, run in (("a", a), ("b", b)):
        alone = [r["verdict"] for r in target_verdicts(run["results"])]
        check(f"pool: {name} alone", alone, ["undecided"])
    pooled = pool_runs([("a", a), ("b", b)])
    check("pool: rounds", len(pooled["put_hot"]["256"]["rounds"]["fencegate"]), 12)
    both = target_verdicts(pooled)
    check("pool: verdict", [(r["median"], r["interval"]["low"], r["verdict"]) for r in both],
          [(0.885, 0.85, "met")])
    # A run without the reference pooled before one with it: its rounds
    # must not pair with the other's.
    lone = hot_run([0.5] * 6, date="lone")
    del lone["results"]["put_hot"]["256"]["rounds"]["ref_seq"]
    mixed = target_verdicts(pool_runs([("lone", lone), ("b", b)]))
    check("pool: a target one run lacks", [(r["median"], r["interval"]["rounds"]) for r in mixed],
          [(0.88, 6)])
    # A point one run lacks (other --conns) and fewer rounds (other
    # --rounds): x has 64 connections only, y 3 rounds at 64 and 6 at 256.
    # The point 256 holds y's 6 rounds after 6 failed ones of x, never
    # pairing a round of x with one of y.
    x = hot_run([0.5] * 6, date="x")
    x["results"]["put_hot"] = {"64": x["results"]["put_hot"]["256"]}
    y = hot_run([0.9] * 6, date="y")
    y["results"]["put_hot"]["64"] = {"rounds": {
        t: rs[:3] for t, rs in y["results"]["put_hot"]["256"]["rounds"].items()}}
    pooled = pool_runs([("x", x), ("y", y)])
    check("pool: a point one run lacks", len(pooled["put_hot"]["256"]["rounds"]["fencegate"]), 12)
    lacking = {r["conns"]: (r["median"], r["interval"]["rounds"])
               for r in target_verdicts(pooled)}
    check("pool: a point one run lacks, fewer rounds", lacking,
          {"64": (0.5, 9), "256": (0.9, 6)})
    for bad, why in (([("a", a), ("c", hot_run([0.8] * 6, date="c", duration_s=3))], "duration_s"),
                     ([("a", a), ("a again", a)], "twice")):
        try:
            pool_runs(bad)
            failures.append(f"pool: pooled what it must refuse ({why})")
        except ValueError as e:
            check(f"pool: refused ({why})", why in str(e), True)
    for f in failures:
        log(f"self-test: {f}")
    log(f"self-test: {'FAILED' if failures else 'passed'} ({len(failures)} failures)")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a few seconds in total, only proves the harness works")
    ap.add_argument("--fencegate", default=os.environ.get("FENCEGATE_BIN"),
                    help="fencegate binary (default: build it in build/)")
    ap.add_argument("--baseline", metavar="PATH",
                    help="also run this (older) fencegate binary as a fourth target, "
                         "interleaved with the others, to compare two builds in one run")
    ap.add_argument("--out", metavar="FILE",
                    help="JSON output (default: build/bench-results/latest.json under the "
                         "repository root, with --quick build/bench-results/quick.json; "
                         "never the source tree)")
    ap.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 4),
                    help="fencegate threads = nginx proxy workers (default: cores, max 4)")
    ap.add_argument("--backend-workers", type=int, default=1)
    ap.add_argument("--nginx-keepalive", type=int, default=256,
                    help="nginx proxy's upstream `keepalive` (idle connections per worker); "
                         "nginx closes beyond it at once, so below the concurrency per "
                         "worker it reconnects on a share of requests")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--duration", type=int, default=3, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=2, help="A B C repetitions per point")
    ap.add_argument("--order", choices=("alternate", "fixed"), default="alternate",
                    help="targets in a round: A B C then C B A in the next (alternate), or "
                         "A B C every round (fixed)")
    ap.add_argument("--conns", default="1,16,64,256")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--access-log", action="store_true", help="fencegate log.access_log: true")
    ap.add_argument("--log-level", default="warn",
                    choices=["trace", "debug", "info", "warn", "error", "critical", "off"],
                    help="fencegate log.level of the scenarios' runs (debug: with --keep, "
                         "bench/load/moves.py reads how a hot key's clients gathered)")
    ap.add_argument("--memory-conns", type=int, default=10000)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--keys", type=int, default=0,
                    help="also store about this many keys through fencegate (async), then "
                         "report its RSS and its restart time on that store")
    ap.add_argument("--keys-import", action="store_true",
                    help="with --keys: write the keys with `fencegate import` of a generated "
                         "file instead of through HTTP (fast enough for 10M keys)")
    ap.add_argument("--etcd-ownership", action="store_true",
                    help="with --etcd-cluster: put_etcd compares replicas that own keys "
                         "(storage.etcd.ownership) with replicas that do not, both batched")
    ap.add_argument("--etcd-cluster", action="store_true",
                    help="also run put_etcd: fenced PUTs through one fencegate on a three-member "
                         "etcd cluster, storage.etcd.max_batch 40 against 1, interleaved, at "
                         "--conns (needs etcd; with --scenarios \"\" --no-memory, alone)")
    ap.add_argument("--deep-paths", action="store_true",
                    help="put_etcd writes 4-segment paths (/objects/t<n>/d<n>/k<n>) instead of "
                         "3, so that each write reads and writes a node per segment of the tree")
    ap.add_argument("--tree", action="store_true",
                    help="also run put_tree: fenced async PUTs with 4-segment paths through two "
                         "fencegates on RocksDB, the tree of paths (nesting per_key) against "
                         "nesting: off, interleaved, at --conns")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    ap.add_argument("--syscalls", action="store_true",
                    help="count syscalls per request of the nginx proxy and fencegate "
                         "(perf stat tracepoints, first round only)")
    ap.add_argument("--perf", metavar="DIR",
                    help="record fencegate with `perf record -g` during each of its runs into "
                         "DIR/perf-<scenario>-c<conns>.data, its runs of a reference through "
                         "the same process (fg_pass, fg_fenced, fg_get) into "
                         "DIR/perf-<scenario>-<reference>-c<conns>.data (skews those numbers: "
                         "use a separate invocation for profiles)")
    ap.add_argument("--trace", metavar="DIR",
                    help="record fencegate's system calls (enter/exit tracepoints) during the "
                         "first round of its runs and of its references through the same "
                         "process (fg_pass, fg_fenced, fg_get) into "
                         "DIR/trace-<scenario>[-<reference>]-c<conns>.data and report where a "
                         "request's time goes, wake by wake (bench/load/phases.py; skews those "
                         "runs: use a separate invocation)")
    ap.add_argument("--report", metavar="JSON", nargs="+",
                    help="print the ratio table of an earlier run as Markdown and exit; with "
                         "several runs of one build, the ratio targets' verdicts over all "
                         "their rounds pooled (the runs' settings must match)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the interval and verdict arithmetic on made-up rounds and exit "
                         "(ctest: bench.load_selftest)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.report:
        if len(args.report) > 1:
            return print_pooled(args.report)
        print_markdown(args.report[0])
        return 0
    if args.quick:
        args.duration, args.rounds, args.conns = 1, 1, "8"
        args.memory_conns = min(args.memory_conns, 200)
    concs = [int(c) for c in args.conns.split(",")]
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for tool in ("nginx", "wrk") + (("etcd",) if args.etcd_cluster else ()):
        if not shutil.which(tool):
            package = {"etcd": "etcd-server"}.get(tool, tool)
            log(f"{tool} not found (apt-get install {package}, or bash docker/install-deps.sh)")
            return 77  # ctest SKIP_RETURN_CODE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by the servers
    if args.memory_conns + 100 > hard:
        args.memory_conns = max(100, hard - 200)
        log(f"RLIMIT_NOFILE hard limit {hard}: memory test with {args.memory_conns} connections")

    binary = args.fencegate or build_binary()
    args.fencegate = os.path.abspath(binary)
    if not os.access(args.fencegate, os.X_OK):
        log(f"not an executable: {args.fencegate}")
        return 2

    work_dir = TempDir("fencegate-bench-", parent=os.environ.get("BENCH_TMP"), mode=0o755)
    work = work_dir.path
    procs = Procs()
    problems = []
    www = None

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    out = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick, "fencegate": args.fencegate, "baseline": args.baseline,
        "threads": args.threads,
        "nginx_proxy_workers": args.threads, "nginx_keepalive": args.nginx_keepalive,
        "backend_workers": args.backend_workers,
        "wrk_threads": args.wrk_threads, "duration_s": args.duration, "rounds": args.rounds,
        "order": args.order,
        "access_log": args.access_log, "log_level": args.log_level,
        "etcd_cluster": args.etcd_cluster, "tree": args.tree, "deep_paths": args.deep_paths,
        "cpus": os.cpu_count(), "kernel": platform.release(),
        "loadavg_start": os.getloadavg(),
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
        "scenarios": {s: SCENARIOS[s] for s in scenarios}},
        "results": {}, "ratios": {}, "problems": problems}
    try:
        backend_port, proxy_port = free_ports(2)
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        www_dir = TempDir("fencegate-bench-www-", parent=shm or work, mode=0o755)
        www = www_dir.path
        os.makedirs(os.path.join(www, "tmp"))
        backend = start_nginx(procs, work, "backend", args.backend_workers,
                              BACKEND_SERVER.format(port=backend_port, get_body=GET_BODY, www=www))
        wait_until("backend nginx", backend, 10,
                   lambda: http_ok(f"http://127.0.0.1:{backend_port}/objects/static"))
        nginx_proxy = start_nginx(procs, work, "proxy", args.threads,
                                  PROXY_SERVER.format(port=proxy_port, backend_port=backend_port,
                                                      keepalive=args.nginx_keepalive))
        wait_until("nginx proxy", nginx_proxy, 10,
                   lambda: http_ok(f"http://127.0.0.1:{proxy_port}/objects/static"))
        log(f"work dir {work}; backend :{backend_port}, nginx proxy :{proxy_port} "
            f"({args.threads} workers), fencegate {args.threads} threads")

        targets = TARGETS + (("baseline",) if args.baseline else ())
        for sc in scenarios:
            durability = "sync" if sc == "put_sync" else "async"
            idempotent = sc in IDEMPOTENT
            fg = Fencegate(procs, args.fencegate, work, f"fg-{sc}", args.threads, backend_port,
                           durability, args.access_log, log_level=args.log_level,
                           idempotent=idempotent)
            base = None
            if args.baseline:
                base = Fencegate(procs, args.baseline, work, f"fg-base-{sc}", args.threads,
                                 backend_port, durability, args.access_log,
                                 log_level=args.log_level, idempotent=idempotent)
            urls = {"direct": f"http://127.0.0.1:{backend_port}",
                    "nginx": f"http://127.0.0.1:{proxy_port}",
                    "fencegate": f"http://127.0.0.1:{fg.port}",
                    "fg_pass": f"http://127.0.0.1:{fg.port}",
                    "ref_seq": f"http://127.0.0.1:{backend_port}"}
            same = PAIRED_SAME.get(sc)
            sc_targets = targets + (("fg_pass",) if sc in PAIRED_PASS else ()) + (
                ("ref_seq",) if sc in PAIRED_REF else ()) + ((same[0],) if same else ())
            if same:
                urls[same[0]] = f"http://127.0.0.1:{fg.port}"
            # What each target of this fencegate process runs when it is not
            # the scenario itself.
            workload = {"fg_pass": "put_pass", **({same[0]: same[1]} if same else {})}
            if base:
                urls["baseline"] = f"http://127.0.0.1:{base.port}"
            out["results"][sc] = {}
            try:
                if sc == "idem_replay":
                    # The keys the timed runs repeat, each run once now.
                    for server in (fg, base) if base else (fg,):
                        for i in range(REPLAY_KEYS):
                            got = server.post_idempotent("/pay/replay", f"replay-{i}",
                                                         b"x" * BODY_BYTES[sc])
                            if got != (200, False):
                                raise RuntimeError(f"storing replay-{i}: (status, replayed) "
                                                   f"{got}, want (200, False)")
                for c in concs:
                    rounds = {t: [] for t in sc_targets}
                    fsyncs = []
                    for rnd in range(args.rounds):
                        for t in round_order(sc_targets, rnd, args.order):
                            counter = recorder = None
                            if sc == "put_sync" and t == "fencegate":
                                counter = count_fsyncs_start(fg.pid, args.duration)
                            if args.perf and t in FG_TARGETS and rnd == 0:
                                recorder = perf_record_start(args.perf, fg.pid, sc, c,
                                                             args.duration, t)
                            tracer = None
                            if args.trace and t in FG_TARGETS and rnd == 0:
                                tracer = phases.record_start(args.trace, fg.pid, sc, c,
                                                             args.duration, t)
                            sys_counter = None
                            # The server under test: fencegate (every thread,
                            # RocksDB's included), nginx's workers, or for
                            # direct the backend's.
                            pids = ([fg.pid] if t in FG_TARGETS else [base.pid]
                                    if t == "baseline" else nginx_pids(nginx_proxy.pid)
                                    if t == "nginx" else nginx_pids(backend.pid))
                            if args.syscalls and rnd == 0 and t not in ("direct", "ref_seq"):
                                sys_counter = syscalls_start(pids, args.duration)
                            ticks, faults = cpu_ticks_and_faults(pids)
                            # The neighbours' share: what the backend spends
                            # per request behind this target (for direct and
                            # ref_seq, the server itself).
                            backend_pids = nginx_pids(backend.pid)
                            backend_ticks, _ = cpu_ticks_and_faults(backend_pids)
                            sched = schedstat(pids)
                            idle = idle_ticks()
                            spread = timer = None
                            if t == "nginx":  # halfway through the run
                                spread = {}
                                timer = threading.Timer(
                                    args.duration / 2,
                                    lambda out=spread: out.update(counts=conns_per_worker(
                                        nginx_proxy.pid, proxy_port)))
                                timer.start()
                            if t == "ref_seq":  # one client, distinct keys, 16-byte bodies
                                r = run_wrk(args, urls[t], "put_async", 1, args.duration)
                            else:
                                r = run_wrk(args, urls[t], workload.get(t, sc), c,
                                            args.duration)
                            ticks_after, faults_after = cpu_ticks_and_faults(pids)
                            backend_ticks_after, _ = cpu_ticks_and_faults(backend_pids)
                            idle_after = idle_ticks()
                            if timer is not None:
                                timer.join()
                                if "counts" in spread:
                                    r["conns_per_worker"] = spread["counts"]
                            if idle is not None and idle_after is not None and r.get("duration_us"):
                                # Cores the machine left idle on average over
                                # the run (every process's, the harness's too).
                                r["idle_cores"] = round(
                                    (idle_after - idle) / CLK_TCK / (r["duration_us"] / 1e6), 2)
                            if r.get("requests"):
                                r["backend_cpu_us_per_request"] = round(
                                    (backend_ticks_after - backend_ticks) / CLK_TCK * 1e6
                                    / r["requests"], 2)
                                # CPU time per request: unlike r/s, it hardly
                                # depends on what else the shared cores run.
                                r["cpu_us_per_request"] = round(
                                    (ticks_after - ticks) / CLK_TCK * 1e6 / r["requests"], 2)
                                # Memory given back and faulted in again shows here.
                                r["minor_faults_per_request"] = round(
                                    (faults_after - faults) / r["requests"], 3)
                                # How often the server's threads were switched
                                # in (mostly after a sleep: on a VM each wake-up
                                # costs several us; preemptions count too), and
                                # how long they waited for a core.
                                sched_after = schedstat(pids)
                                if sched and sched_after:
                                    r["sched_in_per_request"] = round(
                                        (sched_after[0] - sched[0]) / r["requests"], 2)
                                    r["runq_wait_us_per_request"] = round(
                                        (sched_after[1] - sched[1]) / 1e3 / r["requests"], 2)
                            if sys_counter is not None:
                                r["syscalls_per_request"] = syscalls_finish(
                                    sys_counter, r.get("requests"))
                                log(f"syscalls/request {t}: {r['syscalls_per_request']}")
                            if recorder is not None:
                                recorder.wait(timeout=120)
                            if tracer is not None:
                                tracer[0].wait(timeout=120)
                                if r.get("requests"):
                                    r["phases"] = phases.summarize(phases.events(tracer[1]),
                                                                   r["requests"])
                                    phases.print_summary(r["phases"], f"{sc} c={c} {t}")
                            n = count_fsyncs_finish(counter)
                            if n is not None and r.get("duration_us"):
                                fsyncs.append(n / (r["duration_us"] / 1e6))
                            rounds[t].append(r)
                            if "failed" in r:
                                problems.append(f"{sc} c={c} {t}: {r['failed']}")
                            else:
                                e = r["errors"]
                                if r["requests"] == 0:
                                    problems.append(f"{sc} c={c} {t}: no requests")
                                if e["status"]:
                                    problems.append(f"{sc} c={c} {t}: {e['status']} non-2xx/3xx")
                                if e["connect"] + e["read"] + e["write"] + e["timeout"]:
                                    problems.append(f"{sc} c={c} {t}: socket errors {e}")
                                if (r["requests"] and HAS_SCHEDSTAT
                                        and "sched_in_per_request" not in r):
                                    problems.append(f"{sc} c={c} {t}: no scheduler figures "
                                                    "from /proc/PID/task/*/schedstat")
                            log(f"{sc:<9} c={c:<4} round {rnd + 1} {t:<9} "
                                f"{r.get('rps', 0):10.0f} r/s, CPU "
                                f"{r.get('cpu_us_per_request', '-')} us/req, scheduled in "
                                f"{r.get('sched_in_per_request', '-')}/req; wrk "
                                f"{r.get('wrk_cpu_us_per_request', '-')}, backend "
                                f"{r.get('backend_cpu_us_per_request', '-')} us/req, idle cores "
                                f"{r.get('idle_cores', '-')}"
                                + (f", connections per worker {r['conns_per_worker']}"
                                   if "conns_per_worker" in r else ""))
                    row = {t: summarize(rounds[t]) for t in sc_targets}
                    row["rounds"] = rounds
                    row["paired"] = {"fg_over_nginx_rps": paired(rounds, "fencegate", "nginx"),
                                     "fg_over_nginx_p99": paired(rounds, "fencegate", "nginx",
                                                                 "p99"),
                                     "fg_over_nginx_cpu_per_request": paired(
                                         rounds, "fencegate", "nginx", "cpu_us_per_request")}
                    if "fg_pass" in rounds:
                        row["paired"]["fg_over_fg_pass_rps"] = paired(rounds, "fencegate",
                                                                      "fg_pass")
                    if "ref_seq" in rounds:
                        row["paired"]["fg_over_ref_seq_rps"] = paired(rounds, "fencegate",
                                                                      "ref_seq")
                    if same:
                        for key in ("rps", "cpu_us_per_request"):
                            row["paired"][f"fg_over_{same[0]}_{key}"] = paired(
                                rounds, "fencegate", same[0], key)
                    if "baseline" in rounds:
                        # An A/B of two builds is judged like a target: by
                        # the interval of its per-round ratios.
                        for key in ("rps", "cpu_us_per_request"):
                            row["paired"][f"fg_over_baseline_{key}"] = paired(
                                rounds, "fencegate", "baseline", key)
                    if fsyncs:
                        row["fencegate"]["fsyncs_per_s"] = round(statistics.mean(fsyncs), 1)
                    out["results"][sc][str(c)] = row
                if idempotent:
                    # A new key runs, its repeat is replayed; a stored key
                    # of the timed runs is replayed.
                    fresh = f"check-{time.time_ns()}"
                    got = [fg.post_idempotent("/pay/check", fresh, b"x") for _ in range(2)]
                    if sc == "idem_replay":
                        got.append(fg.post_idempotent("/pay/replay", "replay-5",
                                                      b"x" * BODY_BYTES[sc]))
                    out["results"][sc]["replay_check"] = got
                    if got != [(200, False)] + [(200, True)] * (len(got) - 1):
                        problems.append(f"{sc}: (status, replayed) of a new key, its repeat "
                                        f"and a stored key: {got}")
                if sc not in ("get", "put_pass", "idem_replay"):
                    key = "/objects/hot" if sc == "put_hot" else "/objects/t0/k5"
                    tok = fg.stored_token(key)
                    out["results"][sc]["stored_token_check"] = {"key": key, "token": tok}
                    if not tok or tok < 1:
                        problems.append(f"{sc}: fencegate has no token stored for {key}: {tok}")
                fg_rss = rss_kib(fg.pid)
                out["results"][sc]["fencegate_rss_kib_after"] = fg_rss
            finally:
                fg.stop()
                if base:
                    base.stop()
            if fg.proc.returncode not in (0, None):
                problems.append(f"{sc}: fencegate exited with {fg.proc.returncode}")

        if args.etcd_cluster:
            log("put_etcd: one fencegate on a three-member etcd cluster, " +
                ("owning keys against not" if args.etcd_ownership else "max_batch 40 against 1"))
            out["results"]["put_etcd"] = measure_etcd_cluster(args, procs, work, backend_port,
                                                              concs, problems)
        if args.tree:
            log("put_tree: fenced PUTs, 4-segment paths, the tree against nesting: off")
            out["results"]["put_tree"] = measure_tree(args, procs, work, backend_port, concs,
                                                      problems)
        if not args.no_memory:
            log(f"memory: idle and with {args.memory_conns} open connections")
            out["memory"] = measure_memory(args, procs, work, backend_port, nginx_proxy,
                                           proxy_port)
        if args.keys:
            log(f"keys: storing about {args.keys} keys through fencegate")
            out["keys"] = measure_keys(args, procs, work, backend_port)
    except KeyboardInterrupt:
        log("interrupted")
        problems.append("interrupted")
    except Exception as e:  # report, clean up, fail
        log(f"error: {e}")
        problems.append(f"error: {e}")
    finally:
        procs.stop_all()
        if www:
            www_dir.remove()

    # Ratios and the table.
    for sc, by_c in out["results"].items():
        for c, row in by_c.items():
            if not c.isdigit() or not isinstance(row, dict) or "fencegate" not in row:
                continue
            f, n, d = (row[t] for t in ("fencegate", "nginx", "direct"))
            out["ratios"].setdefault(sc, {})[c] = {
                "fg_over_nginx_rps": ratio(f["rps"], n["rps"]),
                "fg_over_direct_rps": ratio(f["rps"], d["rps"]),
                "fg_over_nginx_p99": ratio(f["p99_ms"], n["p99_ms"]),
                "fg_over_nginx_cpu_per_request": ratio(f.get("cpu_us_per_request"),
                                                       n.get("cpu_us_per_request")),
            }
            if "baseline" in row:
                b = row["baseline"]
                out["ratios"][sc][c].update({
                    "fg_over_baseline_rps": ratio(f["rps"], b["rps"]),
                    "baseline_over_nginx_rps": ratio(b["rps"], n["rps"]),
                    "fg_over_baseline_p99": ratio(f["p99_ms"], b["p99_ms"]),
                    "fg_over_baseline_cpu_per_request": ratio(f.get("cpu_us_per_request"),
                                                              b.get("cpu_us_per_request")),
                })
    res = out["results"]
    targets = {}
    # Fenced PUT against fencegate's own pass-through, two ways: against GET,
    # and against put_pass, the same PUT unfenced, whose backend work (a file
    # write) is the same, so that ratio is what fencing itself costs.
    for ref in ("get", "put_pass"):
        for c, row in res.get(ref, {}).items():
            if not c.isdigit():
                continue
            for sc in ("put_async", "put_sync"):
                if sc in res and c in res[sc]:
                    targets.setdefault(f"{sc}_over_fg_{ref}", {})[c] = ratio(
                        res[sc][c]["fencegate"]["rps"], row["fencegate"]["rps"])
    # The same, paired: fenced against unfenced PUT through one fencegate
    # process, round by round (PAIRED_PASS), and GET against nginx.
    for sc in PAIRED_PASS:
        for c, row in res.get(sc, {}).items():
            if c.isdigit() and "fg_over_fg_pass_rps" in row.get("paired", {}):
                targets.setdefault(f"{sc}_over_fg_pass_paired_median", {})[c] = (
                    row["paired"]["fg_over_fg_pass_rps"]["median"])
    for c, row in res.get("get", {}).items():
        if c.isdigit() and "paired" in row:
            targets.setdefault("get_over_nginx_paired_median", {})[c] = (
                row["paired"]["fg_over_nginx_rps"]["median"])
            targets.setdefault("get_p99_over_nginx_paired_median", {})[c] = (
                row["paired"]["fg_over_nginx_p99"]["median"])
    if "put_hot" in res and "put_async" in res and "1" in res["put_async"]:
        seq = res["put_async"]["1"]["direct"]["rps"]  # one client, straight to the backend
        targets["hot_over_direct_sequential"] = {
            c: ratio(res["put_hot"][c]["fencegate"]["rps"], seq)
            for c in res["put_hot"] if c.isdigit()}
    for sc, (name, workload) in PAIRED_SAME.items():
        for c, row in res.get(sc, {}).items():
            for key in ("rps", "cpu_us_per_request"):
                m = row.get("paired", {}).get(f"fg_over_{name}_{key}", {}).get("median") \
                    if c.isdigit() else None
                if m is not None:
                    targets.setdefault(f"{sc}_over_{workload}_{key}_paired_median", {})[c] = m
    for c, row in res.get("put_hot", {}).items():
        if c.isdigit() and "fg_over_ref_seq_rps" in row.get("paired", {}):
            targets.setdefault("hot_over_ref_seq_paired_median", {})[c] = (
                row["paired"]["fg_over_ref_seq_rps"]["median"])
    out["ratios"]["targets"] = targets
    out["ratios"]["verdicts"] = target_verdicts(res)
    out["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
    out["meta"]["loadavg_end"] = os.getloadavg()

    ran = [s for s in scenarios if s in res and all(str(c) in res[s] for c in concs)]
    if ran:
        print()
        print_table(res, ran, concs)
    if targets:
        print("\ntarget ratios:", json.dumps(targets))
    if "put_etcd" in res:
        print("\nput_etcd: fenced PUT r/s through one fencegate on three etcd members, " +
              ("owning keys (storage.etcd.ownership) against not:" if args.etcd_ownership else
               "storage.etcd.max_batch 40 (batched) against 1 (one txn per write):"))
        print_etcd_table(res["put_etcd"], concs)
    if "put_tree" in res:
        print("\nput_tree: fenced async PUT r/s with 4-segment paths, the tree of paths "
              "(nesting per_key) against nesting: off:")
        print_tree_table(res["put_tree"], concs)
    if out["ratios"]["verdicts"]:
        print(f"\nratio targets, median of the per-round ratios and its {COVERAGE:.0%}+ "
              "interval (5 rounds or more for a verdict):")
        print_verdicts(out["ratios"]["verdicts"])
    if "put_sync" in res:
        fs = {c: res["put_sync"][c]["fencegate"].get("fsyncs_per_s")
              for c in res["put_sync"] if c.isdigit()}
        print("put_sync fencegate fsyncs/s:", json.dumps(fs))
    if "memory" in out:
        print("memory (VmRSS KiB):", json.dumps(out["memory"]))
    if "keys" in out:
        print("keys:", json.dumps(out["keys"]))

    out_path = args.out or os.path.join(DEFAULT_OUT_DIR,
                                        "quick.json" if args.quick else "latest.json")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nJSON: {out_path}  ({out['meta']['elapsed_s']} s)")
    for p in problems:
        log(f"problem: {p}")
    if args.keep or problems:
        log(f"kept {work} (configs and logs)")
    else:
        work_dir.remove()
    if problems:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
