"""The lock service (docs/contract.md, "Lock service") through the real
binary: grants, exclusion, renew/release, expiry on the real clock, tokens
that keep increasing across kill -9, clean stop on SIGTERM, and its 4xx
errors."""

import json
import signal
import threading
import time

import pytest

from fg_helpers import RawConnection, admin_key_path, assert_json_error, parse_addr, request

LOCKS = {"listen": "127.0.0.1:0", "max_ttl": "30s"}


def call(gate, name, op, body):
    addr = parse_addr(gate.listening["locks"])
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return request(addr, "POST", f"/v1/locks/{name}/{op}",
                   [("Content-Type", "application/json")], data)


# Leases the tests hold must not run out while they work, however busy the
# machine: the longest ttl LOCKS allows.
TTL, TTL_MS = "30s", 30000


def acquire(gate, name, ttl=TTL, wait=None):
    body = {"ttl": ttl}
    if wait is not None:
        body["wait"] = wait
    return call(gate, name, "acquire", body)


def granted(resp):
    assert resp.status == 200, resp
    doc = resp.json()
    assert set(doc) == {"token", "lease", "expires_in_ms"}, doc
    return doc


@pytest.fixture
def lgate(make_gate):
    return make_gate(name="fencegate", locks=LOCKS)


def test_listening_line_names_the_lock_listener(lgate, make_gate):
    assert parse_addr(lgate.listening["locks"])[1] > 0
    plain = make_gate(name="nolocks")
    assert "locks" not in plain.listening


def test_exclusion_renew_release(lgate):
    a = granted(acquire(lgate, "orders"))
    assert a["token"] == 1 and a["expires_in_ms"] == TTL_MS
    held = assert_json_error(acquire(lgate, "orders"), 409, "lock_held", lock="orders")
    assert 0 < held["expires_in_ms"] <= TTL_MS
    # Another name has its own counter.
    assert granted(acquire(lgate, "invoices"))["token"] == 1

    r = call(lgate, "orders", "renew", {"lease": a["lease"]})
    assert r.status == 200 and r.json()["token"] == 1 and r.json()["lease"] == a["lease"], r
    r = call(lgate, "orders", "release", {"lease": a["lease"]})
    assert r.status == 200 and r.json()["released"] is True, r
    assert_json_error(call(lgate, "orders", "release", {"lease": a["lease"]}), 404, "unknown_lease")
    assert granted(acquire(lgate, "orders"))["token"] == 2


def test_wrong_lease_is_refused_and_the_holder_keeps_the_lock(lgate):
    a = granted(acquire(lgate, "orders"))
    wrong = a["lease"] + 1
    assert_json_error(call(lgate, "orders", "renew", {"lease": wrong}), 404, "unknown_lease")
    assert_json_error(call(lgate, "orders", "release", {"lease": wrong}), 404, "unknown_lease")
    assert_json_error(call(lgate, "other", "release", {"lease": a["lease"]}), 404, "unknown_lease")
    assert_json_error(acquire(lgate, "orders"), 409, "lock_held")
    assert call(lgate, "orders", "renew", {"lease": str(a["lease"])}).status == 200


def test_lease_expires_in_real_time(lgate):
    # t0 before the first acquire is sent: the lease is granted after it, so
    # it cannot run out before t0 + 0.3 s, however slow the machine.
    t0 = time.monotonic()
    a = granted(acquire(lgate, "orders", ttl="300ms"))
    # The second acquire waits for the expiry: no sleep in the test. Its wait
    # is a bound for a failed test, not a speed to meet.
    b = granted(acquire(lgate, "orders", ttl="5s", wait="15s"))
    waited = time.monotonic() - t0
    assert b["token"] == a["token"] + 1
    assert waited >= 0.3, f"granted {waited:.3f}s after the first acquire was sent, the ttl was 0.3s"
    assert_json_error(call(lgate, "orders", "renew", {"lease": a["lease"]}), 410, "lease_expired")
    assert_json_error(call(lgate, "orders", "release", {"lease": a["lease"]}), 410, "lease_expired")


def test_wait_runs_out_while_held(lgate):
    granted(acquire(lgate, "orders", ttl="20s"))
    t0 = time.monotonic()
    assert_json_error(acquire(lgate, "orders", wait="300ms"), 409, "lock_held")
    assert time.monotonic() - t0 >= 0.25


def test_waiter_is_granted_on_release(lgate):
    a = granted(acquire(lgate, "orders"))
    out = {}
    t = threading.Thread(target=lambda: out.update(r=acquire(lgate, "orders", wait="20s")))
    t.start()
    # Whether the release comes before or after the waiter is queued, the
    # waiter ends up with the next token (the queueing itself is unit-tested).
    assert call(lgate, "orders", "release", {"lease": a["lease"]}).status == 200
    t.join(20)
    assert granted(out["r"])["token"] == a["token"] + 1


def test_token_strictly_increases_across_kill_9(lgate):
    seen = []
    for round_ in range(3):
        for _ in range(3):
            g = granted(acquire(lgate, "orders"))
            seen.append(g["token"])
            assert call(lgate, "orders", "release", {"lease": g["lease"]}).status == 200
        held = granted(acquire(lgate, "orders"))  # answered = durable
        seen.append(held["token"])
        lgate.stop(sig=signal.SIGKILL)
        lgate.start()
        # Leases die with the process; the counter does not.
        assert_json_error(call(lgate, "orders", "renew", {"lease": held["lease"]}), 404,
                          "unknown_lease")
        nxt = granted(acquire(lgate, "orders"))
        assert nxt["token"] > held["token"], (round_, seen, nxt)
        seen.append(nxt["token"])
        assert call(lgate, "orders", "release", {"lease": nxt["lease"]}).status == 200
    assert seen == sorted(set(seen)), f"tokens not strictly increasing: {seen}"
    # The counter lives in the token store under a NUL-prefixed key, where
    # no proxy key can reach it; the admin API can read it.
    r = lgate.admin_get(admin_key_path("\0locks/orders"))
    assert r.status == 200 and r.json()["token"] == seen[-1], r


def test_admin_fence_on_the_counter_raises_the_next_token(lgate):
    a = granted(acquire(lgate, "orders"))
    call(lgate, "orders", "release", {"lease": a["lease"]})
    r = lgate.admin_post(admin_key_path("\0locks/orders") + "/fence", {"token": 1000})
    assert r.status == 200, r
    assert granted(acquire(lgate, "orders"))["token"] == 1001


def test_sigterm_with_a_waiting_acquire_exits_0(lgate):
    granted(acquire(lgate, "orders", ttl="30s"))
    out = {}

    def waiter():
        try:
            out["r"] = acquire(lgate, "orders", wait="30s")
        except (AssertionError, OSError) as e:  # the stop came first, or closed the connection
            out["e"] = e

    t = threading.Thread(target=waiter)
    t.start()
    rc = lgate.stop(timeout=15)
    t.join(20)
    assert rc == 0, lgate.stderr_tail()
    if "r" in out:
        assert_json_error(out["r"], 503, "shutting_down")


@pytest.mark.parametrize("body,code", [
    ({}, "bad_ttl"),
    ({"ttl": "abc"}, "bad_ttl"),
    ({"ttl": 10}, "bad_ttl"),
    ({"ttl": "0s"}, "bad_ttl"),
    ({"ttl": "-1s"}, "bad_ttl"),
    ({"ttl": "1m"}, "ttl_too_long"),
    ({"ttl": "10s", "wait": "soon"}, "bad_wait"),
    ({"ttl": "10s", "wait": "1h"}, "bad_wait"),
    ("not json", "bad_request"),
    ("[1]", "bad_request"),
])
def test_acquire_errors(lgate, body, code):
    doc = assert_json_error(call(lgate, "orders", "acquire", body), 400, code)
    if code == "ttl_too_long":
        assert doc["max_ttl_ms"] == 30000


@pytest.mark.parametrize("body", [{}, {"lease": "x"}, {"lease": -1}, {"lease": 1.5}, {"lease": None}])
def test_lease_errors(lgate, body):
    assert_json_error(call(lgate, "orders", "renew", body), 400, "bad_lease")
    assert_json_error(call(lgate, "orders", "release", body), 400, "bad_lease")


def test_routing_errors(lgate):
    addr = parse_addr(lgate.listening["locks"])
    assert_json_error(request(addr, "GET", "/v1/locks/orders/acquire"), 405, "method_not_allowed")
    assert_json_error(request(addr, "POST", "/v1/locks/orders/steal", body="{}"), 404, "not_found")
    assert_json_error(request(addr, "POST", "/v1/locks/a%00b/acquire", body='{"ttl":"1s"}'), 400,
                      "bad_lock_name")
    assert_json_error(request(addr, "POST", "/v1/locks/a/b/acquire", body='{"ttl":"1s"}'), 400,
                      "bad_lock_name")
    # Lock endpoints are not on the proxy listener: there it is proxied like any path.
    assert granted(acquire(lgate, "orders"))["token"] == 1


def test_head_gets_a_bodiless_405_and_the_connection_stays_in_step(lgate):
    addr = parse_addr(lgate.listening["locks"])
    with RawConnection(addr) as c:
        c.send("HEAD", "/v1/locks/h/acquire", close=False)
        c.send("POST", "/v1/locks/h/acquire", [("Content-Type", "application/json")],
               json.dumps({"ttl": "5s"}).encode())
        head = c.read_response("HEAD")
        assert head.status == 405, head
        assert int(head.header("Content-Length")) > 0, head
        granted(c.read_response("POST"))
