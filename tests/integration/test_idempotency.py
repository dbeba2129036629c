"""Idempotency keys through the real binary and the recording backend,
which counts what it ran (docs/contract.md, "Idempotency keys"): a write
with a key runs once, and every repeat within the window gets the first
response back; what differs is refused; what is still running conflicts or
waits; the record survives restarts and crashes."""

import threading
import time

import pytest

from fg_helpers import (ADMIN_TOKEN, IO_TIMEOUT, RawConnection, assert_json_error, request)

KEY = "Idempotency-Key"


def pay_route(idempotency="1h", mode="off", name="pay", prefix="/pay/"):
    return {"name": name, "path_prefix": prefix, "mode": mode, "idempotency": idempotency}


def runs(backend, path=None):
    """The requests the backend ran (POST and PUT), optionally on one path."""
    return [r for r in backend.log()
            if r["method"] in ("POST", "PUT") and (path is None or r["path"] == path)]


def end_to_end(resp):
    """The response's fields a replay must repeat: all but the ones that
    belong to each request or connection."""
    skip = {"x-request-id", "idempotent-replayed", "connection"}
    return [(k.lower(), v) for k, v in resp.headers if k.lower() not in skip]


def post(gate, path, key, body=b"amount=5", headers=()):
    h = [("X-Test-Seq", "1")] + list(headers)
    if key is not None:
        h.append((KEY, key))
    return request(gate.proxy, "POST", path, h, body)


def counters(gate):
    r = gate.admin_get("/v1/idempotency")
    assert r.status == 200, r
    return r.json()


def test_a_repeat_gets_the_first_response_byte_for_byte(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    first = post(gate, "/pay/1", "k1", headers=[("X-Test-Response-Bytes", "3000")])
    assert first.status == 200, first
    assert first.header("Idempotent-Replayed") is None
    assert first.body.startswith(b"seq=")
    again = post(gate, "/pay/1", "k1", headers=[("X-Test-Response-Bytes", "3000")])
    assert again.status == 200, again
    assert again.header("Idempotent-Replayed") == "true"
    assert again.body == first.body
    assert end_to_end(again) == end_to_end(first)
    assert again.header("X-Request-Id") != first.header("X-Request-Id")
    assert len(runs(backend)) == 1


def test_a_repeat_pipelined_behind_the_first_on_one_connection_is_replayed(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    with RawConnection(gate.proxy) as c:
        for _ in range(2):
            c.send("POST", "/pay/2", [(KEY, "k2"), ("X-Test-Seq", "1")], b"x", close=False)
        a = c.read_response("POST")
        b = c.read_response("POST")
    assert (a.status, b.status) == (200, 200), (a, b)
    assert b.header("Idempotent-Replayed") == "true"
    assert b.header("X-Backend-Seq") == a.header("X-Backend-Seq")
    assert len(runs(backend)) == 1


def test_reuse_with_another_body_or_path_is_422(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    assert post(gate, "/pay/3", "k3", body=b"amount=5").status == 200
    assert_json_error(post(gate, "/pay/3", "k3", body=b"amount=6"), 422, "idempotency_mismatch")
    assert_json_error(post(gate, "/pay/other", "k3", body=b"amount=5"), 422,
                      "idempotency_mismatch")
    r = request(gate.proxy, "PUT", "/pay/3", [(KEY, "k3")], b"amount=5")
    assert_json_error(r, 422, "idempotency_mismatch")
    assert len(runs(backend)) == 1


def test_concurrent_repeats_conflict_while_the_first_runs(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    results = {}
    first = threading.Thread(target=lambda: results.setdefault(
        "first", post(gate, "/pay/4", "k4", headers=[("X-Test-Hold-Until", "k4")])))
    first.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the first request at the backend")
    others = [None] * 6

    def repeat(i):
        others[i] = post(gate, "/pay/4", "k4", headers=[("X-Test-Hold-Until", "k4")])

    threads = [threading.Thread(target=repeat, args=(i,)) for i in range(len(others))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(IO_TIMEOUT)
    backend.release("k4")
    first.join(IO_TIMEOUT)
    for r in others:
        assert_json_error(r, 409, "idempotency_in_flight")
    assert results["first"].status == 200
    assert len(runs(backend)) == 1
    assert counters(gate)["conflicts"] == len(others)
    after = post(gate, "/pay/4", "k4", headers=[("X-Test-Hold-Until", "k4")])
    assert after.header("Idempotent-Replayed") == "true"


def test_with_wait_concurrent_repeats_get_the_first_response(make_gate, backend):
    gate = make_gate(routes=[pay_route({"window": "1h", "concurrent": "wait"})])
    n = 6
    out = [None] * (n + 1)

    def send(i):
        out[i] = post(gate, "/pay/5", "k5", headers=[("X-Test-Hold-Until", "k5")])

    first = threading.Thread(target=send, args=(0,))
    first.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the first request at the backend")
    threads = [threading.Thread(target=send, args=(i,)) for i in range(1, n + 1)]
    for t in threads:
        t.start()
    # Every repeat is waiting before the first is let go.
    deadline = time.monotonic() + IO_TIMEOUT
    while counters(gate)["waits"] < n:
        assert time.monotonic() < deadline, counters(gate)
        time.sleep(0.01)  # polling interval of a condition with a deadline
    backend.release("k5")
    for t in [first] + threads:
        t.join(IO_TIMEOUT)
    assert all(r is not None and r.status == 200 for r in out), out
    assert len(runs(backend)) == 1
    seq = out[0].header("X-Backend-Seq")
    assert all(r.header("X-Backend-Seq") == seq for r in out)
    assert [r.header("Idempotent-Replayed") for r in out[1:]] == ["true"] * n
    assert all(r.body == out[0].body for r in out)


def test_scope_separates_clients(make_gate, backend):
    route = pay_route({"window": "1h", "scope": "{header:X-Tenant}"})
    gate = make_gate(routes=[route])
    a = post(gate, "/pay/6", "same", headers=[("X-Tenant", "a")])
    b = post(gate, "/pay/6", "same", headers=[("X-Tenant", "b")])
    assert (a.status, b.status) == (200, 200)
    assert a.header("X-Backend-Seq") != b.header("X-Backend-Seq")
    again = post(gate, "/pay/6", "same", headers=[("X-Tenant", "a")])
    assert again.header("X-Backend-Seq") == a.header("X-Backend-Seq")
    assert again.header("Idempotent-Replayed") == "true"
    assert_json_error(post(gate, "/pay/6", "same"), 400, "bad_idempotency_key")
    assert len(runs(backend)) == 2


def test_keys_are_checked_and_required_when_the_route_says_so(make_gate, backend):
    gate = make_gate(routes=[pay_route({"window": "1h", "required": True})])
    assert_json_error(post(gate, "/pay/7", None), 400, "idempotency_key_required")
    assert_json_error(post(gate, "/pay/7", "k" * 256), 400, "bad_idempotency_key")
    assert_json_error(post(gate, "/pay/7", "has space"), 400, "bad_idempotency_key")
    twice = request(gate.proxy, "POST", "/pay/7", [(KEY, "a"), (KEY, "a")], b"x")
    assert_json_error(twice, 400, "bad_idempotency_key")
    assert runs(backend) == []
    assert post(gate, "/pay/7", "k" * 255).status == 200
    # Reads are not writes: no key needed, nothing kept.
    assert request(gate.proxy, "GET", "/pay/7").status == 404
    assert request(gate.proxy, "GET", "/pay/7").status == 404


def test_without_the_header_a_write_runs_every_time(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    assert post(gate, "/pay/8", None).status == 200
    assert post(gate, "/pay/8", None).status == 200
    assert len(runs(backend)) == 2


def test_after_the_window_the_key_runs_again(make_gate, backend):
    gate = make_gate(routes=[pay_route("1s")])
    first = post(gate, "/pay/9", "k9")
    assert first.status == 200
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        r = post(gate, "/pay/9", "k9")
        assert r.status == 200, r
        if r.header("Idempotent-Replayed") is None:
            break  # forgotten: it ran again
        assert time.monotonic() < deadline, "the record outlived its window"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert r.header("X-Backend-Seq") != first.header("X-Backend-Seq")
    assert len(runs(backend)) == 2
    assert counters(gate)["expirations"] == 1


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_records_survive_a_restart(make_gate, backend, tmp_path, how):
    data = tmp_path / "data"
    gate = make_gate(routes=[pay_route()], data_dir=data)
    first = post(gate, "/pay/10", "k10")
    assert first.status == 200
    if how == "sigterm":
        gate.stop()
    else:
        gate.kill()
    gate = make_gate(routes=[pay_route()], data_dir=data, name="after")
    again = post(gate, "/pay/10", "k10")
    assert again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == first.header("X-Backend-Seq")
    assert len(runs(backend)) == 1


def test_a_crash_mid_request_holds_the_key_until_in_flight_timeout(make_gate, backend, tmp_path):
    data = tmp_path / "data"
    in_flight_timeout = 5.0
    route = pay_route({"window": "1h", "in_flight_timeout": f"{in_flight_timeout:g}s"})
    gate = make_gate(routes=[route], data_dir=data)
    # Before the request is sent: the key is reserved after this, so the
    # reservation cannot have run out while less than in_flight_timeout has
    # passed since (the margin covers clocks read in milliseconds).
    sent_at = time.monotonic()
    held = threading.Thread(target=lambda: _ignore_errors(
        lambda: post(gate, "/pay/11", "k11", headers=[("X-Test-Hold-Until", "k11")])))
    held.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the request at the backend")
    gate.kill()  # after forwarding, before the response was stored
    backend.release("k11")
    held.join(IO_TIMEOUT)
    gate = make_gate(routes=[route], data_dir=data, name="after")
    # The reservation outlived the crash: a repeat does not run at once. A
    # machine slow enough to restart past in_flight_timeout cannot tell.
    r = post(gate, "/pay/11", "k11")
    if time.monotonic() - sent_at < in_flight_timeout - 0.5:
        assert_json_error(r, 409, "idempotency_in_flight")
    deadline = time.monotonic() + IO_TIMEOUT
    while r.status == 409:
        assert time.monotonic() < deadline, r
        time.sleep(0.05)  # polling interval of a condition with a deadline
        r = post(gate, "/pay/11", "k11")
    assert r.status == 200 and r.header("Idempotent-Replayed") is None, r
    # What the contract says a client may then assume: the backend saw the
    # write once before the crash and once after in_flight_timeout.
    assert len(runs(backend, "/pay/11")) == 2


def _ignore_errors(fn):
    try:
        fn()
    except (AssertionError, OSError):
        pass


def test_a_fenced_repeat_is_replayed_even_with_a_stale_token(make_gate, backend):
    route = pay_route("1h", mode="enforce", name="objects", prefix="/objects/")
    gate = make_gate(routes=[route])
    first = gate.put("/objects/a", token=5, headers=[(KEY, "w1"), ("X-Test-Seq", "1")])
    assert first.status == 201, first
    assert gate.put("/objects/a", token=7).status == 200  # another holder, later
    again = gate.put("/objects/a", token=5, headers=[(KEY, "w1"), ("X-Test-Seq", "1")])
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == first.header("X-Backend-Seq")
    # A new execution with the stale token is fenced, and its key given back.
    assert_json_error(gate.put("/objects/a", token=5, headers=[(KEY, "w2")]), 409, "stale_token")
    ok = gate.put("/objects/a", token=8, headers=[(KEY, "w2")])
    assert ok.status == 200 and ok.header("Idempotent-Replayed") is None, ok
    assert len(runs(backend)) == 3
    assert counters(gate)["releases"] == 1


def test_a_response_too_large_to_keep_is_not_run_again(make_gate, backend):
    route = pay_route({"window": "1h", "max_response_bytes": "1KiB"})
    gate = make_gate(routes=[route])
    big = [("X-Test-Response-Bytes", "200000")]
    first = post(gate, "/pay/12", "k12", headers=big)
    assert first.status == 200 and len(first.body) == 200000
    again = post(gate, "/pay/12", "k12", headers=big)
    body = assert_json_error(again, 409, "idempotency_response_not_kept")
    assert len(runs(backend)) == 1
    small = post(gate, "/pay/13", "k13", headers=[("X-Test-Response-Bytes", "1024")])
    assert post(gate, "/pay/13", "k13", headers=[("X-Test-Response-Bytes", "1024")]).body == \
        small.body


def test_a_write_the_backend_never_got_runs_on_retry(make_gate, backend, tmp_path):
    from fencegate_proc import free_port
    dead = free_port()
    route = pay_route()
    gate = make_gate(routes=[route],
                     upstream={"url": f"http://127.0.0.1:{dead}", "connect_timeout": "1s",
                               "timeout": "10s"})
    r = post(gate, "/pay/14", "k14")
    assert r.status == 502, r
    assert counters(gate)["releases"] == 1
    # Nothing reached a backend: the key is free, a retry is a first try
    # (it fails again here, but runs, rather than conflicting).
    r = post(gate, "/pay/14", "k14")
    assert r.status == 502, r
    assert counters(gate)["executions"] == 2



def set_faults(gate, fail_writes=False, fail_reads=False, delay_ms=0):
    body = {"fail_writes": fail_writes, "fail_reads": fail_reads, "delay_ms": delay_ms}
    r = gate.admin_post("/v1/test/store-faults", body, method="PUT")
    assert r.status == 200, r


def test_a_reservation_the_store_decided_too_late_runs_nothing(make_gate, backend):
    """The store answers the reservation when less than half of
    in_flight_timeout is left (a store that was slow or unreachable): a
    repeat asked meanwhile may be decided right after it and take it over
    before its first renewal, so the request does not run (503), and the key
    is given back. Once the store is quick again it runs once."""
    route = dict(pay_route(), idempotency={"window": "1h", "in_flight_timeout": "2s"})
    gate = make_gate(routes=[route],
                     upstream={"url": f"http://127.0.0.1:{backend.port}", "timeout": "1s"},
                     extra_args=["--enable-test-faults"])
    set_faults(gate, delay_ms=1200)
    r = post(gate, "/pay/19", "k19")
    assert_json_error(r, 503, "store_unavailable")
    assert "did not run" in r.json()["message"], r.json()
    assert runs(backend) == []
    set_faults(gate)
    deadline = time.monotonic() + IO_TIMEOUT
    while True:  # the given-back reservation's release may still be delayed
        again = post(gate, "/pay/19", "k19")
        if again.status != 409:
            break
        assert time.monotonic() < deadline, "the key was never given back"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert again.status == 200 and again.header("Idempotent-Replayed") is None, again
    assert len(runs(backend)) == 1


def test_a_key_the_store_cannot_reserve_runs_nothing(make_gate, backend):
    gate = make_gate(routes=[pay_route()], extra_args=["--enable-test-faults"])
    set_faults(gate, fail_writes=True)
    assert_json_error(post(gate, "/pay/15", "k15"), 503, "store_unavailable")
    assert runs(backend) == []
    set_faults(gate)
    first = post(gate, "/pay/15", "k15")
    assert first.status == 200 and first.header("Idempotent-Replayed") is None, first
    assert len(runs(backend)) == 1


def test_a_response_goes_only_once_its_record_is_stored(make_gate, backend):
    """The store fails while the request is at the backend: the response is
    not relayed (503 store_unavailable, saying the request ran), repeats get
    409 idempotency_in_flight while the record cannot be stored, and once
    the store takes writes again the record is stored in the background and
    repeats replay it. The backend ran the request once."""
    gate = make_gate(routes=[pay_route()], extra_args=["--enable-test-faults"])
    out = {}
    held = threading.Thread(target=lambda: out.setdefault(
        "r", post(gate, "/pay/16", "k16", headers=[("X-Test-Hold-Until", "k16")])))
    held.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the request at the backend")
    set_faults(gate, fail_writes=True)  # the response's record will fail
    backend.release("k16")
    held.join(IO_TIMEOUT)
    assert_json_error(out["r"], 503, "store_unavailable")
    assert "ran at the backend" in out["r"].json()["message"], out["r"].json()
    assert out["r"].header("Retry-After") == "1"
    assert_json_error(post(gate, "/pay/16", "k16"), 409, "idempotency_in_flight")
    set_faults(gate)
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        again = post(gate, "/pay/16", "k16")
        if again.status != 409:
            break
        assert time.monotonic() < deadline, "the record was never stored"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    assert again.status == 200 and again.header("Idempotent-Replayed") == "true", again
    assert len(runs(backend)) == 1
    assert counters(gate)["store_errors"] >= 4


def test_a_repeat_that_expects_100_continue_gets_it_then_the_replay(make_gate, backend):
    gate = make_gate(routes=[pay_route()])
    first = post(gate, "/pay/17", "k17", body=b"amount=5")
    assert first.status == 200
    with RawConnection(gate.proxy) as c:
        c.send("POST", "/pay/17", [(KEY, "k17"), ("X-Test-Seq", "1"), ("Expect", "100-continue"),
                                   ("Content-Length", "8")], b"")
        interim = c.read_interim()
        assert interim == 100, interim
        c.send_raw(b"amount=5")
        again = c.read_response("POST")
    assert again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == first.header("X-Backend-Seq")
    assert len(runs(backend)) == 1


def test_the_admin_record_read_fails_closed_with_the_store(make_gate, backend):
    gate = make_gate(routes=[pay_route()], extra_args=["--enable-test-faults"])
    assert post(gate, "/pay/18", "k18").status == 200
    bearer = [("Authorization", f"Bearer {ADMIN_TOKEN}")]
    assert request(gate.admin, "GET", "/v1/idempotency/pay/k18", bearer).status == 200
    set_faults(gate, fail_reads=True)
    assert_json_error(request(gate.admin, "GET", "/v1/idempotency/pay/k18", bearer), 503,
                      "store_unavailable")


SHORT_IN_FLIGHT = {"window": "1h", "in_flight_timeout": "1s"}


def test_a_request_held_at_the_backend_past_in_flight_timeout_keeps_its_key(make_gate, backend):
    """in_flight_timeout counts from the request's last sign of life, not
    from its reservation: a request still at the backend after several
    in_flight_timeouts keeps its key, and a repeat meanwhile is 409, never
    run beside it."""
    gate = make_gate(routes=[pay_route(SHORT_IN_FLIGHT)])
    out = {}
    first = threading.Thread(target=lambda: out.setdefault(
        "r", post(gate, "/pay/slow", "slow", headers=[("X-Test-Hold-Until", "slow")])))
    first.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the request at the backend")
    time.sleep(2.5)  # the condition under test: in_flight_timeout passes, twice
    assert_json_error(post(gate, "/pay/slow", "slow"), 409, "idempotency_in_flight")
    backend.release("slow")
    first.join(IO_TIMEOUT)
    assert out["r"].status == 200, out
    again = post(gate, "/pay/slow", "slow")
    assert again.header("Idempotent-Replayed") == "true", again
    assert again.header("X-Backend-Seq") == out["r"].header("X-Backend-Seq")
    assert len(runs(backend, "/pay/slow")) == 1


def test_a_slow_upload_past_in_flight_timeout_keeps_its_key(make_gate, backend):
    """A body that arrives in pieces for longer than in_flight_timeout: a
    repeat meanwhile is 409, and the request runs once."""
    gate = make_gate(routes=[pay_route(SHORT_IN_FLIGHT)])
    pieces = [b"a" * 10] * 6
    with RawConnection(gate.proxy) as c:
        c.send("POST", "/pay/upload", [(KEY, "upload"), ("X-Test-Seq", "1"),
                                       ("Content-Length", str(sum(map(len, pieces))))], b"")
        for i, piece in enumerate(pieces):
            c.send_raw(piece)
            if i < len(pieces) - 1:
                time.sleep(0.5)  # the condition under test: an upload slower than the timeout
            if i == 3:  # 1.5 s in
                assert_json_error(post(gate, "/pay/upload", "upload", body=b"a" * 60), 409,
                                  "idempotency_in_flight")
        first = c.read_response("POST")
    assert first.status == 200, first
    again = post(gate, "/pay/upload", "upload", body=b"a" * 60)
    assert again.header("Idempotent-Replayed") == "true", again
    assert len(runs(backend, "/pay/upload")) == 1


def test_a_write_waiting_in_its_key_queue_past_in_flight_timeout_keeps_its_key(
        make_gate, backend):
    """On a fenced route, a write with a key waits in its key's queue behind
    a slow one for more than twice in_flight_timeout: its reservation is
    renewed meanwhile, so a repeat is 409, and the write runs once."""
    gate = make_gate(routes=[pay_route(SHORT_IN_FLIGHT, mode="enforce")])
    out = {}
    slow = threading.Thread(target=lambda: out.setdefault("slow", request(
        gate.proxy, "PUT", "/pay/q", [("Fencing-Token", "1"), ("X-Test-Hold-Until", "q")],
        b"first")))
    slow.start()
    backend.wait_until(lambda s: len(s["active"]) == 1, what="the first write at the backend")
    queued = threading.Thread(target=lambda: out.setdefault("queued", request(
        gate.proxy, "PUT", "/pay/q", [("Fencing-Token", "2"), (KEY, "queued"),
                                      ("X-Test-Seq", "1")], b"second")))
    queued.start()
    time.sleep(2.5)  # the condition under test: in_flight_timeout passes, twice, in the queue
    assert_json_error(request(gate.proxy, "PUT", "/pay/q", [("Fencing-Token", "2"),
                                                            (KEY, "queued")], b"second"),
                      409, "idempotency_in_flight")
    backend.release("q")
    slow.join(IO_TIMEOUT)
    queued.join(IO_TIMEOUT)
    assert out["slow"].status in (200, 201, 204), out
    assert out["queued"].status in (200, 201, 204), out
    again = request(gate.proxy, "PUT", "/pay/q", [("Fencing-Token", "2"), (KEY, "queued"),
                                                  ("X-Test-Seq", "1")], b"second")
    assert again.header("Idempotent-Replayed") == "true", again
    assert [r["body"] for r in runs(backend, "/pay/q")] == ["first", "second"]
