"""Start-up with a data dir that fencegate must not use: locked by another
running fencegate, unreadable, or damaged. fencegate exits non-zero, before
listening, with a message that says which and what to do, and never starts
an empty store over a damaged one."""

import os
import subprocess

import pytest

from fg_helpers import START_TIMEOUT, TempDir, default_config, write_config


def run_to_exit(binary, config_path, **kw):
    """Runs fencegate to its exit; it must not get as far as listening."""
    p = subprocess.run([binary, "--config", str(config_path)], capture_output=True,
                       text=True, timeout=START_TIMEOUT, stdin=subprocess.DEVNULL, **kw)
    assert '"listening"' not in p.stdout, f"fencegate started: {p.stdout}"
    return p


def make_store(make_gate, name):
    """A data dir holding a real store with one key, fencegate stopped."""
    gate = make_gate(name=name)
    r = gate.put("/objects/a", 7)
    assert 200 <= r.status < 300, r
    assert gate.stop() == 0
    return gate


def data_dir_of(gate):
    return os.path.join(os.path.dirname(gate.config_path), f"{gate.name}-data")


def test_locked_by_another_fencegate(make_gate, fencegate_bin):
    first = make_gate(name="first")
    second = make_gate(name="second", start=False, data_dir=data_dir_of(first))
    p = run_to_exit(fencegate_bin, second.config_path)
    assert p.returncode != 0
    assert "lock" in p.stderr and "another fencegate running" in p.stderr, p.stderr
    assert "stop it or set storage.path" in p.stderr, p.stderr
    r = first.put("/objects/a", 1)  # the first one is unharmed
    assert 200 <= r.status < 300, r


def test_damaged_current_file(make_gate, fencegate_bin):
    gate = make_store(make_gate, "damaged")
    current = os.path.join(data_dir_of(gate), "CURRENT")
    with open(current, "w") as f:
        f.write("garbage")  # no newline, names no MANIFEST
    p = run_to_exit(fencegate_bin, gate.config_path)
    assert p.returncode != 0
    # The advice never loses tokens: a backup comes with raising every key.
    assert "damaged" in p.stderr and "raise every key" in p.stderr, p.stderr
    with open(current) as f:
        assert f.read() == "garbage", "fencegate rewrote the damaged store"


def test_damaged_manifest(make_gate, fencegate_bin):
    gate = make_store(make_gate, "manifest")
    data = data_dir_of(gate)
    with open(os.path.join(data, "CURRENT")) as f:
        manifest = os.path.join(data, f.read().strip())
    size = os.path.getsize(manifest)
    with open(manifest, "r+b") as f:
        f.write(b"\xff" * size)
    p = run_to_exit(fencegate_bin, gate.config_path)
    assert p.returncode != 0
    # The advice never loses tokens: a backup comes with raising every key.
    assert "damaged" in p.stderr and "raise every key" in p.stderr, p.stderr


def test_damaged_wal_record_with_acknowledged_writes_after_it(make_gate, fencegate_bin):
    """Damage in the middle of the write-ahead log: replaying only up to it
    would forget the tokens acknowledged after it, so fencegate refuses to
    start (a record cut short at the very end, a crash's torn append, is
    dropped instead: RocksDbStoreOpenTest)."""
    gate = make_gate(name="wal")
    for i in range(40):
        r = gate.put(f"/objects/k{i}", i + 1)
        assert 200 <= r.status < 300, r
    assert gate.stop() == 0
    data = data_dir_of(gate)
    wals = [os.path.join(data, n) for n in os.listdir(data) if n.endswith(".log")]
    wal = max(wals, key=os.path.getsize)
    size = os.path.getsize(wal)
    with open(wal, "r+b") as f:
        f.seek(size // 3)
        byte = f.read(1)
        f.seek(size // 3)
        f.write(bytes([byte[0] ^ 0x5A]))
    with open(wal, "rb") as f:
        damaged = f.read()
    p = run_to_exit(fencegate_bin, gate.config_path)
    assert p.returncode != 0
    # The advice never loses tokens: a backup comes with raising every key.
    assert "damaged" in p.stderr and "raise every key" in p.stderr, p.stderr
    with open(wal, "rb") as f:
        assert f.read() == damaged, "fencegate rewrote the damaged log"


def test_store_files_without_current(make_gate, fencegate_bin):
    gate = make_store(make_gate, "partial")
    os.unlink(os.path.join(data_dir_of(gate), "CURRENT"))
    p = run_to_exit(fencegate_bin, gate.config_path)
    assert p.returncode != 0
    assert "no CURRENT file" in p.stderr and "Refusing to create an empty store" in p.stderr, \
        p.stderr
    assert not os.path.exists(os.path.join(data_dir_of(gate), "CURRENT"))


def _drop_to_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_unreadable_data_dir(fencegate_bin, backend):
    """chmod 000 stops everyone but root, and CI runs as root: then fencegate
    runs as the unprivileged user nobody (65534) for this test. Its config
    and data live in a fresh directory under /tmp that nobody may enter."""
    root = os.geteuid() == 0
    if not root and os.geteuid() == 65534:
        pytest.skip("runs as nobody already; cannot demonstrate an unreadable dir")
    with TempDir("fencegate-unreadable-", mode=0o755) as tmp:
        top = tmp.path
        data = os.path.join(top, "data")
        os.mkdir(data)
        try:
            os.chmod(data, 0o000)
            cfg = write_config(os.path.join(top, "fencegate.yaml"),
                               default_config(backend.port, data))
            os.chmod(cfg, 0o644)
            extra = {"preexec_fn": _drop_to_nobody} if root else {}
            if root:
                probe = subprocess.run([fencegate_bin, "--version"], capture_output=True, **extra)
                if probe.returncode != 0:
                    pytest.skip(f"user nobody cannot run {fencegate_bin} "
                                f"(a parent dir is not world-executable): {probe.stderr[:200]!r}")
            p = run_to_exit(fencegate_bin, cfg, **extra)
            assert p.returncode != 0
            assert "Permission denied" in p.stderr, p.stderr
            assert "readable and writable by the user fencegate runs as" in p.stderr, p.stderr
            assert os.listdir(data) == [], "fencegate wrote into the unreadable dir"
        finally:
            os.chmod(data, 0o755)
