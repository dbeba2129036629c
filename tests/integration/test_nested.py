"""Nested resources (docs/contract.md, "Nested resources"): a write that
may change a whole subtree of the backend (WebDAV DELETE, COPY and MOVE of a
collection, a PUT over one) is fenced over everything below it. Through the
real binary, in front of nginx WebDAV: every way the flat fence let a stale
holder (or a write with no token) change a fenced member is refused, the
member keeps its last fenced body on the backend's disk, and the same
collection operations with a token that orders them go through."""

import os

import pytest

from fg_helpers import (ApacheDav, NginxDav, admin_key_path, assert_json_error, build_request,
                        raw_exchange)

ROUTES = [
    {"name": "objects", "path_prefix": "/objects/"},
    {"name": "tenants", "path_regex": "^/tenants/([^/]+)/", "key": "tenant/{1}"},
]


@pytest.fixture
def nginx(tmp_path):
    n = NginxDav(str(tmp_path))
    yield n
    n.stop()


@pytest.fixture
def dav(make_gate, nginx):
    def make(routes=ROUTES):
        return make_gate(upstream={"url": f"http://127.0.0.1:{nginx.port}",
                                   "connect_timeout": "1s", "timeout": "10s"},
                         routes=routes)
    return make


def send(gate, method, target, token=None, body=b"", headers=()):
    h = list(headers)
    if token is not None:
        h.append(("Fencing-Token", str(token)))
    return raw_exchange(gate.proxy, build_request(method, target, h, body))


def dest(nginx, path):
    return [("Destination", f"http://127.0.0.1:{nginx.port}{path}"), ("Overwrite", "T")]


def ok(r):
    assert 200 <= r.status < 300, r
    return r


@pytest.fixture
def fenced(dav, nginx):
    """/objects/d/x written with 34 (33 refused), /tenants/acme/inv/7 with
    35, and unfenced content under /staging to copy and move from."""
    gate = dav()
    ok(send(gate, "PUT", "/objects/d/x", 34, b"fenced 34"))
    assert_json_error(send(gate, "PUT", "/objects/d/x", 33, b"stale 33"), 409, "stale_token")
    ok(send(gate, "PUT", "/tenants/acme/inv/7", 35, b"invoice 35"))
    ok(send(gate, "PUT", "/staging/d/x", body=b"unfenced"))
    ok(send(gate, "PUT", "/staging/acme/inv/7", body=b"unfenced"))
    ok(send(gate, "PUT", "/staging/f", body=b"a file"))
    return gate


def assert_fenced_files_kept(nginx):
    assert nginx.file("objects/d/x") == b"fenced 34"
    assert nginx.file("tenants/acme/inv/7") == b"invoice 35"


def test_a_routes_root_is_fenced(fenced, nginx):
    # DELETE /objects/ would delete every fenced object; /tenants/acme is the
    # tenants route's root although "^/tenants/([^/]+)/" needs a slash.
    assert_json_error(send(fenced, "DELETE", "/objects/"), 428, "token_required", key="/objects")
    assert_json_error(send(fenced, "DELETE", "/tenants/acme/"), 428, "token_required",
                      key="tenant/acme")
    assert_json_error(send(fenced, "DELETE", "/objects/", 99), 409, "nested_keys",
                      path="/objects/d/x", key="/objects/d/x")
    assert_fenced_files_kept(nginx)


def test_a_subtree_write_over_other_keys_is_refused(fenced, nginx):
    r = send(fenced, "DELETE", "/objects/d/", 33)
    assert_json_error(r, 409, "nested_keys", path="/objects/d/x", key="/objects/d/x")
    assert "per_key" in r.json()["message"]
    assert_json_error(send(fenced, "MOVE", "/objects/d/", 33, headers=dest(nginx, "/trash/d/")),
                      409, "nested_keys")
    # COPY over the collection, with the token the fence refused for x.
    assert_json_error(send(fenced, "COPY", "/staging/d/", 33,
                           headers=dest(nginx, "/objects/d/")), 409, "nested_keys")
    # A PUT over the collection replaces it too (apache: a collection by a file).
    assert_json_error(send(fenced, "PUT", "/objects/d", 99, b"a file"), 409, "nested_keys")
    assert_fenced_files_kept(nginx)


def test_a_subtree_write_outside_every_route_is_refused(fenced, nginx):
    for target in ("/tenants/", "/"):
        r = send(fenced, "DELETE", target)
        assert_json_error(r, 409, "nested_keys")
        assert "no route covers" in r.json()["message"]
    assert_json_error(send(fenced, "MOVE", "/staging/f", headers=dest(nginx, "/tenants/")),
                      409, "nested_keys")
    assert_fenced_files_kept(nginx)
    # Outside every route and over nothing fenced: forwarded as before.
    ok(send(fenced, "MOVE", "/staging/f", headers=dest(nginx, "/elsewhere/f")))
    assert nginx.file("elsewhere/f") == b"a file"


def test_a_templated_key_orders_its_own_subtree(fenced, nginx):
    # MOVE over the tenant with no token: its root is fenced.
    assert_json_error(send(fenced, "MOVE", "/staging/acme/", headers=dest(nginx, "/tenants/acme/")),
                      428, "token_required")
    # Every path below is fenced under the tenant's own key: its token decides.
    assert_json_error(send(fenced, "MOVE", "/staging/acme/", 34,
                           headers=dest(nginx, "/tenants/acme/")), 409, "stale_token",
                      key="tenant/acme", current=35)
    assert_fenced_files_kept(nginx)
    ok(send(fenced, "DELETE", "/tenants/acme/", 35))
    assert nginx.file("tenants/acme/inv/7") is None


def test_collection_writes_that_a_token_orders_go_through(fenced, nginx):
    # Nothing fenced below /objects/e: a copy and a move of a collection.
    ok(send(fenced, "COPY", "/staging/d/", 40, headers=dest(nginx, "/objects/e/")))
    assert nginx.file("objects/e/x") == b"unfenced"
    ok(send(fenced, "MOVE", "/objects/e/", 41, headers=dest(nginx, "/objects/g/")))
    assert nginx.file("objects/g/x") == b"unfenced" and nginx.file("objects/e/x") is None
    # Below a collection, its members still run as before.
    ok(send(fenced, "PUT", "/objects/d/y", 1, b"y"))
    assert nginx.file("objects/d/y") == b"y"


def test_shared_tokens_compare_along_the_tree(dav, nginx):
    gate = dav([{"name": "objects", "path_prefix": "/objects/", "nesting": "shared"}])
    ok(send(gate, "PUT", "/objects/d/x", 34, b"fenced 34"))
    r = send(gate, "DELETE", "/objects/d/", 33)
    assert_json_error(r, 409, "stale_token", path="/objects/d/x", token=33, current=34)
    assert r.header("Fencing-Token-Current") == "34"
    assert nginx.file("objects/d/x") == b"fenced 34"
    ok(send(gate, "DELETE", "/objects/d/", 35))
    assert nginx.file("objects/d/x") is None
    # Below that DELETE, a write older than it is refused, whatever its key.
    assert_json_error(send(gate, "PUT", "/objects/d/y", 34, b"older"), 409, "stale_token",
                      path="/objects/d", current=35)
    assert nginx.file("objects/d/y") is None
    ok(send(gate, "PUT", "/objects/d/y", 36, b"newer"))


def test_an_admin_fence_on_a_paths_key_fences_the_path_in_the_tree(dav, nginx):
    gate = dav([{"name": "objects", "path_prefix": "/objects/", "nesting": "shared"}])
    ok(send(gate, "PUT", "/objects/d/x", 34, b"fenced 34"))
    r = gate.admin_post(admin_key_path("/objects/d/x") + "/fence", {"token": 100})
    assert r.status == 200 and r.json()["token"] == 100, r
    # A write over x older than the fence is refused, whichever key it has.
    assert_json_error(send(gate, "DELETE", "/objects/d/", 50), 409, "stale_token",
                      path="/objects/d/x", current=100)
    assert nginx.file("objects/d/x") == b"fenced 34"
    node = gate.admin_get("/v1/paths/" + "objects/d/x")
    assert node.status == 200 and node.json()["token"] == 100, node
    ok(send(gate, "DELETE", "/objects/d/", 101))


def test_an_admin_fence_on_a_path_never_written_is_in_the_tree(dav, nginx):
    gate = dav()
    # A file the backend holds that no write through fencegate made.
    os.makedirs(os.path.join(nginx.root, "objects", "d"))
    with open(os.path.join(nginx.root, "objects", "d", "y"), "wb") as f:
        f.write(b"unfenced")
    r = gate.admin_post(admin_key_path("/objects/d/y") + "/fence", {"token": 7})
    assert r.status == 200, r
    # per_key: the collection's DELETE would delete a path fenced under
    # another key.
    assert_json_error(send(gate, "DELETE", "/objects/d/", 2), 409, "nested_keys",
                      path="/objects/d/y", key="/objects/d/y")
    assert nginx.file("objects/d/y") == b"unfenced"


def test_nesting_off_keeps_the_flat_fence(dav, nginx):
    gate = dav([{"name": "objects", "path_prefix": "/objects/", "nesting": "off"}])
    ok(send(gate, "PUT", "/objects/d/x", 34, b"fenced 34"))
    # The flat model: the collection's own key never saw a token.
    ok(send(gate, "DELETE", "/objects/d/", 33))
    assert nginx.file("objects/d/x") is None


def test_shadow_mode_counts_what_the_tree_would_refuse(dav, nginx):
    gate = dav([{"name": "objects", "path_prefix": "/objects/", "mode": "shadow"}])
    ok(send(gate, "PUT", "/objects/d/x", 34, b"fenced 34"))
    ok(send(gate, "DELETE", "/objects/d/", 33))
    assert gate.metric('fencegate_shadow_violations_total{route="objects"}') == 1


def test_refusals_are_counted_per_route(fenced):
    send(fenced, "DELETE", "/objects/d/", 33)
    send(fenced, "DELETE", "/objects/d/", 34)
    assert fenced.metric(
        'fencegate_requests_total{route="objects",outcome="nested_keys"}') == 2


def test_apache_a_file_copied_over_a_collection_is_refused(make_gate, tmp_path):
    """mod_dav lets a COPY of a file (or a PUT) replace a whole collection:
    through fencegate, over fenced members, neither reaches it."""
    apache = ApacheDav(str(tmp_path))
    try:
        gate = make_gate(upstream={"url": f"http://127.0.0.1:{apache.port}",
                                   "connect_timeout": "1s", "timeout": "10s"}, routes=ROUTES)
        ok(send(gate, "MKCOL", "/objects/", 1))
        ok(send(gate, "PUT", "/objects/x", 34, b"fenced 34"))
        ok(send(gate, "PUT", "/staging", body=b"a file"))  # outside every route
        over = [("Destination", f"http://127.0.0.1:{apache.port}/objects"), ("Overwrite", "T")]
        assert_json_error(send(gate, "COPY", "/staging", headers=over), 428, "token_required")
        assert_json_error(send(gate, "COPY", "/staging", 99, headers=over), 409, "nested_keys",
                          path="/objects/x")
        assert_json_error(send(gate, "DELETE", "/objects", 99), 409, "nested_keys")
        assert apache.file("objects/x") == b"fenced 34"
        # With nothing fenced below it, the same COPY goes through.
        ok(send(gate, "MKCOL", "/other/", body=b""))
        ok(send(gate, "COPY", "/staging", headers=[
            ("Destination", f"http://127.0.0.1:{apache.port}/other"), ("Overwrite", "T")]))
        assert apache.file("other") == b"a file"
    finally:
        apache.stop()
