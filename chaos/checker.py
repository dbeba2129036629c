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
to the backend. stats["moves"] counts the keys' moves between replicas: a
key's applied write that came through another door than the key's
previous one.

Every violation comes with its minimal witness: the two writes (or the write
and the fence), their tokens and CLOCK_MONOTONIC times.

A run of the idempotent workload (meta.json's "workload") is checked by
chaos/idempotent_checker.py instead, for its own properties, and one of the
tree workload by chaos/tree_checker.py, which builds on this module's
Findings and Outcomes.
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


class Findings:
    """Violations per property: each one counted, the first MAX_WITNESSES
    kept with their witness."""

    def __init__(self, properties):
        self.violations = {p: [] for p in properties}
        self.counts = {p: 0 for p in properties}

    def flag(self, prop, witness):
        self.counts[prop] += 1
        if len(self.violations[prop]) < MAX_WITNESSES:
            self.violations[prop].append(witness)

    def result(self, stats):
        return {"violations": self.violations, "counts": self.counts, "stats": stats}


class Outcomes:
    """What the clients' histories say of each write, read once: per write
    one small int (its fate, and the times the backend applied it, counted
    by applied()), per refused write its refusal, per key the
    acknowledgements in time order with the highest token acknowledged up
    to each. A write's keys are its record's `keys`, or its `key`. With
    `sent=True` it also keeps when each write was sent."""

    def __init__(self, history, sent=False):
        self.types = defaultdict(int)
        self.writes = {}        # write id -> outcome | applied count << 2
        self.refused = {}       # write id -> (status, error, client, token, t) of its `fail`
        self.sent_at = {}
        acks = defaultdict(list)  # key -> [(t, token, write, client)]
        for ev in history:
            kind = ev["type"]
            self.types[kind] += 1
            if kind == "invoke":
                self.writes.setdefault(ev["write"], INVOKED)
                if sent:
                    self.sent_at.setdefault(ev["write"], ev["t"])
            elif kind in OUTCOME:
                self.writes[ev["write"]] = OUTCOME[kind]
                if kind == "ok":
                    for key in ev.get("keys") or [ev["key"]]:
                        acks[key].append((ev["t"], ev["token"], ev["write"], ev.get("client")))
                elif kind == "fail":
                    self.refused[ev["write"]] = (ev.get("status"), ev.get("error"),
                                                 ev.get("client"), ev.get("token"), ev["t"])
        self.acks = acks
        self.stale = sum(1 for r in self.refused.values() if r[0] == 409)
        self.unsent = defaultdict(int)  # applied writes no history names -> times applied
        # Per key, the acknowledgements' times and the highest token
        # acknowledged up to each of them.
        self.ack_times, self.ack_best = {}, {}
        for key, evs in acks.items():
            evs.sort(key=lambda e: e[0])
            self.ack_times[key] = [e[0] for e in evs]
            best, prefix = None, []
            for e in evs:
                if best is None or e[1] > best[1]:
                    best = e
                prefix.append(best)
            self.ack_best[key] = prefix

    def applied(self, write):
        """Counts one application of `write` at the backend."""
        if write in self.writes:
            self.writes[write] += 4
        else:
            self.unsent[write] += 1

    def best_ack_before(self, key, t):
        """The acknowledgement with the highest token of `key` among those
        made before `t`, as (t, token, write, client), or None."""
        times = self.ack_times.get(key)
        if times is None:
            return None
        i = bisect.bisect_left(times, t)
        return self.ack_best[key][i - 1] if i else None

    def exactly_once(self, findings):
        """Every acknowledged write applied once, every refused one never,
        none twice, none that no client sent."""
        acked_by_write = None
        for write, entry in self.writes.items():
            outcome, n = entry & 3, entry >> 2
            if outcome == OK and n != 1:
                if acked_by_write is None:  # only when there is a witness to write
                    acked_by_write = {e[2]: _ack_rec(k, e)
                                      for k, evs in self.acks.items() for e in evs}
                findings.flag("exactly-once",
                              f"acknowledged {_w(acked_by_write[write])} was applied {n} times")
            elif outcome == FAIL and n != 0:
                status, error, client, token, t = self.refused[write]
                ev = {"write": write, "client": client, "token": token, "t": t}
                findings.flag("exactly-once",
                              f"refused ({status} {error}) {_w(ev)} was applied {n} times")
            elif outcome != OK and n > 1:
                findings.flag("exactly-once", f"write {write} was applied {n} times")
        for write in self.unsent:
            findings.flag("exactly-once", f"applied write {write} was never sent by a client")

    def fence_restart(self, findings, restarts):
        """After each restart, every key's fence is at least every token
        acknowledged for it before the kill."""
        for r in restarts:
            for key in self.ack_times:
                best = self.best_ack_before(key, r["t_kill"])
                if best is None:
                    continue
                fence = r["fence"].get(key, 0)
                if fence < best[1]:
                    findings.flag(
                        "fence-restart",
                        f"key {key}: after the restart at t={r['t_restarted']:.3f} the fence is "
                        f"{fence}, below {_w(_ack_rec(key, best))} acknowledged before the kill "
                        f"at t={r['t_kill']:.3f}")

    def stats(self, n_applied):
        t = self.types
        return {"leases": t["lease"], "writes": t["invoke"], "ok": t["ok"],
                "refused_409": self.stale, "refused_other": t["fail"] - self.stale,
                "unknown": t["info"], "applied": n_applied}


def check(applied, history, restarts, check_fence=True, windows=None):
    """Returns {"violations": {property: [witness, ...]}, "counts": {property:
    number of violations}, "stats": {...}}.

    applied and history are iterables, each read once (a volume run's are
    files of millions of lines): the checker keeps, per write, one small int
    and, per acknowledged write, one tuple, never the records themselves."""
    findings = Findings(PROPERTIES)
    # With replica pauses: when each write was sent, and the stale applies
    # those pauses explain (write id -> seconds from client to backend).
    outcomes = Outcomes(history, sent=bool(windows))
    sent_at, explained = outcomes.sent_at, {}

    def stale_apply(prop, rec, witness):
        if windows and in_window(rec, sent_at, windows) is not None:
            explained[rec["write"]] = rec["t"] - sent_at[rec["write"]]
        else:
            findings.flag(prop, witness)

    top = {}           # token-order: key -> highest applied record so far
    n_applied, applied_keys = 0, set()
    door_of, moves = {}, 0  # replicas: the door each key's last write came through
    for rec in applied:
        n_applied += 1
        key, token = rec["key"], rec.get("token")
        applied_keys.add(key)
        door = rec.get("door")
        if door is not None:
            moves += door_of.setdefault(key, door) != door
            door_of[key] = door
        outcomes.applied(rec.get("write"))
        # token-order: per key, in apply order.
        if token is None:
            findings.flag("token-order", f"key {key}: {_w(rec)} was applied without a token")
            continue
        best = top.get(key)
        if best is not None and token < best["token"]:
            stale_apply("token-order", rec, f"key {key}: {_w(rec)} applied after {_w(best)}")
        if best is None or token > best["token"]:
            top[key] = rec
        # after-ack: against the highest token acknowledged (to any client)
        # before the moment it was applied.
        best_ack = outcomes.best_ack_before(key, rec["t"])
        if best_ack is not None and best_ack[1] > token:
            stale_apply("after-ack", rec, f"key {key}: {_w(rec)} applied after "
                                          f"{_w(_ack_rec(key, best_ack))} was acknowledged")

    outcomes.exactly_once(findings)
    if check_fence:
        outcomes.fence_restart(findings, restarts)

    stats = dict(outcomes.stats(n_applied), keys=len(applied_keys))
    if door_of:
        stats["moves"] = moves
    if windows is not None:
        stats["replica_pauses"] = len(windows)
        stats["window"] = len(explained)
        stats["window_held_max_s"] = round(max(explained.values(), default=0.0), 3)
    return findings.result(stats)


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
    if meta.get("workload") == "tree":
        import tree_checker  # imported here: it imports this module
        return tree_checker.check_run(run_dir, meta, history, restarts)
    if meta.get("workload") == "idempotent":
        limits = idempotent_checker.Limits(meta["in_flight_timeout_ms"] / 1000.0,
                                           meta["upstream_timeout_ms"] / 1000.0)
        faults = read_jsonl(os.path.join(run_dir, "faults.jsonl"))
        return idempotent_checker.check(applied, history, [r["t_kill"] for r in restarts],
                                        faults, limits)
    windows = None
    # Replicas that own keys forward a key's writes one replica at a time:
    # a stale apply is a violation there, however replicas were paused.
    if meta.get("cluster") and not meta.get("ownership", True):
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
