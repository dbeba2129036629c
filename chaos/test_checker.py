"""The checker must catch each kind of stale or lost write: synthetic
histories, one per property, next to the clean history they break."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402


def inv(client, write, key, token, t):
    return {"t": t, "client": client, "type": "invoke", "key": key, "token": token, "write": write}


def done(type_, client, write, key, token, t, status=200, error=""):
    return {"t": t, "client": client, "type": type_, "key": key, "token": token, "write": write,
            "status": status, "error": error}


def applied(client, write, key, token, t):
    return {"key": key, "token": token, "client": client, "write": write, "t": t}


def clean():
    """c1 writes with token 1, loses the lock; c2 writes with 2; c1's late
    write with 1 is refused (409) and never applied."""
    history = [
        inv("c1", "c1-1", "k", 1, 1.0), done("ok", "c1", "c1-1", "k", 1, 1.2),
        inv("c2", "c2-1", "k", 2, 2.0), done("ok", "c2", "c2-1", "k", 2, 2.2),
        inv("c1", "c1-2", "k", 1, 3.0), done("fail", "c1", "c1-2", "k", 1, 3.1, 409, "stale_token"),
        inv("c2", "c2-2", "k", 2, 4.0), done("info", "c2", "c2-2", "k", 2, 7.0, None, "timed out"),
    ]
    log = [applied("c1", "c1-1", "k", 1, 1.1), applied("c2", "c2-1", "k", 2, 2.1)]
    restarts = [{"t_kill": 2.5, "t_restarted": 2.8, "fence": {"k": 2}}]
    return log, history, restarts


def count(result):
    assert all(len(result["violations"][p]) == min(n, checker.MAX_WITNESSES)
               for p, n in result["counts"].items())
    return dict(result["counts"])


def test_clean_history_has_no_violation():
    result = checker.check(*clean())
    assert count(result) == {p: 0 for p in checker.PROPERTIES}, result
    assert result["stats"]["ok"] == 2 and result["stats"]["refused_409"] == 1
    assert result["stats"]["unknown"] == 1


def test_stale_write_applied_breaks_token_order_and_after_ack():
    log, history, restarts = clean()
    history[5] = done("ok", "c1", "c1-2", "k", 1, 3.1)
    log.append(applied("c1", "c1-2", "k", 1, 3.05))
    result = checker.check(log, history, restarts)
    assert count(result)["token-order"] == 1
    assert count(result)["after-ack"] == 1
    witness = result["violations"]["token-order"][0]
    assert "c1-2" in witness and "c2-1" in witness and "token 1" in witness and "token 2" in witness


def test_reordered_apply_breaks_token_order_even_without_acks():
    log, history, restarts = clean()
    log = [applied("c2", "c2-1", "k", 2, 1.1), applied("c1", "c1-1", "k", 1, 2.1)]
    history = [e for e in history if e["type"] == "invoke"]
    result = checker.check(log, history, restarts, check_fence=False)
    assert count(result)["token-order"] == 1
    assert count(result)["after-ack"] == 0


def test_unknown_write_applied_late_is_caught_by_after_ack():
    """A write whose fate was unknown (info) may land; but not below a token
    already acknowledged, even if nothing was applied in between."""
    log, history, restarts = clean()
    history.append(inv("c3", "c3-1", "j", 5, 1.0))
    history.append(done("info", "c3", "c3-1", "j", 5, 2.0, None, "timed out"))
    history.append(inv("c4", "c4-1", "j", 6, 3.0))
    history.append(done("ok", "c4", "c4-1", "j", 6, 3.5))
    log.append(applied("c4", "c4-1", "j", 6, 3.4))
    log.append(applied("c3", "c3-1", "j", 5, 4.0))
    result = checker.check(log, history, restarts)
    assert count(result)["after-ack"] == 1 and "c3-1" in result["violations"]["after-ack"][0]


def test_refused_write_applied_breaks_exactly_once():
    log, history, restarts = clean()
    log.append(applied("c1", "c1-2", "k", 1, 3.05))
    result = checker.check(log, history, restarts)
    assert any("refused (409 stale_token)" in w for w in result["violations"]["exactly-once"])


def test_acknowledged_write_lost_or_doubled_breaks_exactly_once():
    log, history, restarts = clean()
    lost = checker.check(log[:1], history, restarts)
    assert any("c2-1" in w and "applied 0 times" in w for w in lost["violations"]["exactly-once"])
    doubled = checker.check(log + [applied("c2", "c2-1", "k", 2, 2.15)], history, restarts)
    assert any("c2-1" in w and "applied 2 times" in w for w in doubled["violations"]["exactly-once"])


def test_write_no_client_sent_breaks_exactly_once():
    log, history, restarts = clean()
    log.append(applied("c9", "c9-1", "k", 3, 5.0))
    result = checker.check(log, history, restarts)
    assert any("never sent" in w for w in result["violations"]["exactly-once"])


def test_fence_lost_in_a_restart_breaks_fence_restart():
    log, history, restarts = clean()
    restarts[0]["fence"] = {"k": 1}
    result = checker.check(log, history, restarts)
    assert count(result)["fence-restart"] == 1
    assert "fence is 1" in result["violations"]["fence-restart"][0]
    # A write acknowledged after the kill is not the old process's promise.
    restarts[0]["t_kill"] = 1.5
    assert count(checker.check(log, history, restarts))["fence-restart"] == 0


def test_a_line_cut_by_a_kill_is_skipped(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_bytes(b'{"type": "lease", "t": 1}\n{"type": "inv')
    assert checker.read_jsonl(str(p)) == [{"type": "lease", "t": 1}]



def test_logs_are_read_once_as_streams():
    """A volume run's logs are millions of lines: check() reads them as
    streams, once, and keeps no record whole."""
    log, history, restarts = clean()
    result = checker.check(iter(log), iter(history), restarts)
    assert count(result) == {p: 0 for p in checker.PROPERTIES}
    assert result["stats"]["applied"] == 2 and result["stats"]["ok"] == 2


def test_witnesses_are_capped_and_counted():
    n = checker.MAX_WITNESSES + 50
    log = [applied("c1", f"c1-{i}", "k", n - i, float(i)) for i in range(n)]
    history = [inv("c1", f"c1-{i}", "k", n - i, float(i)) for i in range(n)]
    result = checker.check(log, history, [], check_fence=False)
    assert result["counts"]["token-order"] == n - 1
    assert len(result["violations"]["token-order"]) == checker.MAX_WITNESSES


# --- the volume workload (volume_client.py) ----------------------------------
# No locks: tokens from the shared clock (microseconds * 64 + the client's
# number), many clients on one key at once, long keys logged by name.

def clock_token(us, number):
    return us * 64 + number


def volume_race():
    """c1 draws its token before c2 on key L0007, but c2's write lands
    first and is acknowledged; c1's write arrives later and is refused."""
    t1, t2 = clock_token(1_000_000, 0), clock_token(1_000_050, 1)
    history = [
        inv("c1", "c1-1", "L0007", t1, 10.000), inv("c2", "c2-1", "L0007", t2, 10.001),
        done("ok", "c2", "c2-1", "L0007", t2, 10.003, 204),
        done("fail", "c1", "c1-1", "L0007", t1, 10.004, 409, "stale_token"),
    ]
    log = [applied("c2", "c2-1", "L0007", t2, 10.002)]
    restarts = [{"t_kill": 10.5, "t_restarted": 11.0, "fence": {"L0007": t2}}]
    return log, history, restarts


def test_volume_race_refused_is_clean():
    result = checker.check(*volume_race())
    assert result["counts"] == {p: 0 for p in checker.PROPERTIES}, result
    assert result["stats"]["ok"] == 1 and result["stats"]["refused_409"] == 1


def test_volume_race_that_reaches_the_backend_is_caught():
    """The same race with the fence broken: c1's older token is applied after
    c2's newer one was acknowledged."""
    log, history, restarts = volume_race()
    history[3] = done("ok", "c1", "c1-1", "L0007", history[0]["token"], 10.006, 204)
    log.append(applied("c1", "c1-1", "L0007", history[0]["token"], 10.005))
    result = checker.check(log, history, restarts)
    assert result["counts"]["token-order"] == 1 and result["counts"]["after-ack"] == 1
    assert "c1-1" in result["violations"]["after-ack"][0]
    assert "c2-1" in result["violations"]["after-ack"][0]


def test_volume_fence_lost_on_a_long_key_is_caught():
    log, history, restarts = volume_race()
    restarts[0]["fence"] = {}  # the long key came back unknown after the kill
    result = checker.check(log, history, restarts)
    assert result["counts"]["fence-restart"] == 1
    assert "key L0007" in result["violations"]["fence-restart"][0]


def test_a_client_history_cut_short_shows_as_writes_nobody_sent():
    """A volume client writes its history in batches: if it died, its last
    writes reached the backend without a trace in any history."""
    log, history, restarts = volume_race()
    result = checker.check(log, [e for e in history if e["client"] != "c2"], restarts)
    assert any("c2-1" in w and "never sent" in w for w in result["violations"]["exactly-once"])

