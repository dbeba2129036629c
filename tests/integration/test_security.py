"""Listener separation, through the real binary: nothing of the admin API,
the lock service or the test hooks is reachable through the proxy listener,
and the separate listeners bind to loopback by default."""

import json
import subprocess

from fg_helpers import ADMIN_TOKEN, admin_key_path, assert_json_error, parse_addr, request

LOCKS = {"listen": "127.0.0.1:0", "max_ttl": "30s"}


def test_admin_and_lock_paths_on_the_proxy_listener_go_to_the_backend(make_gate, backend):
    """Every admin, lock and test-hook path sent to the *proxy* port is an
    ordinary request for the backend: fencegate answers none of them, and its
    fences, locks and fault switches do not move."""
    gate = make_gate(locks=LOCKS, extra_args=["--enable-test-faults"])
    auth = [("Authorization", f"Bearer {ADMIN_TOKEN}"), ("Content-Type", "application/json")]
    probes = [
        ("POST", "/v1/keys/sec/fence", auth, json.dumps({"token": 99})),
        ("GET", "/v1/keys/sec", [], b""),
        ("PUT", "/v1/test/store-faults", auth, json.dumps({"fail_writes": True})),
        ("POST", "/v1/locks/sec/acquire", [("Content-Type", "application/json")],
         json.dumps({"ttl": "10s"})),
        ("GET", "/healthz", [], b""),
        ("GET", "/readyz", [], b""),
    ]
    for method, target, headers, body in probes:
        r = request(gate.proxy, method, target, headers, body)
        assert r.header("Server") == "recording-backend/1" and b'"backend"' in r.body, \
            f"{method} {target} on the proxy port must be the backend's answer: {r}"
    # A key with a slash, as the admin port spells it, is not even a valid
    # path on the proxy port (docs/contract.md, "Keys and canonical paths"):
    # refused, nothing forwarded.
    r = request(gate.proxy, "POST", "/v1/keys/%2Fobjects%2Fsec/fence", auth,
                json.dumps({"token": 99}))
    assert_json_error(r, 400, "bad_path")
    seen = [(e["method"], e["path"]) for e in backend.log()]
    assert seen == [(m, t) for m, t, _, _ in probes], seen

    # Nothing moved inside fencegate.
    for key in ("sec", "/objects/sec"):
        assert gate.admin_get(admin_key_path(key)).status == 404, \
            f"a fence POST through the proxy port must not raise the fence of {key}"
    r = gate.put("/objects/sec", 1, b"after")
    assert 200 <= r.status < 300, f"the store faults must not have been switched on: {r}"
    locks = parse_addr(gate.listening["locks"])
    r = request(locks, "POST", "/v1/locks/sec/acquire", [("Content-Type", "application/json")],
                json.dumps({"ttl": "10s"}))
    assert r.status == 200 and r.json()["token"] == 1, \
        f"the lock must be free, and its first token 1: {r}"


def test_admin_fence_on_the_admin_port_needs_the_bearer(gate, backend):
    """The same fence POST on the admin port, without and with the bearer."""
    path = admin_key_path("/objects/sec2") + "/fence"
    r = request(gate.admin, "POST", path, [("Content-Type", "application/json")],
                json.dumps({"token": 5}))
    assert r.status == 401 and r.header("WWW-Authenticate"), r
    r = gate.admin_post(path, {"token": 5}, bearer=ADMIN_TOKEN[:-1] + "x")
    assert r.status == 401, f"a wrong bearer of the same length: {r}"
    r = gate.admin_post(path, {"token": 5})
    assert r.status == 200 and r.json()["token"] == 5, r
    assert backend.log() == []


def test_separate_listeners_default_to_loopback(tmp_path, fencegate_bin):
    """admin.listen's default (docs/contract.md, "Configuration") binds
    127.0.0.1, never all interfaces; the lock service is off unless
    configured."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text('upstream: {url: "http://127.0.0.1:9"}\n'
                   f'storage: {{path: "{tmp_path / "data"}"}}\n')
    out = subprocess.run([fencegate_bin, "--config", str(cfg), "--check"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    assert "admin 127.0.0.1:9901" in out.stdout and "locks off" in out.stdout, \
        f"--check prints the listeners it would bind: {out.stdout!r}"
