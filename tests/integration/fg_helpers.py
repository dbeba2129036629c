"""Helpers for the integration tests: a raw HTTP/1.1 client, the default
config, and process handles for the recording backend and fencegate.

Starting and stopping processes (fencegate, and read_first_line,
stop_process, write_config, free_port, TempDir) lives in
tests/support/fencegate_proc.py, shared with the chaos run, the demo and the
bench, and nginx and Apache as WebDAV backends (NginxDav, ApacheDav) in
tests/support/dav_proc.py, shared with the chaos run; this module adds what
only the tests use, and its names of those helpers are the shared ones.

The client writes bytes to a socket itself so that tests can send what
http.client refuses or rewrites: NUL bytes and odd characters in the request
target, duplicate headers, header values with surrounding spaces.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "support"))

import fencegate_proc  # noqa: E402
from fencegate_proc import (START_TIMEOUT, TempDir, free_port, parse_addr,  # noqa: E402,F401
                            read_first_line, stop_process, write_config)
from dav_proc import APACHE, ApacheDav, NginxDav  # noqa: E402,F401

ADMIN_TOKEN = "integration-admin-secret"
IO_TIMEOUT = float(os.environ.get("FENCEGATE_TEST_IO_TIMEOUT", "20"))
# storage.etcd's timers for the tests whose writes must go through: etcd's
# answer on a busy machine (or under a sanitizer build) can take far longer
# than on an idle one, and a write refused for that (store_unavailable,
# fence_expired) is not what those tests look at. A killed member refuses
# its connections at once, whatever the timeout.
ETCD_TIMERS = {"timeout": "10s", "forward_within": "30s"}


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

    def __init__(self, addr, timeout=IO_TIMEOUT, tls=None, server_hostname=None):
        """`tls`: an ssl.SSLContext to speak TLS (handshake done here)."""
        self.addr = addr
        self.sock = socket.create_connection(addr, timeout=timeout)
        if tls is not None:
            try:
                self.sock = tls.wrap_socket(self.sock, server_hostname=server_hostname)
            except BaseException:
                self.sock.close()
                raise
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
            if not status_line.startswith(b"HTTP/1."):
                # Bytes left over from the previous message (a body where
                # none belongs): the connection is out of step.
                raise AssertionError(f"not a status line: {status_line[:200]!r}")
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

    def read_interim(self):
        """Reads one interim (1xx) response, which read_response skips, and
        returns its status."""
        try:
            line = self._readline()
            while line == b"":
                line = self._readline()
            while self._readline() != b"":
                pass
        except socket.timeout:
            raise AssertionError(f"no interim response from {self.addr} within the timeout; "
                                 f"received so far: {self.buf[:300]!r}") from None
        parts = line.split(b" ")
        assert line.startswith(b"HTTP/1.") and len(parts) > 1 and parts[1][:1] == b"1", line
        return int(parts[1])

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def request(addr, method, target, headers=(), body=b"", timeout=IO_TIMEOUT, tls=None,
            server_hostname=None, **kw):
    """One request on a fresh connection (Connection: close); over TLS with
    `tls` (an ssl.SSLContext)."""
    with RawConnection(addr, timeout, tls, server_hostname) as c:
        c.send(method, target, headers, body, **kw)
        return c.read_response(method)


def raw_exchange(addr, data, timeout=IO_TIMEOUT):
    """Sends arbitrary bytes and reads one response."""
    with RawConnection(addr, timeout) as c:
        c.send_raw(data)
        return c.read_response()


# --------------------------------------------------------------------------
# Configs (written with fencegate_proc.write_config)
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

class Backend:
    """The recording backend, run as a child process. `args` are extra
    command-line arguments (e.g. --tls-cert/--tls-key); `requester` is the
    function that reaches its control endpoints (a TLS one for HTTPS)."""

    def __init__(self, log_dir, args=(), requester=None, name="backend"):
        self.log_path = os.path.join(log_dir, f"{name}.stderr")
        self._stderr = open(self.log_path, "wb")
        self._request = requester or request
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "recording_backend.py"), "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL)
        line, _ = read_first_line(self.proc, START_TIMEOUT, "recording backend")
        self.port = int(line)
        self.addr = ("127.0.0.1", self.port)

    def log(self):
        return self.snapshot()["requests"]

    def snapshot(self):
        r = self._request(self.addr, "GET", "/__log")
        assert r.status == 200, r
        return r.json()

    def reset(self):
        r = self._request(self.addr, "POST", "/__reset")
        assert r.status == 200, r

    def release(self, name):
        """Ends the holds of requests sent with X-Test-Hold-Until: name."""
        r = self._request(self.addr, "POST", f"/__release/{name}")
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


class Fencegate(fencegate_proc.Fencegate):
    """A fencegate process (fencegate_proc.Fencegate), with the requests
    the tests make of it."""

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

    def metric(self, name):
        """The value of the unlabelled sample `name` of GET /metrics, or None
        when there is none."""
        r = self.admin_get("/metrics")
        assert r.status == 200, r
        for line in r.body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait_metric(self, name, value, timeout=IO_TIMEOUT):
        """Polls GET /metrics until the unlabelled sample `name` is `value`
        (e.g. fencegate_keys_waiting: so many writes queued for a key)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.metric(name)
            if got == value:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} is {got} after {timeout}s, want {value}")
            time.sleep(0.01)  # polling interval of a condition with a deadline


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


# --------------------------------------------------------------------------
# A raw backend that sends exactly the bytes a test scripts
# --------------------------------------------------------------------------

class ScriptedBackend:
    """A raw backend on 127.0.0.1:0 that answers each request (read up to
    the end of its head; these tests send no request bodies to it) with the
    bytes `script` maps its target to, closing afterwards when the answer
    says so, and keeps every byte each connection received. `tls`: a
    server-side ssl.SSLContext to speak TLS. A script entry may carry a
    third item, (seconds, stray bytes, close): that long after the answer
    the backend sends the stray bytes on the idle connection (and closes
    it with close), then counts them in `strays`."""

    def __init__(self, script, tls=None):
        self.script = script
        self.tls = tls
        self.received = []  # one bytearray per accepted connection
        self.heads = []     # every request head read, in order
        self.strays = 0     # stray sends done
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            buf = bytearray()
            self.received.append(buf)
            threading.Thread(target=self._serve, args=(conn, buf), daemon=True).start()

    def _serve(self, conn, received):
        pending = b""

        def read_past(marker):
            """The bytes before `marker` (None when the peer closed first)."""
            nonlocal pending
            while marker not in pending:
                data = conn.recv(65536)
                if not data:
                    return None
                received.extend(data)
                pending += data
            before, pending = pending.split(marker, 1)
            return before

        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
        except OSError:
            conn.close()
            return
        with conn:
            try:
                while True:
                    head = read_past(b"\r\n\r\n")
                    if head is None:
                        return
                    self.heads.append(head)
                    if b"transfer-encoding: chunked" in head.lower():  # an empty chunked body
                        if read_past(b"0\r\n\r\n") is None:
                            return
                    parts = head.split(b" ")
                    if len(parts) < 3 or parts[1].decode() not in self.script:
                        return  # not a request we know: drop the connection
                    answer, close, *later = self.script[parts[1].decode()]
                    conn.sendall(answer)
                    if later:
                        threading.Thread(target=self._stray, args=(conn, *later[0]),
                                         daemon=True).start()
                    if close:
                        return
            except OSError:  # the peer reset the connection, or closed TLS without close_notify
                return

    def _stray(self, conn, seconds, data, close):
        time.sleep(seconds)  # the scripted moment of the stray bytes, not synchronisation
        try:
            conn.sendall(data)
            if close:
                conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.strays += 1

    def close(self):
        self.sock.close()


# --------------------------------------------------------------------------
# ZooKeeper: a standalone server as a child process, and the lock recipe of
# docs/locks.md with kazoo (test_token_recipes.py). kazoo is imported by the caller:
# this module must load without it.
# --------------------------------------------------------------------------

ZK_ENV_SCRIPT = "/usr/share/zookeeper/bin/zkEnv.sh"  # Debian's zookeeper package
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZK_MISSING = "bash docker/install-deps.sh installs zookeeperd (ZooKeeper and a Java runtime)"


def zookeeper_java_command():
    """[java, -cp, CLASSPATH, QuorumPeerMain] as Debian's zookeeper package
    runs its server (zkEnv.sh sets JAVA and CLASSPATH), plus slf4j-simple
    from the same directory when present so the server logs to stderr.
    Raises AssertionError naming what is missing."""
    if not os.path.exists(ZK_ENV_SCRIPT):
        raise AssertionError(f"ZooKeeper is not installed ({ZK_ENV_SCRIPT} is missing): {ZK_MISSING}")
    out = subprocess.run(
        ["bash", "-c", '. "$1" >/dev/null 2>&1; printf "%s\\n%s\\n" "$JAVA" "$CLASSPATH"',
         "zkEnv", ZK_ENV_SCRIPT],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    java, classpath = (out.stdout.split("\n") + ["", ""])[:2]
    java = java or shutil.which("java") or ""
    if not (os.path.isfile(java) and os.access(java, os.X_OK)):
        raise AssertionError(f"no Java runtime for ZooKeeper (JAVA={java!r}): {ZK_MISSING}")
    entries = [p for p in classpath.split(":") if p and os.path.exists(p)]
    jars = [p for p in entries if os.path.basename(p).startswith("zookeeper") and p.endswith(".jar")]
    if not jars:
        raise AssertionError(f"no ZooKeeper jar in CLASSPATH={classpath!r} from {ZK_ENV_SCRIPT}: "
                             f"{ZK_MISSING}")
    logger = os.path.join(os.path.dirname(jars[0]), "slf4j-simple.jar")
    if os.path.exists(logger):
        entries.append(logger)
    return [java, "-Xmx256m", "-cp", ":".join(entries), ZK_MAIN]


def four_letter_word(port, word, timeout=2.0):
    """ZooKeeper's answer to a four-letter command, or None if the port does
    not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            out = b""
            while chunk := s.recv(4096):
                out += chunk
            return out.decode("utf-8", "replace")
    except OSError:
        return None


class ZooKeeperServer:
    """A standalone ZooKeeper server, our child process: its own config and
    dataDir under work_dir, a free loopback port, no admin server. Ready when
    `srvr` says it serves and `conf` shows our dataDir (not another server
    that took the port first)."""

    def __init__(self, work_dir, start_timeout=60.0, attempts=5):
        self.work_dir = work_dir
        self.data_dir = os.path.join(work_dir, "data")
        self.start_timeout = start_timeout
        self.attempts = attempts
        self.proc = None
        self.port = None
        self.log_path = None
        self._log = None

    @property
    def hosts(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        cmd = zookeeper_java_command()
        for attempt in range(1, self.attempts + 1):
            # ZooKeeper cannot listen on port 0: take a free port from the
            # kernel, and start again if someone got it meanwhile.
            port = free_port()
            if self._start_on(cmd, port, attempt):
                return self
        raise AssertionError(f"ZooKeeper: every one of {self.attempts} free ports was taken "
                             f"before it could bind; last log {self.log_path}")

    def _start_on(self, cmd, port, attempt):
        cfg = os.path.join(self.work_dir, f"zoo-{attempt}.cfg")
        with open(cfg, "w") as f:
            f.write("# written by the fencegate integration tests\n"
                    "tickTime=200\n"  # sessions may last 0.4 s to 4 s
                    f"dataDir={self.data_dir}\n"
                    f"clientPort={port}\n"
                    "clientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\n"
                    "4lw.commands.whitelist=srvr,conf\n")
        self.port = port
        self.log_path = os.path.join(self.work_dir, f"zookeeper-{attempt}.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd + [cfg], stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        mine = "dataDir=" + os.path.join(self.data_dir, "version-2")
        deadline = time.monotonic() + self.start_timeout
        while True:  # a condition (srvr, then conf) polled with a deadline
            if self.proc.poll() is not None:
                rc, log = self.proc.returncode, self.log_tail()
                self._log.close()
                if "Address already in use" in log:
                    return False
                raise AssertionError(f"ZooKeeper exited with {rc} while starting:\n{log}")
            reply = four_letter_word(port, "srvr")
            if reply and "Mode: standalone" in reply:
                conf = four_letter_word(port, "conf") or ""
                if mine in conf.splitlines():
                    return True
                self.stop()  # another server answers on this port
                return False
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"ZooKeeper did not serve on port {port} within "
                                     f"{self.start_timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except (OSError, TypeError):
            return "(no log)"

    def stop(self, timeout=10.0):
        """SIGTERM by PID, SIGKILL if it outlives the deadline."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def _zk_sequence(node):
    return int(node.rsplit("-", 1)[1])


class ZkLock:
    """The ZooKeeper lock recipe of docs/locks.md, with a kazoo client: one
    EPHEMERAL_SEQUENTIAL znode /locks/<name>/lock-NNNNNNNNNN per contender
    (gone when its session ends or expires); the contender with the lowest
    sequence number holds the lock, a waiting one watches the node just
    before its own. Tokens: the sequence number, or the creation zxid
    (czxid) that the create itself returns."""

    def __init__(self, zk, name):
        self.zk = zk
        self.dir = f"/locks/{name}"
        self.path = self.node = self.sequence = self.czxid = None

    def enqueue(self):
        self.zk.ensure_path(self.dir)
        self.path, stat = self.zk.create(self.dir + "/lock-", ephemeral=True, sequence=True,
                                         include_data=True)
        self.node = self.path.rsplit("/", 1)[1]
        self.sequence = _zk_sequence(self.node)
        self.czxid = stat.czxid
        return self

    def token(self, kind):
        return {"sequence": self.sequence, "czxid": self.czxid}[kind]

    def _queue(self):
        nodes = sorted((n for n in self.zk.get_children(self.dir) if n.startswith("lock-")),
                       key=_zk_sequence)
        if self.node not in nodes:
            raise AssertionError(f"{self.path} is gone (session ended): not a contender any more")
        return nodes

    def holds(self):
        return self._queue()[0] == self.node

    def wait_held(self, timeout):
        """Returns once this contender holds the lock, woken by the watch on
        its predecessor's node; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = self._queue()
            i = nodes.index(self.node)
            if i == 0:
                return self
            changed = threading.Event()
            if self.zk.exists(f"{self.dir}/{nodes[i - 1]}",
                              watch=lambda _event: changed.set()) is None:
                continue  # already gone: look again
            if not changed.wait(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"{self.path}: {nodes[i - 1]} still holds the lock or "
                                     f"waits for it after {timeout}s")

    def acquire(self, timeout):
        return self.enqueue().wait_held(timeout)

    def release(self):
        self.zk.delete(self.path)
