#!/usr/bin/env python3
"""The chaos run's backend: applies writes per key and keeps the ground truth.

    backend.py --log applied.jsonl [--port 0] [--listeners N]

A PUT /objects/<key> is one write. The backend takes a ticket for the key as
soon as it has read the whole request, applies the writes of one key in
ticket order (the way a database serialises writes to one row), and appends
every applied write to the log, fsynced before the response:

    {"key": "k1", "token": 7, "client": "c3", "write": "c3-41", "t": <monotonic>}

`token` is the Fencing-Token header the write arrived with, `client` and
`write` come from the X-Chaos-Client and X-Chaos-Write headers, and `t` is
CLOCK_MONOTONIC, which every process on the machine shares, so the checker
can compare it with the clients' histories. With --listeners N (replicas in
front, one listener each) the backend listens on N ports, prints them on
its first stdout line separated by spaces, and adds `"door": i` to each
record, the index of the listener the write came through.

The nemesis makes the backend slow or stalled through its control endpoint:

    POST /__chaos/delay  {"ms": 150, "for_ms": 2000}

delays every write applied in the next `for_ms` by `ms` (after its ticket is
taken, so the order of one key's writes never changes). GET /objects/<key>
returns the last applied value. The first stdout line is the port.

The idempotent workload (chaos/idempotent_client.py) POSTs payments:

    POST /pay/<account>  {"op": "c2-17", "key": "<Idempotency-Key>", ...}

Each one is a run: applied in ticket order per account, delayed as a write
is, logged as

    {"key": ..., "op": "c2-17", "client": "c2", "attempt": "c2-17.3",
     "account": "a1", "t_arrive": <monotonic>, "t": <monotonic>,
     "response": "<the body answered>"}

(`attempt` from the X-Chaos-Attempt header, `t_arrive` when the request was
read whole, `t` when it was applied, just before the answer) and answered
200 with {"op": ..., "run": <n>, "attempt": ...}, a body no other run has,
so that a replay names the run whose answer it repeats. A payment with
`X-Chaos-Stream-Ms: N` gets that body in STREAM_PIECES pieces, N ms apart
(a response streamed slowly, each piece well within fencegate's
upstream.timeout); its record, logged before the first piece goes, has
`stream_ms`: how long the pieces take.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/objects/"
PAY_PREFIX = "/pay/"
STREAM_PIECES = 6


def stream_gap_ms(headers):
    try:
        return int(headers.get("X-Chaos-Stream-Ms") or 0)
    except ValueError:
        return 0


class State:
    def __init__(self, log_path):
        self.log = open(log_path, "ab")
        self.log_lock = threading.Lock()
        self.cond = threading.Condition()
        self.next_ticket = {}
        self.serving = {}
        self.values = {}
        self.delay_ms = 0
        self.delay_until = 0.0
        self.runs = 0  # payments run, for their answers

    def ticket(self, key):
        with self.cond:
            t = self.next_ticket.get(key, 0)
            self.next_ticket[key] = t + 1
            return t

    def wait_turn(self, key, ticket):
        with self.cond:
            self.cond.wait_for(lambda: self.serving.get(key, 0) == ticket)

    def done(self, key):
        with self.cond:
            self.serving[key] = self.serving.get(key, 0) + 1
            self.cond.notify_all()

    def current_delay(self):
        with self.cond:
            return self.delay_ms / 1000.0 if time.monotonic() < self.delay_until else 0.0

    def apply(self, key, record, body):
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self.log_lock:
            self.log.write(line)
            self.log.flush()
            os.fsync(self.log.fileno())
            self.values[key] = body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=b"", ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                return None  # the peer went away mid-body: not a request
            data += chunk
        return data

    def do_PUT(self):
        if not self.path.startswith(PREFIX):
            return self.reply(404, b'{"error":"not_found"}')
        key = self.path[len(PREFIX):]
        body = self.read_body()
        if body is None:
            self.close_connection = True
            return
        try:
            token = int(self.headers.get("Fencing-Token", ""))
        except ValueError:
            token = None
        st = self.state
        ticket = st.ticket(key)
        try:
            st.wait_turn(key, ticket)
            delay = st.current_delay()
            if delay:
                time.sleep(delay)  # the nemesis' slow or stalled backend
            record = {"key": key, "token": token, "client": self.headers.get("X-Chaos-Client"),
                      "write": self.headers.get("X-Chaos-Write"), "t": time.monotonic()}
            if self.server.door is not None:
                record["door"] = self.server.door
            st.apply(key, record, body)
        finally:
            st.done(key)
        self.reply(200, json.dumps({"applied": record["write"]}).encode())

    def do_GET(self):
        if self.path.startswith(PREFIX):
            value = self.state.values.get(self.path[len(PREFIX):])
            if value is None:
                return self.reply(404, b'{"error":"not_found"}')
            return self.reply(200, value, "application/octet-stream")
        return self.reply(404, b'{"error":"not_found"}')

    def do_POST(self):
        if self.path.startswith(PAY_PREFIX):
            return self.pay()
        body = self.read_body() or b"{}"
        if self.path == "/__chaos/delay":
            spec = json.loads(body)
            with self.state.cond:
                self.state.delay_ms = int(spec["ms"])
                self.state.delay_until = time.monotonic() + int(spec["for_ms"]) / 1000.0
            return self.reply(200, b"{}")
        return self.reply(404, b'{"error":"not_found"}')


    def pay(self):
        account = self.path[len(PAY_PREFIX):]
        body = self.read_body()
        if body is None:
            self.close_connection = True
            return
        t_arrive = time.monotonic()
        try:
            req = json.loads(body)
            op, key = str(req["op"]), str(req["key"])
        except (ValueError, KeyError, TypeError):
            return self.reply(400, b'{"error":"bad_payment"}')
        st = self.state
        ticket = st.ticket(PAY_PREFIX + account)
        try:
            st.wait_turn(PAY_PREFIX + account, ticket)
            delay = st.current_delay()
            if delay:
                time.sleep(delay)
            with st.cond:
                st.runs += 1
                run = st.runs
            attempt = self.headers.get("X-Chaos-Attempt")
            response = json.dumps({"op": op, "run": run, "attempt": attempt}).encode()
            record = {"key": key, "op": op, "client": self.headers.get("X-Chaos-Client"),
                      "attempt": attempt, "account": account, "t_arrive": t_arrive,
                      "t": time.monotonic(), "response": response.decode()}
            gap_ms = stream_gap_ms(self.headers)
            if gap_ms > 0:
                record["stream_ms"] = gap_ms * STREAM_PIECES
            st.apply(PAY_PREFIX + account, record, body)
        finally:
            st.done(PAY_PREFIX + account)
        gap_ms = stream_gap_ms(self.headers)
        if gap_ms <= 0:
            return self.reply(200, response)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(response)))
        self.end_headers()
        self.wfile.flush()
        step = -(-len(response) // STREAM_PIECES)
        for i in range(0, len(response), step):
            time.sleep(gap_ms / 1000.0)
            self.wfile.write(response[i:i + step])
            self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    door = None  # the listener's index when there are several

    def handle_error(self, request, client_address):
        pass  # a peer that went away (fencegate gave up or was killed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True, help="the applied-writes log (JSON lines)")
    parser.add_argument("--listeners", type=int, default=1,
                        help="listen on this many ports (--port must be 0 for more than one)")
    args = parser.parse_args()
    # Python runs signal handlers only in the main thread: block the stop
    # signals before any thread starts and take them with sigwait.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    if args.listeners < 1 or (args.listeners > 1 and args.port != 0):
        parser.error("--listeners must be at least 1, and --port 0 for more than one")
    Handler.state = State(args.log)
    servers = []
    for i in range(args.listeners):
        server = Server(("127.0.0.1", args.port), Handler)
        server.door = i if args.listeners > 1 else None
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        servers.append(server)
    print(" ".join(str(s.server_address[1]) for s in servers), flush=True)
    signal.sigwait(stop_signals)
    for server in servers:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
