"""Inputs from the fuzzers (tests/fuzz), replayed through the real binary:
each could take the process down, forward an ambiguous head, or hang the
config check, and must not."""

import json
import subprocess

from fg_helpers import (START_TIMEOUT, assert_json_error, default_config, parse_addr,
                        raw_exchange, write_config)


def test_non_utf8_header_in_a_key_is_a_json_reply_not_a_crash(make_gate, backend):
    """A {header:...} key with bytes that are not UTF-8: the 428 names the key
    (bad bytes replaced), and fencegate is still up for the next request."""
    gate = make_gate(routes=[{"name": "tenants", "path_prefix": "/objects/",
                              "key": "{header:X-Tenant}{path}"}])
    r = raw_exchange(gate.proxy, b"PUT /objects/a HTTP/1.1\r\nHost: x\r\nX-Tenant: t\xff\xfe\r\n"
                                 b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    assert_json_error(r, 428, "token_required")
    assert r.json()["key"].startswith("t\ufffd"), r
    assert 200 <= gate.put("/objects/a", 1, headers=[("X-Tenant", "t")]).status < 300, \
        "fencegate must still serve after the reply"
    assert gate.running()


def test_non_utf8_lock_name_is_a_json_reply_not_a_crash(make_gate):
    gate = make_gate(locks={"listen": "127.0.0.1:0"})
    addr = parse_addr(gate.listening["locks"])
    body = b'{"ttl": "5s"}'
    r = raw_exchange(addr, b"POST /v1/locks/%FF/acquire HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Type: application/json\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    assert 200 <= r.status < 500 and r.json(), r
    r = raw_exchange(addr, b"POST /v1/locks/\xff HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
    assert 400 <= r.status < 500 and json.loads(r.body), r
    assert gate.running(), "the lock service must survive a name that is not UTF-8"


def test_two_host_fields_on_http10_are_refused(gate, backend):
    r = raw_exchange(gate.proxy, b"GET /objects/h HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n")
    assert r.status == 400, r
    assert backend.log() == []


def test_upstream_url_without_slash_after_port_is_a_config_error(tmp_path, backend,
                                                                   fencegate_bin):
    cfg = default_config(backend.port, tmp_path / "data")
    cfg["upstream"]["url"] = f"http://127.0.0.1:{backend.port})00"
    path = write_config(tmp_path / "c.yaml", cfg)
    p = subprocess.run([fencegate_bin, "--config", path, "--check"], capture_output=True,
                       text=True, timeout=START_TIMEOUT)
    assert p.returncode == 2 and "upstream.url" in p.stderr, p


def test_stray_comma_in_yaml_is_an_error_not_a_hang(tmp_path, fencegate_bin):
    path = tmp_path / "c.yaml"
    path.write_text(",\n")
    p = subprocess.run([fencegate_bin, "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=START_TIMEOUT)
    assert p.returncode == 2 and str(path) in p.stderr, p
