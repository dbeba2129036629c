"""Request limits (SPEC 4): oversized heads and bodies, and writes beyond
the per-key queue bound, are refused by fencegate with JSON and reach
nothing."""

from fg_helpers import RawConnection, admin_key_path, assert_json_error


def test_body_too_large_is_413(make_gate, backend):
    gate = make_gate(limits={"max_body_bytes": 1000})
    assert 200 <= gate.put("/objects/b", 1, b"x" * 1000).status < 300, "a body at the limit passes"
    r = gate.put("/objects/b", 2, b"x" * 1001)
    assert_json_error(r, 413, "body_too_large")
    assert len(backend.log()) == 1, backend.log()
    assert gate.admin_get(admin_key_path("/objects/b")).json()["token"] == 1, \
        "a refused oversized write must not advance the token"


def test_headers_too_large_is_431(make_gate, backend):
    gate = make_gate(limits={"max_header_bytes": 2000})
    r = gate.put("/objects/h", 1, headers=[("X-Big", "y" * 4000)])
    assert_json_error(r, 431, "headers_too_large")
    assert backend.log() == []


def test_writes_waiting_for_one_key_are_bounded(make_gate, backend):
    """limits.max_waiting_per_key: one write in flight, one waiting, the next
    refused at once with 503 too_many_waiting (Retry-After); the queue then
    drains in order and other keys are not affected."""
    gate = make_gate(limits={"max_waiting_per_key": 1})
    with RawConnection(gate.proxy) as ca, RawConnection(gate.proxy) as cb, \
            RawConnection(gate.proxy) as cc:
        ca.send("PUT", "/objects/q", [("Fencing-Token", "1"), ("X-Test-Hold-Ms", "1500")], b"a")
        backend.wait_until(lambda s: any(a["path"] == "/objects/q" for a in s["active"]),
                           what="the first write to reach the backend")
        # b and c now both find the key busy; whichever fencegate reads
        # second finds the one waiting place taken.
        cb.send("PUT", "/objects/q", [("Fencing-Token", "2")], b"b")
        cc.send("PUT", "/objects/q", [("Fencing-Token", "2")], b"c")
        other = gate.put("/objects/other", 1, b"o")
        assert 200 <= other.status < 300, f"another key must not wait: {other}"
        ra, rb, rc = (c.read_response("PUT") for c in (ca, cb, cc))
    assert 200 <= ra.status < 300, ra
    refused = [r for r in (rb, rc) if r.status == 503]
    assert len(refused) == 1, f"exactly one of the two must be refused: {rb} / {rc}"
    assert_json_error(refused[0], 503, "too_many_waiting", key="/objects/q")
    assert refused[0].header("Retry-After") == "1", refused[0]
    passed, passed_body = (rc, "c") if refused[0] is rb else (rb, "b")
    assert 200 <= passed.status < 300, passed
    bodies = [e["body"] for e in backend.log() if e["path"] == "/objects/q"]
    assert bodies == ["a", passed_body], f"the refused write must not reach the backend: {bodies}"
