"""Where a request's time goes inside fencegate, from syscall tracepoints.

`run.py --trace DIR` records the fencegate process during its first round
(fenced run and unfenced run) with `perf record` of the raw_syscalls
enter/exit tracepoints, then summarises each recording here. No sampling
and no call stacks: only the moments each thread entered and left each
system call, so the figures are wall-clock time, including what a
profile cannot see (time spent waiting, time with interrupts off).

A thread's life under load is a series of *wakes*: `epoll_wait` returns,
the thread makes some system calls, and it calls `epoll_wait` again. The
wakes of a proxied request have recognisable *shapes*, the names of their
calls in order (for a fenced PUT at 1 connection: `recvmsg write recvfrom
sendmsg` to take a request and forward it, `recvmsg sendmsg` to pass the
answer back). For each shape this reports how often it occurs per
request, its mean duration, the mean of each step (the time in each call
and the gap before it, which is user code), and how long the thread then
slept in `epoll_wait` (for the forwarding wake: the backend's turn).

The tracepoints cost time themselves (a few hundred ns per call), more so
in wakes with more calls: compare shapes of one recording, or the same
shape across builds, not these figures with untraced runs.

    python3 bench/load/phases.py DIR/trace-put_async-c1.data REQUESTS
"""

import collections
import os
import re
import statistics
import subprocess
import sys

# x86-64 syscall numbers of the calls a proxy makes; others print as numbers.
NAMES = {0: "read", 1: "write", 3: "close", 7: "poll", 16: "ioctl", 17: "pread64",
         18: "pwrite64", 20: "writev", 42: "connect", 44: "sendto", 45: "recvfrom",
         46: "sendmsg", 47: "recvmsg", 54: "setsockopt", 55: "getsockopt", 74: "fsync",
         75: "fdatasync", 137: "statfs", 202: "futex", 228: "clock_gettime",
         232: "epoll_wait", 233: "epoll_ctl", 281: "epoll_pwait", 286: "timerfd_settime",
         288: "accept4"}
EPOLL_WAITS = (232, 281)
LINE = re.compile(r"\s*(\d+)\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):\s+NR (\d+)")


def record_start(out_dir, pid, scenario, conns, secs, target="fencegate"):
    os.makedirs(out_dir, exist_ok=True)
    name = scenario if target == "fencegate" else f"{scenario}-{target}"
    data = os.path.join(out_dir, f"trace-{name}-c{conns}.data")
    proc = subprocess.Popen(["perf", "record", "-q", "-e",
                             "raw_syscalls:sys_enter,raw_syscalls:sys_exit",
                             "-p", str(pid), "-o", data, "--", "sleep", str(secs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, data


def events(data):
    """{tid: [(kind, time_us, nr)]} from a recording, in time order."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,event,trace"],
                         capture_output=True, text=True, check=False).stdout
    return parse(out.splitlines())


def parse(lines):
    per_tid = collections.defaultdict(list)
    for line in lines:
        m = LINE.match(line)
        if m:
            tid, t, kind, nr = m.groups()
            per_tid[tid].append((kind, float(t) * 1e6, int(nr)))
    return per_tid


def wakes(per_tid):
    """Yields (shape, steps, duration_us, sleep_after_us) for every wake:
    from an epoll_wait's exit to the next epoll_wait's entry. steps are
    (label, us) pairs: 'gap>name' (user time before the call) and 'name'
    (time in it)."""
    for evs in per_tid.values():
        woke = None
        calls, steps = [], []
        prev = None
        for i, (kind, t, nr) in enumerate(evs):
            if nr in EPOLL_WAITS:
                if kind == "exit":
                    woke, prev, calls, steps = t, t, [], []
                elif woke is not None:  # entry: the wake ends
                    steps.append(("gap>epoll_wait", t - prev))
                    sleep = next((e[1] - t for e in evs[i + 1:i + 3]
                                  if e[0] == "exit" and e[2] == nr), None)
                    yield " ".join(calls), steps, t - woke, sleep
                    woke = None
                continue
            if woke is None:
                continue
            name = NAMES.get(nr, str(nr))
            if kind == "enter":
                steps.append((f"gap>{name}", t - prev))
                calls.append(name)
            else:
                steps.append((name, t - prev))
            prev = t


def summarize(per_tid, requests, top=4):
    """The most frequent shapes: per request, mean duration, mean steps."""
    groups = collections.defaultdict(list)
    for shape, steps, dur, sleep in wakes(per_tid):
        groups[shape].append((steps, dur, sleep))
    result = []
    for shape, items in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]:
        n_steps = collections.Counter(len(s) for s, _, _ in items).most_common(1)[0][0]
        same = [s for s, _, _ in items if len(s) == n_steps]
        sleeps = [sl for _, _, sl in items if sl is not None]
        result.append({
            "shape": shape or "(none)",
            "per_request": round(len(items) / requests, 2) if requests else None,
            "mean_us": round(statistics.mean(d for _, d, _ in items), 2),
            "median_us": round(statistics.median(d for _, d, _ in items), 2),
            "steps_us": [(label, round(statistics.mean(s[k][1] for s in same), 2))
                         for k, (label, _) in enumerate(same[0])],
            "sleep_after_mean_us": round(statistics.mean(sleeps), 2) if sleeps else None,
        })
    return result


def print_summary(rows, title):
    print(f"\n{title}")
    for r in rows:
        print(f"  {r['shape']:<40} {r['per_request']}/req  mean {r['mean_us']} us "
              f"(median {r['median_us']}), then asleep {r['sleep_after_mean_us']} us")
        print("    " + "  ".join(f"{label} {us}" for label, us in r["steps_us"]))


def self_test():
    """Two wakes of a made-up thread: the shapes, steps and sleeps come out."""
    lines = [
        " 7 1.000000: raw_syscalls:sys_exit: NR 232 = 1",
        " 7 1.000002: raw_syscalls:sys_enter: NR 47 (d)",
        " 7 1.000003: raw_syscalls:sys_exit: NR 47 = 165",
        " 7 1.000010: raw_syscalls:sys_enter: NR 1 (7)",
        " 7 1.000012: raw_syscalls:sys_exit: NR 1 = 46",
        " 7 1.000015: raw_syscalls:sys_enter: NR 46 (e)",
        " 7 1.000025: raw_syscalls:sys_exit: NR 46 = 303",
        " 7 1.000030: raw_syscalls:sys_enter: NR 232 (f)",
        " 7 1.000080: raw_syscalls:sys_exit: NR 232 = 1",
        " 7 1.000081: raw_syscalls:sys_enter: NR 47 (e)",
        " 7 1.000082: raw_syscalls:sys_exit: NR 47 = 110",
        " 7 1.000090: raw_syscalls:sys_enter: NR 232 (f)",
    ]
    rows = summarize(parse(lines), requests=1)
    shapes = {r["shape"]: r for r in rows}
    front = shapes["recvmsg write sendmsg"]
    assert front["mean_us"] == 30.0, front
    assert front["sleep_after_mean_us"] == 50.0, front
    steps = dict(front["steps_us"])
    assert steps == {"gap>recvmsg": 2.0, "recvmsg": 1.0, "gap>write": 7.0, "write": 2.0,
                     "gap>sendmsg": 3.0, "sendmsg": 10.0, "gap>epoll_wait": 5.0}, steps
    back = shapes["recvmsg"]
    assert back["mean_us"] == 10.0 and back["sleep_after_mean_us"] is None, back
    print("phases self-test passed")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        print_summary(summarize(events(sys.argv[1]), int(sys.argv[2])), sys.argv[1])
