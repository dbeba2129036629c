"""Helpers for the integration tests: a raw HTTP/1.1 client, a tiny YAML
writer, and process handles for the recording backend and fencegate.

The client writes bytes to a socket itself so that tests can send what
http.client refuses or rewrites: NUL bytes and odd characters in the request
target, duplicate headers, header values with surrounding spaces.
"""

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ADMIN_TOKEN = "integration-admin-secret"
START_TIMEOUT = float(os.environ.get("FENCEGATE_TEST_START_TIMEOUT", "30"))
IO_TIMEOUT = float(os.environ.get("FENCEGATE_TEST_IO_TIMEOUT", "20"))


# --------------------------------------------------------------------------
# Raw HTTP/1.1 client
# --------------------------------------------------------------------------

@dataclass
class Response:
    status: int
    reason: str
    headers: list = field(default_factory=list)  # [(name, value)] in order
    body: bytes = b""

    def header(self, name):
        """The value of the first header called `name` (any case), or None."""
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise AssertionError(f"body is not JSON ({e}): {self.body[:300]!r}") from None

    def __repr__(self):
        return f"<Response {self.status} {self.headers} {self.body[:300]!r}>"


class ConnectionClosed(AssertionError):
    """The server closed the connection before a complete response."""


def _b(x):
    return x if isinstance(x, bytes) else x.encode("latin-1")


def build_request(method, target, headers=(), body=b"", host=None, close=True,
                  content_length=True):
    """Bytes of one request. `target` is sent exactly as given (str or
    bytes). `headers` is a list of (name, value) pairs, sent in order and
    verbatim: a value " 1 " goes on the wire as "Name:  1 " (one separator
    space, then the value)."""
    lines = [_b(method) + b" " + _b(target) + b" HTTP/1.1"]
    names = {(k.lower() if isinstance(k, str) else k.decode().lower()) for k, _ in headers}
    if "host" not in names:
        lines.append(b"Host: " + _b(host or "127.0.0.1"))
    for k, v in headers:
        lines.append(_b(k) + b": " + _b(v))
    body = _b(body)
    if content_length and "content-length" not in names and "transfer-encoding" not in names:
        if body or method.upper() in ("PUT", "POST", "PATCH"):
            lines.append(b"Content-Length: " + str(len(body)).encode())
    if close and "connection" not in names:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class RawConnection:
    """One TCP connection; send requests and read responses separately so a
    test can have several requests in flight on several connections."""

    def __init__(self, addr, timeout=IO_TIMEOUT):
        self.addr = addr
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def send(self, method, target, headers=(), body=b"", **kw):
        self.sock.sendall(build_request(method, target, headers, body,
                                        host=f"{self.addr[0]}:{self.addr[1]}", **kw))

    def send_raw(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionClosed(f"connection to {self.addr} closed; received so far: {self.buf[:300]!r}")
        self.buf += chunk

    def _readline(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, method="GET"):
        try:
            status_line = self._readline()
            while status_line == b"":
                status_line = self._readline()
            parts = status_line.decode("latin-1").split(" ", 2)
            status = int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            headers = []
            while True:
                line = self._readline()
                if line == b"":
                    break
                k, _, v = line.decode("latin-1").partition(":")
                headers.append((k.strip(), v.strip()))
            resp = Response(status, reason, headers)
            if 100 <= status < 200:
                return self.read_response(method)
            if method.upper() == "HEAD" or status in (204, 304):
                return resp
            te = (resp.header("Transfer-Encoding") or "").lower()
            cl = resp.header("Content-Length")
            if "chunked" in te:
                body = b""
                while True:
                    size = int(self._readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self._readline() != b"":
                            pass
                        break
                    body += self._read_exact(size)
                    self._readline()
                resp.body = body
            elif cl is not None:
                resp.body = self._read_exact(int(cl))
            else:  # until close
                try:
                    while True:
                        self._fill()
                except ConnectionClosed:
                    pass
                resp.body, self.buf = self.buf, b""
            return resp
        except socket.timeout:
            raise AssertionError(f"no complete response from {self.addr} within the timeout; "
                                 f"received so far: {self.buf[:300]!r}") from None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def request(addr, method, target, headers=(), body=b"", timeout=IO_TIMEOUT, **kw):
    """One request on a fresh connection (Connection: close)."""
    with RawConnection(addr, timeout) as c:
        c.send(method, target, headers, body, **kw)
        return c.read_response(method)


def raw_exchange(addr, data, timeout=IO_TIMEOUT):
    """Sends arbitrary bytes and reads one response."""
    with RawConnection(addr, timeout) as c:
        c.send_raw(data)
        return c.read_response()


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return (host.strip("[]"), int(port))


# --------------------------------------------------------------------------
# YAML writing (block style; strings JSON-quoted, which YAML accepts)
# --------------------------------------------------------------------------

def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return json.dumps(str(v))


def to_yaml(obj, indent=0):
    pad = "  " * indent
    lines = []
    for k, v in obj.items():
        if isinstance(v, dict):
            lines.append(f"{pad}{k}:")
            lines.extend(to_yaml(v, indent + 1))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f"{pad}{k}:")
            for item in v:
                sub = to_yaml(item, indent + 2)
                sub[0] = f"{pad}  - " + sub[0].lstrip()
                lines.extend(sub)
        else:
            lines.append(f"{pad}{k}: {_scalar(v)}")
    return lines


def default_config(backend_port, data_dir, **overrides):
    cfg = {
        "listen": "127.0.0.1:0",
        "threads": 2,
        "upstream": {
            "url": f"http://127.0.0.1:{backend_port}",
            "connect_timeout": "1s",
            "timeout": "10s",
        },
        "fencing": {"token_header": "Fencing-Token", "forward_token": True},
        "routes": [{"name": "objects", "path_prefix": "/objects/"}],
        "storage": {"engine": "rocksdb", "path": str(data_dir), "durability": "sync"},
        "admin": {"listen": "127.0.0.1:0", "token": ADMIN_TOKEN},
        "log": {"level": "info", "access_log": True},
    }
    cfg.update(overrides)
    return cfg


def write_config(path, cfg):
    with open(path, "w") as f:
        f.write("\n".join(to_yaml(cfg)) + "\n")
    return str(path)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def read_first_line(proc, timeout, what):
    """Reads the first stdout line of `proc` (binary pipe) with a deadline,
    waking on the pipe becoming readable, never on a timer."""
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    fd = proc.stdout.fileno()
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{what}: no stdout line within {timeout}s (got {buf!r})")
            if not sel.select(left):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait(timeout=5)
                raise AssertionError(f"{what} exited with {proc.returncode} before printing "
                                     f"its first line (got {buf!r})")
            buf += chunk
    finally:
        sel.close()
    line, _, rest = buf.partition(b"\n")
    return line.decode(), rest


def _drain(stream, sink):
    """Keeps reading a pipe so the child never blocks on a full pipe."""
    try:
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            sink.append(chunk)
    except OSError:
        pass


def stop_process(proc, sig=signal.SIGTERM, timeout=20):
    """Signals a process we started (by its PID) and waits for it; kills it
    if it outlives the deadline. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"pid {proc.pid} did not exit within {timeout}s of signal {sig}")
    return proc.returncode


class Backend:
    """The recording backend, run as a child process."""

    def __init__(self, log_dir):
        self.log_path = os.path.join(log_dir, "backend.stderr")
        self._stderr = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "recording_backend.py"), "--port", "0"],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL)
        line, _ = read_first_line(self.proc, START_TIMEOUT, "recording backend")
        self.port = int(line)
        self.addr = ("127.0.0.1", self.port)

    def log(self):
        return self.snapshot()["requests"]

    def snapshot(self):
        r = request(self.addr, "GET", "/__log")
        assert r.status == 200, r
        return r.json()

    def reset(self):
        r = request(self.addr, "POST", "/__reset")
        assert r.status == 200, r

    def wait_until(self, pred, timeout=IO_TIMEOUT, what="backend condition"):
        """Polls /__log until pred(snapshot) is true, with a deadline."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.snapshot()
            if pred(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; backend state: {snap}")
            time.sleep(0.01)  # polling interval of a condition with a deadline

    def stop(self):
        rc = stop_process(self.proc)
        self._stderr.close()
        return rc


class Fencegate:
    """A fencegate process. start() reads the first stdout line, which must
    be {"event":"listening","proxy":"H:P","admin":"H:P"}."""

    def __init__(self, binary, config_path, log_dir, extra_args=(), name="fencegate"):
        self.binary = binary
        self.config_path = config_path
        self.log_dir = log_dir
        self.extra_args = list(extra_args)
        self.name = name
        self.proc = None
        self.starts = 0
        self.listening = None
        self.proxy = None
        self.admin = None

    @property
    def stderr_path(self):
        return os.path.join(self.log_dir, f"{self.name}.{self.starts}.stderr")

    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--config", self.config_path, *self.extra_args],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL)
        try:
            line, rest = read_first_line(self.proc, START_TIMEOUT, "fencegate")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- fencegate stderr ---\n{self.stderr_tail()}") from None
        try:
            ev = json.loads(line)
        except ValueError:
            raise AssertionError(f"fencegate's first stdout line is not JSON: {line!r}") from None
        assert isinstance(ev, dict) and ev.get("event") == "listening", \
            f"first stdout line is not a listening event: {line!r}"
        assert "proxy" in ev, f"listening event without proxy address: {line!r}"
        self.listening = ev
        self.proxy = parse_addr(ev["proxy"])
        self.admin = parse_addr(ev["admin"]) if ev.get("admin") else None
        self.stdout_rest = [rest]
        threading.Thread(target=_drain, args=(self.proc.stdout, self.stdout_rest),
                         daemon=True).start()
        return self

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc is None:
            return None
        rc = stop_process(self.proc, sig, timeout)
        self._stderr.close()
        return rc

    def restart(self):
        """SIGTERM, require exit code 0, start again on the same config and
        data directory (the ports are new: the config asks for port 0)."""
        rc = self.stop()
        assert rc == 0, f"fencegate exited with {rc} on SIGTERM, want 0\n{self.stderr_tail()}"
        return self.start()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, n=60):
        try:
            with open(self.stderr_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no stderr)"

    SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                         "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer")

    def sanitizer_reports(self):
        """Lines of any ASan/UBSan/TSan report in the stderr of every start."""
        found = []
        for n in range(1, self.starts + 1):
            path = os.path.join(self.log_dir, f"{self.name}.{n}.stderr")
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            found += [line for line in text.splitlines()
                      if any(m in line for m in self.SANITIZER_MARKERS)]
        return found

    # --- convenience ---------------------------------------------------------

    def put(self, target, token=None, body=b"data", headers=(), method="PUT"):
        h = list(headers)
        if token is not None:
            h.append(("Fencing-Token", str(token)))
        return request(self.proxy, method, target, h, body)

    def admin_get(self, path):
        assert self.admin, "admin listener is off"
        return request(self.admin, "GET", path)

    def admin_post(self, path, body, bearer=ADMIN_TOKEN, method="POST"):
        assert self.admin, "admin listener is off"
        h = [("Content-Type", "application/json")]
        if bearer is not None:
            h.append(("Authorization", f"Bearer {bearer}"))
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return request(self.admin, method, path, h, data)


def admin_key_path(key):
    from urllib.parse import quote
    return "/v1/keys/" + quote(key, safe="")


def tokens_seen(log, method="PUT", path=None):
    """The Fencing-Token values of the backend's recorded requests."""
    out = []
    for r in log:
        if r["method"] != method or (path is not None and r["path"] != path):
            continue
        vals = [v for k, v in r["headers"] if k.lower() == "fencing-token"]
        out.append(vals[0] if vals else None)
    return out


def assert_json_error(resp, status, code, **fields):
    assert resp.status == status, f"want {status} {code}, got {resp}"
    ctype = resp.header("Content-Type") or ""
    assert ctype.startswith("application/json"), f"want application/json, got {ctype!r}: {resp}"
    doc = resp.json()
    assert doc.get("error") == code, f"want error {code!r}, got {doc}"
    for k, v in fields.items():
        assert doc.get(k) == v, f"want {k}={v!r} in {doc}"
    return doc
