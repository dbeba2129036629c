"""Logs through the real binary: the access log's JSON lines in a file of
their own with a timestamp first, SIGUSR1 reopening the files after a
rename (logrotate's `create`) without losing or tearing a line, the refusal
line on the application log whatever log.access_log says, and --check
refusing a log file in a directory that is not there."""

import datetime
import json
import os
import re
import signal
import subprocess
import threading
import time

from fg_helpers import IO_TIMEOUT, build_request, default_config, raw_exchange, write_config

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readlines()


def wait_for(what, pred, timeout=IO_TIMEOUT):
    """Polls pred() until it returns something true, with a deadline (the
    access line is written once the response has gone out, so it may
    follow the response by a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling interval of a condition with a deadline


def access_lines(path):
    """Every line of an access log file, parsed; a torn line fails here."""
    out = []
    for line in read_lines(path):
        assert line.endswith("}\n") and line.startswith('{"ts":"'), f"not a whole line: {line!r}"
        out.append(json.loads(line))
    return out


def app_lines(gate):
    return read_lines(gate.stderr_path)


def put(gate, path, token, headers=()):
    return raw_exchange(gate.proxy, build_request("PUT", path, [("Fencing-Token", str(token)),
                                                                *headers], b"x"))


def reopen(gate, marker):
    """SIGUSR1 by PID; returns once the application log says the file named
    `marker` was reopened (one more such line than before)."""
    before = sum(marker in l for l in app_lines(gate))
    os.kill(gate.pid, signal.SIGUSR1)
    wait_for(f"'{marker}' reopened", lambda: sum(
        "SIGUSR1: reopened" in l and marker in l for l in app_lines(gate)) > before)


def test_access_lines_go_to_their_file_with_a_timestamp_not_to_the_application_log(
        make_gate, tmp_path):
    access = tmp_path / "access.log"
    gate = make_gate(log={"level": "info", "access_log": True, "access_log_file": str(access)})
    before = datetime.datetime.now(datetime.timezone.utc)
    r = put(gate, "/objects/a%22b", 5, [("X-Request-Id", "rid-file-1")])
    assert r.status in (200, 201, 204), r
    r = raw_exchange(gate.proxy, build_request("GET", "/plain/x", [("X-Request-Id", "rid-file-2")]))
    lines = wait_for("two access lines", lambda: len(access_lines(access)) >= 2 and
                     access_lines(access))
    assert [l["request_id"] for l in lines] == ["rid-file-1", "rid-file-2"]
    after = datetime.datetime.now(datetime.timezone.utc)
    for line in lines:
        assert TS.fullmatch(line["ts"]), line
        ts = datetime.datetime.strptime(line["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc)
        assert before - datetime.timedelta(seconds=1) <= ts <= after, (before, line, after)
    assert lines[0]["key"] == '/objects/a"b' and lines[0]["token"] == 5
    # The application log has its own lines and none of these.
    text = "".join(app_lines(gate))
    assert "proxying" in text
    assert "rid-file-1" not in text and "rid-file-2" not in text, text


def test_sigusr1_after_a_rename_moves_the_lines_to_a_new_file_and_loses_none(
        make_gate, tmp_path):
    access = tmp_path / "access.log"
    app = tmp_path / "fencegate.log"
    gate = make_gate(log={"level": "info", "file": str(app), "access_log": True,
                          "access_log_file": str(access)})
    # With log.file the application log leaves stderr: the reopen lines are
    # in the file.
    gate_stderr = gate.stderr_path

    def app_text():
        return "".join(read_lines(app))

    wait_for("the start line in log.file", lambda: "proxying" in app_text())
    for i in range(5):
        assert put(gate, f"/objects/r{i}", 1).status < 300
    wait_for("5 lines", lambda: len(access_lines(access)) == 5)

    os.rename(access, tmp_path / "access.log.1")
    os.rename(app, tmp_path / "fencegate.log.1")
    os.kill(gate.pid, signal.SIGUSR1)
    # The reopen of log.file is said in the new log.file.
    wait_for("both reopened", lambda: f"SIGUSR1: reopened {access}" in app_text() and
             f"SIGUSR1: reopened {app}" in app_text())
    for i in range(7):
        assert put(gate, f"/objects/s{i}", 1).status < 300
    wait_for("7 lines in the new file", lambda: len(access_lines(access)) == 7)
    old = access_lines(tmp_path / "access.log.1")
    assert [l["path"] for l in old] == [f"/objects/r{i}" for i in range(5)]
    assert [l["path"] for l in access_lines(access)] == [f"/objects/s{i}" for i in range(7)]
    # Nothing of either went to stderr.
    assert not [l for l in read_lines(gate_stderr) if l.strip()], read_lines(gate_stderr)
    assert "proxying" in "".join(read_lines(tmp_path / "fencegate.log.1"))


def test_requests_during_rotations_lose_and_tear_no_line(make_gate, tmp_path):
    access = tmp_path / "access.log"
    gate = make_gate(log={"level": "info", "access_log": True, "access_log_file": str(access)})
    clients, at_least = 4, 60
    errors = []
    sent = [0] * clients
    rotations_done = threading.Event()

    def client(c):
        # Writes until the rotations are over (and at least `at_least`
        # times): however the machine shares its time between the clients
        # and the rotations, every rotation happens while they write.
        try:
            while not rotations_done.is_set() or sent[c] < at_least:
                r = put(gate, f"/objects/c{c}-{sent[c]}", sent[c] + 1)
                assert r.status < 300, r
                sent[c] += 1
        except Exception as e:  # noqa: BLE001  reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    rotated = []
    try:
        for n in range(1, 6):  # five rotations while the clients write
            wait_for("some lines first", lambda: len(read_lines(access)) > 0 or errors)
            assert not errors, errors
            os.rename(access, tmp_path / f"access.log.{n}")
            rotated.append(tmp_path / f"access.log.{n}")
            reopen(gate, str(access))
    finally:
        rotations_done.set()
        for t in threads:
            t.join()
    assert not errors, errors
    total = sum(sent)
    files = rotated + [access]
    wait_for(f"{total} lines", lambda: sum(len(read_lines(f)) for f in files) >= total)
    paths = [l["path"] for f in files for l in access_lines(f)]
    assert len(paths) == total and len(set(paths)) == total
    assert all(access_lines(f) for f in rotated[1:]), "a rotation saw no line at all"


def test_a_refusal_leaves_an_info_line_with_the_access_log_off(make_gate, tmp_path):
    gate = make_gate(log={"level": "info", "access_log": False})
    assert put(gate, "/objects/k", 10).status < 300
    r = raw_exchange(gate.proxy, build_request(
        "PUT", "/objects/k", [("Fencing-Token", "3"), ("X-Request-Id", "rid-stale"),
                              ("Authorization", "Bearer hunter2")], b"body-never-logged"))
    assert r.status == 409, r
    r = raw_exchange(gate.proxy, build_request("PUT", "/objects/k", [("X-Request-Id", "rid-none")],
                                               b"x"))
    assert r.status == 428, r
    r = raw_exchange(gate.proxy, build_request("PUT", "/objects/k", [("Fencing-Token", "x1"),
                                                                    ("X-Request-Id", "rid-bad")],
                                               b"x"))
    assert r.status == 400, r
    r = raw_exchange(gate.proxy, build_request("GET", "/objects/" + "a" * 40000))
    assert r.status == 431, r

    def refusals():
        return [l for l in app_lines(gate) if " info refused " in l]
    lines = wait_for("four refusal lines", lambda: len(refusals()) >= 4 and refusals())
    stale, none, bad, big = lines
    assert ('refused 409 stale_token request_id=rid-stale route="objects" key="/objects/k" '
            'token=3 client=127.0.0.1 method="PUT" path="/objects/k"') in stale, stale
    assert 'refused 428 token_required request_id=rid-none route="objects" key="/objects/k"' \
        in none, none
    assert "token=" not in none, none
    assert "refused 400 " in bad and "request_id=rid-bad" in bad, bad
    assert "refused 431 headers_too_large" in big, big
    text = "".join(app_lines(gate))
    assert "hunter2" not in text and "body-never-logged" not in text, text
    assert not [l for l in app_lines(gate) if l.startswith("{")], "an access line with it off"


def test_sigusr1_without_a_log_file_keeps_fencegate_running(gate):
    os.kill(gate.pid, signal.SIGUSR1)
    wait_for("the no-file line", lambda: any("no log file to reopen" in l for l in app_lines(gate)))
    assert put(gate, "/objects/alive", 1).status < 300


def test_check_refuses_a_log_file_whose_directory_is_missing(fencegate_bin, backend, tmp_path):
    cfg = default_config(backend.port, tmp_path / "data",
                         log={"level": "info",
                              "access_log_file": str(tmp_path / "missing" / "access.log")})
    path = write_config(tmp_path / "fencegate.yaml", cfg)
    out = subprocess.run([fencegate_bin, "--config", str(path), "--check"], capture_output=True,
                         text=True, timeout=IO_TIMEOUT)
    assert out.returncode == 2, out
    assert "field 'log.access_log_file'" in out.stderr and "does not exist" in out.stderr, out
    os.mkdir(tmp_path / "missing")
    out = subprocess.run([fencegate_bin, "--config", str(path), "--check"], capture_output=True,
                         text=True, timeout=IO_TIMEOUT)
    assert out.returncode == 0, out
