"""The admin fence is a barrier (docs/contract.md, "Admin API"): once
POST /v1/keys/{key}/fence answers, no write with a lower token is forwarded
for that key, including writes already queued behind a write in flight."""

import time

import pytest

from fg_helpers import IO_TIMEOUT, RawConnection, admin_key_path, assert_json_error, tokens_seen


def _stored_token(gate, key):
    r = gate.admin_get(admin_key_path(key))
    return r.json()["token"] if r.status == 200 else None


def _wait_stored(gate, key, token):
    """Polls the admin API until the store holds `token` for `key`."""
    deadline = time.monotonic() + IO_TIMEOUT
    while _stored_token(gate, key) != token:
        assert time.monotonic() < deadline, f"the store never held {token} for {key}"
        time.sleep(0.01)  # polling interval of a condition with a deadline


# With two threads the two writers' connections sit on different threads,
# and the thread where the first write ends would send the queued one
# upstream itself (fence/handoff.h) were it not for the fence.
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_write_queued_before_the_fence_is_refused_after_it(make_gate, backend, tmp_path,
                                                               threads, durability):
    gate = make_gate(threads=threads,
                     storage={"engine": "rocksdb", "path": str(tmp_path / "data"),
                              "durability": durability})
    key = "/objects/barrier"
    with RawConnection(gate.proxy) as first, RawConnection(gate.proxy) as second:
        # A (token 5) reaches the backend and is held there.
        first.send("PUT", key, [("Fencing-Token", "5"), ("X-Test-Hold-Until", "first")], b"A",
                   close=False)
        backend.wait_until(lambda s: any(a["path"] == key for a in s["active"]),
                           what="write A to reach the backend")
        # B (token 6) is accepted by the store and waits for its turn behind A.
        second.send("PUT", key, [("Fencing-Token", "6")], b"B", close=False)
        _wait_stored(gate, key, 6)
        # The fence to 10 answers while B is queued.
        fence = gate.admin_post(admin_key_path(key) + "/fence", {"token": 10})
        assert fence.status == 200, fence
        assert fence.json()["token"] == 10
        backend.release("first")
        ra = first.read_response("PUT")
        rb = second.read_response("PUT")
    # A held the key's turn when the fence was decided: it went.
    assert 200 <= ra.status < 300, ra
    doc = assert_json_error(rb, 409, "stale_token", key=key, token=6, current=10)
    assert rb.header("Fencing-Token-Current") == "10", (rb, doc)
    log = backend.log()
    assert tokens_seen(log, path=key) == ["5"], f"the backend saw a write after the fence: {log}"
    assert not backend.snapshot()["active"]
    # Later writes are judged against the fence as ever.
    assert_json_error(gate.put(key, token=9), 409, "stale_token", current=10)
    assert gate.put(key, token=10).status in (200, 201)
