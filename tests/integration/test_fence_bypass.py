"""No way around the fence: every spelling of a resource, every method that
can write, the second resource of a COPY or MOVE and the headers the fence
reads are fenced under one key or refused. Each case writes with token 34
first and then sends the stale alias with token 33, and the other way round
(the alias first); the backend must never receive the stale write."""

import json
import subprocess

import pytest

from fg_helpers import (NginxDav, assert_json_error, build_request, default_config,
                        raw_exchange, write_config)

# (fresh spelling, stale spelling, canonical path): two spellings of one
# resource that a backend such as nginx resolves alike.
ALIASES = [
    pytest.param("/objects/rep:1", "/objects/rep%3A1", "/objects/rep:1", id="colon"),
    pytest.param("/objects/rep:1", "/objects/rep%3a1", "/objects/rep:1", id="colon-lower-hex"),
    pytest.param("/objects/a@b", "/objects/a%40b", "/objects/a@b", id="at"),
    pytest.param("/objects/a+b", "/objects/a%2Bb", "/objects/a+b", id="plus"),
    pytest.param("/objects/a,b=c", "/objects/a%2Cb%3Dc", "/objects/a,b=c", id="sub-delims"),
    pytest.param("/objects/caf%C3%A9", "/objects/caf%c3%a9", "/objects/caf%C3%A9", id="utf8"),
    pytest.param("/objects/%7Bk%7D", "/objects/%7bk%7d", "/objects/%7Bk%7D", id="braces"),
    pytest.param("/objects/t1", "/objects/t1/", "/objects/t1", id="trailing-slash"),
    pytest.param("/objects/t1", "/objects/x/%2E%2E/t1", "/objects/t1", id="encoded-dotdot"),
    pytest.param("/objects/a%20b", "/objects/a%20b/.", "/objects/a%20b", id="space"),
]


def _put(gate, target, token, body, method="PUT", headers=()):
    h = [("Fencing-Token", str(token)), *headers]
    return raw_exchange(gate.proxy, build_request(method, target, h, body))


def _assert_only_fresh_reached(backend, fresh_body):
    log = backend.log()
    assert [e["body"] for e in log] == [fresh_body], \
        f"only the token-34 write may reach the backend; it saw {log}"


@pytest.mark.parametrize("fresh,stale,canonical", ALIASES)
def test_stale_alias_after_the_fresh_write_is_refused(gate, backend, fresh, stale, canonical):
    r = _put(gate, fresh, 34, "fresh 34")
    assert 200 <= r.status < 300, r
    r = _put(gate, stale, 33, "stale 33")
    assert r.status == 409, f"{stale} with 33 after {fresh} with 34: {r}"
    assert_json_error(r, 409, "stale_token", token=33, current=34)
    _assert_only_fresh_reached(backend, "fresh 34")
    # What the backend received is the one canonical spelling.
    assert [e["path"] for e in backend.log()] == [canonical + ("/" if fresh.endswith("/") else "")]


@pytest.mark.parametrize("fresh,stale,canonical", ALIASES)
def test_canonical_spelling_after_a_fresh_alias_is_refused(gate, backend, fresh, stale, canonical):
    r = _put(gate, stale, 34, "fresh 34")
    assert 200 <= r.status < 300, r
    r = _put(gate, fresh, 33, "stale 33")
    assert r.status == 409, f"{fresh} with 33 after {stale} with 34: {r}"
    _assert_only_fresh_reached(backend, "fresh 34")
    path = backend.log()[0]["path"]
    assert path.rstrip("/") == canonical, f"forwarded {path}, want the spelling {canonical}"


@pytest.mark.parametrize("target", [
    pytest.param("/objects/%C0%AF", id="overlong-slash"),
    pytest.param("/objects/%C0%AE%C0%AE/k", id="overlong-dots"),
    pytest.param("/objects/%ED%A0%80", id="surrogate"),
    pytest.param("/objects/%FF", id="invalid-byte"),
])
def test_a_path_that_is_not_utf8_is_refused(gate, backend, target):
    assert_json_error(_put(gate, target, 35, "x"), 400, "bad_path")
    assert backend.log() == []


# Tomcat, Jetty and Spring strip ";..." from a segment and resolve "..;" as
# "..": each of these reaches /objects/k there.
PARAM_ALIASES = [
    pytest.param("/objects/k;x=1", id="matrix"),
    pytest.param("/objects/k%3Bx=1", id="encoded-semicolon"),
    pytest.param("/objects/zz/..;/k", id="dotdot-params"),
    pytest.param("/x/..;/objects/k", id="dotdot-params-outside-the-route"),
    pytest.param("/objects/k;jsessionid=0", id="session-id"),
]


@pytest.mark.parametrize("alias", PARAM_ALIASES)
def test_path_parameters_in_a_write_are_refused_either_order(gate, backend, alias):
    r = _put(gate, alias, 34, "alias 34")
    assert_json_error(r, 400, "bad_path")
    r = _put(gate, "/objects/k", 34, "fresh 34")
    assert 200 <= r.status < 300, r
    assert_json_error(_put(gate, alias, 33, "stale 33"), 400, "bad_path")
    _assert_only_fresh_reached(backend, "fresh 34")


def test_a_route_may_keep_path_parameters_in_its_key(make_gate, backend):
    gate = make_gate(routes=[{"name": "matrix", "path_prefix": "/m/", "path_params": "keep"}])
    r = _put(gate, "/m/k;v=1", 34, "v1")
    assert 200 <= r.status < 300, r
    r = _put(gate, "/m/k%3Bv=1", 33, "stale")
    assert_json_error(r, 409, "stale_token", key="/m/k;v=1")
    assert [e["path"] for e in backend.log()] == ["/m/k;v=1"]


# Methods that write without being PUT, POST, PATCH or DELETE.
WRITING_METHODS = [
    pytest.param("MKCOL", (), id="mkcol"),
    pytest.param("PROPPATCH", (), id="proppatch"),
    pytest.param("LOCK", (), id="lock"),
    pytest.param("UNLOCK", (), id="unlock"),
    pytest.param("FROBNICATE", (), id="unknown-method"),
    pytest.param("put", (), id="lower-case-put"),
    pytest.param("Delete", (), id="mixed-case-delete"),
    pytest.param("POST", (("X-HTTP-Method-Override", "PUT"),), id="override"),
    pytest.param("GET", (("X-HTTP-Method", "DELETE"),), id="get-overridden"),
    pytest.param("GET", (("X-Method-Override", "PUT"),), id="x-method-override"),
]


@pytest.mark.parametrize("method,headers", WRITING_METHODS)
def test_every_method_that_can_write_is_fenced(gate, backend, method, headers):
    r = _put(gate, "/objects/m", 34, "fresh 34")
    assert 200 <= r.status < 300, r
    r = _put(gate, "/objects/m", 33, "stale 33", method=method, headers=headers)
    assert_json_error(r, 409, "stale_token", key="/objects/m", current=34)
    # Without a token it is a 428.
    r = raw_exchange(gate.proxy, build_request(method, "/objects/m", list(headers), "x"))
    assert_json_error(r, 428, "token_required")
    _assert_only_fresh_reached(backend, "fresh 34")


@pytest.mark.parametrize("method,headers", WRITING_METHODS)
def test_a_fresh_write_in_another_method_fences_a_later_put(gate, backend, method, headers):
    r = _put(gate, "/objects/m", 34, "fresh 34", method=method, headers=headers)
    assert len(backend.log()) == 1, f"the token-34 {method} must be forwarded: {r}"
    assert_json_error(_put(gate, "/objects/m", 33, "stale 33"), 409, "stale_token")
    _assert_only_fresh_reached(backend, "fresh 34")


def test_reads_are_not_fenced(gate, backend):
    for method in ("GET", "OPTIONS", "TRACE"):
        r = raw_exchange(gate.proxy, build_request(method, "/objects/m"))
        assert r.status in (200, 404), (method, r)
    assert [e["method"] for e in backend.log()] == ["GET", "OPTIONS", "TRACE"]


@pytest.mark.parametrize("method", ["COPY", "MOVE"])
def test_copy_or_move_onto_a_fenced_resource_needs_its_token(gate, backend, method):
    r = _put(gate, "/objects/dst", 34, "fresh 34")
    assert 200 <= r.status < 300, r
    # The stale holder copies another resource over the fenced one.
    r = _put(gate, "/objects/src", 33, "", method=method,
             headers=[("Destination", "http://127.0.0.1/objects/ds%74")])
    assert_json_error(r, 409, "stale_token", key="/objects/dst", current=34)
    # Nothing was advanced: the source still accepts 33.
    assert 200 <= _put(gate, "/objects/src", 33, "src 33").status < 300
    assert [e["method"] for e in backend.log()] == ["PUT", "PUT"]


@pytest.mark.parametrize("method", ["COPY", "MOVE"])
def test_a_fresh_copy_fences_its_destination(gate, backend, method):
    r = _put(gate, "/objects/src", 34, "", method=method,
             headers=[("Destination", "/objects//dst/")])
    assert 200 <= r.status < 300, r
    entry = backend.log()[0]
    dest = [v for k, v in entry["headers"] if k.lower() == "destination"]
    assert dest == ["/objects/dst/"], f"the Destination is forwarded canonical; got {dest}"
    assert_json_error(_put(gate, "/objects/dst", 33, "stale"), 409, "stale_token", current=34)
    assert_json_error(_put(gate, "/objects/src", 33, "stale"), 409, "stale_token", current=34)
    assert len(backend.log()) == 1


def test_a_copy_out_of_the_fenced_routes_fences_only_its_source(gate, backend):
    r = _put(gate, "/objects/src", 34, "", method="COPY", headers=[("Destination", "/public/x")])
    assert 200 <= r.status < 300, r
    assert 200 <= _put(gate, "/public/x", 1, "anything").status < 300


def test_the_token_header_may_not_be_made_hop_by_hop(gate, backend):
    r = _put(gate, "/objects/h", 34, "x", headers=[("Connection", "Fencing-Token")])
    assert_json_error(r, 400, "bad_token")
    assert backend.log() == []


def test_a_key_header_must_be_one_value(make_gate, backend):
    gate = make_gate(routes=[{"name": "tenants", "path_prefix": "/t/",
                              "key": "{header:X-Tenant}:{path}"}])
    r = _put(gate, "/t/a", 34, "fresh", headers=[("X-Tenant", "acme")])
    assert 200 <= r.status < 300, r
    for headers in ([("X-Tenant", "acme, other")],
                    [("X-Tenant", "other"), ("X-Tenant", "acme")],
                    [("X-Tenant", "acme"), ("Connection", "X-Tenant")]):
        assert_json_error(_put(gate, "/t/a", 33, "stale", headers=headers), 400, "bad_key")
    assert len(backend.log()) == 1


def test_the_readme_demo_backend_keeps_the_fresh_body(make_gate, tmp_path):
    """The README's demo: nginx WebDAV behind fencegate. The stale holder's
    write under another spelling of the path must not replace the file."""
    nginx = NginxDav(str(tmp_path))
    try:
        cfg = dict(upstream={"url": f"http://127.0.0.1:{nginx.port}", "connect_timeout": "1s",
                             "timeout": "10s"})
        gate = make_gate(**cfg)
        r = _put(gate, "/objects/rep:1", 34, "fresh body from 34")
        assert r.status in (201, 204), r
        for stale in ("/objects/rep%3A1", "/objects/rep%3a1/", "/objects/./rep%3A1",
                      "/objects/rep:1;x=1"):
            r = _put(gate, stale, 33, "stale body from 33")
            assert r.status in (400, 409), f"{stale}: {r}"
        # The stale holder moves an unfenced file over the fenced one.
        r = _put(gate, "/public/other", 1, "moved over by 33")
        assert r.status in (201, 204), r
        r = _put(gate, "/public/other", 33, "", method="MOVE",
                 headers=[("Destination", f"http://127.0.0.1:{nginx.port}/objects/rep%3A1")])
        assert r.status == 409, r
        assert nginx.file("objects/rep:1") == b"fresh body from 34"
    finally:
        nginx.stop()


def test_route_prints_the_keys_of_a_request(fencegate_bin, backend, tmp_path):
    cfg = default_config(backend.port, tmp_path / "data")
    path = write_config(tmp_path / "route.yaml", cfg)

    def route(*args):
        out = subprocess.run([fencegate_bin, "route", "--config", path, "--json", *args],
                             capture_output=True, text=True, check=True, timeout=30)
        return json.loads(out.stdout)

    e = route("PUT", "/objects/rep%3a1/")
    assert (e["verdict"], e["route"], e["mode"], e["keys"]) == \
        ("fenced", "objects", "enforce", ["/objects/rep:1"])
    assert e["canonical_path"] == "/objects/rep:1" and e["forward"] == "/objects/rep:1/"
    e = route("MOVE", "/objects/a", "-H", "Destination: /objects/b", "-H", "Fencing-Token: 7")
    assert (e["verdict"], e["keys"], e["token"]) == ("fenced", ["/objects/a", "/objects/b"], 7)
    e = route("PUT", "/x/..;/objects/k")
    assert (e["verdict"], e["status"], e["error"]) == ("refused", 400, "bad_path")
    e = route("GET", "/objects/a")
    assert e["verdict"] == "pass_through"
    # Text for people.
    out = subprocess.run([fencegate_bin, "route", "--config", path, "PUT", "/objects/%61"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    assert "keys:           /objects/a" in out, out
    # A malformed -H is a usage error.
    bad = subprocess.run([fencegate_bin, "route", "--config", path, "PUT", "/a", "-H", "nocolon"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "Name: value" in bad.stderr
