"""One backend resource is never reachable under two keys: spellings of
a fenced path are canonicalised (or refused) before the token check, and
what was fenced is exactly what the backend receives."""

import pytest

from fg_helpers import assert_json_error, build_request, raw_exchange, tokens_seen

SPELLINGS_OF_A = [
    pytest.param("//objects/a", id="leading-double-slash"),
    pytest.param("/objects//a", id="inner-double-slash"),
    pytest.param("/objects/./a", id="dot-segment"),
    pytest.param("/objects/x/../a", id="dotdot-segment"),
    pytest.param("/objects/%61", id="percent-encoded-unreserved"),
]


@pytest.mark.parametrize("target", SPELLINGS_OF_A)
def test_stale_write_under_another_spelling_is_not_forwarded(gate, backend, target):
    r = gate.put("/objects/a", 34, b"from 34")
    assert 200 <= r.status < 300, r
    r = raw_exchange(gate.proxy, build_request("PUT", target, [("Fencing-Token", "33")], b"late 33"))
    assert r.status in (409, 400), f"{target} with token 33: want 409 (or 400), got {r}"
    if r.status == 409:
        assert_json_error(r, 409, "stale_token", key="/objects/a", token=33, current=34)
    log = backend.log()
    assert [(e["path"], e["body"]) for e in log] == [("/objects/a", "from 34")], \
        f"only the token-34 write may reach the backend; it saw {log}"


BAD_PATHS = [
    pytest.param(b"/objects/a%2Fb", id="encoded-slash"),
    pytest.param(b"/objects/a%2fb", id="encoded-slash-lower"),
    pytest.param(b"/objects/a%5Cb", id="encoded-backslash"),
    pytest.param(b"/../x", id="dotdot-above-root"),
    pytest.param(b"/objects/../../x", id="dotdot-leaves-root"),
    pytest.param(b"/objects/a%00b", id="encoded-nul"),
    pytest.param(b"/objects/a\x00b", id="raw-nul"),
    pytest.param(b"/objects/a%zz", id="invalid-percent"),
    pytest.param(b"/objects/a%4", id="truncated-percent"),
]


@pytest.mark.parametrize("target", BAD_PATHS)
def test_bad_path_is_400_and_not_forwarded(gate, backend, target):
    r = raw_exchange(gate.proxy, build_request("PUT", target, [("Fencing-Token", "35")], b"x"))
    assert_json_error(r, 400, "bad_path")
    assert backend.log() == [], f"{target!r} must reach nothing; backend saw {backend.log()}"


def test_bad_path_is_refused_for_unfenced_requests_too(gate, backend):
    # The canonical path is computed before routing: a GET (not fenced)
    # that tries to leave the root is refused as well.
    r = raw_exchange(gate.proxy, build_request("GET", b"/../etc/passwd"))
    assert_json_error(r, 400, "bad_path")
    assert backend.log() == []


@pytest.mark.parametrize("target", SPELLINGS_OF_A)
def test_accepted_write_is_forwarded_with_the_canonical_path(gate, backend, target):
    r = raw_exchange(gate.proxy, build_request("PUT", target, [("Fencing-Token", "34")], b"v"))
    assert 200 <= r.status < 300, f"{target} with token 34: want 2xx, got {r}"
    log = backend.log()
    assert [e["path"] for e in log] == ["/objects/a"], \
        f"backend must receive the canonical path /objects/a for {target}; got {[e['path'] for e in log]}"
    assert tokens_seen(log) == ["34"]
