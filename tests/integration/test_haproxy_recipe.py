"""The front-end recipe of deploy/haproxy/fencegate.cfg, run as shipped:
HAProxy in front of two fencegate replicas that share one fence on a real
etcd member. Every write of one key goes through one replica, and the keys
spread over both; a stale token is refused through either; when a replica
is killed, HAProxy's check takes it out, its keys move to the other, and
the fence holds for them, since the tokens are in etcd."""

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from fg_helpers import IO_TIMEOUT, START_TIMEOUT, assert_json_error, request, tokens_seen
from fencegate_proc import Processes, ProcessError, TempDir, free_port

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK)
                                      else None)
RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "haproxy",
                      "fencegate.cfg")
KEYS = [f"/objects/k{i}" for i in range(33)]  # odd: a round robin would split a key

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (bash docker/install-deps.sh installs it)")


class HAProxy:
    """haproxy -db on the recipe, with the replicas' addresses in its
    environment, plus a test-only global section that opens a stats socket
    (to see which servers are up). Started through `procs`, so it is stopped
    by its PID. HAProxy cannot listen on port 0: a free port is picked, and
    another one if a process takes it first."""

    def __init__(self, procs, work_dir, socket_dir, replicas, attempts=5):
        self.procs = procs
        # A unix socket's path is at most 97 bytes to HAProxy: in a short
        # directory of its own, not in the test's (often long) one.
        self.socket_path = os.path.join(socket_dir, "haproxy.sock")
        extra = os.path.join(work_dir, "haproxy-stats.cfg")
        with open(extra, "w") as f:
            f.write(f"global\n    stats socket {self.socket_path} mode 600 level admin\n")
        env = dict(os.environ)
        for i, gate in enumerate(replicas, 1):
            env[f"FENCEGATE_{i}"] = "%s:%d" % gate.proxy
            env[f"FENCEGATE_{i}_ADMIN_PORT"] = str(gate.admin[1])
        for attempt in range(1, attempts + 1):
            port = free_port()
            env["FENCEGATE_FRONT"] = f"127.0.0.1:{port}"
            self.log_path = os.path.join(work_dir, f"haproxy-{attempt}.stderr")
            with open(self.log_path, "wb") as log:
                self.proc = procs.start([HAPROXY, "-db", "-f", RECIPE, "-f", extra], env=env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            if self._wait_accepting(port):
                self.addr = ("127.0.0.1", port)
                return
            procs.stop(self.proc)
            if "Address already in use" not in self.log():
                raise ProcessError(f"haproxy did not start:\n{self.log()}")
        raise ProcessError(f"haproxy: every one of {attempts} free ports was taken")

    def _wait_accepting(self, port):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:  # a condition polled with a deadline
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.02)  # polling interval of a condition with a deadline
        raise ProcessError(f"haproxy did not listen on {port} within {START_TIMEOUT}s:\n"
                           f"{self.log()}")

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def server_states(self):
        """{server name: status} of the replicas' backend, from `show stat`
        on the stats socket ("UP", "DOWN", "UP 1/2", ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(IO_TIMEOUT)
            s.connect(self.socket_path)
            s.sendall(b"show stat\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        lines = out.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "fencegate_replicas" and row.get("svname") not in (
                    "BACKEND", None):
                states[row["svname"]] = row["status"]
        return states

    def wait_states(self, want, timeout=IO_TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:  # a condition (the check's verdict) polled with a deadline
            try:
                states = self.server_states()
            except OSError as e:  # the stats socket may come up after the proxy port
                states = repr(e)
            if states == want:
                return
            assert time.monotonic() < deadline, f"servers {states}, want {want}"
            time.sleep(0.05)  # polling interval of a condition with a deadline


@pytest.fixture
def recipe(request, make_gate, backend, etcd, tmp_path):
    """(haproxy, [replica 1, replica 2]), both servers UP. HAProxy's log is
    printed when the test failed."""
    storage = {"engine": "etcd",
               "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-haproxy-test/",
                        "timeout": "500ms"}}
    replicas = [make_gate(name=f"replica{i}", storage=storage) for i in (1, 2)]
    procs = Processes()
    socket_dir = TempDir(prefix="fg-haproxy-")
    try:
        front = HAProxy(procs, str(tmp_path), socket_dir.path, replicas)
        front.wait_states({"fencegate1": "UP", "fencegate2": "UP"})
        yield front, replicas
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"--- haproxy log ---\n{front.log()}")
    finally:
        procs.stop_all()
        socket_dir.remove()


def paths_logged(gate):
    """The `path` of every access-log line on the replica's stderr."""
    with open(gate.stderr_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    paths = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                paths.append(json.loads(line)["path"])
            except (ValueError, KeyError):
                pass
    return paths


def replicas_of(replicas, want_lines):
    """{key: [how many of its requests each replica logged]}, once the
    replicas logged `want_lines` requests of KEYS in all (the line is
    written when a request ends, after its answer; polled with a
    deadline)."""
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        logged = [paths_logged(g) for g in replicas]
        total = sum(1 for paths in logged for p in paths if p in KEYS)
        if total >= want_lines:
            return {k: [paths.count(k) for paths in logged] for k in KEYS}
        assert time.monotonic() < deadline, f"{total} access-log lines, want {want_lines}"
        time.sleep(0.02)  # polling interval of a condition with a deadline


def put(addr, key, token):
    return request(addr, "PUT", key, [("Fencing-Token", str(token))], b"v%d" % token)


def test_every_write_of_a_key_goes_through_one_replica(recipe, backend):
    front, replicas = recipe
    for token in (10, 11, 12):
        for key in KEYS:
            r = put(front.addr, key, token)
            assert r.status in (200, 201), (key, r)
    counts = replicas_of(replicas, 3 * len(KEYS))
    for key, per_replica in counts.items():
        assert sorted(per_replica) == [0, 3], f"{key}: requests per replica {per_replica}"
    served = [sum(1 for c in counts.values() if c[i]) for i in range(len(replicas))]
    assert all(served), f"keys per replica {served}: one replica got every key"
    assert len(backend.log()) == 3 * len(KEYS)


def test_a_stale_token_is_refused_through_either_replica(recipe, backend):
    front, replicas = recipe
    for key in KEYS:
        assert put(front.addr, key, 20).status == 201
    assert_json_error(put(front.addr, KEYS[0], 19), 409, "stale_token", current=20, token=19)
    for gate in replicas:  # the key's own replica and the other, past HAProxy
        for key in KEYS:
            assert_json_error(put(gate.proxy, key, 19), 409, "stale_token", current=20)
    assert len(backend.log()) == len(KEYS)


def test_a_killed_replica_s_keys_move_and_the_fence_holds(recipe, backend):
    front, replicas = recipe
    for token in (30, 30):
        for key in KEYS:
            assert put(front.addr, key, token).status in (200, 201)
    counts = replicas_of(replicas, 2 * len(KEYS))
    moved = [k for k, c in counts.items() if c == [2, 0]]  # the keys of replica 1
    stayed = [k for k, c in counts.items() if c == [0, 2]]
    assert moved and stayed and len(moved) + len(stayed) == len(KEYS), counts
    replicas[0].kill()
    front.wait_states({"fencegate1": "DOWN", "fencegate2": "UP"})
    before = len(paths_logged(replicas[1]))
    for key in moved:
        assert_json_error(put(front.addr, key, 29), 409, "stale_token", current=30, token=29)
        assert put(front.addr, key, 31).status == 200
    for key in stayed:
        assert put(front.addr, key, 31).status == 200
    deadline = time.monotonic() + IO_TIMEOUT
    while len(paths_logged(replicas[1])) < before + 2 * len(moved) + len(stayed):
        assert time.monotonic() < deadline, "replica 2 did not log the moved keys' writes"
        time.sleep(0.02)  # polling interval of a condition with a deadline
    after = paths_logged(replicas[1])[before:]
    assert sorted(after) == sorted(moved * 2 + stayed)
    log = backend.log()
    for key in moved:
        assert tokens_seen(log, path=key) == ["30", "30", "31"], key
