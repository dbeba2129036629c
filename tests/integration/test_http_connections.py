"""Limits, timeouts and connection handling: slow and idle clients
are cut off on time, connection limits hold, pooled upstream connections the
backend closed are never used for a fenced write, EOF-delimited responses
are re-framed, bodies stream without being held, and a drain loses nothing."""

import os
import signal
import socket
import threading
import time

import pytest

from fg_helpers import (IO_TIMEOUT, RawConnection, ScriptedBackend, assert_json_error,
                        build_request, raw_exchange, request)


def closed_within(sock, seconds):
    """Seconds until the peer closed `sock` (recv returns b"" or a reset),
    or None when it stayed open for `seconds`."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return time.monotonic() - start
    except (ConnectionResetError, BrokenPipeError):
        return time.monotonic() - start
    except socket.timeout:
        return None


def test_chunked_body_over_the_limit_is_413_and_never_completes_upstream(make_gate, backend):
    gate = make_gate(limits={"max_body_bytes": 1000})
    chunk = b"400\r\n" + b"x" * 0x400 + b"\r\n"
    data = (b"PUT /objects/big HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n")
    r = raw_exchange(gate.proxy, data)
    assert_json_error(r, 413, "body_too_large")
    assert backend.log() == [], "a body cut at the limit must not complete at the backend"


def test_content_length_over_the_limit_is_413_before_anything_is_sent(make_gate, backend):
    gate = make_gate(limits={"max_body_bytes": 1000})
    data = (b"PUT /objects/big HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
            b"Content-Length: 5000\r\n\r\n")
    r = raw_exchange(gate.proxy, data)
    assert_json_error(r, 413, "body_too_large")
    assert backend.log() == []
    assert gate.admin_get("/v1/keys/%2Fobjects%2Fbig").status == 404


def test_header_block_over_the_limit_is_431(make_gate, backend):
    gate = make_gate(limits={"max_header_bytes": 2048})
    r = raw_exchange(gate.proxy, build_request("GET", "/plain/a", [("X-Big", "y" * 4000)]))
    assert_json_error(r, 431, "headers_too_large")
    assert backend.log() == []


def test_slowloris_is_cut_off_within_header_timeout(make_gate, backend):
    # The client sends a byte every 200 ms, so no timer of a single read
    # ever runs out: only header_timeout, a deadline for the whole head, can
    # end it. idle_timeout is far beyond the wait below, and how soon after
    # header_timeout the close comes depends on the machine, not on fencegate.
    gate = make_gate(limits={"header_timeout": "1s", "idle_timeout": "600s"})
    sock = socket.create_connection(gate.proxy)
    sock.sendall(b"PUT /objects/slow HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def dribble():
        # One byte every 200 ms: never finishes the head.
        while not stop.is_set():
            try:
                sock.send(b"X")
            except OSError:
                return
            stop.wait(0.2)

    t = threading.Thread(target=dribble, daemon=True)
    t.start()
    waited = closed_within(sock, IO_TIMEOUT)
    stop.set()
    t.join()
    sock.close()
    assert waited is not None, f"a client dribbling its head was not cut off in {IO_TIMEOUT}s"
    assert backend.log() == []


def test_idle_keepalive_connection_closes_after_idle_timeout(make_gate, backend):
    # header_timeout far beyond the wait: only idle_timeout can close it.
    gate = make_gate(limits={"header_timeout": "600s", "idle_timeout": "1s"})
    with RawConnection(gate.proxy) as c:
        c.send("GET", "/plain/i", close=False)
        assert c.read_response().status == 404
        waited = closed_within(c.sock, IO_TIMEOUT)
    assert waited is not None, f"idle connection still open after {IO_TIMEOUT}s"


def test_max_connections_refuses_beyond_the_limit_and_recovers(make_gate, backend):
    gate = make_gate(limits={"max_connections": 2})
    first = [socket.create_connection(gate.proxy) for _ in range(2)]
    # Both are served (proves they count as active).
    for s in first:
        s.sendall(build_request("GET", "/plain/m", close=False))
    for s in first:
        assert s.recv(65536).startswith(b"HTTP/1.1 404")
    extra = socket.create_connection(gate.proxy)
    assert closed_within(extra, IO_TIMEOUT) is not None, "a third connection was kept open"
    extra.close()
    first[0].close()
    # Once a slot is free a new connection is served again.
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        try:
            r = raw_exchange(gate.proxy, build_request("GET", "/plain/m"))
            break
        except (AssertionError, OSError):  # refused while the slot is still taken
            assert time.monotonic() < deadline, "no connection accepted after one closed"
            time.sleep(0.01)  # polling interval of a condition with a deadline
    assert r.status == 404
    first[1].close()


def connect_from(source_ip, addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(IO_TIMEOUT)
    s.bind((source_ip, 0))
    s.connect(addr)
    return s


def test_max_connections_per_client_refuses_one_address_not_the_others(make_gate, backend):
    gate = make_gate(limits={"max_connections_per_client": 2})
    first = [connect_from("127.0.0.1", gate.proxy) for _ in range(2)]
    for s in first:  # both served: they hold the address's two slots
        s.sendall(build_request("GET", "/plain/m", close=False))
    for s in first:
        assert s.recv(65536).startswith(b"HTTP/1.1 404")
    extra = connect_from("127.0.0.1", gate.proxy)
    assert closed_within(extra, IO_TIMEOUT) is not None, \
        "a third connection from 127.0.0.1 was kept open"
    extra.close()
    # Another client address has its own budget.
    other = connect_from("127.0.0.2", gate.proxy)
    other.sendall(build_request("GET", "/plain/other"))
    assert other.recv(65536).startswith(b"HTTP/1.1 404")
    other.close()
    # Once one of the first two ends, 127.0.0.1 is served again.
    first[0].close()
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        s = connect_from("127.0.0.1", gate.proxy)
        try:
            s.sendall(build_request("GET", "/plain/again"))
            if s.recv(65536).startswith(b"HTTP/1.1 404"):
                break
        except OSError:
            pass  # refused while the slot is still taken
        finally:
            s.close()
        assert time.monotonic() < deadline, "no connection from 127.0.0.1 accepted after one closed"
        time.sleep(0.01)  # polling interval of a condition with a deadline
    first[1].close()


def test_backend_closing_a_pooled_connection_never_fails_a_fenced_write(gate, backend):
    with RawConnection(gate.proxy) as c:
        # The backend answers keep-alive and then closes: the connection
        # fencegate pooled is dead.
        c.send("PUT", "/objects/pool", [("Fencing-Token", "1"), ("X-Test-Drop-Idle", "1")],
               b"one", close=False)
        assert c.read_response("PUT").status in (200, 201)
        backend.wait_until(lambda snap: snap["dropped"] == 1, what="the backend's close")
        c.send("PUT", "/objects/pool", [("Fencing-Token", "2")], b"two", close=False)
        r = c.read_response("PUT")
        assert r.status in (200, 201), r
    assert [e["body"] for e in backend.log()] == ["one", "two"]


def test_a_burst_beyond_max_idle_connections_keeps_its_connections_then_closes_the_excess(
        make_gate, backend):
    # One thread: one pool. Six exchanges at once need six upstream
    # connections, five more than max_idle_connections keeps for good. The
    # upstream timeout outlasts the holds below.
    gate = make_gate(threads=1, upstream={"url": f"http://127.0.0.1:{backend.port}",
                                          "connect_timeout": "1s", "timeout": "30s",
                                          "max_idle_connections": 1})
    n = 6

    def send_burst(conns, hold):
        """Six GETs, each held at the backend until `hold` is released:
        returns once all six are there at once."""
        for i, c in enumerate(conns):
            c.send("GET", f"/plain/{hold}{i}", [("X-Test-Hold-Until", hold)], close=False)
        return backend.wait_until(lambda snap: len(snap["active"]) == n,
                                  what=f"the {hold} burst's {n} requests at the backend")

    def answers(conns):
        assert [c.read_response().status for c in conns] == [404] * n  # nothing stored there

    first, second = [], []
    try:
        # All six held at the backend at once: six connections.
        first += [RawConnection(gate.proxy) for _ in range(n)]
        snap = send_burst(first, "burst1")
        assert snap["connections"] == {"opened": n, "closed": 0}, snap["connections"]
        # The next swing of the load comes the moment the first burst is
        # answered, on client connections opened beforehand, well within the
        # second the pool keeps the excess: it finds the burst's connections
        # idle and reuses them (a hard cap of one would have closed all but
        # one, and connected again now).
        second += [RawConnection(gate.proxy) for _ in range(n)]
        backend.release("burst1")
        answers(first)
        snap = send_burst(second, "burst2")
        # Every upstream connection is busy: no trim can run while we look.
        assert snap["connections"] == {"opened": n, "closed": 0}, (
            f"the burst's connections were not all kept for the next one: {snap['connections']}")
        backend.release("burst2")
        answers(second)
    finally:
        for c in first + second:
            c.close()
    # Once the excess has sat idle for a second it is closed, down to the one
    # the limit keeps, and that one still serves.
    backend.wait_until(lambda snap: snap["connections"]["closed"] == n - 1,
                       what="the connections beyond the limit to be closed")
    assert request(gate.proxy, "GET", "/plain/after").status == 404
    assert backend.snapshot()["connections"] == {"opened": n, "closed": n - 1}


def test_retried_get_with_an_empty_chunked_body_still_ends_its_body(make_gate, backend):
    # A GET whose pooled upstream connection fails before any answer is
    # tried once more on a new one. Its body (empty, chunked) was read the
    # first time: the retry must still end it, or the backend waits for the
    # last chunk until fencegate's upstream timeout answers 504.
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}", "timeout": "10s"})
    with RawConnection(gate.proxy) as c:
        c.send("GET", "/plain/first", close=False)  # leaves a pooled connection
        assert c.read_response().status == 404
        c.send_raw(b"GET /plain/retry HTTP/1.1\r\nHost: x\r\nX-Test-Drop-If-Reused: 1\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        r = c.read_response()
        assert r.status == 404, r
    log = backend.log()
    assert [e["path"] for e in log] == ["/plain/first", "/plain/retry"]
    assert log[0]["peer_port"] != log[1]["peer_port"], "the retry must use a new connection"


def test_an_answer_the_backend_sent_before_the_body_ended_is_relayed(make_gate, backend):
    # The backend answers on the head alone, before the client has sent the
    # body (Expect: 100-continue makes fencegate send the head first and
    # answer 100 itself). That answer arrives while fencegate waits on the
    # client, and no more bytes follow it: fencegate sends the body up, then
    # relays the answer already waiting in the socket, and both connections
    # stay in step for the next request. A read of the response that needed
    # a new readiness event would hang here until upstream.timeout (504):
    # Asio's readiness wait re-arms the socket, so it does not, but a change
    # of how the response is read must keep this case.
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}", "timeout": "60s"})
    with RawConnection(gate.proxy) as c:
        c.send_raw(b"PUT /plain/early HTTP/1.1\r\nHost: x\r\nX-Test-Answer-Early: 1\r\n"
                   b"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n")
        assert c.read_interim() == 100
        backend.wait_until(lambda snap: snap["early"] == 1, what="the backend's early answer")
        c.send_raw(b"0123456789")
        r = c.read_response("PUT")
        assert r.status == 200 and r.body == b'{"backend":"early"}', r
        # The connection is still good for the next request.
        c.send("GET", "/plain/after", close=False)
        assert c.read_response().status == 404
    assert [(e["path"], e["body"]) for e in backend.log()] == [("/plain/early", "0123456789"),
                                                               ("/plain/after", "")]


def test_eof_delimited_response_is_chunked_to_the_client_and_not_pooled(gate, backend):
    with RawConnection(gate.proxy) as c:
        c.send("PUT", "/objects/eof", [("Fencing-Token", "1"), ("X-Test-EOF-Body", "1")], b"e",
               close=False)
        r = c.read_response("PUT")
        assert r.status in (200, 201) and r.header("Transfer-Encoding") == "chunked", r
        assert b"stored" in r.body
        # The client connection stays usable; the upstream one was not reused.
        c.send("GET", "/objects/eof", close=False)
        r = c.read_response()
        assert r.status == 200 and r.body == b"e", r


def test_upstream_timeout_is_504_and_token_stays(make_gate, backend):
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}", "timeout": "300ms"})
    # Held at the backend until the test lets it go: only the timeout answers.
    r = gate.put("/objects/slow", 5, headers=[("X-Test-Hold-Until", "slow")])
    backend.release("slow")
    assert_json_error(r, 504, "upstream_timeout")
    assert gate.admin_get("/v1/keys/%2Fobjects%2Fslow").json()["token"] == 5


def test_client_timeouts_do_not_run_while_the_upstream_works(make_gate, backend):
    """The client's timeouts bound its own reads and writes only: a backend
    slower than header_timeout and idle_timeout, but within upstream.timeout,
    still answers, on the same kept-alive connection, fenced or not."""
    gate = make_gate(limits={"header_timeout": "1s", "idle_timeout": "1s"},
                     upstream={"url": f"http://127.0.0.1:{backend.port}", "timeout": "10s"})
    with RawConnection(gate.proxy) as c:
        # Both sent at once: between the two, the client keeps no timer
        # waiting on itself, however long it takes to read the first answer.
        c.send("PUT", "/objects/patient", [("Fencing-Token", "3"), ("X-Test-Hold-Ms", "2500")],
               b"slow", close=False)
        c.send("GET", "/plain/patient", [("X-Test-Hold-Ms", "2500")], close=False)
        assert c.read_response().status == 201
        assert c.read_response().status == 404
    assert [e["path"] for e in backend.log()] == ["/objects/patient", "/plain/patient"]


def sanitizer_build(binary):
    """ASan/TSan builds carry shadow memory and a quarantine of freed
    blocks: their RSS says nothing of ours. g++ links the sanitizer runtime
    as a shared library (ldd names it), clang links it into the binary
    (its entry points are in the symbol table)."""
    import mmap
    import subprocess
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    if "libasan" in out or "libtsan" in out:
        return True
    with open(binary, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return m.find(b"__asan_init") != -1 or m.find(b"__tsan_init") != -1


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_one_gib_put_streams_through_with_bounded_memory(make_gate, backend):
    size = 1 << 30
    gate = make_gate(limits={"max_body_bytes": 2 * size})
    pid = gate.proc.pid
    peak = [rss_kib(pid)]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    piece = os.urandom(1 << 20)
    with RawConnection(gate.proxy, timeout=120) as c:
        c.send_raw(b"PUT /objects/gib HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
                   b"X-Test-Discard-Body: 1\r\nContent-Length: " + str(size).encode() +
                   b"\r\nConnection: close\r\n\r\n")
        for _ in range(size // len(piece)):
            c.sock.sendall(piece)
        r = c.read_response("PUT")
    done.set()
    sampler.join()
    assert r.status in (200, 201), r
    [entry] = backend.log()
    assert entry["body_bytes"] == size
    if not sanitizer_build(gate.binary):
        assert peak[0] < 64 * 1024, f"fencegate's resident memory reached {peak[0]} KiB"


def test_graceful_drain_finishes_in_flight_requests(gate, backend):
    c = RawConnection(gate.proxy, timeout=30)
    c.send("PUT", "/objects/drain", [("Fencing-Token", "1"), ("X-Test-Hold-Ms", "1500")],
           b"in flight")
    # Wait until the backend is actually holding it, then ask fencegate to stop.
    backend.wait_until(lambda snap: snap["active"], what="the request at the backend")
    gate.proc.send_signal(signal.SIGTERM)
    r = c.read_response("PUT")
    c.close()
    assert r.status in (200, 201), f"in-flight request lost in the drain: {r}"
    assert gate.proc.wait(timeout=20) == 0
    assert [e["body"] for e in backend.log()] == ["in flight"]


def test_an_empty_last_body_read_ends_the_message_once(make_gate):
    """When a body read completes the message with no new bytes (an empty
    chunked or EOF-delimited response body), the client gets exactly one
    last-chunk: the connection stays in step for the next response."""
    backend = ScriptedBackend({
        "/chunked-empty": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", False),
        "/eof-empty": (b"HTTP/1.0 200 OK\r\n\r\n", True),
        "/after": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
    })
    try:
        gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}"})
        with RawConnection(gate.proxy) as c:
            for target in ("/chunked-empty", "/eof-empty"):
                c.send("GET", target, close=False)
                r = c.read_response()
                assert r.status == 200 and r.body == b"", r
                assert r.header("Transfer-Encoding") == "chunked", r
                c.send("GET", "/after", close=False)
                r = c.read_response()
                assert r.status == 200 and r.body == b"ok", r
    finally:
        backend.close()


def test_an_empty_chunked_request_body_reaches_the_backend_with_one_last_chunk(make_gate):
    """A chunked request whose body is empty: the backend must see one
    last-chunk, or the pooled connection carries a stray one into the next
    request."""
    backend = ScriptedBackend({
        "/objects/empty-chunked": (b"HTTP/1.1 204 No Content\r\n\r\n", False),
    })
    try:
        gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}"})
        with RawConnection(gate.proxy) as c:
            for token in (b"1", b"2"):
                c.send_raw(b"PUT /objects/empty-chunked HTTP/1.1\r\nHost: x\r\n"
                           b"Fencing-Token: " + token + b"\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
                r = c.read_response("PUT")
                assert r.status == 204, r
        assert all(h.startswith(b"PUT /objects/empty-chunked ") for h in backend.heads), \
            backend.heads
        sent = b"".join(bytes(b) for b in backend.received)
        assert sent.count(b"0\r\n\r\n") == 2, sent
    finally:
        backend.close()


SMUGGLED = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"


def head_of(size):
    """A 204 response head of exactly `size` bytes (padded with a header).
    fencegate's first read of an upstream connection takes 512 bytes, and
    its next ones double, so the answer ends exactly where a read ends: what
    follows it is still on the socket, not in fencegate's buffer."""
    bare = b"HTTP/1.1 204 No Content\r\nX-Pad: \r\n\r\n"
    return bare[:-4] + b"p" * (size - len(bare)) + b"\r\n\r\n"


@pytest.mark.parametrize("method,answer", [
    pytest.param("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + SMUGGLED,
                 id="beyond-content-length"),
    pytest.param("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5\r\nhello\r\n0\r\n\r\n" + SMUGGLED, id="after-the-last-chunk"),
    pytest.param("GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello" + SMUGGLED,
                 id="body-after-204"),
    pytest.param("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello" + SMUGGLED,
                 id="body-after-304"),
    pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + SMUGGLED,
                 id="body-after-head"),
    pytest.param("GET", head_of(512) + SMUGGLED, id="still-on-the-socket-512"),
    pytest.param("GET", head_of(1024) + SMUGGLED, id="still-on-the-socket-1024"),
    pytest.param("GET", head_of(2048) + SMUGGLED, id="still-on-the-socket-2048"),
])
def test_bytes_beyond_a_response_never_answer_the_next_request(make_gate, method, answer):
    """A backend that sends more than its response frames (one write: the
    answer, then a second response nobody asked for) leaves that connection
    out of step. fencegate must close it: the client's next request, a GET
    that would reuse a pooled connection without probing it, gets the
    backend's real answer on a new connection, never the smuggled one."""
    backend = ScriptedBackend({
        "/first": (answer, False),
        "/second": (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal", False),
    })
    try:
        # One I/O thread: one pool, which the second request would reuse.
        gate = make_gate(threads=1, upstream={"url": f"http://127.0.0.1:{backend.port}"})
        with RawConnection(gate.proxy) as c:
            c.send(method, "/first", close=False)
            first = c.read_response(method)
            assert first.status == int(answer.split(b" ")[1]), first
            assert first.body == (b"hello" if method == "GET" and first.status == 200 else b""), \
                first
            c.send("GET", "/second", close=False)
            second = c.read_response()
            assert second.status == 200 and second.body == b"real", \
                f"the second request got bytes the backend sent after the first answer: {second}"
        assert [h.split(b" ")[1] for h in backend.heads] == [b"/first", b"/second"], backend.heads
        assert len(backend.received) == 2, "the second request went on the first connection"
        assert "beyond its response" in gate.stderr_tail(), gate.stderr_tail()
    finally:
        backend.close()


REQUEST_TIMEOUT_408 = (b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                       b"Content-Length: 0\r\n\r\n")


@pytest.mark.parametrize("seconds,stray,close", [
    pytest.param(0.05, SMUGGLED, False, id="late-response-50ms"),
    pytest.param(0.15, SMUGGLED, False, id="late-response-150ms"),
    pytest.param(0.9, SMUGGLED, False, id="late-response-900ms"),
    pytest.param(0.1, REQUEST_TIMEOUT_408, True, id="408-then-close"),
])
def test_bytes_a_backend_sends_on_an_idle_connection_never_answer_a_request(
        make_gate, seconds, stray, close):
    """A backend that sends bytes on a kept-alive connection after its
    answer, while the connection sits idle in fencegate's pool: a late
    second response, or a 408 before it closes. The next request, a GET
    that would reuse the pooled connection without probing it (it was
    released less than a second ago), must get the backend's real answer
    on another connection."""
    backend = ScriptedBackend({
        "/first": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False,
                   (seconds, stray, close)),
        "/second": (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal", False),
    })
    try:
        gate = make_gate(threads=1, upstream={"url": f"http://127.0.0.1:{backend.port}"})
        with RawConnection(gate.proxy) as c:
            c.send("GET", "/first", close=False)
            first = c.read_response()
            assert first.status == 200 and first.body == b"hello", first
            deadline = time.monotonic() + IO_TIMEOUT
            while backend.strays == 0:  # a condition, polled with a deadline
                assert time.monotonic() < deadline, "the backend never sent its stray bytes"
                time.sleep(0.005)
            c.send("GET", "/second", close=False)
            second = c.read_response()
            assert second.status == 200 and second.body == b"real", \
                f"the second request got bytes the backend sent on an idle connection: {second}"
        assert len(backend.received) == 2, "the second request went on the first connection"
    finally:
        backend.close()
