"""Token header validation (docs/contract.md, "Tokens"): every malformed
form is 400 bad_token and reaches nothing; the extremes of the valid range
pass."""

import pytest

from fg_helpers import admin_key_path, assert_json_error, build_request, raw_exchange, tokens_seen

MALFORMED = [
    pytest.param([""], id="empty"),
    pytest.param(["+1"], id="plus-sign"),
    pytest.param(["-1"], id="minus-sign"),
    pytest.param(["1 2"], id="space-inside"),
    pytest.param(["0x10"], id="hex"),
    pytest.param(["1,2"], id="list"),
    pytest.param(["1.5"], id="decimal"),
    pytest.param(["abc"], id="letters"),
    pytest.param(["18446744073709551616"], id="overflow-2^64"),
    pytest.param(["99999999999999999999"], id="overflow-20-digits"),
    pytest.param(["0" * 20 + "1"], id="21-digits"),
    pytest.param(["1", "1"], id="two-headers"),
    pytest.param(["1", "2"], id="two-headers-different"),
]


@pytest.mark.parametrize("values", MALFORMED)
def test_malformed_token_is_400_and_not_forwarded(gate, backend, values):
    # Raw bytes: each value goes on the wire as "Fencing-Token: " + value.
    headers = [("Fencing-Token", v) for v in values]
    data = build_request("PUT", "/objects/t", headers, b"payload")
    r = raw_exchange(gate.proxy, data)
    assert_json_error(r, 400, "bad_token")
    assert backend.log() == [], "a malformed token must not reach the backend"
    # and nothing was stored for the key
    r = gate.admin_get(admin_key_path("/objects/t"))
    assert r.status == 404, f"malformed token must store nothing, admin says {r}"


def test_max_token_is_accepted(gate, backend):
    r = gate.put("/objects/max", "18446744073709551615")
    assert 200 <= r.status < 300, r
    assert tokens_seen(backend.log()) == ["18446744073709551615"]
    r = gate.admin_get(admin_key_path("/objects/max"))
    assert r.status == 200 and r.json()["token"] == 18446744073709551615, r
    # equal is still accepted at the top of the range
    r = gate.put("/objects/max", "18446744073709551615")
    assert 200 <= r.status < 300, r


def test_surrounding_whitespace_is_http_padding(gate, backend):
    # RFC 9110 5.5: whitespace around a field value is not part of it, so
    # "Fencing-Token:  7 " carries the token 7 (spaces *inside* are 400).
    data = build_request("PUT", "/objects/ws", [("Fencing-Token", " \t7 ")], b"payload")
    r = raw_exchange(gate.proxy, data)
    assert 200 <= r.status < 300, r
    r = gate.admin_get(admin_key_path("/objects/ws"))
    assert r.status == 200 and r.json()["token"] == 7, r


def test_leading_zeros_are_accepted(gate, backend):
    r = gate.put("/objects/lz", "0034")
    assert 200 <= r.status < 300, r
    r = gate.admin_get(admin_key_path("/objects/lz"))
    assert r.status == 200 and r.json() == {"key": "/objects/lz", "token": 34}, r
    r = gate.put("/objects/lz", "33")
    assert_json_error(r, 409, "stale_token", key="/objects/lz", token=33, current=34)
    assert len(backend.log()) == 1


def test_missing_token_is_428(gate, backend):
    r = gate.put("/objects/nt", None)
    assert_json_error(r, 428, "token_required", key="/objects/nt")
    assert backend.log() == []
