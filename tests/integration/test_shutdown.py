"""SIGTERM stops fencegate cleanly (exit 0), idle or after traffic, and the
data directory can be opened again at once."""

from fg_helpers import admin_key_path


def test_sigterm_when_idle_exits_0(gate):
    rc = gate.stop(timeout=15)
    assert rc == 0, f"SIGTERM on an idle fencegate: want exit 0, got {rc}\n{gate.stderr_tail()}"


def test_sigterm_after_traffic_exits_0_and_data_reopens(gate, backend):
    assert 200 <= gate.put("/objects/s", 7).status < 300
    rc = gate.stop(timeout=15)
    assert rc == 0, f"SIGTERM after traffic: want exit 0, got {rc}\n{gate.stderr_tail()}"
    gate.start()
    r = gate.admin_get(admin_key_path("/objects/s"))
    assert r.status == 200 and r.json()["token"] == 7, r
