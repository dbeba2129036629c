"""TLS: the client listener (`tls:`), https upstreams (`upstream.tls`) and the
--check errors for their files. A throwaway PKI is made at test time with the
`openssl` command (no certificates are committed): a CA, a server
certificate for localhost and 127.0.0.1, a client certificate, and a second
CA with its own server certificate that fencegate must not trust."""

import functools
import os
import signal
import socket
import ssl
import subprocess

import pytest

from fg_helpers import (IO_TIMEOUT, Backend, ConnectionClosed, RawConnection, ScriptedBackend,
                        assert_json_error, default_config, request, stop_process,
                        write_config)


# --------------------------------------------------------------------------
# The throwaway PKI
# --------------------------------------------------------------------------

def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stderr}"


EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


class Pki:
    """Files in `d`: ca.pem, server.pem/.key (localhost, 127.0.0.1),
    client.pem/.key, rogue-ca.pem and rogue-server.pem/.key (same names,
    signed by the rogue CA), other.key (matches no certificate)."""

    def __init__(self, d):
        self.dir = str(d)
        self._ca("ca", "fencegate test CA")
        self._ca("rogue-ca", "someone else's CA")
        self._leaf("server", "ca", "localhost",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        self._leaf("client", "ca", "test client", "extendedKeyUsage=clientAuth\n")
        self._leaf("rogue-server", "rogue-ca", "localhost",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", "other.key", cwd=self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        _openssl("req", "-x509", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem",
                 "-days", "3", "-subj", f"/CN={cn}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)

    def _leaf(self, name, ca, cn, ext):
        with open(self.path(f"{name}.ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + ext)
        _openssl("req", "-new", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=self.dir)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-days", "3", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
                 cwd=self.dir)

    def client_context(self, cert=False):
        """A client that trusts our CA (and presents our client certificate)."""
        ctx = ssl.create_default_context(cafile=self.path("ca.pem"))
        if cert:
            ctx.load_cert_chain(self.path("client.pem"), self.path("client.key"))
        return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


def insecure_context():
    """For the tests' own calls to a backend's control endpoints."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@pytest.fixture
def tls_backend(tmp_path, pki):
    """Factory of https recording backends: tls_backend(cert) serves
    <cert>.pem and <cert>.key of the PKI."""
    made = []

    def make(cert="server"):
        b = Backend(str(tmp_path), name=f"tls-backend{len(made)}",
                    args=["--tls-cert", pki.path(f"{cert}.pem"),
                          "--tls-key", pki.path(f"{cert}.key")],
                    requester=functools.partial(request, tls=insecure_context()))
        made.append(b)
        return b

    yield make
    for b in made:
        b.stop()


def https_upstream(backend, **tls):
    # connect_timeout covers the TLS handshake, which the recording backend
    # makes in Python on a thread of its own: slow on a busy machine.
    up = {"url": f"https://127.0.0.1:{backend.port}", "connect_timeout": "10s", "timeout": "10s"}
    if tls:
        up["tls"] = tls
    return up


def tls_put(gate, ctx, target, token, body=b"data", headers=()):
    h = list(headers) + [("Fencing-Token", str(token))]
    return request(gate.proxy, "PUT", target, h, body, tls=ctx, server_hostname="localhost")


def expect_refused(fn, what):
    """fn() must fail at the TLS or connection level, not time out, not answer."""
    try:
        r = fn()
    except TimeoutError:
        raise AssertionError(f"{what}: no answer and no close within {IO_TIMEOUT}s") from None
    except (ssl.SSLError, ConnectionError, ConnectionClosed, OSError) as e:
        return e
    raise AssertionError(f"{what}: want the connection refused, got {r}")


def forwarded_requests(backend, method="PUT"):
    return [r for r in backend.log() if r["method"] == method]


# --------------------------------------------------------------------------
# Client -> fencegate over TLS
# --------------------------------------------------------------------------

def listener_tls(pki, **extra):
    return {"cert_file": pki.path("server.pem"), "key_file": pki.path("server.key"), **extra}


def test_tls_listener_enforces_fencing(make_gate, backend, pki):
    gate = make_gate(tls=listener_tls(pki))
    ctx = pki.client_context()
    r = tls_put(gate, ctx, "/objects/t", 5, b"five")
    assert r.status == 201, r
    r = tls_put(gate, ctx, "/objects/t", 4, b"four")
    assert_json_error(r, 409, "stale_token", key="/objects/t", token=4, current=5)
    assert r.header("Fencing-Token-Current") == "5"
    r = tls_put(gate, ctx, "/objects/t", 6, b"six")
    assert r.status == 200, r
    puts = forwarded_requests(backend)
    assert [p["body"] for p in puts] == ["five", "six"], puts  # 4 never reached it
    for p in puts:
        h = {k.lower(): v for k, v in p["headers"]}
        assert h["x-forwarded-proto"] == "https", h
        assert "proto=https" in h["forwarded"], h


def test_plain_listener_still_says_http(gate, backend):
    assert gate.put("/objects/p", 1).status == 201
    h = {k.lower(): v for k, v in forwarded_requests(backend)[0]["headers"]}
    assert h["x-forwarded-proto"] == "http", h


def test_tls_listener_keeps_connections_alive(make_gate, backend, pki):
    gate = make_gate(tls=listener_tls(pki))
    with RawConnection(gate.proxy, tls=pki.client_context(), server_hostname="localhost") as c:
        for token in (1, 2, 3):
            c.send("PUT", "/objects/k", [("Fencing-Token", str(token))], b"x", close=False)
            r = c.read_response("PUT")
            assert r.status in (200, 201), r
    assert len(forwarded_requests(backend)) == 3


def test_plain_http_to_the_tls_port_is_refused_cleanly(make_gate, backend, pki):
    gate = make_gate(tls=listener_tls(pki))
    with socket.create_connection(gate.proxy, timeout=IO_TIMEOUT) as s:
        s.sendall(b"PUT /objects/plain HTTP/1.1\r\nHost: x\r\nFencing-Token: 9\r\n"
                  b"Content-Length: 1\r\n\r\nx")
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
        except TimeoutError:
            raise AssertionError(f"the TLS port kept a plain HTTP connection open; got {got!r}")
    assert not got.startswith(b"HTTP/"), got
    # The others are not affected, and nothing was forwarded or stored.
    r = tls_put(gate, pki.client_context(), "/objects/plain", 1)
    assert r.status == 201, r
    assert [p["body"] for p in forwarded_requests(backend)] == ["data"]


def test_tls_handshake_must_finish_within_header_timeout(make_gate, pki):
    # Short enough for the silent client to be cut off well within the read
    # below, long enough for the handshake and head of the write after it on
    # a busy machine.
    gate = make_gate(tls=listener_tls(pki), limits={"header_timeout": "3s"})
    with socket.create_connection(gate.proxy, timeout=IO_TIMEOUT) as s:
        try:
            got = s.recv(1)  # no ClientHello: fencegate must give up and close
        except ConnectionResetError:
            got = b""
        except TimeoutError:
            raise AssertionError("a silent TLS client was kept beyond header_timeout") from None
    assert got == b""
    assert tls_put(gate, pki.client_context(), "/objects/h", 1).status == 201


def test_client_that_distrusts_the_certificate_fails_the_handshake(make_gate, pki):
    gate = make_gate(tls=listener_tls(pki))
    other = ssl.create_default_context(cafile=pki.path("rogue-ca.pem"))
    expect_refused(lambda: tls_put(gate, other, "/objects/x", 1), "client with another CA")
    assert tls_put(gate, pki.client_context(), "/objects/x", 1).status == 201


def test_mtls_listener_refuses_a_client_without_certificate(make_gate, backend, pki):
    gate = make_gate(tls=listener_tls(pki, client_ca_file=pki.path("ca.pem")))
    e = expect_refused(lambda: tls_put(gate, pki.client_context(cert=False), "/objects/m", 1),
                       "client without a certificate")
    print(f"refused with: {e!r}")
    assert forwarded_requests(backend) == []
    r = tls_put(gate, pki.client_context(cert=True), "/objects/m", 1)
    assert r.status == 201, r
    assert len(forwarded_requests(backend)) == 1


def test_sigterm_drains_a_tls_request_in_flight(make_gate, backend, pki):
    gate = make_gate(tls=listener_tls(pki))
    with RawConnection(gate.proxy, tls=pki.client_context(), server_hostname="localhost") as c:
        c.send("PUT", "/objects/d", [("Fencing-Token", "1"), ("X-Test-Hold-Ms", "1500")], b"x")
        backend.wait_until(lambda s: len(s["active"]) == 1, what="the held request")
        gate.proc.send_signal(signal.SIGTERM)
        r = c.read_response("PUT")
    assert r.status == 201, r
    assert stop_process(gate.proc, timeout=20) == 0, gate.stderr_tail()


# --------------------------------------------------------------------------
# fencegate -> https upstream
# --------------------------------------------------------------------------

def test_https_upstream_with_our_ca(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream=https_upstream(b, ca_file=pki.path("ca.pem")))
    assert gate.put("/objects/u", 3, b"three").status == 201
    r = gate.put("/objects/u", 2, b"two")
    assert_json_error(r, 409, "stale_token")
    r = request(gate.proxy, "GET", "/objects/u")
    assert r.status == 200 and r.body == b"three", r
    log = b.log()
    assert [(e["method"], e["body"]) for e in log] == [("PUT", "three"), ("GET", "")], log
    assert log[0]["sni"] is None  # an IP address is verified but never sent as SNI


def test_large_bodies_cross_tls_both_ways_intact(make_gate, tls_backend, pki):
    """A 3 MiB body through a TLS listener to an https upstream and back: the
    TLS stream is handed one buffer of a sequence at a time (MaybeTlsStream),
    so a body in many buffers (head, chunks, 64 KiB pieces) must still arrive
    whole and in order, in both directions."""
    b = tls_backend()
    gate = make_gate(tls=listener_tls(pki), upstream=https_upstream(b, ca_file=pki.path("ca.pem")))
    ctx = pki.client_context()
    body = b"".join(b"%07d:" % i + bytes([65 + i % 26]) * 56 for i in range(3 * 16384))
    assert len(body) == 3 << 20
    r = tls_put(gate, ctx, "/objects/big", 9, body)
    assert r.status == 201, r
    assert forwarded_requests(b)[0]["body"] == body.decode(), "the backend got other bytes"
    r = request(gate.proxy, "GET", "/objects/big", tls=ctx, server_hostname="localhost")
    assert r.status == 200 and r.body == body, (r.status, len(r.body))


def test_https_upstream_reuses_its_tls_connections(make_gate, tls_backend, pki):
    b = tls_backend()
    # One worker thread: each worker has its own pool.
    gate = make_gate(threads=1, upstream=https_upstream(b, ca_file=pki.path("ca.pem")))
    for token in (1, 2, 3):
        assert gate.put("/objects/r", token).status in (200, 201)
    ports = {e["peer_port"] for e in b.log()}
    assert len(ports) == 1, f"want one pooled TLS connection, backend saw {ports}"


def test_bytes_beyond_an_https_response_never_answer_the_next_request(make_gate, pki):
    """Over TLS the bytes a backend sends beyond its response may sit in
    OpenSSL's buffers rather than on the socket: a 512-byte answer (what
    fencegate's first read takes) and a second, smuggled response in the
    same TLS record. That connection must not be pooled: the next GET gets
    the backend's real answer on a new connection."""
    bare = b"HTTP/1.1 204 No Content\r\nX-Pad: \r\n\r\n"
    answer = bare[:-4] + b"p" * (512 - len(bare)) + b"\r\n\r\n"
    smuggled = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.path("server.pem"), pki.path("server.key"))
    b = ScriptedBackend({
        "/first": (answer + smuggled, False),
        "/second": (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nreal", False),
    }, tls=server)
    try:
        gate = make_gate(threads=1, upstream=https_upstream(b, ca_file=pki.path("ca.pem")))
        with RawConnection(gate.proxy) as c:
            c.send("GET", "/first", close=False)
            r = c.read_response()
            assert r.status == 204, r
            c.send("GET", "/second", close=False)
            r = c.read_response()
            assert r.status == 200 and r.body == b"real", \
                f"the second request got bytes the backend sent after the first answer: {r}"
        assert len(b.received) == 2, "the second request went on the first connection"
        assert "beyond its response" in gate.stderr_tail()
    finally:
        b.close()


def test_https_upstream_server_name_is_sent_and_verified(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream=https_upstream(b, ca_file=pki.path("ca.pem"),
                                             server_name="localhost"))
    assert gate.put("/objects/n", 1).status == 201
    assert b.log()[0]["sni"] == "localhost"


def test_https_upstream_from_an_unknown_ca_is_502(make_gate, tls_backend, pki):
    b = tls_backend("rogue-server")
    gate = make_gate(upstream=https_upstream(b, ca_file=pki.path("ca.pem")))
    r = gate.put("/objects/bad", 1)
    doc = assert_json_error(r, 502, "upstream_error")
    assert "certificate verify failed" in doc["message"], doc
    assert b.log() == []
    assert "certificate verify failed" in gate.stderr_tail()


def test_https_upstream_system_store_does_not_trust_a_private_ca(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream=https_upstream(b))  # no ca_file: the system trust store
    doc = assert_json_error(gate.put("/objects/sys", 1), 502, "upstream_error")
    assert "unable to get local issuer certificate" in doc["message"], doc
    assert b.log() == []


def test_https_upstream_with_the_wrong_name_is_502(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream=https_upstream(b, ca_file=pki.path("ca.pem"),
                                             server_name="wrong.example"))
    doc = assert_json_error(gate.put("/objects/name", 1), 502, "upstream_error")
    assert "hostname mismatch" in doc["message"], doc
    assert b.log() == []


def test_https_upstream_verify_false_accepts_any_certificate(make_gate, tls_backend, pki):
    b = tls_backend("rogue-server")
    gate = make_gate(upstream=https_upstream(b, verify=False))
    assert gate.put("/objects/v", 1, b"v").status == 201
    assert [e["body"] for e in b.log()] == ["v"]
    assert "upstream.tls.verify is false" in open(gate.stderr_path).read()


def test_https_upstream_with_a_client_certificate(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream=https_upstream(b, ca_file=pki.path("ca.pem"),
                                             cert_file=pki.path("client.pem"),
                                             key_file=pki.path("client.key")))
    assert gate.put("/objects/c", 1).status == 201


def test_plain_upstream_url_to_a_tls_backend_is_502(make_gate, tls_backend, pki):
    b = tls_backend()
    gate = make_gate(upstream={"url": f"http://127.0.0.1:{b.port}", "timeout": "5s"})
    r = gate.put("/objects/mix", 1)
    assert r.status in (502, 504), r
    assert b.log() == []


# --------------------------------------------------------------------------
# --check reads every TLS file
# --------------------------------------------------------------------------

CHECK_TEMPLATE = """\
listen: "127.0.0.1:0"
upstream:
  url: "{url}"
  tls:
    ca_file: "{ca}"
tls:
  cert_file: "{cert}"
  key_file: "{key}"
storage:
  path: "{data}"
"""
# Lines of the fields above.
LINE = {"upstream.tls.ca_file": 5, "tls.cert_file": 7, "tls.key_file": 8, "upstream.tls": 4}


def run_check(binary, tmp_path, **fields):
    values = {"url": "https://127.0.0.1:9", "ca": "", "cert": "", "key": "",
              "data": str(tmp_path / "data")}
    values.update(fields)
    p = tmp_path / "check.yaml"
    p.write_text(CHECK_TEMPLATE.format(**values))
    r = subprocess.run([binary, "--config", str(p), "--check"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    return p, r


def good_files(pki):
    return {"ca": pki.path("ca.pem"), "cert": pki.path("server.pem"),
            "key": pki.path("server.key")}


def test_check_accepts_good_tls_files(fencegate_bin, tmp_path, pki):
    p, r = run_check(fencegate_bin, tmp_path, **good_files(pki))
    assert r.returncode == 0, r.stderr
    assert "with TLS" in r.stdout, r.stdout


@pytest.mark.parametrize("field,change,fragment", [
    ("tls.cert_file", {"cert": "/nonexistent/server.pem"}, "No such file or directory"),
    ("tls.key_file", {"key": "/nonexistent/server.key"}, "No such file or directory"),
    ("tls.key_file", {"key": "OTHER"}, "is not the private key of the certificate"),
    ("tls.cert_file", {"cert": "KEY_AS_CERT"}, "no usable PEM certificate"),
    ("upstream.tls.ca_file", {"ca": "/nonexistent/ca.pem"}, "No such file or directory"),
    ("upstream.tls.ca_file", {"ca": "DIR"}, "is a directory"),
    ("upstream.tls", {"url": "http://127.0.0.1:9"}, "is not https"),
])
def test_check_names_file_line_and_field(fencegate_bin, tmp_path, pki, field, change, fragment):
    values = good_files(pki)
    special = {"OTHER": pki.path("other.key"), "KEY_AS_CERT": pki.path("server.key"),
               "DIR": pki.dir}
    values.update({k: special.get(v, v) for k, v in change.items()})
    p, r = run_check(fencegate_bin, tmp_path, **values)
    assert r.returncode == 2, f"want exit 2, got {r.returncode}: {r.stderr}"
    want = f"{p}:{LINE[field]}: field '{field}': "
    assert want in r.stderr, f"want {want!r} in {r.stderr!r}"
    assert fragment in r.stderr, r.stderr
