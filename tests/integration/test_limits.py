"""Request limits (SPEC 4): oversized heads and bodies are refused by
fencegate with JSON and reach nothing."""

from fg_helpers import admin_key_path, assert_json_error


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
