#!/usr/bin/env python3
"""A backend for thousands of writes a second: one thread, one selector.

    fastbackend.py [--log applied.jsonl] [--long-key-bytes N] [--port 0]
                   [--listeners N] [--write-ms MS]

chaos/backend.py takes a thread and an fsync per write, which caps it at a
few hundred writes a second; this one answers the same PUT /objects/<key>
with the same ground truth for the volume configurations of chaos/run and
for the kill -9 torture test. The first stdout line is the port.

A PUT is applied once its body is read whole, the writes of one key in
arrival order (a key's queue; fencegate sends one write per key at a time,
but a write it gave up on may still be queued when the next arrives). With
--log each applied write is one JSON line, as chaos/backend.py writes them:

    {"key": "k1", "token": 7, "client": "c3", "write": "c3-41", "t": <monotonic>}

The log is buffered and written every 100 ms and when SIGTERM stops the
backend: nobody kills this process, so the page cache is enough. With
--long-key-bytes N, a key of exactly N bytes (the path after /objects/)
of the form NAME/xxx...x is logged as NAME, so that the logs of a volume
run do not repeat each long key a million times.

With --listeners N (replicas in front, one listener each) it listens on N
ports, prints them on its first stdout line separated by spaces, and adds
`"door": i` to each record, as chaos/backend.py does. With --write-ms MS
every write takes MS at the head of its key's queue (a backend that works:
later writes of the key wait behind it, writes of other keys do not).

POST /__chaos/delay {"ms": 150, "for_ms": 2000} delays every write that
reaches the head of its key's queue in the next `for_ms` by `ms`, as in
chaos/backend.py. GET /__stats answers {"applied": N, "queued": M} (M:
writes read but not applied yet). Answers: 204 to a PUT, 404 to anything
else.
"""

import argparse
import heapq
import json
import selectors
import signal
import socket
import sys
import time
from collections import deque

PREFIX = b"/objects/"
FLUSH_EVERY_S = 0.1
MAX_HEAD_BYTES = 65536


def response(status, reason, body=b"", close=False):
    head = f"HTTP/1.1 {status} {reason}\r\n"
    if status != 204:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode() + body


NO_CONTENT = response(204, "No Content")
NOT_FOUND = response(404, "Not Found", b'{"error":"not_found"}')
BAD_REQUEST = response(400, "Bad Request", b'{"error":"bad_request"}', close=True)


class Conn:
    __slots__ = ("sock", "door", "inbuf", "outbuf", "busy", "closing")

    def __init__(self, sock, door=None):
        self.sock = sock
        self.door = door  # the listener's index when there are several
        self.inbuf = b""
        self.outbuf = b""
        self.busy = False  # a request of this connection is queued: read no further
        self.closing = False


class Backend:
    def __init__(self, log_path, long_key_bytes, write_s=0.0):
        self.sel = selectors.DefaultSelector()
        self.log = open(log_path, "ab") if log_path else None
        self.pending_log = []
        self.long_key_bytes = long_key_bytes
        self.queues = {}  # key -> deque of (conn, record); head is being applied
        self.timers = []  # heap of (due, seq, key) for delayed heads
        self.seq = 0
        self.delay_s = 0.0
        self.delay_until = 0.0
        self.write_s = write_s
        self.applied = 0
        self.stopping = False

    # --- requests ------------------------------------------------------------

    def log_key(self, key):
        if self.long_key_bytes and len(key) == self.long_key_bytes:
            name, _, rest = key.partition("/")
            if rest and rest.strip("x") == "":
                return name
        return key

    def on_request(self, conn, method, target, headers, body):
        if method == b"PUT" and target.startswith(PREFIX):
            key = target[len(PREFIX):].decode("latin-1")
            try:
                token = int(headers.get(b"fencing-token", b""))
            except ValueError:
                token = None
            client = headers.get(b"x-chaos-client")
            write = headers.get(b"x-chaos-write")
            rec = {"key": self.log_key(key), "token": token,
                   "client": client.decode() if client else None,
                   "write": write.decode() if write else None}
            if conn.door is not None:
                rec["door"] = conn.door
            q = self.queues.get(key)
            if q is None:
                q = self.queues[key] = deque()
            q.append((conn, rec))
            conn.busy = True
            if len(q) == 1:
                self.start_head(key)
            return
        if method == b"POST" and target == b"/__chaos/delay":
            spec = json.loads(body or b"{}")
            self.delay_s = int(spec["ms"]) / 1000.0
            self.delay_until = time.monotonic() + int(spec["for_ms"]) / 1000.0
            return self.send(conn, response(200, "OK", b"{}"))
        if method == b"GET" and target == b"/__stats":
            queued = sum(len(q) for q in self.queues.values())
            return self.send(conn, response(200, "OK", json.dumps(
                {"applied": self.applied, "queued": queued}).encode()))
        self.send(conn, NOT_FOUND)

    def start_head(self, key):
        """The head of a key's queue: applied now, or after the nemesis'
        delay (later writes of the key wait behind it)."""
        now = time.monotonic()
        delay = self.write_s + (self.delay_s if now < self.delay_until else 0.0)
        if delay > 0:
            self.seq += 1
            heapq.heappush(self.timers, (now + delay, self.seq, key))
        else:
            self.apply_head(key)

    def apply_head(self, key):
        q = self.queues[key]
        conn, rec = q.popleft()
        rec["t"] = time.monotonic()
        self.applied += 1
        if self.log is not None:
            self.pending_log.append(json.dumps(rec, separators=(",", ":")))
        more = bool(q)
        if not more:
            del self.queues[key]
        conn.busy = False
        if not conn.closing:
            self.send(conn, NO_CONTENT)
            self.parse(conn)  # the next request of this connection, if read already
        if more:
            self.start_head(key)

    # --- the connection's bytes ----------------------------------------------

    def send(self, conn, data):
        if conn.closing:
            return
        conn.outbuf += data
        self.flush_out(conn)

    def flush_out(self, conn):
        try:
            while conn.outbuf:
                n = conn.sock.send(conn.outbuf)
                conn.outbuf = conn.outbuf[n:]
        except BlockingIOError:
            pass
        except OSError:
            return self.close(conn)
        self.sel.modify(conn.sock, selectors.EVENT_READ |
                        (selectors.EVENT_WRITE if conn.outbuf else 0), conn)

    def parse(self, conn):
        """Handles the complete requests in conn's buffer, one at a time."""
        while not conn.busy and not conn.closing:
            end = conn.inbuf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.inbuf) > MAX_HEAD_BYTES:
                    self.send(conn, BAD_REQUEST)
                    self.close(conn)
                return
            lines = conn.inbuf[:end].split(b"\r\n")
            parts = lines[0].split(b" ")
            if len(parts) != 3:
                self.send(conn, BAD_REQUEST)
                return self.close(conn)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if b"transfer-encoding" in headers:  # fencegate forwards Content-Length here
                self.send(conn, BAD_REQUEST)
                return self.close(conn)
            length = int(headers.get(b"content-length", b"0"))
            if len(conn.inbuf) < end + 4 + length:
                return
            body = conn.inbuf[end + 4:end + 4 + length]
            conn.inbuf = conn.inbuf[end + 4 + length:]
            self.on_request(conn, parts[0], parts[1], headers, body)

    def on_readable(self, conn):
        try:
            data = conn.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            return self.close(conn)
        conn.inbuf += data
        self.parse(conn)

    def close(self, conn):
        """A queued write of a closed connection is still applied (its body
        was read whole), as chaos/backend.py does; only its answer is lost."""
        if conn.closing:
            return
        conn.closing = True
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    # --- the loop ------------------------------------------------------------

    def write_log(self):
        if self.pending_log:
            self.log.write(("\n".join(self.pending_log) + "\n").encode())
            self.log.flush()
            self.pending_log = []

    def serve(self, listeners, wakeup):
        doors = len(listeners) > 1
        for i, listener in enumerate(listeners):
            self.sel.register(listener, selectors.EVENT_READ, ("accept", listener,
                                                               i if doors else None))
        self.sel.register(wakeup, selectors.EVENT_READ, "stop")
        next_flush = time.monotonic() + FLUSH_EVERY_S
        while not self.stopping:
            now = time.monotonic()
            timeout = next_flush - now
            if self.timers:
                timeout = min(timeout, self.timers[0][0] - now)
            for key, events in self.sel.select(max(timeout, 0)):
                if isinstance(key.data, tuple):
                    _, listener, door = key.data
                    try:
                        sock, _ = listener.accept()
                    except OSError:
                        continue
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conn = Conn(sock, door)
                    self.sel.register(sock, selectors.EVENT_READ, conn)
                elif key.data == "stop":
                    self.stopping = True
                else:
                    conn = key.data
                    if events & selectors.EVENT_WRITE and not conn.closing:
                        self.flush_out(conn)
                    if events & selectors.EVENT_READ and not conn.closing:
                        self.on_readable(conn)
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _, _, key = heapq.heappop(self.timers)
                self.apply_head(key)
            if now >= next_flush:
                if self.log is not None:
                    self.write_log()
                next_flush = now + FLUSH_EVERY_S
        # Stopping: writes still delayed are applied, as a stopped process
        # would have finished them, so the log has every write that got a
        # ticket.
        while self.timers:
            _, _, key = heapq.heappop(self.timers)
            self.apply_head(key)
        if self.log is not None:
            self.write_log()
            self.log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", help="the applied-writes log (JSON lines); none: count only")
    ap.add_argument("--long-key-bytes", type=int, default=0)
    ap.add_argument("--listeners", type=int, default=1,
                    help="listen on this many ports (--port must be 0 for more than one)")
    ap.add_argument("--write-ms", type=float, default=0.0, help="time each write takes")
    args = ap.parse_args()
    if args.listeners < 1 or (args.listeners > 1 and args.port != 0):
        ap.error("--listeners must be at least 1, and --port 0 for more than one")
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # the wake-up fd ends the loop
    listeners = []
    for _ in range(args.listeners):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", args.port))
        listener.listen(1024)
        listener.setblocking(False)
        listeners.append(listener)
    print(" ".join(str(ln.getsockname()[1]) for ln in listeners), flush=True)
    Backend(args.log, args.long_key_bytes, args.write_ms / 1000.0).serve(listeners, wake_r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
