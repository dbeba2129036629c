#!/usr/bin/env python3
"""A volume chaos client: thousands of writes a second from one process.

chaos/client.py takes a lock per write, a few writes a second; this one
keeps many keep-alive connections busy through one selector, each sending a
write to a key drawn at random from the whole key set, with a token from
the shared monotonic clock: microseconds of CLOCK_MONOTONIC times 64 plus
the client's number (a timestamp oracle: no lock, no round trip, tokens of
one client always rise, and of two clients the one drawn later is higher).
Two clients writing one key at once therefore race as two lock holders of
different generations do, and a frozen client wakes with old tokens: stale
writes for fencegate to refuse. One write per key is in flight per client.

Long keys: a name starting with L is written to /objects/NAME/xxx...x, a key
of --long-key-bytes bytes after /objects/ (fastbackend.py logs it as NAME).

The history is chaos/client.py's (invoke, then ok / fail / info per write),
buffered and written every half second and at the end: the nemesis freezes
clients but never kills them.
"""

import argparse
import heapq
import json
import random
import selectors
import socket
import sys
import time
from urllib.parse import urlsplit

from client import DEFINITE_REFUSALS, WRITE_TIMEOUT_S

FLUSH_EVERY_S = 0.5
MAX_BACKOFF_S = 0.2


def key_path(name, long_key_bytes):
    """The path a key name is written to."""
    if name.startswith("L"):
        head = name + "/"
        return "/objects/" + head + "x" * (long_key_bytes - len(head))
    return "/objects/" + name


class Conn:
    __slots__ = ("sock", "buf", "write", "deadline", "backoff")

    def __init__(self):
        self.sock = None
        self.buf = b""
        self.write = None   # (fields, key) of the write in flight
        self.deadline = 0.0
        self.backoff = 0.0


class Client:
    def __init__(self, args):
        self.id, self.number = args.id, args.number
        u = urlsplit(args.write_url)
        self.addr = (u.hostname, u.port)
        self.keys = args.keys.split(",")
        self.paths = {k: key_path(k, args.long_key_bytes).encode() for k in self.keys}
        self.in_flight = set()
        self.rng = random.Random(args.seed)
        self.until = args.until
        self.conns = [Conn() for _ in range(args.connections)]
        self.timers = []  # (due, n, conn): connections backing off
        self.sel = selectors.DefaultSelector()
        self.hist = open(args.history, "a")
        self.lines = []
        self.seq = 0
        self.last_token = 0

    def add(self, type_, **fields):
        rec = {"t": time.monotonic(), "client": self.id, "type": type_, **fields}
        self.lines.append(json.dumps(rec, separators=(",", ":")))

    def flush(self):
        if self.lines:
            self.hist.write("\n".join(self.lines) + "\n")
            self.hist.flush()
            self.lines = []

    def token(self):
        t = time.monotonic_ns() // 1000 * 64 + self.number
        self.last_token = t if t > self.last_token else self.last_token + 64
        return self.last_token

    # --- one connection -------------------------------------------------------

    def start(self, c):
        """The next write on c (connecting first if needed)."""
        if time.monotonic() >= self.until:
            return
        if c.sock is None:
            try:
                c.sock = socket.create_connection(self.addr, timeout=1)
            except OSError:
                return self.back_off(c)
            c.sock.setblocking(False)
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.buf = b""
            self.sel.register(c.sock, selectors.EVENT_READ, c)
        key = self.rng.choice(self.keys)
        while key in self.in_flight:
            key = self.rng.choice(self.keys)
        self.in_flight.add(key)
        self.seq += 1
        fields = {"key": key, "token": self.token(), "write": f"{self.id}-{self.seq}"}
        c.write = (fields, key)
        c.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self.add("invoke", **fields)
        body = fields["write"].encode()
        req = (b"PUT %s HTTP/1.1\r\nHost: chaos\r\nFencing-Token: %d\r\nX-Chaos-Client: %s\r\n"
               b"X-Chaos-Write: %s\r\nContent-Length: %d\r\n\r\n%s" % (
                   self.paths[key], fields["token"], self.id.encode(), body, len(body), body))
        try:
            c.sock.sendall(req)
        except OSError as e:
            self.end(c, "info", error=str(e) or type(e).__name__)

    def end(self, c, type_, broken=True, **extra):
        fields, key = c.write
        c.write = None
        self.in_flight.discard(key)
        self.add(type_, **fields, **extra)
        if broken:
            self.sel.unregister(c.sock)
            c.sock.close()
            c.sock = None
            return self.back_off(c)
        if type_ == "ok" or extra.get("status") == 409:
            c.backoff = 0.0
            return self.start(c)
        self.back_off(c)  # 502, 503, 504: as a client retrying with back-off would

    def back_off(self, c):
        """A connection that failed, or got an error answer, waits before its
        next write (fencegate is being restarted, or a fault is on)."""
        c.backoff = min(MAX_BACKOFF_S, max(0.005, c.backoff * 2))
        heapq.heappush(self.timers, (time.monotonic() + c.backoff * self.rng.uniform(0.5, 1.0),
                                     id(c), c))

    def on_readable(self, c):
        try:
            data = c.sock.recv(65536)
            error = "connection closed"
        except BlockingIOError:
            return
        except OSError as e:
            data, error = b"", str(e) or type(e).__name__
        if c.write is None:  # backing off: a closed connection is opened again after
            if not data:
                self.sel.unregister(c.sock)
                c.sock.close()
                c.sock = None
            return
        if not data:
            return self.end(c, "info", error=error)
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
        if 200 <= status < 300:
            return self.end(c, "ok", broken=close, status=status)
        try:
            error = json.loads(body).get("error", "")
        except (ValueError, AttributeError):
            error = ""
        kind = "fail" if error in DEFINITE_REFUSALS else "info"
        self.end(c, kind, broken=close, status=status, error=error)

    # --- the loop -------------------------------------------------------------

    def run(self):
        for c in self.conns:
            self.start(c)
        next_flush = time.monotonic() + FLUSH_EVERY_S
        while True:
            now = time.monotonic()
            if now >= self.until and all(c.write is None for c in self.conns):
                break
            timeout = min(next_flush, self.timers[0][0] if self.timers else next_flush) - now
            for key, _ in self.sel.select(max(timeout, 0)):
                c = key.data
                if c.sock is not None:
                    self.on_readable(c)
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                self.start(heapq.heappop(self.timers)[2])
            for c in self.conns:
                if c.write is not None and now > c.deadline:
                    self.end(c, "info", error="timed out")
            if now >= next_flush:
                self.flush()
                next_flush = now + FLUSH_EVERY_S
        for c in self.conns:
            if c.sock is not None:
                c.sock.close()
        self.flush()
        self.hist.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True)
    ap.add_argument("--number", type=int, required=True, help="0-63: the token's low bits")
    ap.add_argument("--write-url", required=True)
    ap.add_argument("--keys", required=True, help="comma-separated names")
    ap.add_argument("--long-key-bytes", type=int, default=990)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--until", type=float, required=True, help="CLOCK_MONOTONIC deadline")
    ap.add_argument("--history", required=True)
    args = ap.parse_args()
    if not 0 <= args.number < 64:
        ap.error("--number must be 0-63")
    Client(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
