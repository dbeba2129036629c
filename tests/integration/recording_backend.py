#!/usr/bin/env python3
"""A small HTTP/1.1 backend that records every request it receives.

Run as a process: ``python3 recording_backend.py [--port 0]``. It listens on
127.0.0.1 (port 0 = the kernel picks) and prints the port as the FIRST line
of stdout, then serves until SIGTERM/SIGINT. With ``--tls-cert FILE
--tls-key FILE`` it speaks HTTPS (each connection's handshake runs on its
own thread; a failed one is dropped quietly), and each log entry has the
SNI name the client sent (``sni``, null when none).

Behaviour:
- every request except the control endpoints is recorded in memory:
  method, raw request target (exactly as sent on the request line), header
  pairs in order, body (latin-1 text), monotonic start time (headers parsed)
  and end time (taken just before the response is written, after any hold);
- ``X-Test-Hold-Ms: N`` holds the request N ms before answering;
- ``X-Test-Hold-Until: NAME`` holds the request (once it is logged as
  active) until ``POST /__release/NAME``, or 60 s at most; a release that
  comes first lets it through at once;
- ``X-Test-Status: N`` answers with status N instead of the default;
- ``X-Test-Seq: 1`` adds ``X-Backend-Seq: N``, the request's number in the
  log, to the answer, and ``X-Test-Response-Bytes: N`` answers a body of N
  bytes that begins with that number: a replay is told from a second run;
  with ``X-Test-Incompressible: 1`` the rest of those bytes are random, so
  that a store that compresses keeps them whole;
- ``X-Test-Drop-Idle: 1`` answers normally (keep-alive) and then closes the
  connection without saying so, as a backend's idle timeout does;
- ``X-Test-Trickle-Ms: N`` sends the body (with its Content-Length) in five
  pieces, N ms apart, as a backend that streams a slow answer does;
- ``X-Test-EOF-Body: 1`` answers without Content-Length, the body delimited
  by closing the connection;
- ``X-Test-Drop-If-Reused: 1`` on a connection that already served a
  request: reads the request whole, then closes without answering (and
  without logging it), as a backend whose idle timeout fires just as a
  request arrives; on a new connection it is served as usual;
- a body cut short (EOF before Content-Length bytes or before the last
  chunk) is not applied and not logged: the request never completed;
- ``X-Test-Answer-Early: 1`` answers 200 ``{"backend":"early"}`` as soon as
  the head is read, before the body (as a backend that refuses or accepts
  a request on its head alone), counts it (``early`` in ``/__log``), then
  reads the body and logs the request; the connection stays open;
- ``X-Test-Discard-Body: 1`` reads the body and only counts its bytes (for
  bodies too large to keep); the log then has ``body_bytes`` and no body;
- PUT stores the body under the raw path: 201 when new, 200 when replaced;
  POST/PATCH answer 200, DELETE 200 (204-free so a body is always present),
  and so does any other method (WebDAV's, unknown ones, another case);
  GET/HEAD answer the stored body (200) or 404;
- connections that carried at least one recorded request are counted:
  ``connections`` in ``/__log`` has ``opened`` (at the first such request)
  and ``closed`` (once the client closed it, or it was dropped);
- control endpoints, never recorded and meant to be called directly:
  ``GET /__log`` -> ``{"requests": [...finished], "active": [...in progress]}``
  (an active entry appears once the request's headers and body were read),
  ``POST /__reset`` clears the log and the stored bodies,
  ``POST /__release/NAME`` ends the holds named NAME (``X-Test-Hold-Until``).
"""

import argparse
import json
import os
import socket
import signal
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.log = []       # guarded by lock
        self.objects = {}   # raw path -> bytes, guarded by lock
        self.seq = 0        # guarded by lock
        self.active = {}    # id -> request still being handled, guarded by lock
        self.next_active = 0  # guarded by lock
        self.dropped = 0      # connections closed by X-Test-Drop-Idle; guarded by lock
        self.early = 0        # answers sent before the body by X-Test-Answer-Early; guarded by lock
        self.opened = 0       # connections that carried a recorded request; guarded by lock
        self.closed = 0       # ... of which ended; guarded by lock
        self.releases = {}    # X-Test-Hold-Until name -> threading.Event; guarded by lock

    def release_event(self, name):
        with self.lock:
            return self.releases.setdefault(name, threading.Event())


STATE = State()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recording-backend/1"

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):  # keep stderr quiet
        pass

    def finish(self):  # the connection ends, whichever way
        try:
            super().finish()
        finally:
            if getattr(self, "served", 0):
                with STATE.lock:
                    STATE.closed += 1

    # --- request parsing -------------------------------------------------

    def _raw_target(self):
        # self.path may be rewritten by http.server (it collapses a leading
        # "//"), so take the target from the request line as sent.
        parts = self.requestline.split(" ")
        return parts[1] if len(parts) >= 2 else self.path

    def _read_body(self):
        self.discarded = None
        if self.headers.get("X-Test-Discard-Body"):
            return self._discard_body()
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise IncompleteBody("EOF before the last chunk")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    # trailers until the empty line
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                chunk = self.rfile.read(size)
                if len(chunk) < size:
                    raise IncompleteBody("EOF inside a chunk")
                chunks.append(chunk)
                self.rfile.readline(3)  # CRLF after the chunk
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length", "0") or "0")
        body = self.rfile.read(length) if length > 0 else b""
        if len(body) < length:
            raise IncompleteBody(f"EOF after {len(body)} of {length} body bytes")
        return body

    def _discard_body(self):
        """Reads a Content-Length body in pieces, keeping only its size."""
        length = int(self.headers.get("Content-Length", "0") or "0")
        left = length
        while left > 0:
            piece = self.rfile.read(min(left, 1 << 20))
            if not piece:
                raise IncompleteBody(f"EOF with {left} body bytes missing")
            left -= len(piece)
        self.discarded = length - left
        return b""

    # --- responses -------------------------------------------------------

    def _send(self, status, body, content_type="application/json", head_only=False, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in extra:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only and body:
            self.wfile.write(body)
        self.wfile.flush()

    def _control(self, method, target):
        if method == "GET" and target == "/__log":
            with STATE.lock:
                body = json.dumps({"requests": STATE.log,
                                   "active": list(STATE.active.values()),
                                   "dropped": STATE.dropped,
                                   "early": STATE.early,
                                   "connections": {"opened": STATE.opened,
                                                   "closed": STATE.closed}}).encode()
            self._send(200, body)
            return True
        if method == "POST" and target.startswith("/__release/"):
            STATE.release_event(target[len("/__release/"):]).set()
            self._send(200, b'{"released":true}')
            return True
        if method == "POST" and target == "/__reset":
            with STATE.lock:
                STATE.log.clear()
                STATE.objects.clear()
            self._send(200, b'{"reset":true}')
            return True
        return False

    def _handle(self):
        start = time.monotonic()
        method = self.command
        target = self._raw_target()
        if self.headers.get("X-Test-Answer-Early"):
            return self._answer_early(start, method, target)
        try:
            body = self._read_body()
        except IncompleteBody:
            self.close_connection = True
            return
        if self._control(method, target):
            return
        served = getattr(self, "served", 0)
        self.served = served + 1
        if not served:
            with STATE.lock:
                STATE.opened += 1
        if served and self.headers.get("X-Test-Drop-If-Reused"):
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return

        headers = [[k, v] for k, v in self.headers.items()]
        with STATE.lock:
            STATE.next_active += 1
            active_id = STATE.next_active
            STATE.active[active_id] = {"method": method, "path": target,
                                       "headers": headers, "start": start}

        hold_ms = self.headers.get("X-Test-Hold-Ms")
        if hold_ms:
            # The backend is told to be slow; this is behaviour under test,
            # not synchronisation.
            threading.Event().wait(int(hold_ms) / 1000.0)
        hold_until = self.headers.get("X-Test-Hold-Until")
        if hold_until:
            # Until the test says so: the request stays in flight at the
            # backend meanwhile. The bound only keeps a failed test from
            # hanging.
            STATE.release_event(hold_until).wait(60)

        with STATE.lock:
            del STATE.active[active_id]
            status, out, ctype = self._respond(method, target, body)
            forced = self.headers.get("X-Test-Status")
            if forced:
                status = int(forced)
            self._log_locked(start, method, target, headers, body, status)
            seq = STATE.seq
        extra = []
        if self.headers.get("X-Test-Seq"):
            extra.append(("X-Backend-Seq", str(seq)))
            size = self.headers.get("X-Test-Response-Bytes")
            if size:
                head = f"seq={seq};".encode()
                n = int(size)
                fill = os.urandom(n) if self.headers.get("X-Test-Incompressible") else b"x" * n
                out = (head + fill)[:n] if n >= len(head) else head[:n]
        if self.headers.get("X-Test-EOF-Body"):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)
            self.wfile.flush()
            self.close_connection = True
            return
        trickle = self.headers.get("X-Test-Trickle-Ms")
        if trickle and method != "HEAD":
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.flush()
            step = -(-len(out) // 5)
            for i in range(0, len(out), step):
                time.sleep(int(trickle) / 1000)  # the slow backend under test
                self.wfile.write(out[i:i + step])
                self.wfile.flush()
            return
        self._send(status, out, ctype, head_only=(method == "HEAD"), extra=extra)
        if self.headers.get("X-Test-Drop-Idle"):
            # FIN now, then count it: a test can wait until the close is sent.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            with STATE.lock:
                STATE.dropped += 1

    def _answer_early(self, start, method, target):
        self._send(200, b'{"backend":"early"}')
        with STATE.lock:
            STATE.early += 1
        try:
            body = self._read_body()
        except IncompleteBody:
            self.close_connection = True
            return
        with STATE.lock:
            self._log_locked(start, method, target, [[k, v] for k, v in self.headers.items()],
                             body, 200)

    def _log_locked(self, start, method, target, headers, body, status):
        """Appends a finished request to the log; called with STATE.lock held."""
        STATE.seq += 1
        STATE.log.append({
            "seq": STATE.seq,
            "method": method,
            "path": target,
            "headers": headers,
            "body": body.decode("latin-1"),
            "body_bytes": len(body) if self.discarded is None else self.discarded,
            "start": start,
            "end": time.monotonic(),
            "status": status,
            "peer_port": self.client_address[1],
            "sni": getattr(self.connection, "fg_sni", None),
        })

    def _respond(self, method, target, body):
        """Decides the answer; called with STATE.lock held."""
        if method in ("GET", "HEAD"):
            if target in STATE.objects:
                return 200, STATE.objects[target], "application/octet-stream"
            return 404, b'{"backend":"not found"}', "application/json"
        if method == "PUT":
            created = target not in STATE.objects
            STATE.objects[target] = body
            info = {"backend": "stored", "path": target, "bytes": len(body)}
            return (201 if created else 200), json.dumps(info).encode(), "application/json"
        if method == "DELETE":
            existed = STATE.objects.pop(target, None) is not None
            return 200, json.dumps({"backend": "deleted", "existed": existed}).encode(), "application/json"
        return 200, json.dumps({"backend": "ok", "method": method}).encode(), "application/json"

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_OPTIONS = _handle

    def __getattr__(self, name):
        # Every other method (WebDAV's, unknown ones, ones in another letter
        # case) is recorded and answered 200 too, as a lenient backend would.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)


class IncompleteBody(Exception):
    """The client closed before the whole body arrived."""


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    tls = None  # an ssl.SSLContext for HTTPS

    def finish_request(self, request, client_address):
        # On the connection's own thread, so a slow handshake blocks no one.
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return  # a client that refused our certificate, or went away
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        pass  # a client that vanished mid-request is not the backend's problem


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def remember_sni(sock, name, _ctx):
        sock.fg_sni = name  # read into the request log

    ctx.sni_callback = remember_sni
    return ctx


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert", help="certificate chain (PEM): serve HTTPS")
    parser.add_argument("--tls-key", help="private key of --tls-cert (PEM)")
    args = parser.parse_args()

    # The kernel may deliver a process-wide SIGTERM to any thread, but Python
    # runs signal handlers only in the main thread, and only when it wakes: a
    # main thread parked in Event.wait() could sleep through the signal. So
    # block the stop signals before any thread starts (threads inherit the
    # mask) and take them synchronously with sigwait.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    server = Server(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        server.tls = tls_context(args.tls_cert, args.tls_key)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    print(server.server_address[1], flush=True)
    signal.sigwait(stop_signals)
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
