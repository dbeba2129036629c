"""A store from before the tree of paths (docs/contract.md, "Nested
resources"): keys and no nodes, as an older fencegate left its data
directory or etcd prefix, or as an import of keys alone leaves a store.
Through the real binary: the first start enters every key that a route of
the tree fences under its own path, so that a collection write above it is
refused as if the tree had seen it written; a key that maps back to no path
stops the start with advice when a route keys its writes otherwise;
`fencegate enter-tree` enters a store again, on demand."""

import json
import subprocess
import time

from fg_helpers import IO_TIMEOUT, START_TIMEOUT, assert_json_error
from test_export_import import etcd_put, etcd_storage

TENANT_ROUTES = [
    {"name": "objects", "path_prefix": "/objects/"},
    {"name": "tenants", "path_regex": "^/tenants/([^/]+)/", "key": "tenant/{1}"},
]


def tool(binary, *args, stdin=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, input=stdin,
                          timeout=START_TIMEOUT)


def wait_for_log(gate, text, timeout=IO_TIMEOUT):
    """The etcd engine enters the tree beside the serving replica: waits
    for its log line."""
    deadline = time.monotonic() + timeout
    while text not in gate.stderr_tail():
        if time.monotonic() > deadline:
            raise AssertionError(f"no '{text}' in {timeout}s:\n{gate.stderr_tail()}")
        time.sleep(0.02)  # polling interval of a condition with a deadline


def node(gate, path):
    r = gate.admin_get("/v1/paths" + path)
    assert r.status == 200, r
    return json.loads(r.body)


def test_an_etcd_prefix_from_before_the_tree_enters_it_at_the_first_start(make_gate, etcd):
    # Tokens exactly as an older fencegate stored them: `<prefix>t/<key>`,
    # 20 decimal digits, and no node of the tree.
    etcd_put(etcd, b"fg-old/t//objects/d/x", b"%020d" % 34)
    etcd_put(etcd, b"fg-old/t//objects/e", b"%020d" % 5)
    etcd_put(etcd, b"fg-old/t/unrouted", b"%020d" % 9)
    gate = make_gate(name="old", storage=etcd_storage(etcd, "fg-old/"))
    wait_for_log(gate, "entered 2 of the store's 3 keys into the tree")
    entered = node(gate, "/objects/d/x")
    assert entered["fenced"] and entered["key"] == "/objects/d/x" and entered["token"] == 34
    assert node(gate, "/objects")["below"] == {"path": "/objects/d/x", "token": 34}

    # The collection above the fenced member: refused, whatever its token.
    assert_json_error(gate.put("/objects/d/", 99, method="DELETE"), 409, "nested_keys",
                      path="/objects/d/x", key="/objects/d/x")
    assert_json_error(gate.put("/objects/d/x", 33), 409, "stale_token")

    # Once: the next start finds the marker and enters nothing again.
    gate.restart()
    assert_json_error(gate.put("/objects/d/", 99, method="DELETE"), 409, "nested_keys")
    assert "proxying" in gate.stderr_tail(), gate.stderr_tail()  # the new process's log
    assert "into the tree of paths" not in gate.stderr_tail(), gate.stderr_tail()


def test_keys_a_route_keys_otherwise_stop_the_start_with_advice(make_gate, fencegate_bin):
    gate = make_gate(name="tenants", start=False, routes=TENANT_ROUTES)
    keys = '{"key":"/objects/d/x","token":34}\n{"key":"tenant/acme","token":35}\n'
    p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", "-", stdin=keys)
    assert p.returncode == 0, p.stderr
    assert "1 of its 2 keys entered the tree" in p.stderr, p.stderr
    assert "warning: 1 stored keys ('tenant/acme') map back to no path" in p.stderr, p.stderr

    # 'tenant/acme' may be the tenants route's: its paths cannot be known.
    p = tool(fencegate_bin, "--config", gate.config_path)
    assert p.returncode == 1, p
    assert "cannot enter the tree of paths" in p.stderr, p.stderr
    assert "route(s) 'tenants'" in p.stderr and "nesting: off" in p.stderr, p.stderr
    assert "fencegate enter-tree --skip-unmapped" in p.stderr, p.stderr

    p = tool(fencegate_bin, "enter-tree", "--config", gate.config_path)
    assert p.returncode == 1 and "map back to no path" in p.stderr, p
    p = tool(fencegate_bin, "enter-tree", "--config", gate.config_path, "--skip-unmapped")
    assert p.returncode == 0, p.stderr
    assert "1 of 2 keys entered" in p.stderr and "1 left outside it" in p.stderr, p.stderr

    gate.start()
    assert_json_error(gate.put("/objects/d/", 99, method="DELETE"), 409, "nested_keys",
                      path="/objects/d/x")
    assert_json_error(gate.put("/tenants/acme/inv/7", 34), 409, "stale_token")


def test_enter_tree_enters_paths_written_while_a_route_was_flat(make_gate, fencegate_bin,
                                                               tmp_path):
    flat = [{"name": "objects", "path_prefix": "/objects/", "nesting": "off"}]
    data = tmp_path / "shared-data"
    gate = make_gate(name="flat", routes=flat, data_dir=data)
    r = gate.put("/objects/d/x", 34)
    assert 200 <= r.status < 300, r
    assert gate.admin_get("/v1/paths/objects/d/x").status == 404  # the flat fence keeps no tree
    assert gate.stop() == 0

    # The route joins the tree: the store was entered at its first start,
    # so its paths wait for `enter-tree`.
    tree = make_gate(name="tree", start=False, data_dir=data)
    p = tool(fencegate_bin, "enter-tree", "--config", tree.config_path)
    assert p.returncode == 0, p.stderr
    assert "1 of 1 keys entered" in p.stderr, p.stderr
    tree.start()
    assert node(tree, "/objects/d/x")["token"] == 34
    assert_json_error(tree.put("/objects/d/", 99, method="DELETE"), 409, "nested_keys",
                      path="/objects/d/x")
