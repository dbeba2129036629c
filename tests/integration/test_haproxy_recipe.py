"""The front-end recipe of deploy/haproxy/fencegate.cfg, run as shipped:
HAProxy in front of two fencegate replicas that share one fence on a real
etcd member. Every write of one key goes through one replica, and the keys
spread over both; a stale token is refused through either; when a replica
is killed, HAProxy's check takes it out, its keys move to the other, and
the fence holds for them, since the tokens are in etcd. With etcd gone,
reads still go through and writes get HAProxy's 503 in fencegate's JSON."""

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from fg_helpers import ETCD_TIMERS, IO_TIMEOUT, assert_json_error, request, tokens_seen
from fencegate_proc import Processes, TempDir
from haproxy_proc import HAPROXY, HAProxy

KEYS = [f"/objects/k{i}" for i in range(33)]  # odd: a round robin would split a key

pytestmark = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (bash docker/install-deps.sh installs it)")


@pytest.fixture
def recipe(request, make_gate, backend, etcd, tmp_path):
    """(haproxy, [replica 1, replica 2]), both servers UP. HAProxy's log is
    printed when the test failed."""
    storage = {"engine": "etcd",
               "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-haproxy-test/",
                        **ETCD_TIMERS}}
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
    """The `path` of every access-log line on the replica's stderr, but for
    the writes it answered key_moving (a key it did not own yet: retried)."""
    with open(gate.stderr_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    paths = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if "path" in record and record.get("outcome") != "key_moving":
                paths.append(record["path"])
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
        # The killed replica owned its keys (storage.etcd.ownership): they
        # pass once etcd ends its lease, and until then a write of one is
        # answered 503 key_moving, which a client retries.
        deadline = time.monotonic() + IO_TIMEOUT
        r = put(front.addr, key, 29)
        while r.status == 503 and b'"key_moving"' in r.body:
            assert time.monotonic() < deadline, "the killed replica's keys never moved"
            time.sleep(0.1)  # polling interval of a condition with a deadline
            r = put(front.addr, key, 29)
        assert_json_error(r, 409, "stale_token", current=30, token=29)
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


def test_reads_go_on_without_etcd_and_writes_get_a_json_503(recipe, backend, etcd):
    front, replicas = recipe
    front.wait_states({"fencegate1": "UP", "fencegate2": "UP"}, backend="fencegate_reads")
    for key in KEYS:
        assert put(front.addr, key, 40).status == 201
    etcd.kill()  # no replica can decide a write: none is ready
    front.wait_states({"fencegate1": "DOWN", "fencegate2": "DOWN"})
    assert front.server_states("fencegate_reads") == {"fencegate1": "UP", "fencegate2": "UP"}
    for key in KEYS:  # each from the backend, through whichever replica
        r = request(front.addr, "GET", key)
        assert r.status == 200 and r.body == b"v40", (key, r)
    # A GET that a method-override header makes a write goes with the writes.
    assert_json_error(request(front.addr, "GET", KEYS[0], [("Fencing-Token", "41"),
                                                          ("X-HTTP-Method-Override", "PUT")]),
                      503, "no_replica")
    r = put(front.addr, KEYS[0], 41)
    assert_json_error(r, 503, "no_replica")
    assert r.header("Retry-After") == "1"
    assert tokens_seen(backend.log(), path=KEYS[0]) == ["40"]

