"""(f) What is not fenced passes through untouched; shadow mode never
refuses; the admin API needs its bearer and can only raise tokens."""

from fg_helpers import RawConnection, admin_key_path, assert_json_error, tokens_seen


def test_get_on_fenced_prefix_passes_without_token(gate, backend):
    r = gate.put("/objects/g", 7, b"content")
    assert 200 <= r.status < 300, r
    r = gate.put("/objects/g", None, method="GET", body=b"")
    assert r.status == 200 and r.body == b"content", r
    log = backend.log()
    assert [(e["method"], e["path"]) for e in log] == [("PUT", "/objects/g"), ("GET", "/objects/g")]


def test_unmatched_path_passes_without_token(gate, backend):
    r = gate.put("/other/thing", None, b"free")
    assert 200 <= r.status < 300, f"unmatched path: want the backend's 2xx, got {r}"
    r = gate.put("/other/thing", None, method="DELETE", body=b"")
    assert r.status == 200, r
    log = backend.log()
    assert [(e["method"], e["path"], e["body"]) for e in log] == \
        [("PUT", "/other/thing", "free"), ("DELETE", "/other/thing", "")], log


def test_backend_status_and_body_are_relayed(gate, backend):
    r = gate.put("/objects/s", 1, b"x", headers=[("X-Test-Status", "202")])
    assert r.status == 202, f"the backend's status must be relayed: {r}"
    assert b'"stored"' in r.body, r


def test_shadow_mode_forwards_stale_writes(make_gate, backend):
    gate = make_gate(name="shadow", routes=[{"name": "objects", "path_prefix": "/objects/",
                                             "mode": "shadow"}])
    r = gate.put("/objects/sh", 34, b"34")
    assert 200 <= r.status < 300, r
    r = gate.put("/objects/sh", 33, b"stale 33", headers=[("X-Test-Status", "202")])
    assert r.status == 202, f"shadow mode must forward and relay the backend's status: {r}"
    log = backend.log()
    assert [e["body"] for e in log] == ["34", "stale 33"], log
    assert tokens_seen(log) == ["34", "33"]


def test_admin_health(gate):
    assert gate.admin_get("/healthz").status == 200
    assert gate.admin_get("/readyz").status == 200


def test_admin_unknown_key_is_404(gate):
    r = gate.admin_get(admin_key_path("/objects/never"))
    assert_json_error(r, 404, "not_found")


def test_admin_fence_needs_bearer(gate, backend):
    path = admin_key_path("/objects/z") + "/fence"
    r = gate.admin_post(path, {"token": 50}, bearer=None)
    assert r.status == 401, f"no bearer: want 401, got {r}"
    r = gate.admin_post(path, {"token": 50}, bearer="not-the-token")
    assert r.status == 401, f"wrong bearer: want 401, got {r}"
    r = gate.admin_get(admin_key_path("/objects/z"))
    assert r.status == 404, f"a refused fence must store nothing: {r}"


def test_admin_fence_raises_and_never_lowers(gate, backend):
    key = "/objects/m"
    assert 200 <= gate.put(key, 10).status < 300
    r = gate.admin_post(admin_key_path(key) + "/fence", {"token": 50})
    assert r.status == 200 and r.json() == {"key": key, "token": 50}, r

    r = gate.admin_post(admin_key_path(key) + "/fence", {"token": 20})
    assert r.status == 200 and r.json() == {"key": key, "token": 50}, \
        f"lowering must leave the token at 50: {r}"
    r = gate.admin_get(admin_key_path(key))
    assert r.json() == {"key": key, "token": 50}, r

    r = gate.put(key, 49)
    assert_json_error(r, 409, "stale_token", key=key, token=49, current=50)
    r = gate.put(key, 50)
    assert 200 <= r.status < 300, r
    assert tokens_seen(backend.log()) == ["10", "50"]


def test_admin_fence_on_unseen_key(gate, backend):
    key = "/objects/new"
    r = gate.admin_post(admin_key_path(key) + "/fence", {"token": 100})
    assert r.status == 200 and r.json() == {"key": key, "token": 100}, r
    assert_json_error(gate.put(key, 99), 409, "stale_token", current=100)
    assert backend.log() == []


def test_admin_head_gets_no_body_and_the_connection_stays_in_step(gate):
    """A HEAD answer carries the GET's Content-Length but no body; were the
    body sent, the pipelined GET's answer would be read from inside it."""
    with RawConnection(gate.admin) as c:
        c.send("HEAD", "/healthz", close=False)
        c.send("GET", "/healthz")
        head = c.read_response("HEAD")
        assert head.status == 200, head
        assert int(head.header("Content-Length")) > 0, head
        get = c.read_response("GET")
        assert get.status == 200, get
        assert get.json() == {"status": "ok"}
