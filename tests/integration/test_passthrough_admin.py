"""What is not fenced passes through untouched; shadow mode never
refuses; the admin API needs its bearer and can only raise tokens."""

import pytest

from fg_helpers import (ADMIN_TOKEN, RawConnection, admin_key_path, assert_json_error, request,
                        tokens_seen)


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


@pytest.mark.parametrize("order", ["good-first", "good-second"])
def test_admin_fence_with_two_authorization_headers_is_400(gate, backend, order):
    """Which of two credentials counts is a guess, and a proxy in front of
    the admin listener may make it the other way: refused, whichever comes
    first, and nothing is raised."""
    path = admin_key_path("/objects/two-auth") + "/fence"
    creds = [("Authorization", f"Bearer {ADMIN_TOKEN}"), ("Authorization", "Bearer wrong")]
    if order == "good-second":
        creds.reverse()
    r = request(gate.admin, "POST", path, [("Content-Type", "application/json")] + creds,
                b'{"token": 50}')
    doc = assert_json_error(r, 400, "bad_request")
    assert "Authorization" in doc["message"], doc
    assert gate.admin_get(admin_key_path("/objects/two-auth")).status == 404


@pytest.mark.parametrize("body,code,says", [
    pytest.param('{"token": "50"}', "bad_token", "must be a JSON number, not a string",
                 id="string"),
    pytest.param('{"token": 50.5}', "bad_token", "must be an integer", id="fraction"),
    pytest.param('{"token": -50}', "bad_token", "must not be negative", id="negative"),
    pytest.param('{"token": 5e-1}', "bad_token", "must be an integer", id="exponent-not-integer"),
    pytest.param('{"token": 18446744073709551616}', "bad_token", "larger than", id="too-large"),
    pytest.param('{"token": null}', "bad_token", "not null", id="null"),
    pytest.param('{"token": 1, "token": 50}', "bad_request", '"token" is given twice',
                 id="duplicate-token"),
    pytest.param('{"token": 50, "force": true}', "bad_request", 'unknown member "force"',
                 id="unknown-member"),
    pytest.param('{}', "bad_request", 'no "token"', id="no-token"),
    pytest.param('[50]', "bad_request", "not an array", id="array"),
    pytest.param('50', "bad_request", "not a number", id="bare-number"),
    pytest.param('{"token": 50', "bad_request", "not valid JSON", id="truncated"),
    pytest.param('', "bad_request", "not valid JSON", id="empty"),
])
def test_admin_fence_body_that_is_not_one_token_is_400(gate, backend, body, code, says):
    """The body is {"token": N}, N a JSON number whose value is an integer
    from 0 to 2^64-1, and nothing else; anything else is refused with what
    is wrong, and the token stays as it was (a duplicate "token" would
    otherwise raise to the last one, which nlohmann keeps silently)."""
    key = "/objects/body"
    assert 200 <= gate.put(key, 10).status < 300
    r = gate.admin_post(admin_key_path(key) + "/fence", body)
    doc = assert_json_error(r, 400, code)
    assert says in doc["message"], doc
    assert gate.admin_get(admin_key_path(key)).json()["token"] == 10
    assert 200 <= gate.put(key, 11).status < 300, "a write above the old token must still pass"


@pytest.mark.parametrize("body,token", [
    pytest.param('{"token": 1e3}', 1000, id="exponent"),
    pytest.param('{"token": 2000.0}', 2000, id="integral-fraction"),
    pytest.param('{"token": 18446744073709551615}', 18446744073709551615, id="max"),
    pytest.param('{"token": 1.8446744073709551615e19}', 18446744073709551615,
                 id="max-with-exponent"),
])
def test_admin_fence_takes_any_integer_number_exactly(gate, backend, body, token):
    key = "/objects/exact"
    r = gate.admin_post(admin_key_path(key) + "/fence", body)
    assert r.status == 200 and r.json() == {"key": key, "token": token}, r
    assert_json_error(gate.put(key, token - 1), 409, "stale_token", current=token)


def test_admin_key_over_1024_bytes_after_decoding_is_400_bad_key(gate, backend):
    """The key in an admin URL is at most 1,024 bytes once percent-decoded,
    as every key; a longer one is the client's mistake (400 bad_key), not a
    store failure (503)."""
    longest = "/" + "k" * 1023
    r = gate.admin_post(admin_key_path(longest) + "/fence", {"token": 7})
    assert r.status == 200 and r.json() == {"key": longest, "token": 7}, r
    assert gate.admin_get(admin_key_path(longest)).json()["token"] == 7

    too_long = longest + "k"
    encoded = "".join(f"%{b:02X}" for b in too_long.encode())  # 3,075 bytes in the URL
    for method, path, body in [("GET", "/v1/keys/" + encoded, None),
                               ("POST", "/v1/keys/" + encoded + "/fence", {"token": 7})]:
        if method == "GET":
            r = gate.admin_get(path)
        else:
            r = gate.admin_post(path, body)
        doc = assert_json_error(r, 400, "bad_key")
        assert "1025 bytes" in doc["message"] and "1024" in doc["message"], doc
