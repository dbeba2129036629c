"""ApacheDav, Apache httpd with mod_dav as a WebDAV backend, driven
directly (no fencegate): how it answers the writes fencegate forwards."""

import http.client
import os
import time

from fg_helpers import IO_TIMEOUT, ApacheDav


def _send(dav, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection(*dav.addr, timeout=IO_TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def _wait_requests(dav, expected):
    """Apache logs a request after answering it, in whichever order its
    threads get there: wait for the lines, in any order."""
    deadline = time.monotonic() + IO_TIMEOUT
    while sorted(dav.requests()) != sorted(expected) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(dav.requests()) == sorted(expected)


def test_put_mkcol_copy_delete(tmp_path):
    dav = ApacheDav(str(tmp_path))
    try:
        assert _send(dav, "PUT", "/d/x", b"x") == 409  # mod_dav makes no missing parent
        assert _send(dav, "MKCOL", "/d/") == 201
        assert _send(dav, "PUT", "/d/x", b"x") == 201
        assert _send(dav, "MKCOL", "/c/") == 201
        copy = {"Destination": f"http://127.0.0.1:{dav.port}/c/d/", "Overwrite": "T"}
        assert _send(dav, "COPY", "/d/", headers=copy) == 201
        assert _send(dav, "PUT", "/c/d/old", b"old") == 201
        # Onto an existing collection: the destination is replaced, not merged.
        assert _send(dav, "COPY", "/d/", headers=copy) == 204
        assert _send(dav, "DELETE", "/d/") == 204

        assert dav.file("c/d/x") == b"x"
        assert dav.file("c/d/old") is None
        assert not os.path.exists(os.path.join(dav.root, "d"))
        _wait_requests(dav, ["PUT /d/x HTTP/1.1", "MKCOL /d/ HTTP/1.1", "PUT /d/x HTTP/1.1",
                             "MKCOL /c/ HTTP/1.1", "COPY /d/ HTTP/1.1", "PUT /c/d/old HTTP/1.1",
                             "COPY /d/ HTTP/1.1", "DELETE /d/ HTTP/1.1"])
    finally:
        dav.stop()
