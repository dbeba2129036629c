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

Every violation comes with its minimal witness: the two writes (or the write
and the fence), their tokens and CLOCK_MONOTONIC times.
"""

import bisect
import json
import os
import sys
from collections import defaultdict

PROPERTIES = ("token-order", "after-ack", "exactly-once", "fence-restart")


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                # A line cut by a kill: histories are written line by line, so
                # only the very last line of a file can be partial.
                continue
    return out


def _w(rec):
    """A write, for a witness."""
    return f"{rec.get('write')} (client {rec.get('client')}, token {rec.get('token')}, t={rec.get('t'):.3f})"


def check(applied, history, restarts, check_fence=True):
    """Returns {"violations": {property: [witness, ...]}, "stats": {...}}."""
    violations = {p: [] for p in PROPERTIES}

    # token-order: per key, in apply order.
    top = {}
    for rec in applied:
        key, token = rec["key"], rec.get("token")
        if token is None:
            violations["token-order"].append(f"key {key}: {_w(rec)} was applied without a token")
            continue
        best = top.get(key)
        if best is not None and token < best["token"]:
            violations["token-order"].append(
                f"key {key}: {_w(rec)} applied after {_w(best)}")
        if best is None or token > best["token"]:
            top[key] = rec

    # after-ack: an applied write against the highest token acknowledged
    # (to any client) before the moment it was applied.
    acks = defaultdict(list)
    for ev in history:
        if ev["type"] == "ok":
            acks[ev["key"]].append(ev)
    ack_times, ack_best = {}, {}
    for key, evs in acks.items():
        evs.sort(key=lambda e: e["t"])
        ack_times[key] = [e["t"] for e in evs]
        best, prefix = None, []
        for e in evs:
            if best is None or e["token"] > best["token"]:
                best = e
            prefix.append(best)
        ack_best[key] = prefix
    for rec in applied:
        key, token = rec["key"], rec.get("token")
        if token is None or key not in ack_times:
            continue
        i = bisect.bisect_left(ack_times[key], rec["t"])
        if i == 0:
            continue
        best = ack_best[key][i - 1]
        if best["token"] > token:
            violations["after-ack"].append(
                f"key {key}: {_w(rec)} applied after {_w(best)} was acknowledged")

    # exactly-once.
    applied_count = defaultdict(int)
    for rec in applied:
        applied_count[rec.get("write")] += 1
    invoked = {ev["write"]: ev for ev in history if ev["type"] == "invoke"}
    for ev in history:
        n = applied_count.get(ev.get("write"), 0)
        if ev["type"] == "ok" and n != 1:
            violations["exactly-once"].append(
                f"acknowledged {_w(ev)} was applied {n} times")
        elif ev["type"] == "fail" and n != 0:
            violations["exactly-once"].append(
                f"refused ({ev.get('status')} {ev.get('error')}) {_w(ev)} was applied {n} times")
    acked = {ev["write"] for ev in history if ev["type"] == "ok"}
    for write, n in applied_count.items():
        if write not in invoked:
            violations["exactly-once"].append(f"applied write {write} was never sent by a client")
        elif n > 1 and write not in acked:
            violations["exactly-once"].append(f"write {write} was applied {n} times")

    # fence-restart.
    if check_fence:
        for r in restarts:
            for key, evs in acks.items():
                before = [e for e in evs if e["t"] < r["t_kill"]]
                if not before:
                    continue
                best = max(before, key=lambda e: e["token"])
                fence = r["fence"].get(key, 0)
                if fence < best["token"]:
                    violations["fence-restart"].append(
                        f"key {key}: after the restart at t={r['t_restarted']:.3f} the fence is "
                        f"{fence}, below {_w(best)} acknowledged before the kill at "
                        f"t={r['t_kill']:.3f}")

    types = defaultdict(int)
    for ev in history:
        types[ev["type"]] += 1
    stale = sum(1 for ev in history if ev["type"] == "fail" and ev.get("status") == 409)
    stats = {"leases": types["lease"], "writes": types["invoke"], "ok": types["ok"],
             "refused_409": stale, "refused_other": types["fail"] - stale,
             "unknown": types["info"], "applied": len(applied),
             "keys": len({rec["key"] for rec in applied})}
    return {"violations": violations, "stats": stats}


def load_run(run_dir):
    applied = read_jsonl(os.path.join(run_dir, "applied.jsonl"))
    history = []
    hist_dir = os.path.join(run_dir, "history")
    for name in sorted(os.listdir(hist_dir)) if os.path.isdir(hist_dir) else []:
        history += read_jsonl(os.path.join(hist_dir, name))
    restarts = read_jsonl(os.path.join(run_dir, "restarts.jsonl"))
    meta_path = os.path.join(run_dir, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    return applied, history, restarts, meta


def check_run(run_dir):
    applied, history, restarts, meta = load_run(run_dir)
    return check(applied, history, restarts, check_fence=meta.get("through_fencegate", True))


def report(result, out=sys.stdout, max_witnesses=5):
    total = 0
    for p in PROPERTIES:
        ws = result["violations"][p]
        total += len(ws)
        print(f"  {p:<14} {len(ws)} violation(s)", file=out)
        for w in ws[:max_witnesses]:
            print(f"      witness: {w}", file=out)
        if len(ws) > max_witnesses:
            print(f"      ... and {len(ws) - max_witnesses} more", file=out)
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
