"""The README's token recipes against the real servers from Debian: each
lock service's token increases with every new holder, and fencegate
refuses the older holder's write. (fencegate's own lock service: see
test_locks.py and test_gc_pause_demo.py. ZooKeeper and Consul: documented,
not tested here.)"""

import importlib.util
import os
import shutil
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "gc_pause_demo", os.path.join(ROOT, "locks", "demo", "gc_pause_demo.py"))
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)


@pytest.fixture
def env(fencegate_bin, tmp_path):
    procs = demo.Processes()
    e = None
    try:
        e = demo.Environment(fencegate_bin, str(tmp_path), procs, with_etcd=True)
        e.procs = procs
        yield e
    finally:
        procs.stop_all()
        if e:
            e.close()


def put(env, path, token, data):
    status, _ = demo.http_json("PUT", env.proxy + path, data.encode(),
                               {"Fencing-Token": str(token)})
    return status


def etcd(env, path, body):
    status, out = demo.http_json("POST", env.etcd + path, body)
    assert status == 200, (path, status, out)
    import json
    return json.loads(out)


def test_etcd_lease_lock_create_revision(env):
    tokens = []
    for holder in ("a", "b"):
        lease = etcd(env, "/v3/lease/grant", {"TTL": 10})["ID"]
        key = etcd(env, "/v3/lock/lock", {"name": demo.b64("orders"), "lease": lease})["key"]
        kv = etcd(env, "/v3/kv/range", {"key": key})["kvs"][0]
        tokens.append(int(kv["create_revision"]))
        if holder == "a":
            etcd(env, "/v3/lock/unlock", {"key": key})  # or: the lease expires
    assert tokens[1] > tokens[0], tokens
    assert put(env, "/objects/etcd", tokens[1], "b") == 201
    assert put(env, "/objects/etcd", tokens[0], "a") == 409


def test_etcdctl_lock_exports_a_revision(env):
    etcdctl = shutil.which("etcdctl") or "/usr/bin/etcdctl"
    revs = []
    for _ in range(2):
        out = subprocess.run(
            [etcdctl, "--endpoints", env.etcd, "lock", "--ttl=5", "orders", "--", "sh", "-c",
             'echo "$ETCD_LOCK_KEY $ETCD_LOCK_REV"'],
            capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        assert out.returncode == 0, out.stderr
        key, rev = out.stdout.split()
        assert key.startswith("orders/"), out.stdout
        revs.append(int(rev))
    assert revs[1] > revs[0], revs
    assert put(env, "/objects/etcdctl", revs[1], "second") == 201
    assert put(env, "/objects/etcdctl", revs[0], "first") == 409


# --------------------------------------------------------------------------
# Redis: SET NX PX for the lock, INCR for the token, in one Lua script
# --------------------------------------------------------------------------

ACQUIRE = ("if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
           "return redis.call('INCR', KEYS[2]) end return false")


class Resp:
    """A minimal RESP client (no redis-py in Debian's base install)."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._read()

    def _read(self):
        line = self.f.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise AssertionError(f"redis error: {rest.decode()}")
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return [self._read() for _ in range(int(rest))]
        raise AssertionError(f"bad RESP line {line!r}")

    def close(self):
        self.f.close()
        self.sock.close()


@pytest.fixture
def redis_port(tmp_path):
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(server):
        pytest.fail("redis-server is not installed: bash docker/install-deps.sh installs it")
    port = demo.free_port()
    log = open(tmp_path / "redis.log", "wb")
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # a condition (PONG) polled with a deadline
            try:
                c = Resp(port)
                if c.cmd("PING") == "PONG":
                    c.close()
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_redis_set_nx_px_with_incr(env, redis_port):
    r = Resp(redis_port)
    a = r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-a", 300)
    assert isinstance(a, int) and a >= 1
    assert r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-b", 300) is None, \
        "held: no grant, no token"
    # a's lock expires (PX 300): wait for the key to be gone, then b gets it.
    deadline = time.monotonic() + 10
    while r.cmd("EXISTS", "lock:orders") == 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    b = r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-b", 5000)
    assert b == a + 1
    assert put(env, "/objects/redis", b, "b") == 201
    assert put(env, "/objects/redis", a, "a") == 409
    r.close()
