"""The chaos checker of the idempotent workload: did a payment run twice
where the contract does not allow it, or did a client get an answer that
no run gave?

Inputs: the backend's runs (applied.jsonl, chaos/backend.py), the
clients' histories (chaos/idempotent_client.py), fencegate's kills
(restarts.jsonl), the nemesis' other faults (faults.jsonl) and the run's
timeouts (meta.json). Per idempotency key:

  at-most-once   the key ran at the backend once, or each further run is
                 explained by the limit the contract documents
                 (docs/contract.md, "Idempotency keys"): the run before it
                 left no stored answer, and the reservation it held had
                 run out. Every run comes from an attempt a client sent
                 with that key.
  acked-ran      every operation a client saw succeed (a 2xx or a replay)
                 ran at the backend, and an attempt the backend answered
                 ran there.
  replay-body    every replay is byte for byte the body the backend
                 answered one of the key's runs with, never that of a run
                 whose own attempt got a 502 or 504 (fencegate never read
                 that answer whole); every 2xx that is not a replay is the
                 body of the run its attempt caused.
  refused        no attempt was refused for good (a 4xx other than 408,
                 409 and 429): each repeats its key's first request.
  after-ack      no run of a key follows a run whose attempt got a fresh
                 2xx (its answer went out only once stored), nor reached
                 the backend after any client had a 2xx for the key.
  replay-unseen  an operation whose client got a fresh 2xx is replayed
                 only that answer, and one operation is never replayed two
                 different answers.

A further run N after run P (in arrival order) is explained when both hold:

  1. P's answer was never stored, for one of these causes:
       upstream        P's attempt got a 502 or 504 from fencegate: the
                       exchange with the backend failed, and the
                       reservation stays until in_flight_timeout;
       kill            fencegate was SIGKILLed after P's attempt was sent
                       and before it could have stored the answer: no
                       later than STORE_GRACE_S after the backend answered
                       P (after its last piece, for a streamed answer), or,
                       when the attempt got no HTTP answer, before the
                       client stopped waiting for it;
       store           P's attempt got 503 store_unavailable (the run's
                       answer could not be stored, and is kept in memory
                       while fencegate lives), and fencegate was SIGKILLed
                       between P's attempt and N;
       upstream-unseen P's attempt got no HTTP answer, and its exchange
                       with the backend may have failed: a fault on the
                       backend's side (slow, stalled, network) overlapped
                       the time from the attempt's sending to the
                       backend's answer (its last piece, for a streamed
                       answer), or the backend answered at least
                       upstream.timeout after the attempt was sent.
  2. N reached the backend at least in_flight_timeout after fencegate gave
     up on P, less CLOCK_TOLERANCE_S. A live request's reservation never
     expires, and one whose outcome is unknown is kept for
     in_flight_timeout from then: fencegate gave up no sooner than P's
     arrival at the backend (less any latency added on the backend's side
     and GAVE_UP_SLACK_S), and, for a 504, than upstream.timeout after P's
     attempt was sent. When the client read the 502 or 504 bounds nothing:
     a client the nemesis paused, or one starved on a busy machine, reads
     it late. After a kill between P's attempt and N only
     the store's reservation is left, which a crash may have left unrenewed
     since it was made: then from P's attempt's sending.

Anything else is a violation, with its witness: the two runs, their
attempts, and what is missing.
"""

import bisect
from collections import defaultdict

PROPERTIES = ("at-most-once", "acked-ran", "replay-body", "refused", "after-ack",
              "replay-unseen")
MAX_WITNESSES = 1000
# Reservations carry wall-clock milliseconds, the harness CLOCK_MONOTONIC
# seconds: a millisecond of truncation, and the two clocks' rates, which
# differ by parts per million over the seconds compared.
CLOCK_TOLERANCE_S = 0.01
# From the backend's answer to the stored record: the answer crosses the
# fault proxy (at most the latency the nemesis adds) and is committed by
# the store's writer (milliseconds, or more on a loaded machine).
STORE_GRACE_S = 1.0
# The nemesis logs a fault just before it sets it, and heals it just after
# its duration.
FAULT_SLACK_S = 0.25
# How much earlier than the harness sees it fencegate may have given up on
# a request: the backend logs an arrival once its Python thread has read the
# request (late on a loaded machine), and a 502 or 504 crosses the client's
# fault proxy after it was decided.
GAVE_UP_SLACK_S = 0.5
BACKEND_FAULTS = ("slow-backend", "stall-backend", "net-backend")
RETRIED_STATUSES = (408, 409, 429)


def backend_fault_spans(faults):
    """[(start, end, kind)] of the faults on the backend's side: a slow or
    stalled backend delays the writes it starts until the end of the fault,
    each by `ms`; a network fault's delayed bytes arrive `latency_ms` late."""
    spans = []
    for f in faults:
        kind = f.get("fault")
        if kind not in BACKEND_FAULTS:
            continue
        extra = (f.get("ms") or f.get("latency_ms") or 0) / 1000.0
        spans.append((f["t"], f["t"] + f.get("seconds", 0) + extra + FAULT_SLACK_S, kind))
    return sorted(spans)


def _a(attempt_id, att):
    """An attempt, for a witness."""
    if att is None:
        return f"attempt {attempt_id} (in no history)"
    got = "no HTTP answer" if att.get("status") is None else f"status {att['status']}"
    if att.get("replayed"):
        got += " replayed"
    err = f" {att['error']}" if att.get("error") else ""
    end = f"{att['e']:.3f}" if att.get("e") is not None else "?"
    return f"attempt {attempt_id} (sent t={att['s']:.3f}, ended t={end}: {got}{err})"


def _r(run, att=None):
    """A run, for a witness; with its attempt's fate when given."""
    how = f"ran (arrived t={run['t_arrive']:.3f}, answered t={run['t']:.3f})"
    if att is not None:
        return f"{_a(run.get('attempt'), att)} {how}"
    return f"attempt {run.get('attempt')} {how}"


class Limits:
    """What the run was configured with (seconds)."""

    def __init__(self, in_flight_timeout_s, upstream_timeout_s):
        self.in_flight_timeout = in_flight_timeout_s
        self.upstream_timeout = upstream_timeout_s


def latency_spans(faults, kind):
    """[(start, end, seconds)] of the `kind` faults that delayed bytes."""
    return [(f["t"], f["t"] + f.get("seconds", 0) + FAULT_SLACK_S, f["latency_ms"] / 1000.0)
            for f in faults
            if f.get("fault") == kind and f.get("mode") == "latency" and f.get("latency_ms")]


def added_latency(spans, start, end):
    """The most latency a fault of `spans` added within [start, end]."""
    return max((lat for s, e, lat in spans if s <= end and e >= start), default=0.0)


def killed_within(kills, start, end):
    i = bisect.bisect_left(kills, start - CLOCK_TOLERANCE_S)
    return i < len(kills) and kills[i] <= end


def unstored_cause(prev, att, nxt, kills, spans, limits):
    """Why fencegate may never have stored the answer to run `prev`, whose
    attempt is `att`, before run `nxt`: "upstream", "kill", "store",
    "upstream-unseen", or None."""
    if att is None:
        return None
    if att["status"] in (502, 504):
        return "upstream"
    if att["status"] == 503 and att.get("error") == "store_unavailable":
        return "store" if killed_within(kills, att["s"], nxt["t_arrive"]) else None
    if att["status"] is not None:
        return None  # fencegate answered otherwise: not an upstream failure, and alive
    s, p = att["s"], prev["t"]
    e = att["e"] if att.get("e") is not None else float("inf")
    answered = p + prev.get("stream_ms", 0) / 1000.0  # its last piece
    if killed_within(kills, s, max(e, answered + STORE_GRACE_S)):
        return "kill"
    if p - s >= limits.upstream_timeout:
        return "upstream-unseen"
    if any(start <= answered and end >= s for start, end, _ in spans):
        return "upstream-unseen"  # a fault before its answer, or during its stream
    return None


def gave_up_by(prev, att, nxt, kills, latencies, limits):
    """(the earliest moment fencegate may have given up on run `prev`'s
    attempt `att`, what it is dated from), for a run `nxt` after it. Only
    bounds that hold whatever the harness's own processes were doing: when
    a client read its answer says nothing (a paused or starved client reads
    it late)."""
    if killed_within(kills, att["s"], nxt["t_arrive"]):
        return att["s"], "the first run's attempt (a kill came between)"
    lat = added_latency(latencies["net-backend"], att["s"], prev["t_arrive"])
    arrival = max(att["s"], prev["t_arrive"] - lat - GAVE_UP_SLACK_S)
    if att["status"] == 504 and att["s"] + limits.upstream_timeout > arrival:
        # fencegate times out no sooner than upstream.timeout after it sent
        # the request, which was after the attempt was.
        return att["s"] + limits.upstream_timeout, "the first run's attempt and upstream.timeout"
    return arrival, "the first run's arrival at the backend"


def check(runs, history, kills, faults, limits):
    """Returns {"violations": {property: [witness, ...]}, "counts": {...},
    "stats": {...}} as checker.check does.

    runs: the backend's records; history: every client's events; kills:
    CLOCK_MONOTONIC times of fencegate's SIGKILLs; faults: the nemesis'
    faults.jsonl records; limits: a Limits."""
    violations = {p: [] for p in PROPERTIES}
    counts = {p: 0 for p in PROPERTIES}

    def flag(prop, witness):
        counts[prop] += 1
        if len(violations[prop]) < MAX_WITNESSES:
            violations[prop].append(witness)

    ops = {}                     # op -> {"key", "outcome", "client"}
    key_op = {}                  # key -> op
    attempts = {}                # attempt id -> {"op", "s", "e", "status", ...}
    types = defaultdict(int)
    shapes = defaultdict(int)
    late_hedges = 0
    for ev in history:
        kind = ev["type"]
        types[kind] += 1
        if kind == "invoke":
            ops[ev["op"]] = {"key": ev["key"], "outcome": None, "client": ev.get("client")}
            key_op[ev["key"]] = ev["op"]
            shapes[ev.get("shape", "plain")] += 1
        elif kind == "attempt":
            late_hedges += bool(ev.get("late"))
            attempts[ev["attempt"]] = {"op": ev["op"], "s": ev["t"], "e": None, "status": None,
                                       "replayed": False, "error": "", "body": None}
        elif kind == "answer":
            att = attempts.setdefault(ev["attempt"], {"op": ev["op"], "s": ev["t"]})
            att.update(e=ev["t"], status=ev.get("status"), replayed=bool(ev.get("replayed")),
                       error=ev.get("error", ""), body=ev.get("body"))
        elif kind in ("ok", "fail", "info") and ev["op"] in ops:
            ops[ev["op"]]["outcome"] = kind

    by_key = defaultdict(list)
    n_runs = 0
    for rec in runs:
        n_runs += 1
        by_key[rec.get("key")].append(rec)
    kills = sorted(kills)
    spans = backend_fault_spans(faults)
    latencies = {"net-backend": latency_spans(faults, "net-backend")}

    # at-most-once
    explained = defaultdict(int)
    for key, rs in by_key.items():
        rs.sort(key=lambda r: r["t_arrive"])
        op = key_op.get(key)
        for r in rs:
            att = attempts.get(r.get("attempt"))
            if op is None or r.get("op") != op or att is None or att["op"] != op:
                flag("at-most-once", f"key {key}: {_r(r)} for operation {r.get('op')}, which "
                                     f"no client sent with this key (its operation: {op})")
        for prev, nxt in zip(rs, rs[1:]):
            att = attempts.get(prev.get("attempt"))
            if prev.get("attempt") == nxt.get("attempt"):
                flag("at-most-once", f"key {key}: {_r(prev)}, and again: {_r(nxt)}")
                continue
            cause = unstored_cause(prev, att, nxt, kills, spans, limits)
            problems = []
            if cause is None:
                problems.append("nothing explains why fencegate did not store the first "
                                "run's answer (no 502/504, no kill, no backend fault)")
            if att is not None:
                since, what = gave_up_by(prev, att, nxt, kills, latencies, limits)
                early = nxt["t_arrive"] - since
                if early < limits.in_flight_timeout - CLOCK_TOLERANCE_S:
                    problems.append(f"the second run arrived {early:.3f} s after fencegate "
                                    f"may have given up on the first (dated from {what}), "
                                    f"before in_flight_timeout "
                                    f"({limits.in_flight_timeout:g} s)")
            if problems:
                flag("at-most-once", f"key {key} ({op}) ran twice: {_r(prev, att)}, then "
                                     f"{_r(nxt)}: " + "; ".join(problems))
            else:
                explained[cause] += 1

    # after-ack: fencegate relays a fresh 2xx only once its record is
    # stored, and a stored record is replayed, never run again.
    acked_at = {}  # key -> when a client first had a 2xx for it
    for aid, att in attempts.items():
        status, key = att.get("status"), ops.get(att["op"], {}).get("key")
        if status is not None and 200 <= status < 300 and att.get("e") is not None:
            acked_at[key] = min(acked_at.get(key, float("inf")), att["e"])
    for key, rs in by_key.items():
        fresh = None  # the first run whose own attempt got a fresh 2xx
        for r in rs:
            if fresh is not None:
                flag("after-ack", f"key {key}: {_r(r)} ran after "
                                  f"{_r(fresh, attempts.get(fresh.get('attempt')))}, whose "
                                  f"answer went out as a fresh 2xx")
                continue
            if r["t_arrive"] > acked_at.get(key, float("inf")) + CLOCK_TOLERANCE_S:
                flag("after-ack", f"key {key}: {_r(r)} reached the backend after a client "
                                  f"had a 2xx for the key (t={acked_at[key]:.3f})")
            att = attempts.get(r.get("attempt"))
            if att is not None and att.get("status") is not None and \
                    200 <= att["status"] < 300 and not att["replayed"]:
                fresh = r

    # replay-unseen: a replay repeats the answer its operation's client saw.
    seen = defaultdict(lambda: (set(), set()))  # op -> (fresh bodies, replayed bodies)
    for aid, att in attempts.items():
        status = att.get("status")
        if status is not None and 200 <= status < 300:
            seen[att["op"]][1 if att["replayed"] else 0].add(att.get("body"))
    for op, (fresh, replayed) in seen.items():
        key = ops.get(op, {}).get("key")
        if fresh and replayed - fresh:
            flag("replay-unseen", f"key {key} ({op}): replayed {sorted(replayed - fresh)}, "
                                  f"but its client had the answer {sorted(fresh)}")
        elif len(replayed) > 1:
            flag("replay-unseen", f"key {key} ({op}): replayed two answers: {sorted(replayed)}")

    # acked-ran, replay-body, refused
    responses = {k: {r["response"] for r in rs} for k, rs in by_key.items()}
    run_of_attempt = {r.get("attempt"): r for rs in by_key.values() for r in rs}
    failed_upstream = {r["response"] for rs in by_key.values() for r in rs
                       if attempts.get(r.get("attempt"), {}).get("status") in (502, 504)}
    replays = refused_409 = 0
    for aid, att in attempts.items():
        status = att.get("status")
        op = att["op"]
        key = ops.get(op, {}).get("key")
        if status is None:
            continue
        if status == 409:
            refused_409 += 1
        if 200 <= status < 300 and att["replayed"]:
            replays += 1
            body = att.get("body")
            if body not in responses.get(key, ()):
                flag("replay-body", f"key {key} ({op}): {_a(aid, att)} replayed {body!r}, "
                                    f"which no run of the key answered "
                                    f"(they answered {sorted(responses.get(key, ()))})")
            elif body in failed_upstream:
                flag("replay-body", f"key {key} ({op}): {_a(aid, att)} replayed {body!r}, the "
                                    f"answer of a run whose own attempt got a 502 or 504")
        elif 200 <= status < 300:
            run = run_of_attempt.get(aid)
            if run is None:
                flag("acked-ran", f"key {key} ({op}): {_a(aid, att)} was answered by no run "
                                  f"at the backend")
            elif att.get("body") != run["response"]:
                flag("replay-body", f"key {key} ({op}): {_a(aid, att)} got {att.get('body')!r}, "
                                    f"but its run answered {run['response']!r}")
        elif status < 500 and status not in RETRIED_STATUSES:
            flag("refused", f"key {key} ({op}): {_a(aid, att)} was refused for good")
    for op, o in ops.items():
        if o["outcome"] == "ok" and not by_key.get(o["key"]):
            flag("acked-ran", f"key {o['key']} ({op}): client {o['client']} saw it succeed, "
                              f"but it never ran at the backend")

    outcomes = defaultdict(int)
    for o in ops.values():
        outcomes[o["outcome"]] += 1
    stats = {"leases": 0, "writes": len(ops), "ok": outcomes["ok"], "refused_409": refused_409,
             "refused_other": outcomes["fail"], "unknown": outcomes["info"],
             "applied": n_runs, "keys": len(by_key), "attempts": types["attempt"],
             "replays": replays, "kills": len(kills),
             "explained_reruns": dict(explained),
             "slow_uploads": shapes["slow-upload"], "streams": shapes["stream"],
             "late_hedges": late_hedges}
    return {"violations": violations, "counts": counts, "stats": stats}
