"""Reloading the configuration (docs/contract.md, "Configuration" and
"Admin API"): SIGHUP and POST /v1/reload read the --config file again. A
valid file applies at once, to the next request on a kept-alive connection
too; an invalid one, or one that changes a field bound at start, is refused
whole and the running configuration keeps serving; no connection or queued
write is lost while reloads happen under load."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from fg_helpers import (ADMIN_TOKEN, IO_TIMEOUT, START_TIMEOUT, RawConnection, admin_key_path,
                        assert_json_error, default_config, parse_addr, read_first_line,
                        request, tokens_seen, write_config)
from fencegate_proc import Processes, drain  # after fg_helpers, which puts it on the path

RELOADED = "configuration reloaded from"
REFUSED = "configuration reload from"


def ok(r):
    """A write the backend took (201 the first time a path is stored)."""
    return r.status in (200, 201, 204)


def log_count(gate, text):
    return gate.stderr_tail(n=1000000).count(text)


def wait_for(pred, what, timeout=IO_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling interval of a condition with a deadline


def reload_by_signal(gate):
    """SIGHUP, then waits for the reload's log line (applied or refused);
    returns that line."""
    before = log_count(gate, RELOADED) + log_count(gate, REFUSED)
    os.kill(gate.pid, signal.SIGHUP)
    wait_for(lambda: log_count(gate, RELOADED) + log_count(gate, REFUSED) > before,
             "the reload's log line")
    assert gate.running(), gate.stderr_tail()
    lines = [line for line in gate.stderr_tail(n=1000000).splitlines()
             if RELOADED in line or REFUSED in line]
    return lines[-1]


def reload_by_admin(gate, bearer=ADMIN_TOKEN):
    return gate.admin_post("/v1/reload", b"", bearer=bearer)


def rewrite(gate, backend, tmp_path, **overrides):
    """Writes the gate's --config file anew: the default config (the same
    data directory) with `overrides`."""
    cfg = default_config(backend.port, tmp_path / "fencegate-data", **overrides)
    write_config(gate.config_path, cfg)
    return cfg


TWO_ROUTES = [{"name": "objects", "path_prefix": "/objects/"},
              {"name": "docs", "path_prefix": "/docs/"}]


@pytest.mark.parametrize("how", ["signal", "admin"])
def test_new_route_fences_at_once(gate, backend, tmp_path, how):
    # Unrouted before: passes through without a token.
    assert ok(gate.put("/docs/a"))
    with RawConnection(gate.proxy) as kept:
        kept.send("PUT", "/docs/b", body=b"x", close=False)
        assert ok(kept.read_response())
        rewrite(gate, backend, tmp_path, routes=TWO_ROUTES)
        if how == "signal":
            line = reload_by_signal(gate)
            assert f"{RELOADED} {gate.config_path}: 2 routes" in line, line
        else:
            r = reload_by_admin(gate)
            assert r.status == 200, r
            assert r.json() == {"status": "reloaded", "source": gate.config_path, "routes": 2}
            assert f"{RELOADED} {gate.config_path}: 2 routes" in gate.stderr_tail()
        # The next request on the connection that was open before.
        kept.send("PUT", "/docs/b", body=b"x", close=False)
        assert_json_error(kept.read_response(), 428, "token_required")
    assert_json_error(gate.put("/docs/a"), 428, "token_required")
    assert ok(gate.put("/docs/a", token=1))
    # The route that was there before still fences.
    assert_json_error(gate.put("/objects/a"), 428, "token_required")


@pytest.mark.parametrize("how", ["signal", "admin"])
@pytest.mark.parametrize("bad", ["field", "token_file"])
def test_invalid_file_refused_and_old_config_serves(gate, backend, tmp_path, how, bad):
    assert ok(gate.put("/objects/k", token=5))
    if bad == "field":
        routes = [{"name": "objects", "path_prefix": "/objects/"},
                  {"name": "docs", "path_prefix": "/docs/", "mode": "sometimes"}]
        rewrite(gate, backend, tmp_path, routes=routes)
        where = "field 'routes[1].mode'"
    else:
        missing = tmp_path / "no-such-token"
        rewrite(gate, backend, tmp_path, routes=TWO_ROUTES,
                admin={"listen": "127.0.0.1:0", "token_file": str(missing)})
        where = "field 'admin.token_file'"
    if how == "signal":
        line = reload_by_signal(gate)
        assert " error " in line and "refused" in line, line
        assert where in line and gate.config_path in line, line
    else:
        doc = assert_json_error(reload_by_admin(gate), 422, "invalid_config",
                                source=gate.config_path)
        assert where in doc["message"] and gate.config_path in doc["message"], doc
        assert where in gate.stderr_tail()
    # Nothing of the refused file applies: /docs/ is still unrouted, the
    # fence and the admin token are the old ones.
    assert ok(gate.put("/docs/a"))
    assert_json_error(gate.put("/objects/k", token=4), 409, "stale_token")
    assert ok(gate.put("/objects/k", token=6))
    assert gate.admin_post("/v1/keys/%2Fobjects%2Fk/fence", {"token": 7}).status == 200


@pytest.mark.parametrize("how", ["signal", "admin"])
def test_restart_only_change_refused_whole(gate, backend, tmp_path, how):
    cfg = default_config(backend.port, tmp_path / "other-data", routes=TWO_ROUTES, threads=3)
    write_config(gate.config_path, cfg)
    wanted = ["threads changes only with a restart", "storage.path changes only with a restart"]
    if how == "signal":
        line = reload_by_signal(gate)
        assert "refused" in line and all(w in line for w in wanted), line
    else:
        doc = assert_json_error(reload_by_admin(gate), 422, "restart_required")
        assert doc["fields"] == wanted, doc
    # The route added beside them did not apply either.
    assert ok(gate.put("/docs/a"))
    assert_json_error(gate.put("/objects/a"), 428, "token_required")
    # The file fixed, the same reload applies.
    rewrite(gate, backend, tmp_path, routes=TWO_ROUTES)
    assert reload_by_admin(gate).status == 200
    assert_json_error(gate.put("/docs/a"), 428, "token_required")


def test_reload_needs_the_bearer_token(gate, backend, tmp_path):
    rewrite(gate, backend, tmp_path, routes=TWO_ROUTES)
    assert_json_error(reload_by_admin(gate, bearer=None), 401, "unauthorized")
    assert_json_error(reload_by_admin(gate, bearer="wrong"), 401, "unauthorized")
    assert_json_error(gate.admin_get("/v1/reload"), 405, "method_not_allowed")
    # None of those reloaded.
    assert ok(gate.put("/docs/a"))
    assert RELOADED not in gate.stderr_tail()
    # A new admin token applies with the reload that brings it.
    rewrite(gate, backend, tmp_path, routes=TWO_ROUTES,
            admin={"listen": "127.0.0.1:0", "token": "rotated"})
    assert reload_by_admin(gate).status == 200
    assert_json_error(reload_by_admin(gate), 401, "unauthorized")
    assert reload_by_admin(gate, bearer="rotated").status == 200


def test_live_settings_apply(gate, backend, tmp_path):
    """Limits and the token header change with a reload."""
    assert ok(gate.put("/objects/big", token=1, body=b"x" * 2000))
    rewrite(gate, backend, tmp_path, fencing={"token_header": "X-Fence"},
            limits={"max_body_bytes": 1000})
    assert reload_by_admin(gate).status == 200
    assert_json_error(gate.put("/objects/big", token=2, body=b"x" * 2000), 413, "body_too_large")
    # The old header is no token any more; the new one is.
    assert_json_error(gate.put("/objects/k", token=1), 428, "token_required")
    r = gate.put("/objects/k", headers=[("X-Fence", "1")])
    assert ok(r), r


@pytest.mark.parametrize("how", ["signal", "admin"])
def test_requests_under_way_finish_under_their_configuration(gate, backend, tmp_path, how):
    """A write held at the backend and one queued behind it on the same key
    were classified before the reload: both go through as they began (the
    token forwarded, though the new file stops forwarding it), while a
    request that starts after the reload runs under the new file."""
    key = "/objects/under-way"
    with RawConnection(gate.proxy) as first, RawConnection(gate.proxy) as second:
        first.send("PUT", key, [("Fencing-Token", "5"), ("X-Test-Hold-Until", "first")], b"A",
                   close=False)
        backend.wait_until(lambda s: any(a["path"] == key for a in s["active"]),
                           what="write A to reach the backend")
        second.send("PUT", key, [("Fencing-Token", "6")], b"B", close=False)
        wait_for(lambda: gate.admin_get(admin_key_path(key)).json().get("token") == 6,
                 "write B to be accepted and queued behind A")
        rewrite(gate, backend, tmp_path, routes=TWO_ROUTES,
                fencing={"token_header": "Fencing-Token", "forward_token": False})
        if how == "signal":
            assert RELOADED in reload_by_signal(gate)
        else:
            assert reload_by_admin(gate).status == 200
        # New requests: the new route, the token no longer forwarded.
        assert_json_error(gate.put("/docs/a"), 428, "token_required")
        assert ok(gate.put("/objects/other", token=1))
        backend.release("first")
        assert ok(first.read_response("PUT"))
        assert ok(second.read_response("PUT"))
        # The kept-alive connections now run under the new file.
        first.send("PUT", key, [("Fencing-Token", "7")], b"C", close=False)
        assert ok(first.read_response("PUT"))
    log = backend.log()
    assert tokens_seen(log, path=key) == ["5", "6", None]
    assert tokens_seen(log, path="/objects/other") == [None]


def test_no_connection_or_write_lost_while_reloading_under_load(gate, backend, tmp_path):
    """Client threads on kept-alive connections write with increasing
    tokens on a few keys each while the file is reloaded, by signal and by
    the admin API in turn, between two configurations that differ in
    routes, limits, timeouts and logging. Every write must be answered 200
    and reach the backend."""
    threads, keys_per_thread, reloads = 6, 3, 24
    configs = [
        dict(routes=[{"name": "objects", "path_prefix": "/objects/"}]),
        dict(routes=[{"name": "objects", "path_prefix": "/objects/"},
                     {"name": "docs", "path_prefix": "/docs/", "mode": "shadow"}],
             upstream={"url": f"http://127.0.0.1:{backend.port}", "connect_timeout": "2s",
                       "timeout": "15s", "max_idle_connections": 8},
             limits={"header_timeout": "5s", "idle_timeout": "30s", "max_body_bytes": 65536},
             log={"level": "debug", "access_log": False}),
    ]
    stop = threading.Event()
    acked = []          # (path, token) answered 200
    errors = []
    lock = threading.Lock()

    def client(t):
        token = 0
        conn = None
        try:
            conn = RawConnection(gate.proxy)
            while not stop.is_set():
                # Two writes pipelined: the second waits on the connection
                # while the first is decided and forwarded.
                sent = []
                for _ in range(2):
                    token += 1
                    path = f"/objects/t{t}-k{token % keys_per_thread}"
                    conn.send("PUT", path, [("Fencing-Token", str(token))],
                              body=f"{t}:{token}", close=False)
                    sent.append((path, str(token)))
                for path, tok in sent:
                    r = conn.read_response()
                    with lock:
                        if ok(r):
                            acked.append((path, tok))
                        else:
                            errors.append(f"{path} token {tok}: {r.status} {r.body[:200]!r}")
        except Exception as e:  # a dropped connection counts as an error
            with lock:
                errors.append(f"thread {t}: {type(e).__name__}: {e}")
        finally:
            if conn is not None:
                conn.close()

    workers = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    try:
        for i in range(reloads):
            with lock:
                seen = len(acked)
            # Writes under way between each two reloads.
            wait_for(lambda: len(acked) >= seen + 40 or errors, "writes between reloads")
            rewrite(gate, backend, tmp_path, **configs[(i + 1) % 2])
            if i % 2 == 0:
                line = reload_by_signal(gate)
                assert RELOADED in line, line
            else:
                r = reload_by_admin(gate)
                assert r.status == 200, r
        with lock:
            seen = len(acked)
        wait_for(lambda: len(acked) >= seen + 10 or errors, "writes after the last reload")
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=IO_TIMEOUT)
    assert not any(w.is_alive() for w in workers)
    print(f"reloads: {reloads}, writes acknowledged: {len(acked)}, errors: {len(errors)}")
    assert errors == [], errors[:10]
    assert log_count(gate, RELOADED) == reloads
    recorded = {(r["path"], v) for r in backend.log() if r["method"] == "PUT"
                for k, v in r["headers"] if k.lower() == "fencing-token"}
    missing = [a for a in acked if a not in recorded]
    assert missing == [], f"{len(missing)} acknowledged writes never reached the backend: " \
                          f"{missing[:10]}"


def test_idempotency_keys_switch_on_and_off_with_a_reload(gate, backend, tmp_path):
    def post(key):
        return gate.put("/pay/1", method="POST", body=b"amount=5",
                        headers=[("Idempotency-Key", key)])

    pay = {"name": "pay", "path_prefix": "/pay/", "mode": "off"}
    rewrite(gate, backend, tmp_path, routes=[pay])
    assert reload_by_admin(gate).status == 200
    assert post("k1").header("Idempotent-Replayed") is None
    assert post("k1").header("Idempotent-Replayed") is None
    rewrite(gate, backend, tmp_path, routes=[dict(pay, idempotency="1h")])
    assert reload_by_admin(gate).status == 200
    first = post("k2")
    assert ok(first) and first.header("Idempotent-Replayed") is None, first
    assert post("k2").header("Idempotent-Replayed") == "true"
    # The admin listener sees the new route's records too.
    r = gate.admin_post("/v1/idempotency/pay/k2", b"", method="GET")
    assert r.status == 200, r
    rewrite(gate, backend, tmp_path, routes=[pay])
    assert reload_by_admin(gate).status == 200
    assert post("k2").header("Idempotent-Replayed") is None


def test_a_route_keeps_its_metrics_across_reloads(gate, backend, tmp_path):
    """A route's request counts keep counting through a reload; a route a
    reload adds has series of its own from then on; one it removes keeps
    its last counts."""
    def counts():
        text = gate.admin_get("/metrics").body.decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("fencegate_requests_total{") and 'outcome="token_required"' in line:
                route = line.split('route="', 1)[1].split('"', 1)[0]
                out[route] = float(line.rsplit(" ", 1)[1])
        return out

    def counted(want):
        # A request is counted once its response is written, which may be
        # just after the client has read it.
        wait_for(lambda: counts() == want, f"the counts {want}")

    assert_json_error(gate.put("/objects/a"), 428, "token_required")
    counted({"": 0, "objects": 1})
    rewrite(gate, backend, tmp_path, routes=TWO_ROUTES)
    assert reload_by_admin(gate).status == 200
    assert_json_error(gate.put("/objects/a"), 428, "token_required")
    assert_json_error(gate.put("/docs/a"), 428, "token_required")
    counted({"": 0, "objects": 2, "docs": 1})
    rewrite(gate, backend, tmp_path, routes=TWO_ROUTES[1:])
    assert reload_by_admin(gate).status == 200
    assert_json_error(gate.put("/docs/a"), 428, "token_required")
    counted({"": 0, "objects": 2, "docs": 2})


def holds(pid, sig):
    """Whether process `pid` holds (blocks) `sig`: SigBlk of its main
    thread, proc(5)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigBlk:"):
                return (int(line.split()[1], 16) >> (sig - 1)) & 1 == 1
    return False


def test_a_sighup_while_starting_reloads_once_listening(backend, fencegate_bin, tmp_path):
    """SIGHUP and SIGUSR1 sent after the configuration was read but before
    fencegate can act on them do not end the process: the reload happens
    once it listens. Here the log file is a FIFO nobody reads yet, so
    fencegate waits opening it, as it would while RocksDB replays a long
    WAL."""
    fifo = tmp_path / "app.log"
    os.mkfifo(fifo)
    config_path = tmp_path / "fencegate.yaml"

    def config(routes):
        return default_config(backend.port, tmp_path / "data", routes=routes,
                              log={"level": "info", "file": str(fifo)})

    write_config(config_path, config(TWO_ROUTES[:1]))
    procs = Processes()
    try:
        proc = procs.start([fencegate_bin, "--config", str(config_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL)
        wait_for(lambda: proc.poll() is not None or holds(proc.pid, signal.SIGHUP),
                 "fencegate to hold SIGHUP")
        assert proc.poll() is None, f"fencegate exited with {proc.returncode}"
        write_config(config_path, config(TWO_ROUTES))
        os.kill(proc.pid, signal.SIGHUP)
        os.kill(proc.pid, signal.SIGUSR1)
        log = []
        with open(fifo, "rb") as reader:  # lets fencegate's open of the FIFO return
            drainer = threading.Thread(target=drain, args=(reader, log),
                                       daemon=True)
            drainer.start()
            line, _ = read_first_line(proc, START_TIMEOUT, "fencegate")
            proxy = parse_addr(json.loads(line)["proxy"])
            wait_for(lambda: f"{RELOADED} {config_path}: 2 routes" in b"".join(log).decode(),
                     "the reload's log line")
            assert b"SIGUSR1: reopened" in b"".join(log)
            assert_json_error(request(proxy, "PUT", "/docs/a", body=b"x"), 428,
                              "token_required")
            assert procs.stop(proc) == 0
            drainer.join(timeout=IO_TIMEOUT)
    finally:
        procs.stop_all()
