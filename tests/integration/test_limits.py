"""Request limits (docs/contract.md, "Responses"): oversized heads and
bodies, and writes beyond the per-key queue bound, are refused by fencegate
with JSON and reach nothing."""

import time

import pytest

from fg_helpers import (ADMIN_TOKEN, RawConnection, admin_key_path, assert_json_error, raw_exchange,
                        request, tokens_seen)


def test_body_too_large_is_413(make_gate, backend):
    gate = make_gate(limits={"max_body_bytes": 1000})
    assert 200 <= gate.put("/objects/b", 1, b"x" * 1000).status < 300, "a body at the limit passes"
    r = gate.put("/objects/b", 2, b"x" * 1001)
    assert_json_error(r, 413, "body_too_large")
    assert len(backend.log()) == 1, backend.log()
    assert gate.admin_get(admin_key_path("/objects/b")).json()["token"] == 1, \
        "a refused oversized write must not advance the token"


def test_headers_too_large_is_431(make_gate, backend):
    gate = make_gate(limits={"max_header_bytes": 2000})
    r = gate.put("/objects/h", 1, headers=[("X-Big", "y" * 4000)])
    assert_json_error(r, 431, "headers_too_large")
    assert backend.log() == []


def head_of(size, token=1):
    """A fenced PUT whose head (request line to the blank line included) is
    exactly `size` bytes, padded with one header, and an empty body."""
    def build(pad):
        return (b"PUT /objects/h HTTP/1.1\r\nHost: x\r\nFencing-Token: %d\r\n"
                b"Content-Length: 0\r\nConnection: close\r\nX-Pad: %s\r\n\r\n"
                % (token, b"p" * pad))
    data = build(size - len(build(0)))
    assert len(data) == size
    return data


def many_small_fields(first, field_size):
    """A head of `first` (the request line and fields, each line ending in
    CRLF but the last one's value, which is padded) and 6,000 fields of
    `field_size` bytes, laid out so that each 512-byte read of fencegate's
    ends one byte into a field (when the client's bytes are all there to
    read): Beast's parser then takes every field before it whole, and never
    holds more than one read's worth of the head unparsed."""
    value = b"v" * (field_size - len(b"X-00000: ") - 2)
    fields = b"".join(b"X-%05d: %s\r\n" % (i, value) for i in range(6000))
    first += b"p" * ((field_size - 1 - len(first) - 2) % field_size) + b"\r\n"
    assert len(first) % field_size == field_size - 1 and len(fields) == 6000 * field_size
    return first + fields + b"\r\n"


@pytest.mark.parametrize("field_size", [16, 32])
def test_a_head_of_many_small_fields_is_431(make_gate, backend, field_size):
    """max_header_bytes bounds the whole head, not what the parser holds
    unparsed at one time: 6,000 small fields (96 or 192 KB) against the
    default 16 KiB."""
    gate = make_gate()
    r = raw_exchange(gate.proxy, many_small_fields(
        b"PUT /objects/many HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\n"
        b"Content-Length: 4\r\nConnection: close\r\nX-Pad: ", field_size) + b"data")
    assert_json_error(r, 431, "headers_too_large")
    assert backend.log() == []
    assert gate.admin_get(admin_key_path("/objects/many")).status == 404


def test_an_admin_head_of_many_small_fields_is_431(gate):
    body = b'{"token": 5}'
    r = raw_exchange(gate.admin, many_small_fields(
        b"POST " + admin_key_path("/objects/many").encode() + b"/fence HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + ADMIN_TOKEN.encode() + b"\r\n"
        b"Content-Length: %d\r\nConnection: close\r\nX-Pad: " % len(body), 32) + body)
    assert_json_error(r, 431, "headers_too_large")
    assert gate.admin_get(admin_key_path("/objects/many")).status == 404


def test_a_head_one_byte_over_the_limit_is_431_however_it_is_cut(make_gate, backend):
    """The limit counts the request line, every field and the blank line:
    a head of exactly the limit passes, one byte more is refused, whether
    its bytes are in one field or spread over many, and whether they come
    in one write or one field at a time."""
    gate = make_gate(limits={"max_header_bytes": 2000})
    r = raw_exchange(gate.proxy, head_of(2000, token=1))
    assert r.status in (200, 201), f"a head of exactly the limit must pass: {r}"
    assert_json_error(raw_exchange(gate.proxy, head_of(2001, token=2)), 431, "headers_too_large")

    # 50 fields of about 30 bytes (the recording backend takes at most 100
    # fields): just under the limit passes, just over does not, also when
    # every field is its own write.
    def many(size, token):
        lines = [b"PUT /objects/h HTTP/1.1", b"Host: x", b"Fencing-Token: %d" % token,
                 b"Content-Length: 0", b"Connection: close"]
        lines += [b"X-F%03d: %s" % (i, b"v" * 20) for i in range(50)]
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        pad = size - len(head)
        lines[-1] += b"v" * pad
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        assert len(head) == size
        return lines, head

    _, head = many(1999, 3)
    r = raw_exchange(gate.proxy, head)
    assert r.status in (200, 201), f"a head just under the limit must pass: {r}"
    lines, _ = many(2001, 4)
    with RawConnection(gate.proxy) as c:
        for line in lines:
            c.send_raw(line + b"\r\n")
        c.send_raw(b"\r\n")
        assert_json_error(c.read_response("PUT"), 431, "headers_too_large")
    assert tokens_seen(backend.log()) == ["1", "3"]


def test_writes_waiting_for_one_key_are_bounded(make_gate, backend):
    """limits.max_waiting_per_key: one write in flight, one waiting, the next
    refused at once with 503 too_many_waiting (Retry-After); the queue then
    drains in order and other keys are not affected."""
    gate = make_gate(limits={"max_waiting_per_key": 1})
    with RawConnection(gate.proxy) as ca, RawConnection(gate.proxy) as cb, \
            RawConnection(gate.proxy) as cc:
        # a is held at the backend until the test lets it go.
        ca.send("PUT", "/objects/q", [("Fencing-Token", "1"), ("X-Test-Hold-Until", "a")], b"a")
        backend.wait_until(lambda s: any(a["path"] == "/objects/q" for a in s["active"]),
                           what="the first write to reach the backend")
        # b takes the one waiting place; c, sent once b waits, finds it taken.
        cb.send("PUT", "/objects/q", [("Fencing-Token", "2")], b"b")
        gate.wait_metric("fencegate_keys_waiting", 1)
        cc.send("PUT", "/objects/q", [("Fencing-Token", "2")], b"c")
        rc = cc.read_response("PUT")  # at once, while a is still held
        other = gate.put("/objects/other", 1, b"o")
        assert 200 <= other.status < 300, f"another key must not wait: {other}"
        backend.release("a")
        ra, rb = (c.read_response("PUT") for c in (ca, cb))
    assert 200 <= ra.status < 300, ra
    assert_json_error(rc, 503, "too_many_waiting", key="/objects/q")
    assert rc.header("Retry-After") == "1", rc
    assert 200 <= rb.status < 300, rb
    bodies = [e["body"] for e in backend.log() if e["path"] == "/objects/q"]
    assert bodies == ["a", "b"], f"the refused write must not reach the backend: {bodies}"


def test_a_body_that_keeps_arriving_is_not_cut_by_idle_timeout(make_gate, backend):
    """idle_timeout is the longest silence, between requests and between
    pieces of a body: an upload sending a piece every 0.4 s for longer than
    idle_timeout (1 s) goes through whole; one silent past it is cut."""
    gate = make_gate(limits={"idle_timeout": "1s"})
    pieces = [b"p%d;" % i for i in range(7)]
    with RawConnection(gate.proxy) as c:
        c.send("PUT", "/plain/slow", [("Content-Length", str(sum(map(len, pieces))))], b"")
        for piece in pieces:
            c.send_raw(piece)
            time.sleep(0.4)  # the condition under test: an upload slower than the timeout
        r = c.read_response("PUT")
    assert 200 <= r.status < 300, r
    assert [x["body"] for x in backend.log() if x["path"] == "/plain/slow"] == \
        ["".join(p.decode() for p in pieces)]


def test_a_small_response_that_keeps_arriving_is_timed_per_piece(make_gate, backend):
    """upstream.timeout is per piece for every body size: a small body sent
    in five pieces 0.4 s apart (2 s in all) under a 1 s timeout arrives whole."""
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{backend.port}",
                               "connect_timeout": "1s", "timeout": "1s"})
    r = request(gate.proxy, "GET", "/plain/trickle",
                [("X-Test-Seq", "1"), ("X-Test-Response-Bytes", "500"),
                 ("X-Test-Trickle-Ms", "400")])
    assert len(r.body) == 500 and r.body.startswith(b"seq="), r  # the whole body (a 404: no such object)
