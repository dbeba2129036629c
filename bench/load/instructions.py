#!/usr/bin/env python3
"""Instructions per request, counted by callgrind: fencegate's work in a
figure that the neighbours' load on shared cores does not move.

    python3 bench/load/instructions.py --fencegate BIN [--baseline OLD_BIN] [--top 15]

Starts the load harness's nginx backend (run.py) on loopback, then
fencegate (run.py's config, durability async) under valgrind's callgrind
with instrumentation off. For every scenario it sends --warmup requests,
then, counted, --requests more, one after another on one kept-alive
connection (callgrind_control: instrumentation on, zero, dump), and divides
the instructions of every thread of the process (I/O threads, RocksDB's)
by the requests. The client is this script, outside the count.

Scenarios (run.py's, at one connection):
  get        pass-through GET, 128-byte body from the backend
  put_pass   PUT of 16 bytes to an unfenced path
  put_async  the same PUT, fenced: distinct keys (10k), increasing tokens
  put_hot    the same PUT, fenced, one key, equal tokens
and "fence" = put_async - put_pass: what fencing adds to a write. Only when
named in --scenarios (fencegate then has run.py's idempotent route /pay/):
  idem_post    POST of 16 bytes with a new Idempotency-Key, to a route with
               idempotency keys and no fencing (reserved, run, stored)
  idem_replay  POST repeating one of 100 keys stored before the warm-up
               (replayed, never at the backend)
  put_tree     put_async with 4-segment paths (/objects/t0/d<n % 16>/k<n>),
               on the tree of paths (nesting per_key)
  put_flat     the same paths under a route with nesting: off (/flat/)
and "tree" = put_tree - put_flat: what the tree of paths adds to a write.

With --baseline, the same for a second binary, and the ratios this/baseline.
--access-log stderr|file turns the access log on (stderr is redirected to a
file in the work dir; `file` sets log.access_log_file, which a binary from
before that field refuses), so its cost per request is in the count.
A count moves by well under 1% between runs of one binary (timers and the
background threads' idle work during the pauses add a little, the same in
every scenario, so that `fence` cancels it), so a change of a few hundred
instructions per request is visible where requests/s on shared cores could
not show it. It counts instructions, not time: cache misses, which decide
how long those instructions take at one connection, are not in it
(docs/performance.md).

The JSON goes to build/bench-results/instructions.json under the
repository root unless --out names another file.

--quick sends a few requests only, to prove the tool works (ctest:
bench.instructions_quick): exit 1 if a request failed, a count is missing
or fencegate did not store the fenced tokens; 77 (skip) without valgrind.
--self-test checks the parsing and arithmetic on made-up dumps.
Every process it starts is stopped by its PID.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import run  # noqa: E402  (puts tests/support on sys.path)
from fencegate_proc import ProcessError, TempDir, free_port  # noqa: E402

SCENARIOS = ("get", "put_pass", "put_async", "put_hot")
# Counted only when asked for (run.py's IDEMPOTENT).
IDEMPOTENT = ("idem_post", "idem_replay")
TREE = ("put_tree", "put_flat")
BODY = b"x" * 16


def parse_summary(text):
    """The instruction count of a callgrind dump (its `summary:` line)."""
    m = re.search(r"^summary:\s*(\d+)", text, re.M)
    if not m:
        raise ValueError("no summary line in the callgrind dump")
    return int(m.group(1))


def parse_top(annotate_out, requests, limit):
    """callgrind_annotate --inclusive=yes lines -> [(instructions per request,
    function), ...], the first `limit` after the program's total."""
    rows = []
    for line in annotate_out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*\S)\s*$", line)
        if not m or "PROGRAM TOTALS" in m.group(2):
            continue
        fn = re.sub(r"\s*\[[^\]]*\]$", "", m.group(2))  # drop the object file
        rows.append((round(int(m.group(1).replace(",", "")) / requests), fn))
        if len(rows) == limit:
            break
    return rows


class Client:
    """One kept-alive connection; every request goes in one send (head and
    body in one segment, as wrk sends them: a body read apart from its head
    takes fencegate's streaming path, thousands of instructions more), and
    every answer must be 2xx, framed by Content-Length (or a 204)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.token = time.time_ns() // 1000  # grows between runs: never stale
        self.hot_token = self.token

    def send(self, scenario, i):
        extra = ""
        body = BODY
        if scenario == "get":
            method, path, body = "GET", "/objects/static", b""
        elif scenario == "put_pass":
            method, path = "PUT", f"/plain/t0/k{i % 10000}"
        elif scenario == "put_async":
            self.token += 1
            method, path = "PUT", f"/objects/t0/k{i % 10000}"
            extra = f"Fencing-Token: {self.token}\r\n"
        elif scenario in TREE:
            self.token += 1
            root = "/objects" if scenario == "put_tree" else "/flat"
            method, path = "PUT", f"{root}/t0/d{i % 16}/k{i % 10000}"
            extra = f"Fencing-Token: {self.token}\r\n"
        elif scenario == "idem_post":  # a new key every time
            method, path = "POST", f"/pay/t0/k{i % 10000}"
            extra = f"Idempotency-Key: {self.hot_token}-{i}\r\n"
        elif scenario == "idem_replay":  # the first 100 store, the rest replay
            method, path = "POST", "/pay/replay"
            extra = f"Idempotency-Key: replay-{i % 100}\r\n"
        else:  # put_hot: one lock holder writing many times
            method, path = "PUT", "/objects/hot"
            extra = f"Fencing-Token: {self.hot_token}\r\n"
        length = f"Content-Length: {len(body)}\r\n" if method != "GET" else ""
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n{extra}{length}\r\n"
        self.sock.sendall(head.encode() + body)
        status, headers = self._read_head()
        n = "0" if status in (204, 304) else headers.get("content-length")
        if n is None:
            raise RuntimeError(f"{method} {path}: HTTP {status} without Content-Length")
        self._read_exactly(int(n))
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path}: HTTP {status}")
        return path

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("fencegate closed the connection")
        self.buf += chunk

    def _read_head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def _read_exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        self.buf = self.buf[n:]


def control(pid, *argv):
    out = subprocess.run(["callgrind_control", *argv, str(pid)], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(argv)}: {out.stderr.strip()}")


def measure(args, procs, work, name, binary, backend_port):
    """Counts every scenario on one fencegate under callgrind."""
    cg_dir = os.path.join(work, f"callgrind-{name}")
    os.makedirs(cg_dir)
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={cg_dir}/callgrind.out"]
    access_log = {"off": False, "stderr": True, "file": "file"}[args.access_log]
    fg = run.Fencegate(procs, binary, work, f"fg-{name}", args.threads, backend_port, "async",
                       access_log, wrapper=wrapper, ready_secs=300,
                       idempotent=any(sc in IDEMPOTENT for sc in args.scenarios),
                       flat_route="put_flat" in args.scenarios)
    result = {"binary": binary}
    try:
        control(fg.pid, "--instr=on")
        client = Client(fg.port)
        last_key = None
        for sc in args.scenarios:
            if sc == "idem_replay":
                for i in range(100):  # the keys the counted requests repeat
                    client.send(sc, i)
            for i in range(args.warmup):
                client.send(sc, i)
            control(fg.pid, "--zero")
            for i in range(args.warmup, args.warmup + args.requests):
                path = client.send(sc, i)
                # The next request finds fencegate idle, as it does at one
                # connection outside valgrind (its work after a response
                # takes microseconds, the client's turn tens): under
                # valgrind that work is 50x slower, and a request arriving
                # while it runs is read at once instead of after an
                # epoll_wait, which moves the count by thousands.
                time.sleep(args.gap_ms / 1000)
            if sc == "put_async":
                last_key = path
            before = set(glob.glob(os.path.join(cg_dir, "callgrind.out*")))
            control(fg.pid, f"--dump={sc}")
            new = sorted(set(glob.glob(os.path.join(cg_dir, "callgrind.out*"))) - before)
            if len(new) != 1:
                raise RuntimeError(f"expected one new callgrind dump after {sc}, found {new}")
            with open(new[0]) as f:
                total = parse_summary(f.read())
            row = {"requests": args.requests, "instructions": total,
                   "per_request": round(total / args.requests),
                   "dump": os.path.basename(new[0])}
            if args.top:
                ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", new[0]],
                                     capture_output=True, text=True, timeout=300)
                row["top"] = parse_top(ann.stdout, args.requests, args.top)
            result[sc] = row
            run.log(f"{name}: {sc} {row['per_request']} instructions per request")
        if last_key is not None:
            result["last_key_token"] = fg.stored_token(last_key)
            result["last_token_sent"] = client.token
    finally:
        fg.stop()
    if "put_async" in result and "put_pass" in result:
        result["fence"] = result["put_async"]["per_request"] - result["put_pass"]["per_request"]
    if "put_tree" in result and "put_flat" in result:
        result["tree"] = result["put_tree"]["per_request"] - result["put_flat"]["per_request"]
    return result


def report(results, names):
    cols = [n for n in names if n in results]
    print(f"{'scenario':<10}" + "".join(f"{n + ' instr/req':>22}" for n in cols)
          + (f"{'this / baseline':>18}" if len(cols) == 2 else ""))
    for sc in list(SCENARIOS) + ["fence"] + list(IDEMPOTENT) + list(TREE) + ["tree"]:
        vals = []
        for n in cols:
            v = results[n].get(sc)
            vals.append(v["per_request"] if isinstance(v, dict) else v)
        if all(v is None for v in vals):
            continue
        line = f"{sc:<10}" + "".join(f"{'-' if v is None else v:>22}" for v in vals)
        if len(vals) == 2 and vals[0] and vals[1]:
            line += f"{vals[0] / vals[1]:>18.3f}"
        print(line)
    for n in cols:
        for sc in SCENARIOS + IDEMPOTENT + TREE:
            top = results[n].get(sc, {}).get("top") if isinstance(results[n].get(sc),
                                                                    dict) else None
            if top:
                print(f"\n{n} {sc}: inclusive instructions per request")
                for ir, fn in top:
                    print(f"{ir:>10}  {fn[:150]}")


def self_test():
    bad = []

    def check(what, got, want):
        if got != want:
            bad.append(f"{what}: got {got!r}, want {want!r}")

    dump = "version: 1\npositions: line\nevents: Ir\nsummary: 4836200\n\nob=(1) x\n"
    check("summary", parse_summary(dump), 4836200)
    try:
        parse_summary("events: Ir\n")
        bad.append("a dump without summary was accepted")
    except ValueError:
        pass
    ann = """--------
Ir
--------
241,812,965 (100.0%)  PROGRAM TOTALS

--------
Ir                    file:function
--------
241,843,783 (100.0%)  ???:boost::asio::detail::scheduler::run(error_code&) [/x/fencegate]
 70,471,985 (29.14%)  ???:fencegate::storage::RocksDbStore::Advance(std::string) [/x/fencegate]
  9,980,510 ( 4.13%)  ./malloc/./malloc/malloc.c:malloc [/usr/lib/libc.so.6]
"""
    check("top", parse_top(ann, 5000, 2),
          [(48369, "???:boost::asio::detail::scheduler::run(error_code&)"),
           (14094, "???:fencegate::storage::RocksDbStore::Advance(std::string)")])
    for b in bad:
        print("FAIL", b)
    print("self-test:", "FAILED" if bad else "ok")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fencegate", default=os.environ.get("FENCEGATE_BIN"),
                    help="fencegate binary (default: build it in build/)")
    ap.add_argument("--baseline", metavar="PATH", help="a second (older) binary to compare")
    ap.add_argument("--requests", type=int, default=3000, help="counted requests per scenario")
    ap.add_argument("--warmup", type=int, default=1000, help="uncounted requests before them")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--threads", type=int, default=2, help="fencegate threads")
    ap.add_argument("--gap-ms", type=float, default=2.0,
                    help="pause after each counted request (see measure())")
    ap.add_argument("--top", type=int, default=0, metavar="K",
                    help="also list the K functions with the most inclusive instructions")
    ap.add_argument("--out", metavar="FILE",
                    help="JSON output (default: build/bench-results/instructions.json under "
                         "the repository root; never the source tree)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (dumps, logs)")
    ap.add_argument("--access-log", choices=("off", "stderr", "file"), default="off",
                    help="log.access_log off (default), on to stderr (a file in the work "
                         "dir), or on to log.access_log_file; the count includes its write")
    ap.add_argument("--quick", action="store_true",
                    help="a few requests per scenario: proves the tool works")
    ap.add_argument("--self-test", action="store_true",
                    help="check the parsing on made-up dumps and exit (ctest)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.quick:
        args.requests, args.warmup = 20, 10
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    for s in args.scenarios:
        if s not in SCENARIOS + IDEMPOTENT + TREE:
            ap.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS + IDEMPOTENT + TREE)}")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "nginx"):
        if not shutil.which(tool):
            run.log(f"{tool} not found (apt-get install valgrind nginx, or "
                    "bash docker/install-deps.sh)")
            return 77  # ctest SKIP_RETURN_CODE
    binaries = {"this": os.path.abspath(args.fencegate or run.build_binary())}
    if args.baseline:
        binaries["baseline"] = os.path.abspath(args.baseline)
    for b in binaries.values():
        if not os.access(b, os.X_OK):
            run.log(f"not an executable: {b}")
            return 2

    work_dir = TempDir("fencegate-instr-", parent=os.environ.get("BENCH_TMP"), mode=0o755)
    work = work_dir.path
    procs = run.Procs()
    out = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "requests": args.requests, "warmup": args.warmup, "threads": args.threads,
        "valgrind": subprocess.run(["valgrind", "--version"], capture_output=True,
                                   text=True).stdout.strip()},
        "results": {}, "problems": []}
    problems = out["problems"]
    try:
        backend_port = free_port()
        www = os.path.join(work, "www")
        os.makedirs(os.path.join(www, "tmp"))
        os.chmod(www, 0o755)
        backend = run.start_nginx(procs, work, "backend", 1, run.BACKEND_SERVER.format(
            port=backend_port, get_body=run.GET_BODY, www=www))
        run.wait_until("backend nginx", backend, 10,
                       lambda: run.http_ok(f"http://127.0.0.1:{backend_port}/objects/static"))
        for name, binary in binaries.items():
            try:
                r = measure(args, procs, work, name, binary, backend_port)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired,
                    ProcessError) as e:
                problems.append(f"{name}: {e}")
                continue
            out["results"][name] = r
            for sc in args.scenarios:
                if not r.get(sc, {}).get("per_request"):
                    problems.append(f"{name}: no instruction count for {sc}")
            if "put_async" in args.scenarios and r.get("last_key_token") != r.get(
                    "last_token_sent"):
                problems.append(f"{name}: fencegate stored token {r.get('last_key_token')} for "
                                f"the last fenced key, sent {r.get('last_token_sent')}")
    except KeyboardInterrupt:
        problems.append("interrupted")
    finally:
        procs.stop_all()
        if not args.keep:
            work_dir.remove()
        else:
            run.log(f"kept {work}")
    report(out["results"], list(binaries))
    path = args.out or os.path.join(run.DEFAULT_OUT_DIR, "instructions.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nJSON: {path}")
    for p in problems:
        print("PROBLEM", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
