"""The backend is gone: a fenced write gets 502, and the token stays
advanced (the lock service had granted it)."""

from fg_helpers import admin_key_path, assert_json_error


def test_upstream_down_is_502(gate, backend):
    r = gate.put("/objects/u", 1, b"while up")
    assert 200 <= r.status < 300, r   # leaves an idle pooled connection behind

    assert backend.stop() == 0

    r = gate.put("/objects/u", 2, b"while down")
    assert_json_error(r, 502, "upstream_error")
    r = gate.admin_get(admin_key_path("/objects/u"))
    assert r.status == 200 and r.json()["token"] == 2, \
        f"the token stays advanced after an upstream failure: {r}"

    r = gate.put("/objects/fresh", 1, b"while down")
    assert_json_error(r, 502, "upstream_error")


def test_readyz_reports_the_upstream(gate, backend):
    assert gate.admin_get("/readyz").status == 200
    assert backend.stop() == 0
    r = gate.admin_get("/readyz")
    assert r.status == 503, f"readyz with the upstream down: want 503, got {r}"


def test_upstream_too_slow_is_504_and_token_stays(make_gate, backend):
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}",
                               "connect_timeout": "1s", "timeout": "300ms"})
    # Held at the backend until the test lets it go: only the timeout answers.
    r = gate.put("/objects/slow", 5, b"slow", headers=[("X-Test-Hold-Until", "slow")])
    backend.release("slow")
    assert_json_error(r, 504, "upstream_timeout")
    r = gate.admin_get(admin_key_path("/objects/slow"))
    assert r.status == 200 and r.json()["token"] == 5, r
    assert_json_error(gate.put("/objects/slow", 4), 409, "stale_token", current=5)
