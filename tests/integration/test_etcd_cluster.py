"""The etcd engine on a three-member etcd cluster (storage.engine: etcd, all
three members in storage.etcd.endpoints): losing one member, even the
leader, under load costs at most a short window of 503s while etcd elects
a new leader, and no accepted token is lost; losing two (no quorum), fenced
writes fail closed and readiness says so; with both back, service resumes
by itself and every acknowledged token is still the fence."""

import threading
import time

import pytest

from fg_helpers import IO_TIMEOUT, admin_key_path, assert_json_error, tokens_seen
from fencegate_proc import EtcdCluster, Processes

# How long after a member is killed fenced writes may be refused with 503:
# etcd's election (one election timeout, 1 s by default, and a vote) plus
# one failover round of the client (storage.etcd.timeout per member).
ELECTION_WINDOW = 10.0
# storage.etcd's timers: a request to a member that cannot answer (no
# leader, no quorum) fails after `timeout`, which keeps the tests short; an
# answer on a busy machine still comes well within it, and within
# forward_within, so that no write is refused before a member is killed.
ETCD_TIMEOUT, FORWARD_WITHIN = "2s", "10s"


@pytest.fixture
def cluster(tmp_path):
    procs = Processes()
    c = EtcdCluster(procs, str(tmp_path)).start()
    yield c
    procs.stop_all()


def gate_on(make_gate, cluster, name="gate"):
    storage = {"engine": "etcd",
               "etcd": {"endpoints": cluster.endpoints(), "prefix": "fencegate-cluster/",
                        "timeout": ETCD_TIMEOUT, "forward_within": FORWARD_WITHIN}}
    return make_gate(name=name, storage=storage)


def wait_ready(gate, status, what):
    deadline = time.monotonic() + IO_TIMEOUT
    while gate.admin_get("/readyz").status != status:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling interval of a condition with a deadline


def test_the_leader_killed_under_load(make_gate, backend, cluster):
    gate = gate_on(make_gate, cluster)
    keys = [f"/objects/load{i}" for i in range(3)]
    answers = []  # (started, finished, key, token, status, error code)
    next_token = iter(range(1, 1_000_000))
    lock = threading.Lock()
    stop = threading.Event()
    failures = []

    def writer(key):
        try:
            while not stop.is_set():
                with lock:
                    token = next(next_token)
                started = time.monotonic()
                r = gate.put(key, token=token, body=b"t%d" % token)
                code = r.json().get("error") if r.status >= 400 else None
                answers.append((started, time.monotonic(), key, token, r.status, code))
        except BaseException as e:  # an unanswered (or garbled) write fails the test
            failures.append(e)

    def ok_since(t):
        return sum(1 for a in list(answers) if a[0] > t and 200 <= a[4] < 300)

    threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in keys]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + IO_TIMEOUT
        while ok_since(0) < 30 and not failures:
            assert time.monotonic() < deadline, f"no load before the kill: {answers[-5:]}"
            time.sleep(0.01)  # polling interval of a condition with a deadline
        leader = cluster.leader()
        assert leader is not None, "no member names a leader"
        cluster.kill(leader)
        killed = time.monotonic()
        # Service continues: writes started well after the kill succeed.
        deadline = killed + ELECTION_WINDOW + IO_TIMEOUT
        while ok_since(killed + 0.5) < 30 and not failures:
            assert time.monotonic() < deadline, f"writes stopped succeeding: {answers[-5:]}"
            time.sleep(0.01)  # polling interval of a condition with a deadline
    finally:
        stop.set()
        for t in threads:
            t.join(IO_TIMEOUT)
    assert not failures, f"a write was not answered properly: {failures[0]!r}"
    refused = [a for a in answers if not 200 <= a[4] < 300]
    for started, finished, key, token, status, code in refused:
        # store_unavailable: etcd did not answer in time; fence_expired: it
        # answered after the election, later than storage.etcd.forward_within.
        # Neither forwards anything.
        assert status == 503 and code in ("store_unavailable", "fence_expired"), refused
        assert finished >= killed and started <= killed + ELECTION_WINDOW, \
            f"refused outside the election window ({started - killed:+.2f}s): {refused}"
    log = backend.log()
    for key in keys:
        mine = [a for a in answers if a[2] == key]
        accepted = [a[3] for a in mine if 200 <= a[4] < 300]
        assert mine[-1][4] in (200, 201), f"the last write to {key} failed: {mine[-1]}"
        # The backend saw exactly the accepted writes, in order; none refused.
        assert tokens_seen(log, path=key) == [str(t) for t in accepted]
        # Every accepted token is still the fence.
        assert gate.admin_get(admin_key_path(key)).json() == {"key": key,
                                                              "token": accepted[-1]}
        assert_json_error(gate.put(key, token=accepted[-1] - 1), 409, "stale_token",
                          current=accepted[-1])
    print(f"leader etcd{leader} killed; {len(answers)} writes, {len(refused)} refused with 503")


def lose_quorum(gate, backend, cluster):
    """Kills the leader and one more member, so that the one left is a
    follower without a quorum, and checks that fenced writes fail closed."""
    leader = cluster.leader()
    assert leader is not None, "no member names a leader"
    others = [i for i in range(3) if i != leader]
    for i in (leader, others[0]):
        cluster.kill(i)
    started = time.monotonic()
    # A key written only now: no write of it can have reached etcd.
    assert_json_error(gate.put("/objects/outage", token=7), 503, "store_unavailable")
    assert time.monotonic() - started < IO_TIMEOUT
    wait_ready(gate, 503, "readyz stayed ready without a quorum")
    assert_json_error(gate.put("/objects/outage", token=8), 503, "store_unavailable")
    assert tokens_seen(backend.log(), path="/objects/outage") == []
    return [leader, others[0]]


def test_two_members_killed_writes_fail_closed(make_gate, backend, cluster):
    gate = gate_on(make_gate, cluster)
    assert gate.put("/objects/a", token=10).status == 201
    wait_ready(gate, 200, "readyz not ready with all three members")
    lose_quorum(gate, backend, cluster)
    assert tokens_seen(backend.log()) == ["10"]


def test_two_members_restored_service_resumes(make_gate, backend, cluster):
    gate = gate_on(make_gate, cluster)
    assert gate.put("/objects/b", token=20).status == 201
    assert gate.put("/objects/b", token=21).status == 200
    killed = lose_quorum(gate, backend, cluster)
    for i in killed:
        cluster.start_member(i)
    wait_ready(gate, 200, "readyz did not come back with the quorum")
    assert_json_error(gate.put("/objects/b", token=20), 409, "stale_token", current=21)
    assert gate.admin_get(admin_key_path("/objects/b")).json() == {"key": "/objects/b",
                                                                   "token": 21}
    assert gate.put("/objects/b", token=22).status == 200
    assert tokens_seen(backend.log(), path="/objects/b") == ["20", "21", "22"]


def test_without_quorum_queued_writes_share_one_decision_deadline(make_gate, backend, cluster):
    # Two writes that the store decides one after the other (a path of the
    # tree, and one of a flat route), while no member can answer: the second
    # does not wait for the first's etcd requests and then run its own; both
    # end at storage.etcd.decision_timeout, which the answers name.
    gate = make_gate(name="gate", routes=[
        {"name": "objects", "path_prefix": "/objects/"},
        {"name": "flat", "path_prefix": "/flat/", "nesting": "off"}],
        storage={"engine": "etcd",
                 "etcd": {"endpoints": cluster.endpoints(), "prefix": "fencegate-cluster/",
                          "timeout": ETCD_TIMEOUT, "decision_timeout": "1s"}})
    cluster.kill(0)
    cluster.kill(1)
    answers = {}

    def write(path):
        answers[path] = gate.put(path, token=5, body=b"x")

    writers = [threading.Thread(target=write, args=(p,)) for p in ("/objects/a", "/flat/b")]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    for path, r in answers.items():
        doc = assert_json_error(r, 503, "store_unavailable")
        assert "decision" in doc["message"], (path, doc)
    assert backend.log() == []
