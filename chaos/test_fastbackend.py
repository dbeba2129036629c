"""fastbackend.py through its socket: a write delayed by the nemesis keeps
its key's later writes behind it, other keys pass; long keys are logged by
name; with several listeners each write names its door, and --write-ms
makes each write take its time at the head of its key's queue."""

import http.client
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def start(tmp_path, *args):
    log = tmp_path / "applied.jsonl"
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "fastbackend.py"), "--log", str(log),
                          *args], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    ports = [int(x) for x in p.stdout.readline().split()]
    return p, (ports[0] if len(ports) == 1 else ports), log


def stop(p, log):
    p.terminate()
    assert p.wait(timeout=10) == 0
    p.stdout.close()
    return [json.loads(line) for line in log.read_text().splitlines()]


def put(port, path, token, write):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("PUT", path, body=write.encode(),
              headers={"Fencing-Token": str(token), "X-Chaos-Client": "c1", "X-Chaos-Write": write})
    return c


def stats(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/__stats")
    doc = json.loads(c.getresponse().read())
    c.close()
    return doc


def post_delay(port, ms, for_ms):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/__chaos/delay", body=json.dumps({"ms": ms, "for_ms": for_ms}))
    assert c.getresponse().status == 200
    c.close()


def test_a_delayed_write_keeps_its_keys_order(tmp_path):
    p, port, log = start(tmp_path)
    try:
        post_delay(port, 2000, 60000)
        a = put(port, "/objects/k", 1, "a")
        deadline = time.monotonic() + 10
        while stats(port)["queued"] < 1:  # a condition, polled with a deadline
            assert time.monotonic() < deadline, "write a was never read"
        # The delay ends; A, at the head of k's queue, still waits its 2 s.
        post_delay(port, 0, 0)
        b = put(port, "/objects/k", 2, "b")
        c = put(port, "/objects/j", 3, "c")
        assert c.getresponse().status == 204  # another key is not held up
        assert a.getresponse().status == 204
        assert b.getresponse().status == 204
    finally:
        records = stop(p, log)
    assert [r["write"] for r in records] == ["c", "a", "b"]
    assert [(r["key"], r["token"], r["client"]) for r in records] == [
        ("j", 3, "c1"), ("k", 1, "c1"), ("k", 2, "c1")]


def test_long_keys_are_logged_by_name(tmp_path):
    p, port, log = start(tmp_path, "--long-key-bytes", "40")
    try:
        long_key = "L0001/" + "x" * 34
        for path in ("/objects/" + long_key, "/objects/L0002/" + "x" * 33 + "y", "/objects/s3"):
            r = put(port, path, 5, path[-3:])
            assert r.getresponse().status == 204
    finally:
        records = stop(p, log)
    assert [r["key"] for r in records] == ["L0001", "L0002/" + "x" * 33 + "y", "s3"]


def test_doors_and_the_time_a_write_takes(tmp_path):
    p, ports, log = start(tmp_path, "--listeners", "2", "--write-ms", "200")
    try:
        a = put(ports[0], "/objects/k", 1, "a")
        deadline = time.monotonic() + 10
        while stats(ports[0])["queued"] < 1:  # a condition, polled with a deadline
            assert time.monotonic() < deadline, "write a was never read"
        b = put(ports[1], "/objects/k", 2, "b")
        c = put(ports[1], "/objects/j", 3, "c")
        for conn in (a, b, c):
            assert conn.getresponse().status == 204
    finally:
        records = stop(p, log)
    by_write = {r["write"]: r for r in records}
    assert sorted((r["write"], r["door"]) for r in records) == [("a", 0), ("b", 1), ("c", 1)]
    # b waited behind a, then took its own 200 ms; c, another key, did not.
    assert by_write["b"]["t"] - by_write["a"]["t"] >= 0.19
