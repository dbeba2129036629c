"""The checker must catch each kind of stale or lost write, each payment
run twice where the contract does not allow it, and each stale write that
changed a member of the tree, directly or through a collection: synthetic
histories, one per property, next to the clean history they break."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
import idempotent_checker  # noqa: E402
import tree_checker  # noqa: E402


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


def replica_window():
    """Two replicas: c1's write with token 5 goes to replica 0, which is
    paused from 1.5 to 4.0 while it holds it; c2 writes 6 through replica 1
    (acknowledged at 3.2); replica 0 resumes and delivers 5 at 4.1."""
    history = [
        inv("c1", "c1-1", "k", 5, 1.0), done("info", "c1", "c1-1", "k", 5, 3.0, None, "timed out"),
        inv("c2", "c2-1", "k", 6, 3.0), done("ok", "c2", "c2-1", "k", 6, 3.2),
    ]
    log = [dict(applied("c2", "c2-1", "k", 6, 3.1), door=1),
           dict(applied("c1", "c1-1", "k", 5, 4.1), door=0)]
    windows = [{"fault": "replica-pause", "replica": 0, "t_pause": 1.5, "t_resume": 4.0}]
    return log, history, windows


def test_a_stale_write_delivered_by_a_paused_replica_is_counted_as_the_window():
    log, history, windows = replica_window()
    result = checker.check(log, history, [], windows=windows)
    assert count(result) == {p: 0 for p in checker.PROPERTIES}, result
    assert result["stats"]["window"] == 1 and result["stats"]["replica_pauses"] == 1
    assert result["stats"]["window_held_max_s"] == 3.1


def test_a_stale_write_the_pauses_do_not_explain_is_a_violation():
    log, history, windows = replica_window()
    # Without the pause, through the other replica, or sent after the pause
    # began (so checked after the replica resumed): each is a violation.
    other_door = [log[0], dict(log[1], door=1)]
    sent_late = [dict(e, t=2.0) if e["write"] == "c1-1" and e["type"] == "invoke" else e
                 for e in history]
    for log_, history_, windows_ in ((log, history, []), (other_door, history, windows),
                                     (log, sent_late, windows)):
        result = checker.check(log_, history_, [], windows=windows_)
        assert count(result)["token-order"] == 1 and count(result)["after-ack"] == 1, result
        assert result["stats"]["window"] == 0


def test_moves_count_a_keys_writes_changing_replica():
    log, history, _ = replica_window()
    assert checker.check(log, history, [])["stats"]["moves"] == 1
    same_door = [dict(e, door=1) for e in log]
    assert checker.check(same_door, history, [])["stats"]["moves"] == 0
    # Back and forth over two keys: k moves twice, j once.
    hops = [dict(applied("c1", f"w{i}", key, i, float(i)), door=door)
            for i, (key, door) in enumerate([("k", 0), ("j", 2), ("k", 1), ("j", 0), ("k", 0)])]
    hist = [ev for i, rec in enumerate(hops)
            for ev in (inv("c1", rec["write"], rec["key"], i, i - 0.5),
                       done("ok", "c1", rec["write"], rec["key"], i, i + 0.1))]
    assert checker.check(hops, hist, [])["stats"]["moves"] == 3
    # Without doors (one fencegate) there is nothing to count.
    assert "moves" not in checker.check(clean()[0], clean()[1], [])["stats"]


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



# --- the idempotent workload (idempotent_client.py) --------------------------
# Payments with idempotency keys; the backend logs each run with the attempt
# that caused it. in_flight_timeout 2 s, upstream.timeout 1 s.

LIMITS = idempotent_checker.Limits(in_flight_timeout_s=2.0, upstream_timeout_s=1.0)


def pay_events(op, key, attempts, outcome="ok"):
    """The history of one operation: attempts are (id, sent, ended, status,
    replayed, body)."""
    events = [{"t": attempts[0][1] - 0.001, "client": "c1", "type": "invoke", "op": op,
               "key": key, "account": "a0"}]
    for aid, sent, ended, status, replayed, body in attempts:
        events.append({"t": sent, "client": "c1", "type": "attempt", "op": op, "attempt": aid})
        answer = {"t": ended, "client": "c1", "type": "answer", "op": op, "attempt": aid,
                  "status": status, "replayed": replayed,
                  "error": "" if status is None or status < 300 else "some_error"}
        if status is None:
            answer["error"] = "timed out"
        if body is not None:
            answer["body"] = body
        events.append(answer)
    events.append({"t": attempts[-1][2], "client": "c1", "type": outcome, "op": op, "key": key})
    return events


def pay_run(op, key, attempt, arrived, answered, run):
    return {"key": key, "op": op, "client": "c1", "attempt": attempt, "account": "a0",
            "t_arrive": arrived, "t": answered,
            "response": f'{{"op": "{op}", "run": {run}, "attempt": "{attempt}"}}'}


def check_pay(runs, history, kills=(), faults=()):
    return idempotent_checker.check(runs, history, list(kills), list(faults), LIMITS)


def rerun_after_504():
    """c1-1's first attempt runs at the backend but fencegate gives up
    (504); the retries conflict (409) until in_flight_timeout, then one
    runs again and is answered; a last retry is a replay of that answer."""
    second = pay_run("c1-1", "K1", "c1-1.4", 13.3, 13.31, 2)
    history = pay_events("c1-1", "K1", [
        ("c1-1.1", 10.0, 11.02, 504, False, None),
        ("c1-1.2", 11.1, 11.11, 409, False, None),
        ("c1-1.3", 11.4, 11.41, 409, False, None),
        ("c1-1.4", 13.2, 16.2, None, False, None),  # its answer was lost
        ("c1-1.5", 16.4, 16.41, 200, True, second["response"]),
    ])
    runs = [pay_run("c1-1", "K1", "c1-1.1", 10.01, 11.5, 1), second]
    return runs, history


def test_a_clean_idempotent_history_has_no_violation():
    history = pay_events("c1-2", "K2", [("c1-2.1", 1.0, 1.05, 200, False, None)])
    runs = [pay_run("c1-2", "K2", "c1-2.1", 1.01, 1.02, 1)]
    history[-2]["body"] = runs[0]["response"]
    result = check_pay(runs, history)
    assert result["counts"] == {p: 0 for p in idempotent_checker.PROPERTIES}, result
    assert result["stats"]["ok"] == 1 and result["stats"]["applied"] == 1


def test_a_rerun_explained_by_an_upstream_failure_is_accepted():
    result = check_pay(*rerun_after_504())
    assert result["counts"] == {p: 0 for p in idempotent_checker.PROPERTIES}, result
    assert result["stats"]["explained_reruns"] == {"upstream": 1}
    assert result["stats"]["replays"] == 1 and result["stats"]["refused_409"] == 2


def test_a_rerun_explained_by_a_kill_is_accepted():
    """The first attempt got no answer: fencegate was killed while the
    backend ran it; after the restart a retry runs it again."""
    history = pay_events("c1-3", "K3", [
        ("c1-3.1", 20.0, 20.3, None, False, None),
        ("c1-3.2", 22.1, 22.15, 200, False, None),
    ])
    runs = [pay_run("c1-3", "K3", "c1-3.1", 20.01, 20.2, 1),
            pay_run("c1-3", "K3", "c1-3.2", 22.11, 22.12, 2)]
    history[-2]["body"] = runs[1]["response"]
    result = check_pay(runs, history, kills=[20.25])
    assert result["counts"] == {p: 0 for p in idempotent_checker.PROPERTIES}, result
    assert result["stats"]["explained_reruns"] == {"kill": 1}
    # The same rerun without the kill, or with the kill long after the
    # backend answered, is not explained.
    for kills in ([], [21.5]):
        result = check_pay(runs, history, kills=kills)
        assert result["counts"]["at-most-once"] == 1, kills
        assert "nothing explains" in result["violations"]["at-most-once"][0]
    # Unless the answer was streamed until then: the kill cut the stream
    # before fencegate could store it.
    runs[0] = dict(runs[0], stream_ms=1500)
    assert check_pay(runs, history, kills=[21.5])["counts"]["at-most-once"] == 0


def test_a_rerun_explained_by_a_backend_fault_the_client_did_not_see_is_accepted():
    """The attempt's 504 was lost on the client's side; the backend was
    stalled while the run waited."""
    history = pay_events("c1-4", "K4", [
        ("c1-4.1", 30.0, 33.0, None, False, None),
        ("c1-4.2", 33.1, 33.15, 200, False, None),
    ])
    runs = [pay_run("c1-4", "K4", "c1-4.1", 30.01, 30.5, 1),
            pay_run("c1-4", "K4", "c1-4.2", 33.11, 33.12, 2)]
    history[-2]["body"] = runs[1]["response"]
    stall = {"t": 29.0, "fault": "stall-backend", "ms": 1500, "seconds": 2.0}
    assert check_pay(runs, history, faults=[stall])["counts"]["at-most-once"] == 0
    assert check_pay(runs, history)["counts"]["at-most-once"] == 1
    # A fault on the clients' side explains nothing.
    net_client = dict(stall, fault="net-client")
    assert check_pay(runs, history, faults=[net_client])["counts"]["at-most-once"] == 1
    # A network fault on the backend's side that cut a streamed answer
    # after its head explains it too.
    cut = {"t": 31.5, "fault": "net-backend", "mode": "reset", "latency_ms": 50, "seconds": 1.0}
    assert check_pay(runs, history, faults=[cut])["counts"]["at-most-once"] == 1
    runs[0] = dict(runs[0], stream_ms=1500)
    assert check_pay(runs, history, faults=[cut])["counts"]["at-most-once"] == 0


def test_a_planted_duplicate_is_caught():
    """The backend ran the key again although the first run was answered
    (200) and stored: a replay was due."""
    history = pay_events("c1-5", "K5", [
        ("c1-5.1", 40.0, 40.05, 200, False, None),
    ])
    runs = [pay_run("c1-5", "K5", "c1-5.1", 40.01, 40.02, 1),
            pay_run("c1-5", "K5", "c1-5.1", 45.0, 45.01, 2)]
    history[-2]["body"] = runs[0]["response"]
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "K5" in result["violations"]["at-most-once"][0]
    # A hedged copy that ran beside an answered attempt is caught too.
    history = pay_events("c1-6", "K6", [
        ("c1-6.1", 50.0, 50.05, 200, False, None),
        ("c1-6.2", 50.01, 50.06, 200, False, None),
    ])
    runs = [pay_run("c1-6", "K6", "c1-6.1", 50.02, 50.03, 1),
            pay_run("c1-6", "K6", "c1-6.2", 50.03, 50.04, 2)]
    history[2]["body"], history[4]["body"] = runs[0]["response"], runs[1]["response"]
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "c1-6.2" in result["violations"]["at-most-once"][0]


def test_a_rerun_before_in_flight_timeout_is_caught():
    """A 504 explains a rerun only once the reservation has run out: a
    retry that ran 1.2 s after the first attempt was sent (a reservation
    lost, or not kept) is a violation."""
    runs, history = rerun_after_504()
    runs[1] = dict(runs[1], t_arrive=11.2, t=11.21)
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "before in_flight_timeout" in result["violations"]["at-most-once"][0]


def test_a_rerun_is_dated_from_when_fencegate_gave_up_not_from_the_attempt():
    """A live request's reservation does not expire: after a 504 (upstream
    timeout 1 s, attempt sent at 10.0) fencegate gave up no sooner than
    11.0, so a rerun at 12.2 (2.2 s after the attempt) is caught; so is one
    1.2 s after a slow upload reached the backend."""
    runs, history = rerun_after_504()
    runs[1] = dict(runs[1], t_arrive=12.2, t=12.21)
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "upstream.timeout" in result["violations"]["at-most-once"][0]
    runs[1] = dict(runs[1], t_arrive=13.05, t=13.06)
    assert check_pay(runs, history)["counts"]["at-most-once"] == 0
    # No answer: dated from the first run's arrival (a slow upload that
    # arrived whole at 23.0), unless fencegate was killed between.
    history = pay_events("c1-8", "K8", [
        ("c1-8.1", 20.0, 26.0, None, False, None),
        ("c1-8.2", 24.3, 24.35, 200, False, None),
    ])
    runs = [pay_run("c1-8", "K8", "c1-8.1", 23.0, 24.1, 1),
            pay_run("c1-8", "K8", "c1-8.2", 24.31, 24.32, 2)]
    history[-2]["body"] = runs[1]["response"]
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "arrival at the backend" in result["violations"]["at-most-once"][0]
    assert check_pay(runs, history, kills=[23.5])["counts"]["at-most-once"] == 0


def test_a_rerun_after_an_answer_withheld_for_the_store_needs_a_kill():
    """503 store_unavailable: the run's answer is kept in memory while
    fencegate lives; only a kill lets the key run again."""
    history = pay_events("c1-9", "K9", [
        ("c1-9.1", 80.0, 80.5, 503, False, None),
        ("c1-9.2", 83.0, 83.05, 200, False, None),
    ])
    history[2]["error"] = "store_unavailable"
    runs = [pay_run("c1-9", "K9", "c1-9.1", 80.01, 80.02, 1),
            pay_run("c1-9", "K9", "c1-9.2", 83.01, 83.02, 2)]
    history[-2]["body"] = runs[1]["response"]
    result = check_pay(runs, history, kills=[81.0])
    assert result["counts"] == {p: 0 for p in idempotent_checker.PROPERTIES}, result
    assert result["stats"]["explained_reruns"] == {"store": 1}
    for kills in ([], [79.0], [84.0]):
        assert check_pay(runs, history, kills=kills)["counts"]["at-most-once"] == 1, kills


def test_a_run_after_a_fresh_answer_or_a_seen_replay_is_caught_as_after_ack():
    """The first run's answer went out fresh (so it was stored): a run
    after it is a second execution whatever else happened, even where a
    kill would explain a rerun; and no run may reach the backend after a
    client had a 2xx for the key."""
    history = pay_events("c2-1", "L1", [
        ("c2-1.1", 90.0, 90.05, 200, False, None),
        ("c2-1.2", 93.0, 93.05, 200, False, None),
    ])
    runs = [pay_run("c2-1", "L1", "c2-1.1", 90.01, 90.02, 1),
            pay_run("c2-1", "L1", "c2-1.2", 93.01, 93.02, 2)]
    history[2]["body"], history[4]["body"] = runs[0]["response"], runs[1]["response"]
    result = check_pay(runs, history, kills=[90.03])
    assert result["counts"]["after-ack"] == 1, result
    assert "fresh 2xx" in result["violations"]["after-ack"][0]
    # The first attempt's answer lost (a kill explains the rerun), but a
    # hedged copy had a replay of it before the second run arrived.
    history = pay_events("c2-2", "L2", [
        ("c2-2.1", 100.0, 103.0, None, False, None),
        ("c2-2.2", 100.5, 100.55, 200, True, None),
        ("c2-2.3", 103.1, 103.15, 200, False, None),
    ])
    runs = [pay_run("c2-2", "L2", "c2-2.1", 100.01, 100.02, 1),
            pay_run("c2-2", "L2", "c2-2.3", 103.11, 103.12, 2)]
    history[4]["body"], history[6]["body"] = runs[0]["response"], runs[1]["response"]
    result = check_pay(runs, history, kills=[100.03])
    assert result["counts"]["at-most-once"] == 0, result
    assert result["counts"]["after-ack"] == 1
    assert "after a client had a 2xx" in result["violations"]["after-ack"][0]


def test_a_replay_of_an_execution_the_client_never_saw_is_caught():
    """The client had run 1's answer fresh; a later repeat replayed run 2's
    (the key ran again and its record was replaced)."""
    history = pay_events("c2-3", "L3", [
        ("c2-3.1", 110.0, 110.05, 200, False, None),
        ("c2-3.2", 115.0, 115.05, 200, True, None),
    ])
    runs = [pay_run("c2-3", "L3", "c2-3.1", 110.01, 110.02, 1),
            pay_run("c2-3", "L3", "c2-3.9", 112.0, 112.01, 2)]
    history[2]["body"], history[4]["body"] = runs[0]["response"], runs[1]["response"]
    result = check_pay(runs, history)
    assert result["counts"]["replay-unseen"] == 1
    assert "its client had the answer" in result["violations"]["replay-unseen"][0]
    # Two different replays of one operation are caught as well.
    history = pay_events("c2-3", "L3", [
        ("c2-3.1", 110.0, 113.0, None, False, None),
        ("c2-3.2", 115.0, 115.05, 200, True, runs[1]["response"]),
        ("c2-3.3", 116.0, 116.05, 200, True, runs[0]["response"]),
    ])
    result = check_pay(runs, history)
    assert result["counts"]["replay-unseen"] == 1
    assert "two answers" in result["violations"]["replay-unseen"][0]


def test_a_replay_body_mismatch_is_caught():
    runs, history = rerun_after_504()
    history[-2]["body"] = '{"op": "c1-1", "run": 7, "attempt": "c1-1.9"}'
    result = check_pay(runs, history)
    assert result["counts"]["replay-body"] == 1
    assert "which no run of the key answered" in result["violations"]["replay-body"][0]
    # Nor may a replay repeat the answer fencegate never read whole (the
    # first run's, whose attempt got 504).
    history[-2]["body"] = runs[0]["response"]
    result = check_pay(runs, history)
    assert result["counts"]["replay-body"] == 1
    assert "502 or 504" in result["violations"]["replay-body"][0]


def test_an_acknowledged_payment_that_never_ran_is_caught():
    runs, history = rerun_after_504()
    result = check_pay([], history)
    assert result["counts"]["acked-ran"] == 1
    assert "never ran" in result["violations"]["acked-ran"][0]


def test_a_run_nobody_sent_is_caught():
    runs, history = rerun_after_504()
    runs.append(pay_run("c9-1", "K9", "c9-1.1", 60.0, 60.01, 9))
    result = check_pay(runs, history)
    assert result["counts"]["at-most-once"] == 1
    assert "no client sent" in result["violations"]["at-most-once"][0]


def test_a_retry_refused_for_good_is_caught():
    history = pay_events("c1-7", "K7", [
        ("c1-7.1", 70.0, 73.0, None, False, None),
        ("c1-7.2", 73.1, 73.11, 422, False, None),
    ], outcome="fail")
    result = check_pay([pay_run("c1-7", "K7", "c1-7.1", 70.01, 70.02, 1)], history)
    assert result["counts"]["refused"] == 1


def test_an_idempotent_run_directory_is_checked_by_its_own_checker(tmp_path):
    runs, history = rerun_after_504()
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "c1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in history))
    (tmp_path / "applied.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    (tmp_path / "meta.json").write_text(json.dumps(
        {"workload": "idempotent", "in_flight_timeout_ms": 2000, "upstream_timeout_ms": 1000}))
    result = checker.check_run(str(tmp_path))
    assert set(result["counts"]) == set(idempotent_checker.PROPERTIES)
    assert sum(result["counts"].values()) == 0 and result["stats"]["applied"] == 2


# --- the tree workload (tree_client.py, nginx WebDAV) ------------------------
# nginx logs each request when it has answered it, in wall-clock time; the
# clients' histories are in CLOCK_MONOTONIC. WALL is the run's clock offset.

WALL = 1_800_000_000.0
NGINX = "http://127.0.0.1:8000"
STAGING = {"/staging/s0/x0": b"staging x0\n", "/staging/s0/sub/y0": b"staging y0\n"}


def tree_write(client, write, method, path, token, t, outcome="ok", status=201, dest=None,
               applied=True):
    """One write of the tree workload: its history (invoke at t, outcome at
    t + 0.2) and, when nginx answered it, its line of the request log (at
    t + 0.1, with `status`)."""
    keys = tree_checker.keys_of(method, path, dest or "")
    fields = {"key": keys[0], "keys": keys, "token": token, "write": write, "method": method,
              "path": path, **({"dest": dest} if dest else {})}
    history = [{"t": t, "client": client, "type": "invoke", **fields},
               {"t": t + 0.2, "client": client, "type": outcome, **fields, "status": status,
                "error": "stale_token" if status == 409 else ""}]
    line = {"t": WALL + t + 0.1, "method": method, "uri": path,
            "dest": f"{NGINX}{dest}" if dest else "", "token": str(token), "write": write,
            "client": client, "status": status}
    return history, [line] if applied else []


def tree_run(*writes):
    """The history and the request log of these writes, in this order."""
    history, log = [], []
    for h, line in writes:
        history += h
        log += line
    return log, sorted(history, key=lambda e: e["t"])


def tree_clean():
    """A member written with 10; a DELETE of its collection with 5 refused
    (409), then one with 11 applied; a COPY of staging with 12 and a MOVE
    of the copy with 13; two PUTs of one lease (14) in the moved
    collection; a DELETE nginx answers 404; a PUT with 9 that never came
    back and never landed."""
    writes = [
        tree_write("c1", "c1-1", "PUT", "/objects/d0/x0", 10, 1.0),
        tree_write("c2", "c2-1", "DELETE", "/objects/d0/", 5, 1.5, "fail", 409, applied=False),
        tree_write("c2", "c2-2", "DELETE", "/objects/d0/", 11, 2.0, status=204),
        tree_write("c3", "c3-1", "COPY", "/staging/s0/", 12, 2.5, dest="/objects/d1/"),
        tree_write("c3", "c3-2", "MOVE", "/objects/d1/", 13, 3.0, dest="/objects/d2/"),
        tree_write("c4", "c4-1", "PUT", "/objects/d2/x0", 14, 3.5, status=204),
        tree_write("c4", "c4-2", "PUT", "/objects/d2/x0", 14, 4.0, status=204),
        tree_write("c5", "c5-1", "DELETE", "/objects/d1/", 15, 4.5, "fail", 404),
        tree_write("c1", "c1-2", "PUT", "/objects/d0/x1", 9, 5.0, "info", None, applied=False),
    ]
    log, history = tree_run(*writes)
    disk = {"/objects/d2/x0": tree_checker.member_body("c4-2", 14),
            "/objects/d2/sub/y0": STAGING["/staging/s0/sub/y0"]}
    restarts = [{"t_kill": 5.5, "t_restarted": 6.0,
                 "fence": {"/objects/d0": 11, "/objects/d0/x0": 10, "/objects/d1": 13,
                           "/objects/d2": 13, "/objects/d2/x0": 14}}]
    return log, history, restarts, disk


def check_tree(log, history, restarts, disk):
    return tree_checker.check(log, history, restarts, STAGING, disk, clock_offset=WALL)


def test_a_clean_tree_history_has_no_violation():
    result = check_tree(*tree_clean())
    assert count(result) == {p: 0 for p in tree_checker.PROPERTIES}, result
    s = result["stats"]
    assert s["applied"] == 6 and s["ok"] == 6 and s["refused_409"] == 1
    assert s["refused_other"] == 1 and s["unknown"] == 1
    assert s["applied_by_method"] == {"PUT": 3, "DELETE": 1, "COPY": 1, "MOVE": 1}


def test_a_stale_delete_after_a_newer_member_write_breaks_tree_order():
    log, history, restarts, disk = tree_clean()
    # The DELETE with 5 goes through after the member's PUT with 10.
    stale_h, stale_log = tree_write("c2", "c2-1", "DELETE", "/objects/d0/", 5, 1.5, status=204)
    history = [e for e in history if e["write"] != "c2-1"] + stale_h
    log.insert(1, stale_log[0])
    result = check_tree(log, history, restarts, disk)
    assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0) | {"tree-order": 1}, result
    witness = result["violations"]["tree-order"][0]
    assert witness.startswith("at /objects/d0: DELETE /objects/d0/ c2-1 (client c2, token 5")
    assert "PUT /objects/d0/x0 c1-1 (client c1, token 10, t=1.100)" in witness


def test_a_move_over_a_newer_write_in_either_subtree_breaks_tree_order():
    for member in ("/objects/d0/x0", "/objects/d1/x0"):  # in its source, in its destination
        log, history = tree_run(
            tree_write("c1", "c1-1", "PUT", member, 20, 1.0),
            tree_write("c2", "c2-1", "MOVE", "/objects/d0/", 15, 2.0, dest="/objects/d1/"))
        disk = {"/objects/d1/x0": tree_checker.member_body("c1-1", 20)} \
            if member.startswith("/objects/d0/") else {}
        result = check_tree(log, history, [], disk)
        assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0) | {"tree-order": 1}
        assert (f"at {member.rsplit('/', 1)[0]}: MOVE /objects/d0/ -> /objects/d1/ c2-1"
                in result["violations"]["tree-order"][0])
        # With a token newer than the member's, the same MOVE is in order.
        log[1]["token"] = "21"
        assert count(check_tree(log, history, [], disk))["tree-order"] == 0


def test_tree_order_compares_only_writes_that_overlap():
    disk = {"/objects/d0/x0": tree_checker.member_body("c1-1", 20),
            "/objects/d1/x0": tree_checker.member_body("c2-1", 5)}
    # Another collection, a sibling member, a collection named without its
    # slash: only the last overlaps.
    log, history = tree_run(
        tree_write("c1", "c1-1", "PUT", "/objects/d0/x0", 20, 1.0),
        tree_write("c2", "c2-1", "PUT", "/objects/d1/x0", 5, 2.0),
        tree_write("c3", "c3-1", "PUT", "/objects/d0/x1", 6, 3.0),
        tree_write("c3", "c3-2", "DELETE", "/objects/d0/x1", 6, 3.5, status=204),
        tree_write("c4", "c4-1", "COPY", "/staging/s0/", 7, 4.0, dest="/objects/d0/sub"))
    disk["/objects/d0/sub/x0"] = STAGING["/staging/s0/x0"]
    disk["/objects/d0/sub/sub/y0"] = STAGING["/staging/s0/sub/y0"]
    result = check_tree(log, history, [], disk)
    assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0), result
    # A PUT older than a DELETE of its collection spelt without the slash.
    log, history = tree_run(
        tree_write("c1", "c1-1", "DELETE", "/objects/d0", 20, 1.0, "fail", 404),
        tree_write("c2", "c2-1", "DELETE", "/objects/d0", 20, 1.5, status=204),
        tree_write("c3", "c3-1", "PUT", "/objects/d0/x0", 19, 2.0))
    disk = {"/objects/d0/x0": tree_checker.member_body("c3-1", 19)}
    result = check_tree(log, history, [], disk)
    assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0) | {"tree-order": 1}
    assert "applied after DELETE /objects/d0 c2-1" in result["violations"]["tree-order"][0]


def test_an_equal_token_repeat_is_in_order():
    log, history = tree_run(
        tree_write("c1", "c1-1", "DELETE", "/objects/d0/", 8, 1.0, status=204),
        tree_write("c1", "c1-2", "PUT", "/objects/d0/x0", 8, 2.0),
        tree_write("c1", "c1-3", "PUT", "/objects/d0/x0", 8, 3.0, status=204),
        tree_write("c1", "c1-4", "DELETE", "/objects/d0/", 8, 4.0, status=204))
    result = check_tree(log, history, [], {})
    assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0), result
    log[2]["token"] = "7"
    assert count(check_tree(log, history, [], {}))["tree-order"] == 1


def test_a_tree_write_applied_without_a_token_breaks_tree_order():
    log, history, restarts, disk = tree_clean()
    log[2]["token"] = ""
    result = check_tree(log, history, restarts, disk)
    assert count(result)["tree-order"] == 1
    assert "COPY /staging/s0/ -> /objects/d1/ c3-1" in result["violations"]["tree-order"][0]
    assert "without a token" in result["violations"]["tree-order"][0]


def test_a_tree_on_disk_unlike_the_applied_writes_breaks_final_tree():
    log, history, restarts, disk = tree_clean()
    body = tree_checker.member_body("c4-2", 14)
    for bad, what in (({"/objects/d2/sub/y0": disk["/objects/d2/sub/y0"]}, "missing on disk"),
                      (dict(disk, **{"/objects/d0/x0": b"old"}), "no such file"),
                      (dict(disk, **{"/objects/d2/x0": b"lost update"}), "writes leave")):
        result = check_tree(log, history, restarts, bad)
        assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0) | {"final-tree": 1}
        assert what in result["violations"]["final-tree"][0], result
    # The witness names the write that last set the file.
    result = check_tree(log, history, restarts, {"/objects/d2/sub/y0": b"staging y0\n"})
    assert f"leave it as {body!r}; last written by PUT /objects/d2/x0 c4-2" in \
        result["violations"]["final-tree"][0]
    # A write the log does not show, which did land: the disk tells.
    assert log[5]["write"] == "c4-2"
    result = check_tree(log[:5] + log[6:], history, restarts, disk)
    assert count(result)["final-tree"] == 1 and count(result)["exactly-once"] == 1


def test_tree_writes_lost_doubled_or_unsent_break_exactly_once():
    log, history, restarts, disk = tree_clean()
    assert count(check_tree(log + [dict(log[2], t=WALL + 3.2)], history, restarts,
                            disk))["exactly-once"] == 1
    refused_applied = dict(log[0], write="c2-1", token="5", method="DELETE",
                           uri="/objects/d0/", t=WALL + 1.6, status=204)
    result = check_tree(log[:1] + [refused_applied] + log[1:], history, restarts, disk)
    assert any("refused (409 stale_token)" in w for w in result["violations"]["exactly-once"])
    unsent = dict(log[5], write="c9-1", client="c9", t=WALL + 4.3)
    result = check_tree(log + [unsent], history, restarts, disk)
    assert any("c9-1" in w and "never sent" in w for w in result["violations"]["exactly-once"])
    # The harness's staging writes are not clients' writes.
    staging = dict(log[0], uri="/staging/s0/x0", token="", write="", client="harness")
    assert count(check_tree([staging] + log, history, restarts, disk))["exactly-once"] == 0


def test_a_fence_lost_under_either_key_of_a_move_breaks_fence_restart():
    log, history, restarts, disk = tree_clean()
    for key in ("/objects/d1", "/objects/d2"):
        lost = [dict(restarts[0], fence=dict(restarts[0]["fence"], **{key: 12}))]
        result = check_tree(log, history, lost, disk)
        assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0) | {"fence-restart": 1}
        assert f"key {key}: " in result["violations"]["fence-restart"][0]
        assert "c3-2" in result["violations"]["fence-restart"][0]


def test_a_tree_run_directory_is_checked_by_its_own_checker(tmp_path):
    log, history, restarts, disk = tree_clean()
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "c.jsonl").write_text("".join(json.dumps(e) + "\n" for e in history))
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    (tmp_path / "restarts.jsonl").write_text(json.dumps(restarts[0]) + "\n")
    for path, body in disk.items():
        f = tmp_path / "nginx" / "www" / path.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(body)
    (tmp_path / "meta.json").write_text(json.dumps(
        {"workload": "tree", "through_fencegate": True, "nginx_root": "nginx/www",
         "clock_offset": WALL, "staging": {p: b.decode() for p, b in STAGING.items()}}))
    result = checker.check_run(str(tmp_path))
    assert count(result) == dict.fromkeys(tree_checker.PROPERTIES, 0), result
    assert result["stats"]["files"] == 2 and result["stats"]["applied"] == 6
