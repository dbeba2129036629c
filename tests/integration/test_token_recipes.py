"""The token recipes of docs/locks.md against the real servers from Debian
(etcd, Redis, ZooKeeper): each lock service's token increases with every
new holder, and fencegate refuses the older holder's write. (fencegate's
own lock service: see test_locks.py and test_gc_pause_demo.py. Consul:
documented, not tested here.)"""

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from fg_helpers import (HERE, IO_TIMEOUT, ZkLock, ZooKeeperServer, assert_json_error, free_port,
                        read_first_line, tokens_seen)

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
    port = free_port()
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
    # PX 2000: long enough that b's try right after still finds it held on a
    # busy machine, short enough to wait out.
    a = r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-a", 2000)
    assert isinstance(a, int) and a >= 1
    assert r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-b", 2000) is None, \
        "held: no grant, no token"
    # a's lock expires: wait for the key to be gone, then b gets it.
    deadline = time.monotonic() + IO_TIMEOUT
    while r.cmd("EXISTS", "lock:orders") == 1:
        assert time.monotonic() < deadline, "a's lock outlived its PX"
        time.sleep(0.02)  # polling interval of a condition with a deadline
    b = r.cmd("EVAL", ACQUIRE, 2, "lock:orders", "fence:orders", "holder-b", 5000)
    assert b == a + 1
    assert put(env, "/objects/redis", b, "b") == 201
    assert put(env, "/objects/redis", a, "a") == 409
    r.close()


# --------------------------------------------------------------------------
# ZooKeeper: an EPHEMERAL_SEQUENTIAL znode per contender, the lowest holds the
# lock; token = the znode's sequence number or its creation zxid (czxid)
# --------------------------------------------------------------------------

def _kazoo():
    try:
        from kazoo.client import KazooClient
    except ImportError:
        pytest.fail("kazoo is not installed for this Python (the suite runs with /usr/bin/python3): "
                    "bash docker/install-deps.sh installs python3-kazoo")
    return KazooClient


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """One standalone ZooKeeper for the module, our child process."""
    _kazoo()
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_client(zookeeper):
    """Factory of connected kazoo clients (4 s sessions), closed at teardown."""
    KazooClient = _kazoo()
    clients = []

    def make():
        c = KazooClient(hosts=zookeeper.hosts, timeout=4.0)
        clients.append(c)
        c.start(timeout=20)
        return c

    yield make
    for c in clients:
        c.stop()
        c.close()


# Client 1 runs as its own process so that it can be frozen, as by a long GC
# pause: ZooKeeper then expires its session and deletes its znode, and the
# client, resumed, still believes it holds the lock.
HOLDER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from kazoo.client import KazooClient
from fg_helpers import ZkLock
zk = KazooClient(hosts=sys.argv[2], timeout=float(sys.argv[4]))
zk.start(timeout=20)
lock = ZkLock(zk, sys.argv[3]).acquire(timeout=20)
print(json.dumps({"path": lock.path, **{k: lock.token(k) for k in ("sequence", "czxid")}}),
      flush=True)
sys.stdin.read()  # holds the lock until stdin closes (or its session expires)
zk.stop()
zk.close()
"""


class PausableHolder:
    def __init__(self, zookeeper, name, session_timeout, log_dir):
        self.stderr_path = os.path.join(log_dir, f"zk-holder-{name}.stderr")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, HERE, zookeeper.hosts, name, str(session_timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        try:
            line, _ = read_first_line(self.proc, 60, "ZooKeeper lock holder")
        except AssertionError as e:
            self.stop()
            raise AssertionError(f"{e}\n{self.stderr_tail()}") from None
        self.grant = json.loads(line)

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stderr_tail(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.resume()
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


def accepted(gate, path, token, body):
    r = gate.put(path, token, body.encode())
    assert 200 <= r.status < 300, (token, r)


@pytest.mark.parametrize("kind", ["sequence", "czxid"])
def test_zookeeper_lock_token_after_session_expiry(kind, zookeeper, zk_client, gate, backend,
                                                  tmp_path):
    name, path = f"orders-{kind}", f"/objects/zk-{kind}"
    # Client 1: session timeout 3 s (tickTime 200 ms allows 0.4 s to 4 s):
    # its pings keep it alive until it is paused, however busy the machine.
    c1 = PausableHolder(zookeeper, name, 3.0, str(tmp_path))
    try:
        t1 = c1.grant[kind]
        accepted(gate, path, t1, "client1")

        zk = zk_client()
        c2 = ZkLock(zk, name).enqueue()
        assert not c2.holds(), "client 1 holds the lock: client 2 must wait"
        c1.pause()  # no pings from client 1: ZooKeeper expires its session
        c2.wait_held(timeout=30)  # woken by the watch on client 1's znode
        assert zk.exists(c1.grant["path"]) is None, "client 1's znode must be gone"
        t2 = c2.token(kind)
        assert t2 > t1, (kind, t1, t2)
        accepted(gate, path, t2, "client2")

        c1.resume()  # client 1 wakes up and writes with its old token
        r = gate.put(path, t1, b"client1-stale")
        assert_json_error(r, 409, "stale_token", key=path, token=t1, current=t2)
    finally:
        c1.stop()

    # A third grant, after a release this time.
    c3 = ZkLock(zk_client(), name).enqueue()
    assert not c3.holds(), "client 2 holds the lock: client 3 must wait"
    c2.release()
    c3.wait_held(timeout=30)
    t3 = c3.token(kind)
    assert t1 < t2 < t3, (kind, t1, t2, t3)
    accepted(gate, path, t3, "client3")

    log = [r for r in backend.log() if r["path"] == path]
    assert [r["body"] for r in log] == ["client1", "client2", "client3"], log
    assert tokens_seen(log) == [str(t1), str(t2), str(t3)], log


def test_zookeeper_sequence_restarts_with_a_new_parent_czxid_does_not(zookeeper, zk_client, gate,
                                                                     backend):
    """The caveat in docs/locks.md: the sequence number counts per parent
    znode, so a deleted and re-created parent (Curator's lock parents are
    container nodes, which ZooKeeper deletes once empty) starts again at 0
    and fencegate refuses the rightful new holder; the czxid still
    increases."""
    zk = zk_client()
    ZkLock(zk, "orders-reset").acquire(timeout=10).release()
    b = ZkLock(zk, "orders-reset").acquire(timeout=10)
    accepted(gate, "/objects/zk-reset", b.sequence, "b")
    b.release()
    zk.delete("/locks/orders-reset")
    c = ZkLock(zk, "orders-reset").acquire(timeout=10)
    assert c.sequence < b.sequence and c.czxid > b.czxid, (b.sequence, c.sequence, b.czxid, c.czxid)
    r = gate.put("/objects/zk-reset", c.sequence, b"c")
    assert_json_error(r, 409, "stale_token", token=c.sequence, current=b.sequence)
    assert [r["body"] for r in backend.log()] == ["b"]
