"""Request framing: a request that fencegate and the backend could
frame differently is a fencing bypass (request smuggling). Each ambiguous
form is refused with 400 and nothing reaches the backend; what is forwarded
is re-framed by fencegate, never copied from the client."""

import pytest

from fg_helpers import (ConnectionClosed, RawConnection, assert_json_error, build_request,
                        raw_exchange)


def req(lines, body=b""):
    """A request from raw header lines (bytes), sent exactly as written."""
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


SMUGGLING = [
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: gzip"], b"abc"),
                 id="te-last-not-chunked"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked, gzip"],
                     b"3\r\nabc\r\n0\r\n\r\n"), id="te-chunked-then-gzip"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked, chunked"],
                     b"3\r\nabc\r\n0\r\n\r\n"), id="te-chunked-twice"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked x"],
                     b"3\r\nabc\r\n0\r\n\r\n"), id="te-two-codings-without-a-comma"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked;"],
                     b"3\r\nabc\r\n0\r\n\r\n"), id="te-parameter-without-a-name"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked",
                      b"Content-Length: 3"], b"3\r\nabc\r\n0\r\n\r\n"), id="te-and-cl"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: 3",
                      b"Transfer-Encoding: chunked"], b"3\r\nabc\r\n0\r\n\r\n"), id="cl-and-te"),
    pytest.param(req([b"PUT /plain/a HTTP/1.0", b"Host: x", b"Transfer-Encoding: chunked"],
                     b"3\r\nabc\r\n0\r\n\r\n"), id="te-on-http10"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: 3",
                      b"Content-Length: 3"], b"abc"), id="two-equal-content-lengths"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: 3",
                      b"Content-Length: 4"], b"abcd"), id="two-different-content-lengths"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: 3, 3"], b"abc"),
                 id="content-length-list"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length:"], b"abc"),
                 id="empty-content-length"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: 3a"], b"abc"),
                 id="non-numeric-content-length"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Content-Length: -3"], b"abc"),
                 id="negative-content-length"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Content-Length: 3"], b"abc"), id="no-host"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"Host: y", b"Content-Length: 3"],
                     b"abc"), id="two-hosts"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"X-A: a\x00b", b"Content-Length: 3"],
                     b"abc"), id="nul-in-header"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"X-A: a\rb", b"Content-Length: 3"],
                     b"abc"), id="bare-cr-in-header"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b"X-A : b", b"Content-Length: 3"],
                     b"abc"), id="space-before-colon"),
    pytest.param(req([b"PUT http://evil.example/plain/a HTTP/1.1", b"Host: x",
                      b"Content-Length: 3"], b"abc"), id="absolute-form-other-host"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x", b" X-Folded: b", b"Content-Length: 3"],
                     b"abc"), id="obs-fold-into-host"),
    pytest.param(req([b"PUT /plain/a HTTP/1.1", b"Host: x y", b"Content-Length: 3"], b"abc"),
                 id="host-with-space"),
]


@pytest.mark.parametrize("data", SMUGGLING)
def test_ambiguous_framing_is_400_and_nothing_forwarded(gate, backend, data):
    r = raw_exchange(gate.proxy, data)
    assert r.status == 400, f"want 400, got {r}"
    assert r.header("Content-Type") == "application/json", r
    assert backend.log() == [], f"the backend received {backend.log()}"


@pytest.mark.parametrize("data", [
    pytest.param(req([b"PUT /objects/s HTTP/1.1", b"Host: x", b"Fencing-Token: 9",
                      b"Transfer-Encoding: chunked", b"Content-Length: 5"],
                     b"5\r\nhello\r\n0\r\n\r\n"), id="te-and-cl"),
    pytest.param(req([b"PUT /objects/s HTTP/1.1", b"Host: x", b"Fencing-Token: 9",
                      b"Content-Length: 5", b"Content-Length: 5"], b"hello"), id="two-cl"),
])
def test_ambiguous_fenced_write_stores_nothing(gate, backend, data):
    r = raw_exchange(gate.proxy, data)
    assert r.status == 400, r
    assert backend.log() == []
    assert gate.admin_get("/v1/keys/%2Fobjects%2Fs").status == 404


def test_smuggled_second_request_never_reaches_backend(gate, backend):
    # The classic CL.TE form: if one side used Content-Length and the other
    # chunked, "PUT /objects/v ... token 1" would be a second request.
    inner = b"PUT /objects/v HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\nContent-Length: 0\r\n\r\n"
    body = b"0\r\n\r\n" + inner
    data = req([b"POST /plain/a HTTP/1.1", b"Host: x",
                b"Content-Length: " + str(len(body)).encode(),
                b"Transfer-Encoding: chunked"], body)
    with RawConnection(gate.proxy) as c:
        c.send_raw(data)
        r = c.read_response()
        assert r.status == 400, r
    assert backend.log() == []


def test_folded_header_is_forwarded_as_one_line(gate, backend):
    # RFC 9112 5.2 lets a proxy replace obs-fold with a space instead of
    # refusing: the backend then sees one line and cannot frame differently.
    data = req([b"GET /plain/f HTTP/1.1", b"Host: x", b"X-A: one", b" two",
                b"Connection: close"])
    raw_exchange(gate.proxy, data)
    [entry] = backend.log()
    values = [v for k, v in entry["headers"] if k.lower() == "x-a"]
    assert len(values) == 1 and "\r" not in values[0] and "\n" not in values[0], values


@pytest.mark.parametrize("te", [
    pytest.param([b"gzip, chunked"], id="gzip-chunked"),
    pytest.param([b"deflate, chunked"], id="deflate-chunked"),
    pytest.param([b"gzip", b"chunked"], id="gzip-then-chunked-in-two-fields"),
    pytest.param([b"chunked;ext=1"], id="chunked-with-a-parameter"),
])
def test_a_transfer_coding_other_than_chunked_is_501_and_the_connection_closes(gate, backend, te):
    """fencegate forwards a body de-chunked under its own "Transfer-Encoding:
    chunked": a gzip coding under it would reach the backend as the body
    itself. So only chunked alone is forwarded; any other well-formed list
    of codings is 501, nothing is stored or forwarded, and the connection
    closes, its body unread (a request behind it is never answered)."""
    body = b"3\r\nabc\r\n0\r\n\r\n"
    behind = b"PUT /objects/te HTTP/1.1\r\nHost: x\r\nFencing-Token: 2\r\nContent-Length: 0\r\n\r\n"
    data = req([b"PUT /objects/te HTTP/1.1", b"Host: x", b"Fencing-Token: 1"] +
               [b"Transfer-Encoding: " + v for v in te], body) + behind
    with RawConnection(gate.proxy) as c:
        c.send_raw(data)
        r = c.read_response("PUT")
        doc = assert_json_error(r, 501, "not_implemented")
        assert "fencegate forwards only Transfer-Encoding: chunked" in doc["message"], doc
        assert r.header("Connection") == "close", r
        with pytest.raises(ConnectionClosed):
            c.read_response("PUT")
    assert backend.log() == []
    assert gate.admin_get("/v1/keys/%2Fobjects%2Fte").status == 404


def test_chunked_request_is_reframed_chunked(gate, backend):
    data = req([b"PUT /objects/c HTTP/1.1", b"Host: x", b"Fencing-Token: 3",
                b"Transfer-Encoding: chunked", b"Connection: close"],
               b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
    r = raw_exchange(gate.proxy, data)
    assert 200 <= r.status < 300, r
    [entry] = backend.log()
    assert entry["body"] == "hello world"
    names = {k.lower(): v for k, v in entry["headers"]}
    assert names.get("transfer-encoding") == "chunked"
    assert "content-length" not in names


def test_content_length_request_is_reframed_with_one_content_length(gate, backend):
    r = raw_exchange(gate.proxy, build_request("PUT", "/objects/l", [("Fencing-Token", "3")],
                                               b"hello"))
    assert 200 <= r.status < 300, r
    [entry] = backend.log()
    lengths = [v for k, v in entry["headers"] if k.lower() == "content-length"]
    assert lengths == ["5"]
    assert not any(k.lower() == "transfer-encoding" for k, _ in entry["headers"])


def test_absolute_form_for_our_host_is_forwarded_in_origin_form(gate, backend):
    host = f"{gate.proxy[0]}:{gate.proxy[1]}"
    data = req([f"PUT http://{host}/objects//abs?q=1 HTTP/1.1".encode(),
                f"Host: {host}".encode(), b"Fencing-Token: 4", b"Content-Length: 2",
                b"Connection: close"], b"hi")
    r = raw_exchange(gate.proxy, data)
    assert 200 <= r.status < 300, r
    [entry] = backend.log()
    assert entry["path"] == "/objects/abs?q=1"


def test_http10_request_gets_a_closed_http10_answer(gate, backend):
    data = req([b"PUT /objects/h10 HTTP/1.0", b"Fencing-Token: 4", b"Content-Length: 2"], b"hi")
    with RawConnection(gate.proxy) as c:
        c.send_raw(data)
        r = c.read_response()
        assert 200 <= r.status < 300, r
    [entry] = backend.log()
    assert entry["body"] == "hi"
