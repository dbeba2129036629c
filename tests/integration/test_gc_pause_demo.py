"""The GC-pause demo (locks/demo/gc_pause_demo.py) as a test: with
fencegate's lock service and with a real etcd lock, client 1's stale write
lands when it goes straight to the backend and is refused with 409 when it
goes through fencegate."""

import importlib.util
import io
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "gc_pause_demo", os.path.join(ROOT, "locks", "demo", "gc_pause_demo.py"))
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)


def run(fencegate_bin, tmp_path, lock):
    out = io.StringIO()
    direct, fenced = demo.run_demo(fencegate_bin, lock, workdir=str(tmp_path), out=out)
    text = out.getvalue()
    print(text)  # shown with -s, and on failure
    assert demo.check(direct, fenced) == []
    assert "straight to the backend" in text and "through fencegate" in text
    assert "409 stale_token" in text and "LOST" in text
    return direct, fenced


def test_gc_pause_with_fencegate_lock_service(fencegate_bin, tmp_path):
    direct, fenced = run(fencegate_bin, tmp_path, "fencegate")
    # A fresh lock name per story: tokens 1 and 2, as in docs/locks.md.
    assert (direct["c1_token"], direct["c2_token"]) == (1, 2)
    assert (fenced["c1_token"], fenced["c2_token"]) == (1, 2)


def test_gc_pause_with_etcd_lock(fencegate_bin, tmp_path):
    if not (shutil.which("etcd") or os.path.exists("/usr/bin/etcd")):
        pytest.fail("etcd is not installed: bash docker/install-deps.sh installs etcd-server")
    run(fencegate_bin, tmp_path, "etcd")
