"""The timeline of a stale lock holder: a paused holder wakes up after its
lease expired and is stopped at the write, also across a restart."""

from fg_helpers import admin_key_path, assert_json_error, tokens_seen


def test_stale_holder_is_fenced_across_restart(gate, backend):
    r = gate.put("/objects/x", 33, b"from 33")
    assert 200 <= r.status < 300, f"token 33 on a new key: want 2xx from the backend, got {r}"

    r = gate.put("/objects/x", 34, b"from 34")
    assert 200 <= r.status < 300, f"token 34: want 2xx, got {r}"

    r = gate.put("/objects/x", 33, b"late 33")
    assert_json_error(r, 409, "stale_token", key="/objects/x", token=33, current=34)
    assert r.header("Fencing-Token-Current") == "34", f"want Fencing-Token-Current: 34, got {r}"

    r = gate.put("/objects/x", 34, b"34 again")
    assert 200 <= r.status < 300, f"token equal to the stored one: want 2xx, got {r}"

    gate.restart()

    r = gate.put("/objects/x", 33, b"late 33 after restart")
    assert_json_error(r, 409, "stale_token", key="/objects/x", token=33, current=34)
    assert r.header("Fencing-Token-Current") == "34", r

    log = backend.log()
    assert [e["path"] for e in log] == ["/objects/x"] * 3, log
    assert tokens_seen(log) == ["33", "34", "34"], \
        f"backend must see exactly the accepted writes 33,34,34; saw {tokens_seen(log)}"
    assert [e["body"] for e in log] == ["from 33", "from 34", "34 again"], log

    r = gate.admin_get(admin_key_path("/objects/x"))
    assert r.status == 200, r
    assert r.json() == {"key": "/objects/x", "token": 34}, r.json()
