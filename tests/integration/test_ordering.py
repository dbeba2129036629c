"""Writes to one key reach the backend one at a time, in the order
fencegate accepted them; writes to different keys run in parallel."""

import itertools
import re

from fg_helpers import RawConnection, build_request

# Names of backend holds (X-Test-Hold-Until): a released name lets every
# later hold of it through at once, so each hold has its own.
_holds = itertools.count()


def hold_name(what):
    return f"{what}-{next(_holds)}"


def _active_with_token(snap, path, token):
    return any(a["path"] == path and ["Fencing-Token", token] in [[k, v] for k, v in a["headers"]]
               for a in snap["active"])


def test_same_key_writes_are_serialised(gate, backend):
    with RawConnection(gate.proxy) as c33, RawConnection(gate.proxy) as c34:
        c33.send("PUT", "/objects/k", [("Fencing-Token", "33"), ("X-Test-Hold-Ms", "1000")], b"33")
        # Once 33 is being handled by the backend, fencegate has accepted it;
        # 34 sent now, on another connection, must wait until 33 is done.
        backend.wait_until(lambda s: _active_with_token(s, "/objects/k", "33"),
                           what="token 33 to reach the backend")
        c34.send("PUT", "/objects/k", [("Fencing-Token", "34")], b"34")
        r33 = c33.read_response("PUT")
        r34 = c34.read_response("PUT")
    assert 200 <= r33.status < 300, r33
    assert 200 <= r34.status < 300, r34
    log = backend.log()
    assert [e["body"] for e in log] == ["33", "34"], f"backend order: {log}"
    e33, e34 = log
    assert e34["start"] >= e33["end"], (
        f"34 reached the backend while 33 was still held there: "
        f"33 = [{e33['start']:.3f}, {e33['end']:.3f}], 34 started {e34['start']:.3f}")


def test_same_key_sent_back_to_back(gate, backend):
    # 34 sent right after 33 was written to the socket, without waiting for
    # anything. fencegate may see them in either order; whatever it accepted
    # must reach the backend one at a time and a refused one never.
    with RawConnection(gate.proxy) as c33, RawConnection(gate.proxy) as c34:
        c33.send("PUT", "/objects/k2", [("Fencing-Token", "33"), ("X-Test-Hold-Ms", "1000")], b"33")
        c34.send("PUT", "/objects/k2", [("Fencing-Token", "34")], b"34")
        r33 = c33.read_response("PUT")
        r34 = c34.read_response("PUT")
    assert 200 <= r34.status < 300, r34
    log = backend.log()
    if r33.status == 409:          # 34 was accepted first: 33 is stale
        assert [e["body"] for e in log] == ["34"], log
    else:
        assert 200 <= r33.status < 300, r33
        assert [e["body"] for e in log] == ["33", "34"], log
        assert log[1]["start"] >= log[0]["end"], f"overlap at the backend: {log}"


def test_different_keys_run_in_parallel(gate, backend):
    with RawConnection(gate.proxy) as ca, RawConnection(gate.proxy) as cb:
        # Each held at the backend until both are there: were the second
        # key's write to wait for the first's, the wait below would time out.
        ca.send("PUT", "/objects/p1", [("Fencing-Token", "1"), ("X-Test-Hold-Until", "both")],
                b"a")
        cb.send("PUT", "/objects/p2", [("Fencing-Token", "1"), ("X-Test-Hold-Until", "both")],
                b"b")
        backend.wait_until(lambda s: len(s["active"]) == 2,
                           what="both writes at the backend at once")
        backend.release("both")
        ra = ca.read_response("PUT")
        rb = cb.read_response("PUT")
    assert 200 <= ra.status < 300 and 200 <= rb.status < 300, (ra, rb)
    log = {e["path"]: e for e in backend.log()}
    a, b = log["/objects/p1"], log["/objects/p2"]
    assert a["start"] < b["end"] and b["start"] < a["end"], (
        f"writes to different keys did not overlap at the backend: "
        f"p1 [{a['start']:.3f}, {a['end']:.3f}], p2 [{b['start']:.3f}, {b['end']:.3f}]")


def _hot_key_writes(gate, backend, writers=6):
    """One write of /objects/hot held at the backend, `writers - 1` more
    queued behind it, each on its own connection (consecutive connections
    go to alternate I/O threads). Checks that the writes reached the backend
    once each, one at a time, and that each client got the answer to its
    own write."""
    conns = [RawConnection(gate.proxy) for _ in range(writers)]
    hold = hold_name("hot")
    try:
        conns[0].send("PUT", "/objects/hot", [("Fencing-Token", "7"), ("X-Test-Hold-Until", hold)],
                      b"w0", close=False)
        backend.wait_until(lambda s: _active_with_token(s, "/objects/hot", "7"),
                           what="the first write to reach the backend")
        # The rest queue behind it, each held briefly at the backend so that
        # an overlap would show in the log's times; the first goes once
        # every one of them waits for the key.
        for i, c in enumerate(conns[1:], start=1):
            c.send("PUT", "/objects/hot", [("Fencing-Token", "7"), ("X-Test-Hold-Ms", "20")],
                   b"w%d" % i, close=False)
        gate.wait_metric("fencegate_keys_waiting", writers - 1)
        backend.release(hold)
        answers = [c.read_response("PUT") for c in conns]
    finally:
        for c in conns:
            c.close()
    log = backend.log()
    assert [a.status for a in answers] == [201] + [200] * (writers - 1), answers
    # Each exactly once: a request sent twice (by two threads) shows here.
    assert log[0]["body"] == "w0" and sorted(e["body"] for e in log) == sorted(
        f"w{i}" for i in range(writers)), log
    for before, after in zip(log, log[1:]):
        assert after["start"] >= before["end"], (
            f"{after['body']} reached the backend while {before['body']} was still there: {log}")
    # The request id fencegate gave each write upstream comes back to the
    # client that sent it.
    sent_id = {e["body"]: dict(e["headers"])["X-Request-Id"] for e in log}
    for i, answer in enumerate(answers):
        assert answer.header("X-Request-Id") == sent_id[f"w{i}"], (i, answer, log)


def test_a_hot_key_on_one_thread_is_handed_on_one_write_at_a_time(make_gate, backend):
    # With one thread every waiter of the key runs where the previous write
    # ends, and the key is handed on before that write's response goes to
    # its client (KeyLease::HandOn). The writes must still reach the
    # backend one at a time, and each client must get the answer to its own
    # write.
    _hot_key_writes(make_gate(threads=1), backend)


def test_a_hot_key_handed_to_another_thread_goes_from_the_handing_thread(make_gate, backend):
    # With two threads, consecutive writers sit on alternate threads. The
    # thread where a write ends sends the next one's request itself, on its
    # own upstream connection, and hands that connection over (fence/handoff.h);
    # the writer's own thread reads the response. The same guarantees hold,
    # and the debug log shows the hand-overs happened. The hand-over carries
    # a write of one key only: the route keeps the flat model (a write over
    # the tree of paths waits on several of its nodes, and goes from its own
    # thread).
    gate = make_gate(threads=2, log={"level": "debug", "access_log": True},
                     routes=[{"name": "objects", "path_prefix": "/objects/", "nesting": "off"}])
    _hot_key_writes(gate, backend)
    with open(gate.stderr_path) as f:
        relayed = [line for line in f if "sent upstream by the thread that handed the key on" in line]
    assert relayed, "no write was sent by the thread that handed the key on:\n" + gate.stderr_tail()


def test_the_clients_of_a_hot_key_move_to_its_thread_with_their_pipelined_requests(
        make_gate, backend):
    # With two threads, a client whose writes wait for a key that lives on
    # the other thread moves there between two requests (after its first
    # such wait: test_a_client_moves_after_one_wait_and_at_most_once...),
    # with whatever it already sent behind its last write. Once every client
    # of the key is on the key's thread, the key is handed on within it: no
    # write is sent upstream by another thread.
    gate = make_gate(threads=2, log={"level": "debug", "access_log": True})
    host = f"{gate.proxy[0]}:{gate.proxy[1]}"
    conns = [RawConnection(gate.proxy) for _ in range(4)]  # on alternate threads

    def round_of_writes(rnd):
        # One write held at the backend; the other clients' writes wait
        # behind it, each with a GET of its own pipelined in the same packet.
        # The held one goes once all of them wait.
        leader = conns[rnd % len(conns)]
        hold = hold_name(f"round{rnd}")
        leader.send("PUT", "/objects/hot", [("Fencing-Token", "7"), ("X-Test-Hold-Until", hold)],
                    b"r%d-lead" % rnd, close=False)
        backend.wait_until(lambda s: any(a["path"] == "/objects/hot" for a in s["active"]),
                           what=f"round {rnd}'s first write to reach the backend")
        others = [c for c in conns if c is not leader]
        for i, c in enumerate(others):
            c.send_raw(build_request("PUT", "/objects/hot", [("Fencing-Token", "7")],
                                     b"r%d-%d" % (rnd, i), host=host, close=False)
                       + build_request("GET", f"/plain/r{rnd}-{i}", host=host, close=False))
        gate.wait_metric("fencegate_keys_waiting", len(others))
        backend.release(hold)
        assert leader.read_response("PUT").status in (200, 201)
        for c in others:
            assert c.read_response("PUT").status == 200
            assert c.read_response("GET").status == 404  # answered by the backend

    def log_lines():
        with open(gate.stderr_path) as f:
            return f.readlines()

    try:
        for rnd in range(4):  # each client waits in 3 of them
            round_of_writes(rnd)
        before = len(log_lines())
        round_of_writes(4)
    finally:
        for c in conns:
            c.close()
    lines = log_lines()
    moves = [line for line in lines if "moves to the I/O thread of key /objects/hot" in line]
    assert 1 <= len(moves) <= len(conns), (
        "the hot key's clients did not move to its thread (or moved back and forth):\n"
        + "".join(moves) + gate.stderr_tail())
    late = [line for line in lines[before:]
            if "sent upstream by the thread that handed the key on" in line]
    assert not late, "once moved, writes were still handed across threads:\n" + "".join(late)
    # Every pipelined GET reached the backend, from whichever thread.
    gets = sorted(e["path"] for e in backend.log() if e["method"] == "GET")
    assert gets == sorted(f"/plain/r{r}-{i}" for r in range(5) for i in range(3)), gets


def test_a_client_moves_after_one_wait_and_at_most_once_between_keys_of_two_threads(
        make_gate, backend):
    # A connection that has not moved yet moves to the thread of the key its
    # write waited for after that one wait, so that the new clients of a hot
    # key gather on its thread within one round of its queue. Once moved, it
    # moves again only after two waits in a row for keys of one other
    # thread: a client whose writes alternate between a key of each thread
    # moves once (its first write that waits for a key of the other thread),
    # never back and forth.
    gate = make_gate(threads=2, log={"level": "debug"})
    leader = RawConnection(gate.proxy)  # its writes never wait: it never moves

    def moves():
        with open(gate.stderr_path) as f:
            return re.findall(r"moves to the I/O thread of key (\S+) \(thread (\d+)\)", f.read())

    def wait_behind_leader(client, key):
        hold = hold_name("lead")
        leader.send("PUT", key, [("Fencing-Token", "7"), ("X-Test-Hold-Until", hold)], b"lead",
                    close=False)
        backend.wait_until(lambda s: any(a["path"] == key for a in s["active"]),
                           what=f"the leader's write of {key} to reach the backend")
        client.send("PUT", key, [("Fencing-Token", "7")], b"waiter", close=False)
        gate.wait_metric("fencegate_keys_waiting", 1)  # the client's write waits
        backend.release(hold)
        assert leader.read_response("PUT").status in (200, 201)
        assert client.read_response("PUT").status in (200, 201)
        # A move is logged before the moved connection's next request is
        # read: once this is answered, the log has it.
        client.send("GET", "/plain/after", [], close=False)
        assert client.read_response("GET").status == 404

    # A new connection per key, on either thread: the one that waited for a
    # key of the other thread moves there after that single wait, and the
    # log says which thread. Until a key of each thread is known.
    home = {}
    try:
        for i in range(40):
            if len(set(home.values())) == 2:
                break
            key = f"/objects/probe{i}"
            with RawConnection(gate.proxy) as fresh:
                wait_behind_leader(fresh, key)
            home.update(moves())
        by_thread = {t: k for k, t in home.items()}
        assert len(by_thread) == 2, (
            f"no new client moved after one wait for a key of both threads: {home}\n"
            + gate.stderr_tail())
        moved_before = len(moves())
        # One client, alternating between a key of each thread, each write
        # waiting behind the leader's.
        with RawConnection(gate.proxy) as client:
            for _ in range(4):
                for key in by_thread.values():
                    wait_behind_leader(client, key)
        later = moves()[moved_before:]
    finally:
        leader.close()
    assert len(later) == 1, (
        f"a client alternating between {by_thread} moved {len(later)} times, not once: {later}")
