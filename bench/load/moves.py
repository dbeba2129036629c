#!/usr/bin/env python3
"""How fast a hot key's clients gathered on its I/O thread, from fencegate's
debug log (docs/performance.md).

Run the harness with the log at debug and its files kept, then read the
fencegate log of the scenario:

    python3 bench/load/run.py --fencegate build/app/fencegate --scenarios put_hot \
        --conns 256 --duration 1 --rounds 3 --no-memory --log-level debug --keep
    python3 bench/load/moves.py <kept dir>/fg-put_hot/fencegate.log
    python3 bench/load/moves.py --self-test      # the parsing, on a made-up log (ctest)

Two debug lines count: a client's move to the thread of a key ("moves to the
I/O thread of key") and a write sent upstream by the thread that handed the
key on to another thread (a hand-over across threads, fence/handoff.h). Lines more
than --gap seconds apart belong to different wrk runs. For each run: the
moves, the hand-overs across threads, and when the last of each came,
counted from the run's first such line (the first hand-over or move: a run
starts a little before it).
"""

import argparse
import re
import statistics
import sys

STAMP = re.compile(r"T(\d\d):(\d\d):(\d\d(?:\.\d+)?)")
MOVE = "moves to the I/O thread of key"
HANDOVER = "sent upstream by the thread that handed the key on"


def events(lines):
    """(seconds of the day, "move" or "handover") for each line that counts."""
    for line in lines:
        kind = "move" if MOVE in line else "handover" if HANDOVER in line else None
        m = STAMP.search(line) if kind else None
        if m:
            yield int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3]), kind


def runs(evs, gap):
    """Events split where more than `gap` seconds pass without one."""
    out, cur = [], []
    for e in evs:
        if cur and e[0] - cur[-1][0] > gap:
            out.append(cur)
            cur = []
        cur.append(e)
    if cur:
        out.append(cur)
    return out


def summary(run):
    t0 = run[0][0]
    moves = [t - t0 for t, k in run if k == "move"]
    handovers = [t - t0 for t, k in run if k == "handover"]
    return {
        "moves": len(moves),
        "last_move_ms": round(max(moves) * 1000, 1) if moves else None,
        "median_move_ms": round(statistics.median(moves) * 1000, 1) if moves else None,
        "handovers": len(handovers),
        "last_handover_ms": round(max(handovers) * 1000, 1) if handovers else None,
    }


def self_test():
    """The splitting and the figures, on a made-up log of two runs."""
    def line(t, text):
        return f"2026-12-05T06:{int(t // 60):02d}:{t % 60:06.3f}+00:00 debug {text}\n"
    log = [line(10.000, "key /objects/hot: request a " + HANDOVER + " (299 of 299 bytes)"),
           line(10.010, "client 127.0.0.1 " + MOVE + " /objects/hot (thread 1)"),
           line(10.020, "client 127.0.0.1 " + MOVE + " /objects/hot (thread 1)"),
           line(10.030, "something else at debug"),
           line(10.050, "client 127.0.0.1 " + MOVE + " /objects/hot (thread 1)"),
           line(12.000, "client 127.0.0.1 " + MOVE + " /objects/hot (thread 0)")]
    found = [summary(r) for r in runs(list(events(log)), 0.5)]
    want = [{"moves": 3, "last_move_ms": 50.0, "median_move_ms": 20.0, "handovers": 1,
             "last_handover_ms": 0.0},
            {"moves": 1, "last_move_ms": 0.0, "median_move_ms": 0.0, "handovers": 0,
             "last_handover_ms": None}]
    assert found == want, found
    print("moves self-test passed")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="fencegate's log (stderr), written with log.level: debug")
    ap.add_argument("--gap", type=float, default=0.5,
                    help="seconds without a move or hand-over that separate two runs")
    args = ap.parse_args(argv)
    with open(args.log, errors="replace") as f:
        found = runs(list(events(f)), args.gap)
    if not found:
        print(f"{args.log}: no move or hand-over lines (was log.level debug?)", file=sys.stderr)
        return 1
    print("run  moves  last move ms  median move ms  hand-overs  last hand-over ms")
    for i, run in enumerate(found, start=1):
        s = summary(run)
        print(f"{i:>3}  {s['moves']:>5}  {s['last_move_ms']!s:>12}  {s['median_move_ms']!s:>14}"
              f"  {s['handovers']:>10}  {s['last_handover_ms']!s:>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
