"""Replicas sharing one fence through etcd (storage.engine: etcd): two
fencegate processes in front of one backend, on one real etcd member. A
token accepted through one is a fence for the other; while etcd is gone,
fenced writes fail closed (503) and readiness says so; when it returns,
service resumes by itself and no accepted token was lost. A replica held
up between its check and its forward past storage.etcd.forward_within does
not forward: by then its key may have moved to the other replica."""

import base64
import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

from fg_helpers import ETCD_TIMERS, IO_TIMEOUT, assert_json_error, request, tokens_seen


def replica(make_gate, etcd, name, ownership=None, endpoint=None, etcd_extra=None, **gate):
    etcd_section = {"endpoints": [endpoint or etcd.url], "prefix": "fencegate-test/",
                    **ETCD_TIMERS, **(etcd_extra or {})}
    if ownership is not None:
        etcd_section["ownership"] = ownership
    return make_gate(name=name, storage={"engine": "etcd", "etcd": etcd_section}, **gate)


# A route of the flat model: its check-and-advance is one transaction, whose
# answer HeldAnswers holds (a write over the tree of paths reads first).
FLAT = [{"name": "objects", "path_prefix": "/objects/", "nesting": "off"}]


def owner_of(etcd, key):
    """The name of the replica that owns `key` in etcd, or None."""
    name = base64.b64encode(b"fencegate-test/o/k/" + key.encode()).decode()
    req = urllib.request.Request(f"{etcd.url}/v3/kv/range", method="POST",
                                 data=json.dumps({"key": name}).encode())
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def test_two_replicas_share_one_fence(make_gate, backend, etcd):
    a = replica(make_gate, etcd, "a")
    b = replica(make_gate, etcd, "b")
    assert a.put("/objects/x", token=34, body=b"via a").status == 201
    r = b.put("/objects/x", token=33, body=b"late via b")
    assert_json_error(r, 409, "stale_token", current=34, token=33)
    assert b.put("/objects/x", token=35, body=b"via b").status == 200
    assert_json_error(a.put("/objects/x", token=34, body=b"late via a"), 409, "stale_token",
                      current=35)
    assert tokens_seen(backend.log(), path="/objects/x") == ["34", "35"]
    for gate in (a, b):
        assert gate.admin_get("/v1/keys/%2Fobjects%2Fx").json() == {"key": "/objects/x",
                                                                    "token": 35}


def test_without_etcd_writes_fail_closed_and_service_resumes(make_gate, backend, etcd):
    a = replica(make_gate, etcd, "a")
    assert a.put("/objects/y", token=10).status == 201
    assert a.admin_get("/readyz").status == 200
    etcd.kill()
    started = time.monotonic()
    assert_json_error(a.put("/objects/y", token=11), 503, "store_unavailable")
    assert time.monotonic() - started < IO_TIMEOUT
    deadline = time.monotonic() + IO_TIMEOUT
    while a.admin_get("/readyz").status != 503:
        assert time.monotonic() < deadline, "readyz stayed ready without etcd"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    # Reads pass through unfenced, as with a failed embedded store.
    assert request(a.proxy, "GET", "/objects/y").status == 200
    assert tokens_seen(backend.log(), path="/objects/y") == ["10"]
    etcd.start()
    deadline = time.monotonic() + IO_TIMEOUT
    while a.admin_get("/readyz").status != 200:
        assert time.monotonic() < deadline, "readyz did not come back with etcd"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert_json_error(a.put("/objects/y", token=9), 409, "stale_token", current=10)
    assert a.put("/objects/y", token=12).status == 200


def test_a_killed_owners_keys_move_when_its_lease_ends_not_before(make_gate, backend, etcd):
    """kill -9 of the replica that owns a key: another replica's write of
    it is answered key_moving while the owner's lease lives (the owner key
    is still in etcd), and judged once etcd has ended the lease: the fence
    holds across the replicas."""
    a = replica(make_gate, etcd, "a", ownership={"lease_ttl": "3s", "name": "replica-a"})
    assert a.put("/objects/z", token=50).status == 201
    assert owner_of(etcd, "/objects/z") == "replica-a"
    a.kill()
    again = replica(make_gate, etcd, "b", ownership={"wait": "200ms", "name": "replica-b"})
    r = again.put("/objects/z", token=49)
    body = assert_json_error(r, 503, "key_moving")
    assert "replica-a" in body["message"], body
    assert r.header("Retry-After") == "1"
    assert owner_of(etcd, "/objects/z") == "replica-a"  # not before the lease ends
    deadline = time.monotonic() + IO_TIMEOUT
    while owner_of(etcd, "/objects/z") is not None:
        assert time.monotonic() < deadline, "etcd never ended the killed replica's lease"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert_json_error(again.put("/objects/z", token=49), 409, "stale_token", current=50)
    assert again.put("/objects/z", token=51).status == 200
    assert owner_of(etcd, "/objects/z") == "replica-b"
    assert tokens_seen(backend.log(), path="/objects/z") == ["50", "51"]
    metrics = again.admin_get("/metrics").body.decode()
    assert 'fencegate_requests_total{route="objects",outcome="key_moving"} 1' in metrics
    assert "fencegate_key_waits_total 1" in metrics
    # The key (and, on this route of the tree, its collection /objects).
    assert re.search(r"^fencegate_key_takes_total [1-9]", metrics, re.M), metrics


def test_idempotency_records_are_shared_by_the_replicas(make_gate, backend, etcd):
    """A key run through A is replayed through B; a repeat while it runs
    conflicts through either; records live in etcd with a lease."""
    route = {"name": "pay", "path_prefix": "/pay/", "mode": "off",
             "idempotency": {"window": "1h", "in_flight_timeout": "30s"}}
    storage = {"engine": "etcd",
               "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-test/", **ETCD_TIMERS}}
    a = make_gate(name="a", storage=storage, routes=[route])
    b = make_gate(name="b", storage=storage, routes=[route])
    key = [("Idempotency-Key", "pay-1"), ("X-Test-Seq", "1")]
    first = request(a.proxy, "POST", "/pay/1", key, b"amount=5")
    assert first.status == 200 and first.header("Idempotent-Replayed") is None, first
    again = request(b.proxy, "POST", "/pay/1", key, b"amount=5")
    assert again.status == 200 and again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == first.header("X-Backend-Seq")
    assert again.body == first.body
    assert_json_error(request(b.proxy, "POST", "/pay/1", key, b"amount=6"), 422,
                      "idempotency_mismatch")
    assert len([r for r in backend.log() if r["method"] == "POST"]) == 1
    # The record carries a lease, so that etcd drops it once expired.
    name = base64.b64encode(b"fencegate-test/i/").decode()
    end = base64.b64encode(b"fencegate-test/i0").decode()
    req = urllib.request.Request(f"{etcd.url}/v3/kv/range", method="POST",
                                 data=json.dumps({"key": name, "range_end": end}).encode())
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    assert len(kvs) == 1 and int(kvs[0].get("lease", "0")) != 0, kvs


def test_a_request_at_the_backend_past_in_flight_timeout_keeps_its_key_at_every_replica(
        make_gate, backend, etcd):
    """A's request stays at the backend for more than twice in_flight_timeout:
    A renews its reservation in etcd, so a repeat through B meanwhile is
    409, not run; once A's response is stored B replays it."""
    route = {"name": "pay", "path_prefix": "/pay/", "mode": "off",
             "idempotency": {"window": "1h", "in_flight_timeout": "1s"}}
    a = replica(make_gate, etcd, "a", routes=[route])
    b = replica(make_gate, etcd, "b", routes=[route])
    key = [("Idempotency-Key", "slow"), ("X-Test-Seq", "1")]
    out = {}
    first = threading.Thread(target=lambda: out.setdefault("r", request(
        a.proxy, "POST", "/pay/slow", key + [("X-Test-Hold-Until", "slow")], b"amount=5")))
    first.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the request at the backend")
    time.sleep(2.5)  # the condition under test: in_flight_timeout passes, twice
    assert_json_error(request(b.proxy, "POST", "/pay/slow", key, b"amount=5"), 409,
                      "idempotency_in_flight")
    backend.release("slow")
    first.join(IO_TIMEOUT)
    assert out["r"].status == 200, out
    again = request(b.proxy, "POST", "/pay/slow", key, b"amount=5")
    assert again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == out["r"].header("X-Backend-Seq")
    assert len([r for r in backend.log() if r["method"] == "POST"]) == 1


class HeldAnswers:
    """A TCP proxy in front of etcd that passes requests on at once and,
    while hold() is in force, keeps etcd's answers until release(): a
    replica whose check-and-advance etcd has decided, and which has not
    heard the answer yet (paused, or a slow network)."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.passing = threading.Event()
        self.passing.set()
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # etcd is down: the replica sees its connection close
                client.close()
                continue
            self.socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, self.passing),
                             daemon=True).start()

    @staticmethod
    def _pump(src, dst, gate):
        try:
            while data := src.recv(65536):
                if gate is not None:
                    gate.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def hold(self):
        self.passing.clear()

    def release(self):
        self.passing.set()

    def close(self):
        self.release()
        self.listener.close()
        for s in self.socks:
            s.close()


def stored_token(etcd, key):
    """The token etcd holds for `key` under the tests' prefix, or None."""
    name = base64.b64encode(b"fencegate-test/t/" + key.encode()).decode()
    req = urllib.request.Request(f"{etcd.url}/v3/kv/range", method="POST",
                                 data=json.dumps({"key": name}).encode())
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
        kvs = json.loads(r.read()).get("kvs", [])
    return int(base64.b64decode(kvs[0]["value"])) if kvs else None


def held_up_write(make_gate, backend, etcd, forward_within):
    """Replica A's write with 5 is decided by etcd, and A hears the answer
    only after replica B forwarded 6 (its key moved, as after a failover);
    returns A's answer to the write with 5. The route keeps the flat model:
    its check-and-advance is one transaction, whose answer is the one held
    (a write over the tree of paths reads, then writes)."""
    held = HeldAnswers(("127.0.0.1", etcd.client_port))
    flat = FLAT
    try:
        # Without ownership, which would have B wait for A's key.
        a = make_gate(name="a", routes=flat, storage={
            "engine": "etcd",
            "etcd": {"endpoints": [f"http://127.0.0.1:{held.port}"], "prefix": "fencegate-test/",
                     "timeout": "10s", "forward_within": forward_within,
                     "ownership": {"enabled": False}}})
        b = make_gate(name="b", routes=flat, storage={
            "engine": "etcd",
            "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-test/", **ETCD_TIMERS,
                     "ownership": {"enabled": False}}})
        assert a.put("/objects/h", token=4).status == 201
        answer = {}
        held.hold()
        writer = threading.Thread(target=lambda: answer.update(r=a.put("/objects/h", token=5)))
        writer.start()
        deadline = time.monotonic() + IO_TIMEOUT
        while stored_token(etcd, "/objects/h") != 5:  # etcd decided A's write
            assert time.monotonic() < deadline, "etcd never stored A's token"
            time.sleep(0.01)  # polling interval of a condition with a deadline
        # A's check began before etcd stored its token.
        decided = time.monotonic()
        assert b.put("/objects/h", token=6).status == 200
        # A stays held up for longer than a 200 ms forward_within: the case
        # under test is a duration.
        time.sleep(max(0.0, decided + 0.3 - time.monotonic()))
        held.release()
        writer.join(IO_TIMEOUT)
        assert not writer.is_alive()
        return answer["r"]
    finally:
        held.close()


def test_a_write_held_up_past_forward_within_is_not_forwarded(make_gate, backend, etcd):
    r = held_up_write(make_gate, backend, etcd, "200ms")
    body = assert_json_error(r, 503, "fence_expired", key="/objects/h")
    assert "storage.etcd.forward_within (200 ms)" in body["message"], body
    assert r.header("Retry-After") == "0"
    assert tokens_seen(backend.log(), path="/objects/h") == ["4", "6"]


def test_without_forward_within_a_held_up_replica_delivers_late(make_gate, backend, etcd):
    """The window the README states, when forward_within is off: the write
    with 5, accepted before 6, reaches the backend after it."""
    r = held_up_write(make_gate, backend, etcd, "off")
    assert r.status == 200, r
    assert tokens_seen(backend.log(), path="/objects/h") == ["4", "6", "5"]


def test_with_ownership_a_held_up_owner_forwards_before_its_key_moves(make_gate, backend, etcd):
    """The failback case: replica A owns the key and still holds a write
    with 5 that etcd accepted (its answer held up on the way back, as a
    write queued behind slow ones would be); the key moves to B, whose
    write with 6 waits until A has forwarded 5 and given the key up. The
    backend sees 4, 5, 6: no stale landing."""
    held = HeldAnswers(("127.0.0.1", etcd.client_port))
    try:
        a = replica(make_gate, etcd, "a", endpoint=f"http://127.0.0.1:{held.port}",
                    ownership={"name": "replica-a"}, routes=FLAT)
        b = replica(make_gate, etcd, "b", ownership={"name": "replica-b"}, routes=FLAT)
        assert a.put("/objects/h", token=4).status == 201
        answers = {}
        held.hold()
        writer_a = threading.Thread(target=lambda: answers.update(a=a.put("/objects/h", token=5)))
        writer_a.start()
        deadline = time.monotonic() + IO_TIMEOUT
        while stored_token(etcd, "/objects/h") != 5:  # etcd decided A's write
            assert time.monotonic() < deadline, "etcd never stored A's token"
            time.sleep(0.01)  # polling interval of a condition with a deadline
        writer_b = threading.Thread(target=lambda: answers.update(b=b.put("/objects/h", token=6)))
        writer_b.start()
        deadline = time.monotonic() + IO_TIMEOUT
        while "fencegate_key_waits_total 1" not in b.admin_get("/metrics").body.decode():
            assert time.monotonic() < deadline, "B's write never waited for A's key"
            time.sleep(0.01)  # polling interval of a condition with a deadline
        assert owner_of(etcd, "/objects/h") == "replica-a"
        held.release()
        for w in (writer_a, writer_b):
            w.join(IO_TIMEOUT)
            assert not w.is_alive()
        assert answers["a"].status == 200, answers["a"]
        assert answers["b"].status == 200, answers["b"]
        assert tokens_seen(backend.log(), path="/objects/h") == ["4", "5", "6"]
        assert owner_of(etcd, "/objects/h") == "replica-b"
    finally:
        held.close()


def test_a_paused_owner_does_not_forward_after_its_lease_ends(make_gate, backend, etcd):
    """Replica A owns the key; its write with 5 is accepted by etcd, then A
    is cut off from etcd (its answers and keep-alives held) and paused
    (SIGSTOP) past its lease. B takes the key once etcd ends A's lease and
    forwards 6. A, resumed and reconnected, learns that 5 was accepted, but
    its lease has ended by its own clock: 503 fence_expired, not forwarded."""
    held = HeldAnswers(("127.0.0.1", etcd.client_port))
    try:
        a = replica(make_gate, etcd, "a", endpoint=f"http://127.0.0.1:{held.port}",
                    ownership={"name": "replica-a", "lease_ttl": "2s", "margin": "500ms"},
                    routes=FLAT)
        # B waits for etcd to end A's lease: generous, on a slow machine.
        b = replica(make_gate, etcd, "b", ownership={"name": "replica-b", "wait": "15s"},
                    etcd_extra={"decision_timeout": "15s"}, routes=FLAT)
        assert a.put("/objects/p", token=4).status == 201
        answers = {}
        held.hold()
        writer = threading.Thread(target=lambda: answers.update(a=a.put("/objects/p", token=5)))
        writer.start()
        deadline = time.monotonic() + IO_TIMEOUT
        while stored_token(etcd, "/objects/p") != 5:
            assert time.monotonic() < deadline, "etcd never stored A's token"
            time.sleep(0.01)  # polling interval of a condition with a deadline
        a.proc.send_signal(signal.SIGSTOP)
        try:
            r = b.put("/objects/p", token=6)  # waits until etcd ends A's lease
            assert r.status == 200, r
        finally:
            a.proc.send_signal(signal.SIGCONT)
        held.release()
        writer.join(IO_TIMEOUT)
        assert not writer.is_alive()
        body = assert_json_error(answers["a"], 503, "fence_expired", key="/objects/p")
        assert "storage.etcd.ownership" in body["message"], body
        assert tokens_seen(backend.log(), path="/objects/p") == ["4", "6"]
    finally:
        held.close()
