"""Header hygiene: hop-by-hop headers stay on their hop,
X-Forwarded-For / Forwarded cannot be forged past the trusted hops, and
every request carries an X-Request-Id end to end."""

import json
import re
import time

from fg_helpers import IO_TIMEOUT, RawConnection, build_request, raw_exchange


def backend_headers(entry):
    out = {}
    for k, v in entry["headers"]:
        out.setdefault(k.lower(), []).append(v)
    return out


def test_hop_by_hop_headers_do_not_reach_the_backend(gate, backend):
    data = build_request("PUT", "/objects/h", [
        ("Fencing-Token", "1"),
        ("Connection", "close, X-Secret, X-Other"),
        ("X-Secret", "do-not-forward"),
        ("X-Other", "nor-this"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Upgrade", "websocket"),
        ("Proxy-Authorization", "Basic c2VjcmV0"),
        ("Proxy-Connection", "keep-alive"),
        ("Trailer", "X-T"),
        ("X-Kept", "yes"),
    ], b"body")
    r = raw_exchange(gate.proxy, data)
    assert 200 <= r.status < 300, r
    [entry] = backend.log()
    h = backend_headers(entry)
    for name in ("x-secret", "x-other", "keep-alive", "te", "upgrade", "proxy-authorization",
                 "proxy-connection", "trailer"):
        assert name not in h, f"{name} reached the backend: {h}"
    assert h["x-kept"] == ["yes"]
    assert h["fencing-token"] == ["1"]


def test_forged_forwarded_headers_are_replaced_without_trusted_hops(gate, backend):
    data = build_request("GET", "/plain/f", [
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Forwarded-Proto", "https"),
        ("Forwarded", "for=6.6.6.6;proto=https"),
    ])
    raw_exchange(gate.proxy, data)
    [entry] = backend.log()
    h = backend_headers(entry)
    assert h["x-forwarded-for"] == ["127.0.0.1"]
    assert h["x-forwarded-proto"] == ["http"]
    assert h["forwarded"] == ["for=127.0.0.1;proto=http"]


def test_trusted_hop_is_kept_and_peer_appended(make_gate, backend):
    gate = make_gate(forwarding={"trusted_hops": 1})
    data = build_request("GET", "/plain/f", [
        ("X-Forwarded-For", "1.1.1.1, 2.2.2.2"),
        ("X-Forwarded-Proto", "https"),
    ])
    raw_exchange(gate.proxy, data)
    [entry] = backend.log()
    h = backend_headers(entry)
    # Only the last entry was added by the one trusted proxy; 1.1.1.1 could
    # have been written by anyone.
    assert h["x-forwarded-for"] == ["2.2.2.2, 127.0.0.1"]
    assert h["x-forwarded-proto"] == ["https"]


def test_request_id_is_generated_passed_on_returned_and_logged(gate, backend):
    r = raw_exchange(gate.proxy, build_request("PUT", "/objects/rid", [("Fencing-Token", "5")],
                                               b"x"))
    rid = r.header("X-Request-Id")
    assert rid and re.fullmatch(r"[0-9a-f]{32}", rid), r
    [entry] = backend.log()
    assert backend_headers(entry)["x-request-id"] == [rid]
    # The access log line is written once the response has gone out, so it
    # may follow the response by a moment: poll the log with a deadline.
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        lines = [json.loads(l) for l in open(gate.stderr_path)
                 if l.startswith("{") and l.endswith("}\n")]
        logged = [l for l in lines if l.get("request_id") == rid]
        if logged or time.monotonic() > deadline:
            break
        time.sleep(0.01)  # polling interval of a condition with a deadline
    assert len(logged) == 1, lines
    line = logged[0]
    for field in ("method", "path", "route", "key", "token", "outcome", "status", "bytes_in",
                  "bytes_out", "upstream_ms", "total_ms", "client"):
        assert field in line, f"access log lacks {field}: {line}"
    assert line["key"] == "/objects/rid" and line["token"] == 5 and line["status"] == r.status


def test_valid_incoming_request_id_is_kept_invalid_one_replaced(gate, backend):
    r = raw_exchange(gate.proxy, build_request("GET", "/plain/r", [("X-Request-Id", "abc-123.x")]))
    assert r.header("X-Request-Id") == "abc-123.x"
    r = raw_exchange(gate.proxy, build_request("GET", "/plain/r", [("X-Request-Id", "bad id!")]))
    assert r.header("X-Request-Id") != "bad id!"
    ids = [backend_headers(e)["x-request-id"][0] for e in backend.log()]
    assert ids[0] == "abc-123.x" and ids[1] == r.header("X-Request-Id")


def test_fencegates_own_replies_carry_the_request_id(gate, backend):
    r = raw_exchange(gate.proxy, build_request("PUT", "/objects/n", [("X-Request-Id", "mine")],
                                               b"x"))
    assert r.status == 428
    assert r.header("X-Request-Id") == "mine"


def test_pipelined_requests_are_answered_in_order(gate, backend):
    host = f"{gate.proxy[0]}:{gate.proxy[1]}"
    data = (build_request("PUT", "/objects/p1", [("Fencing-Token", "2")], b"one", host=host,
                          close=False)
            + build_request("PUT", "/objects/p1", [("Fencing-Token", "1")], b"stale", host=host,
                            close=False)
            + build_request("GET", "/objects/p1", host=host, close=False)
            + build_request("PUT", "/objects/p2", [("Fencing-Token", "2")], b"two", host=host,
                            close=True))
    with RawConnection(gate.proxy) as c:
        c.send_raw(data)
        statuses = [c.read_response(m).status for m in ("PUT", "PUT", "GET", "PUT")]
    assert statuses[0] in (200, 201) and statuses[1] == 409
    assert statuses[2] == 200 and statuses[3] in (200, 201), statuses
    assert [e["path"] for e in backend.log()] == ["/objects/p1", "/objects/p1", "/objects/p2"]


def test_a_request_pipelined_while_the_last_is_at_the_backend_is_answered(make_gate, backend):
    """The client sends its next request while fencegate waits on the
    backend for the one before, on a connection kept alive through several
    requests (fencegate's wait for the next request then makes no recv of
    its own until the socket has an event, net/read_attempt.h). The event
    those bytes raise is seen while no read is pending on the client; the
    next wait must still read them. Were it forgotten, the second answer
    would come only when the idle timeout (600 s here) closed the
    connection: the client's read bound (IO_TIMEOUT) fails the test first."""
    gate = make_gate(limits={"idle_timeout": "600s"})
    with RawConnection(gate.proxy) as c:
        for i in range(3):  # into the steady rhythm of a kept-alive client
            c.send("GET", f"/plain/warm{i}", close=False)
            assert c.read_response().status == 404
        c.send("PUT", "/objects/held", [("Fencing-Token", "1"), ("X-Test-Hold-Until", "held")],
               b"slow", close=False)
        backend.wait_until(lambda snap: any(a["path"] == "/objects/held" for a in snap["active"]),
                           what="the held PUT at the backend")
        c.send("GET", "/plain/next", close=False)  # sent while the PUT is still held
        backend.release("held")
        assert c.read_response("PUT").status in (200, 201)
        assert c.read_response().status == 404
        c.send("GET", "/objects/held", close=False)  # and the rhythm goes on
        assert c.read_response().status == 200
