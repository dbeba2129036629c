#!/usr/bin/env python3
"""The chaos checker: did any stale write reach the backend?

    checker.py RUN_DIR        (a run directory written by chaos/run)

Inputs: the backend's applied-writes log (ground truth, in apply order), the
clients' histories, and the fence values fencegate reported right after each
restart. Per key it checks:

  token-order     applied tokens never decrease in apply order
  after-ack       no write is applied after a write with a higher token was
                  acknowledged to its client
  exactly-once    every acknowledged write was applied exactly once, every
                  refused one (409 and fencegate's other refusals) never, no
                  write was applied twice, and nothing was applied that no
                  client sent
  fence-restart   after each fencegate restart the fence is at least every
                  token acknowledged before the kill

With replicas (the cluster configuration) one stale write is allowed, and
counted apart as "window", not as a violation: the limit the README
states, a replica paused while it holds a write it accepted. A stale apply
(token-order or after-ack) is that only when the write came through the
backend listener of a replica (its "door") that was paused after the
client sent the write and resumed before the backend applied it; any other
stale apply is a violation. stats["window"] counts them and
stats["window_held_max_s"] is the longest such write took from its client
to the backend.

Every violation comes with its minimal witness: the two writes (or the write
and the fence), their tokens and CLOCK_MONOTONIC times.

A run of the idempotent workload (meta.json's "workload") is checked by
chaos/idempotent_checker.py instead, for its own properties.
"""

import bisect
import itertools
import json
import os
import sys
from collections import defaultdict

import idempotent_checker

PROPERTIES = ("token-order", "after-ack", "exactly-once", "fence-restart")
# Witnesses kept per property; a control run at volume has hundreds of
# thousands, and their number is in "counts".
MAX_WITNESSES = 1000


def iter_jsonl(path):
    """The records of a JSON-lines file, one at a time."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError:
                # A line cut by a kill: histories are written line by line, so
                # only the very last line of a file can be partial.
                continue


def read_jsonl(path):
    return list(iter_jsonl(path))


def _w(rec):
    """A write, for a witness."""
    return f"{rec.get('write')} (client {rec.get('client')}, token {rec.get('token')}, t={rec.get('t'):.3f})"


def _ack_rec(key, ack):
    t, token, write, client = ack
    return {"key": key, "t": t, "token": token, "write": write, "client": client}


# A write's fate from its history, as the low bits of its entry in the
# checker's table; the applied count is the rest (entry >> 2).
INVOKED, OK, FAIL, INFO = 0, 1, 2, 3
OUTCOME = {"ok": OK, "fail": FAIL, "info": INFO}


def in_window(rec, sent_at, windows):
    """The replica pause that explains a stale apply of `rec`, or None: one
    of the write's own replica (door) that began after the write was sent
    and ended before it was applied."""
    t_sent = sent_at.get(rec.get("write"))
    if t_sent is None or rec.get("door") is None:
        return None
    for w in windows:
        if w["replica"] == rec["door"] and t_sent <= w["t_pause"] and w["t_resume"] <= rec["t"]:
            return w
    return None


def check(applied, history, restarts, check_fence=True, windows=None):
    """Returns {"violations": {property: [witness, ...]}, "counts": {property:
    number of violations}, "stats": {...}}.

    applied and history are iterables, each read once (a volume run's are
    files of millions of lines): the checker keeps, per write, one small int
    and, per acknowledged write, one tuple, never the records themselves."""
    violations = {p: [] for p in PROPERTIES}
    counts = {p: 0 for p in PROPERTIES}

    def flag(prop, witness):
        counts[prop] += 1
        if len(violations[prop]) < MAX_WITNESSES:
            violations[prop].append(witness)

    # With replica pauses: when each write was sent, and the stale applies
    # those pauses explain (write id -> seconds from client to backend).
    sent_at, explained = {}, {}

    def stale_apply(prop, rec, witness):
        if windows and in_window(rec, sent_at, windows) is not None:
            explained[rec["write"]] = rec["t"] - sent_at[rec["write"]]
        else:
            flag(prop, witness)

    types = defaultdict(int)
    writes = {}        # write id -> outcome | applied count << 2
    refused = {}       # write id -> (status, error, client, token, t) of its `fail`
    acks = defaultdict(list)  # key -> [(t, token, write, client)]
    for ev in history:
        kind = ev["type"]
        types[kind] += 1
        if kind == "invoke":
            writes.setdefault(ev["write"], INVOKED)
            if windows:
                sent_at.setdefault(ev["write"], ev["t"])
        elif kind in OUTCOME:
            writes[ev["write"]] = OUTCOME[kind]
            if kind == "ok":
                acks[ev["key"]].append((ev["t"], ev["token"], ev["write"], ev.get("client")))
            elif kind == "fail":
                refused[ev["write"]] = (ev.get("status"), ev.get("error"), ev.get("client"),
                                        ev.get("token"), ev["t"])
    stale = sum(1 for r in refused.values() if r[0] == 409)

    # Per key, the acknowledgements in time order and the highest token
    # acknowledged up to each of them.
    ack_times, ack_best = {}, {}
    for key, evs in acks.items():
        evs.sort(key=lambda e: e[0])
        ack_times[key] = [e[0] for e in evs]
        best, prefix = None, []
        for e in evs:
            if best is None or e[1] > best[1]:
                best = e
            prefix.append(best)
        ack_best[key] = prefix

    top = {}           # token-order: key -> highest applied record so far
    unsent = defaultdict(int)
    n_applied, applied_keys = 0, set()
    for rec in applied:
        n_applied += 1
        key, token, write = rec["key"], rec.get("token"), rec.get("write")
        applied_keys.add(key)
        if write in writes:
            writes[write] += 4
        else:
            unsent[write] += 1
        # token-order: per key, in apply order.
        if token is None:
            flag("token-order", f"key {key}: {_w(rec)} was applied without a token")
            continue
        best = top.get(key)
        if best is not None and token < best["token"]:
            stale_apply("token-order", rec, f"key {key}: {_w(rec)} applied after {_w(best)}")
        if best is None or token > best["token"]:
            top[key] = rec
        # after-ack: against the highest token acknowledged (to any client)
        # before the moment it was applied.
        times = ack_times.get(key)
        if times is None:
            continue
        i = bisect.bisect_left(times, rec["t"])
        if i == 0:
            continue
        best_ack = ack_best[key][i - 1]
        if best_ack[1] > token:
            stale_apply("after-ack", rec, f"key {key}: {_w(rec)} applied after "
                                          f"{_w(_ack_rec(key, best_ack))} was acknowledged")

    # exactly-once.
    acked_by_write = None
    for write, entry in writes.items():
        outcome, n = entry & 3, entry >> 2
        if outcome == OK and n != 1:
            if acked_by_write is None:  # only when there is a witness to write
                acked_by_write = {e[2]: _ack_rec(k, e) for k, evs in acks.items() for e in evs}
            flag("exactly-once", f"acknowledged {_w(acked_by_write[write])} was applied {n} times")
        elif outcome == FAIL and n != 0:
            status, error, client, token, t = refused[write]
            ev = {"write": write, "client": client, "token": token, "t": t}
            flag("exactly-once", f"refused ({status} {error}) {_w(ev)} was applied {n} times")
        elif outcome != OK and n > 1:
            flag("exactly-once", f"write {write} was applied {n} times")
    for write in unsent:
        flag("exactly-once", f"applied write {write} was never sent by a client")

    # fence-restart.
    if check_fence:
        for r in restarts:
            for key, times in ack_times.items():
                i = bisect.bisect_left(times, r["t_kill"])
                if i == 0:
                    continue
                best = ack_best[key][i - 1]
                fence = r["fence"].get(key, 0)
                if fence < best[1]:
                    flag("fence-restart",
                         f"key {key}: after the restart at t={r['t_restarted']:.3f} the fence is "
                         f"{fence}, below {_w(_ack_rec(key, best))} acknowledged before the kill "
                         f"at t={r['t_kill']:.3f}")

    stats = {"leases": types["lease"], "writes": types["invoke"], "ok": types["ok"],
             "refused_409": stale, "refused_other": types["fail"] - stale,
             "unknown": types["info"], "applied": n_applied, "keys": len(applied_keys)}
    if windows is not None:
        stats["replica_pauses"] = len(windows)
        stats["window"] = len(explained)
        stats["window_held_max_s"] = round(max(explained.values(), default=0.0), 3)
    return {"violations": violations, "counts": counts, "stats": stats}


def load_run(run_dir):
    """The run's logs as streams (read once) and its small files."""
    applied = iter_jsonl(os.path.join(run_dir, "applied.jsonl"))
    hist_dir = os.path.join(run_dir, "history")
    names = sorted(os.listdir(hist_dir)) if os.path.isdir(hist_dir) else []
    history = itertools.chain.from_iterable(
        iter_jsonl(os.path.join(hist_dir, name)) for name in names)
    restarts = read_jsonl(os.path.join(run_dir, "restarts.jsonl"))
    meta_path = os.path.join(run_dir, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    return applied, history, restarts, meta


def check_run(run_dir):
    applied, history, restarts, meta = load_run(run_dir)
    if meta.get("workload") == "idempotent":
        limits = idempotent_checker.Limits(meta["in_flight_timeout_ms"] / 1000.0,
                                           meta["upstream_timeout_ms"] / 1000.0)
        faults = read_jsonl(os.path.join(run_dir, "faults.jsonl"))
        return idempotent_checker.check(applied, history, [r["t_kill"] for r in restarts],
                                        faults, limits)
    windows = None
    if meta.get("cluster"):
        windows = [f for f in read_jsonl(os.path.join(run_dir, "faults.jsonl"))
                   if f.get("fault") == "replica-pause"]
    return check(applied, history, restarts, check_fence=meta.get("through_fencegate", True),
                 windows=windows)


def report(result, out=sys.stdout, max_witnesses=5):
    """Prints each property's violations and witnesses; returns how many."""
    total = 0
    for p in result["counts"]:
        ws = result["violations"][p]
        n = result["counts"][p]
        total += n
        print(f"  {p:<14} {n} violation(s)", file=out)
        for w in ws[:max_witnesses]:
            print(f"      witness: {w}", file=out)
        if n > max_witnesses:
            print(f"      ... and {n - max_witnesses} more", file=out)
    return total


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = check_run(sys.argv[1])
    print(json.dumps(result["stats"]))
    return 1 if report(result) else 0


if __name__ == "__main__":
    sys.exit(main())
