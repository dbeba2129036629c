#!/usr/bin/env python3
"""One writer process of the kill -9 torture test (test_kill_torture.py).

    torture_writer.py --index I --writers W --keys N --connections M

It owns the keys whose number is I modulo W, so each key has one writer and
its token only goes up: every write takes the key's next token, whether or
not the last one was answered. One thread keeps M keep-alive connections
busy through a selector, one write in flight per key at a time.

Lines on stdin, from the harness:
  go HOST:PORT GEN   write to this fencegate (generation GEN) from now on
  stop               finish the writes in flight, report, exit
Lines on stdout, to the harness:
  idle GEN {...}     every connection is down and none can be opened again
                     (fencegate GEN is dead); the JSON has "acked": [[key
                     number, highest token acknowledged], ...] for the keys
                     whose highest acknowledged token rose since the last
                     report, and the counts so far
  done {...}         the same, after `stop`
A connection that fails while fencegate still runs is opened again at once;
one that cannot be opened waits for the next `go`. Nothing but the harness
decides when fencegate is back, so no write reaches a restarted fencegate
before the harness has read its fences.
"""

import argparse
import json
import os
import selectors
import socket
import sys
import time
from collections import deque

WRITE_TIMEOUT_S = 10.0
LONG_PATH_BYTES = 1000  # a long key's whole path; keys may have 1024 bytes


def key_path(n, long_every):
    """Key number n: every long_every-th key is ~1 KB long."""
    if long_every and n % long_every == 0:
        head = f"/objects/L{n:05d}/"
        return head + "x" * (LONG_PATH_BYTES - len(head))
    return f"/objects/s{n:05d}"


class Conn:
    __slots__ = ("sock", "key", "token", "buf", "deadline")

    def __init__(self):
        self.sock = None
        self.key = None      # key number of the write in flight, or None
        self.token = 0
        self.buf = b""
        self.deadline = 0.0


class Writer:
    def __init__(self, args):
        self.keys = list(range(args.index, args.keys, args.writers))
        self.paths = {n: key_path(n, args.long_every).encode() for n in self.keys}
        self.next_token = {n: 1 for n in self.keys}
        self.acked = {}         # key number -> highest acknowledged token
        self.dirty = set()      # keys whose acked rose since the last report
        self.idle_keys = deque(self.keys)
        self.conns = [Conn() for _ in range(args.connections)]
        self.sel = selectors.DefaultSelector()
        self.addr = None
        self.gen = 0
        self.reported = 0       # last generation reported idle
        self.stopping = False
        self.counts = {"acked": 0, "refused_409": 0, "refused_503": 0, "unknown": 0,
                       "unexpected": 0}
        self.unexpected = []    # the first few answers that must not happen

    # --- connections --------------------------------------------------------

    def open(self, c):
        try:
            s = socket.create_connection(self.addr, timeout=2)
        except OSError:
            return False  # fencegate is gone: wait for the next `go`
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sock, c.buf = s, b""
        self.sel.register(s, selectors.EVENT_READ, c)
        return True

    def drop(self, c):
        """The write in flight, if any, has an unknown outcome."""
        if c.key is not None:
            self.counts["unknown"] += 1
            self.idle_keys.append(c.key)
            c.key = None
        if c.sock is not None:
            self.sel.unregister(c.sock)
            c.sock.close()
            c.sock = None

    def send_next(self, c):
        if self.stopping or not self.idle_keys:
            return
        if c.sock is None and not self.open(c):
            return
        n = self.idle_keys.popleft()
        token = self.next_token[n]
        self.next_token[n] = token + 1
        c.key, c.token = n, token
        c.deadline = time.monotonic() + WRITE_TIMEOUT_S
        body = b"t%d" % token
        req = (b"PUT %s HTTP/1.1\r\nHost: torture\r\nFencing-Token: %d\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (self.paths[n], token, len(body), body))
        try:
            c.sock.sendall(req)  # small: fits the socket buffer at once
        except OSError:
            self.drop(c)

    def on_readable(self, c):
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop(c)
            return self.send_next(c)  # at once if fencegate still runs
        c.buf += data
        end = c.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = c.buf[:end].split(b"\r\n")
        status = int(head[0].split(b" ", 2)[1])
        length, close = 0, False
        for line in head[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        if len(c.buf) < end + 4 + length:
            return
        body = c.buf[end + 4:end + 4 + length]
        c.buf = c.buf[end + 4 + length:]
        self.outcome(c, status, body)
        if close:
            self.drop(c)
        self.send_next(c)

    def outcome(self, c, status, body):
        n, token = c.key, c.token
        c.key = None
        self.idle_keys.append(n)
        if 200 <= status < 300:
            self.counts["acked"] += 1
            if token > self.acked.get(n, 0):
                self.acked[n] = token
                self.dirty.add(n)
        elif status == 409:
            # One writer per key and tokens that only go up: nothing it sends
            # can be stale, unless fencegate holds a token nobody sent.
            self.counts["refused_409"] += 1
            self.note_unexpected(n, token, status, body)
        elif status == 503:
            self.counts["refused_503"] += 1  # fail closed: allowed, not acknowledged
        elif status in (502, 504):
            self.counts["unknown"] += 1
        else:
            self.note_unexpected(n, token, status, body)

    def note_unexpected(self, n, token, status, body):
        self.counts["unexpected"] += 1
        if len(self.unexpected) < 10:
            self.unexpected.append(f"key {n} token {token}: {status} {body[:200]!r}")

    # --- reports and the loop -----------------------------------------------

    def report(self, word):
        acked = [[n, self.acked[n]] for n in sorted(self.dirty)]
        self.dirty.clear()
        doc = {"acked": acked, "counts": self.counts, "unexpected": self.unexpected}
        sys.stdout.write(f"{word} {json.dumps(doc, separators=(',', ':'))}\n")
        sys.stdout.flush()

    def on_command(self, line):
        words = line.split()
        if words and words[0] == "go":
            host, _, port = words[1].rpartition(":")
            self.addr, self.gen = (host, int(port)), int(words[2])
            for c in self.conns:
                if c.sock is None and c.key is None:
                    self.send_next(c)
        elif words and words[0] == "stop":
            self.stopping = True
        elif not words:  # stdin closed: the harness is gone
            self.stopping = True

    def run(self):
        stdin = sys.stdin.buffer.raw
        self.sel.register(stdin, selectors.EVENT_READ, None)
        pending = b""
        while True:
            busy = [c for c in self.conns if c.key is not None]
            if self.stopping and not busy:
                break
            if (not self.stopping and self.gen > self.reported
                    and all(c.sock is None for c in self.conns)):
                self.reported = self.gen
                self.report(f"idle {self.gen}")
            for key, _ in self.sel.select(timeout=1.0):
                if key.data is None:
                    chunk = os.read(stdin.fileno(), 4096)
                    pending += chunk
                    if not chunk:
                        self.sel.unregister(stdin)
                        self.on_command("")
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        self.on_command(line.decode())
                elif key.data.sock is not None:
                    self.on_readable(key.data)
            now = time.monotonic()
            for c in self.conns:
                if c.key is not None and now > c.deadline:
                    self.drop(c)
                    self.send_next(c)
        for c in self.conns:
            self.drop(c)
        self.report("done")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=int, required=True)
    ap.add_argument("--writers", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--long-every", type=int, default=2, help="every n-th key is ~1 KB (0: none)")
    ap.add_argument("--connections", type=int, default=16)
    Writer(ap.parse_args()).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
