"""A full disk through the real binary: the token store lives on a small
tmpfs that the test mounts and then fills until RocksDB's writes fail.
Fenced writes must fail closed (503 store_unavailable, nothing forwarded),
/readyz must say so, pass-through traffic must keep flowing, and freeing
the space must restore service without a restart, with nothing that was
acknowledged lost. A second test fills a larger tmpfs from far above the
store's free-space floor, where the store does not ask the file system
before every write (FreeSpaceGuard), and checks the next write is refused.

The ext4 tests put the store on an ext4 file system on a loop device, as a
real disk behaves (delayed allocation, preallocated WAL blocks, the root
reserve), and let fencegate's own writes fill it: idempotency records of
incompressible responses, so that RocksDB's compression does not hide them.
RocksDB as Debian builds it keeps assert() live, and a write it retries on
a file that already failed aborts the process: these tests fail with the
abort, not with a 503, when the store touches RocksDB after a failed write.
A start on a full disk must exit 1, saying what to do.

Needs root (or CAP_SYS_ADMIN) to mount, and a loop device for ext4; skipped
with the reason otherwise. The mount is always unmounted, after fencegate
has stopped.
"""

import errno
import os
import shutil
import subprocess
import time

import pytest

from fg_helpers import (START_TIMEOUT, IO_TIMEOUT, ConnectionClosed, admin_key_path,
                        assert_json_error, request)

FS_SIZE = "32m"     # room for RocksDB's preallocations (WAL: 1.1 x the 8 MiB memtable; MANIFEST: 4 MiB) and the 4 MiB floor
KEY_PAD = "k" * 900  # long keys make each WAL record span pages sooner
MAX_WRITES_UNTIL_FULL = 3000
# Far above the store's floor: 4 MiB plus FreeSpaceGuard::kHeadroom (256 MiB)
# plus RocksDB's preallocations, so that the store stops asking the file
# system before every write.
ROOMY_FS_SIZE = "400m"
RECHECK_S = 0.020  # FreeSpaceGuard::kRecheck: how old a free-space answer may be


def _mount_tmpfs(mnt, size):
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root; run the suite as root (CI does)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700",
                        "fencegate-test", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here: {r.stderr.strip()}")


def _mount_ext4(mnt, size):
    """An ext4 file system of `size` bytes on a loop device, mounted at mnt."""
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root; run the suite as root (CI does)")
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed (e2fsprogs)")
    image = mnt.parent / f"{mnt.name}.img"
    with open(image, "wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"mounting an ext4 image on a loop device is not permitted here: "
                    f"{r.stderr.strip()}")


def _umount(mnt):
    u = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
    assert u.returncode == 0, f"umount {mnt} failed: {u.stderr}"


@pytest.fixture
def mount_tmpfs(tmp_path):
    """mount_tmpfs(name, size, kind="tmpfs") -> a size-limited tmpfs (or,
    with kind="ext4", an ext4 loop device of size bytes) under tmp_path,
    unmounted after the test (after fencegate has stopped)."""
    mounted = []

    def mount(name, size, kind="tmpfs"):
        mnt = tmp_path / name
        (_mount_ext4 if kind == "ext4" else _mount_tmpfs)(mnt, size)
        mounted.append(mnt)
        return mnt
    try:
        yield mount
    finally:
        for mnt in reversed(mounted):
            _umount(mnt)


@pytest.fixture
def small_fs(mount_tmpfs):
    return mount_tmpfs("small-fs", FS_SIZE)


@pytest.fixture
def roomy_fs(mount_tmpfs):
    return mount_tmpfs("roomy-fs", ROOMY_FS_SIZE)


def fill(path):
    """Writes `path` until the file system refuses with ENOSPC, with ever
    smaller writes, so that no free byte is left. Returns bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 64 << 10, 4 << 10, 512, 1):
            data = b"\0" * chunk
            while True:
                try:
                    n = f.write(data)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
                written += n
                if n < chunk:
                    break
    return written


def fill_leaving(path, leave):
    """Writes `path` until `leave` bytes are left available beside it."""
    st = os.statvfs(path.parent)
    n = max(0, st.f_bavail * st.f_frsize - leave)
    with open(path, "wb") as f:
        while n > 0:
            chunk = min(n, 1 << 20)
            f.write(b"\0" * chunk)
            n -= chunk


def readyz(gate):
    return request(gate.admin, "GET", "/readyz").status


def wait_ready(gate, timeout=IO_TIMEOUT):
    import time
    deadline = time.monotonic() + timeout
    while readyz(gate) != 200:
        assert time.monotonic() < deadline, f"/readyz not 200 within {timeout}s"
        time.sleep(0.05)  # polling interval of a condition with a deadline


def test_full_disk_fails_closed_and_recovers(small_fs, make_gate, backend):
    gate = make_gate(name="small", data_dir=small_fs / "data")
    acked = {}
    token = 0

    def fenced(key, body=None):
        nonlocal token
        token += 1
        r = gate.put(f"/objects/{key}", token, body=body or f"t{token}".encode())
        if 200 <= r.status < 300:
            acked[f"/objects/{key}"] = token
        return r, token

    for i in range(20):
        r, _ = fenced(f"before-{i}")
        assert 200 <= r.status < 300, r
    assert readyz(gate) == 200

    filler = small_fs / "filler"
    fill(filler)

    # The WAL's last page may still have room: write until the store fails.
    refused = None
    for i in range(MAX_WRITES_UNTIL_FULL):
        r, t = fenced(f"{KEY_PAD}-{i}")
        if r.status == 503:
            assert_json_error(r, 503, "store_unavailable")
            refused = t
            break
        assert 200 <= r.status < 300, r
    assert refused is not None, f"no 503 after {MAX_WRITES_UNTIL_FULL} writes on a full disk"

    # Fail closed while full: more refusals, nothing of them forwarded.
    for i in range(5):
        r, _ = fenced(f"while-full-{i}", body=b"must-not-arrive")
        assert_json_error(r, 503, "store_unavailable")
    assert readyz(gate) == 503, "/readyz must fail while the store cannot write"
    log = backend.log()
    assert not [x for x in log if x["body"] in ("must-not-arrive", f"t{refused}")], \
        "a write refused with 503 reached the backend"

    # Pass-through traffic is not fenced and keeps flowing.
    r = request(gate.proxy, "PUT", "/plain/p", body=b"unfenced")
    assert 200 <= r.status < 300, r
    r = request(gate.proxy, "GET", "/plain/p")
    assert r.status == 200 and r.body == b"unfenced", r
    r = request(gate.proxy, "GET", "/objects/before-0")
    assert r.status == 200, r

    # Free the space: service comes back without a restart.
    os.unlink(filler)
    wait_ready(gate)
    r, t = fenced("after-recovery", body=b"after-recovery")
    assert 200 <= r.status < 300, r
    assert [x for x in backend.log() if x["body"] == "after-recovery"], "not forwarded"

    def check_all():
        for key, tok in acked.items():
            g = gate.admin_get(admin_key_path(key))
            assert g.status == 200 and g.json()["token"] >= tok, \
                f"{key}: acknowledged {tok}, store answers {g}"
    check_all()
    gate.restart()  # SIGTERM (exit 0) and start again on the same data
    check_all()
    stale = gate.put("/objects/after-recovery", t - 1, body=b"stale")
    assert_json_error(stale, 409, "stale_token")
    print(f"disk full: {len(acked)} acknowledged writes kept, first refusal at token {refused}")
    assert gate.stop() == 0


def test_a_disk_filled_far_from_the_floor_is_seen_within_the_recheck_interval(
        roomy_fs, make_gate, backend):
    """Far from a full disk the store does not ask the file system before
    every write (FreeSpaceGuard): it trusts an answer for RECHECK_S. A disk
    that another process fills must still refuse the first write after that,
    with a 503, and not reach RocksDB's WAL append (which would abort the
    process) nor the backend."""
    gate = make_gate(name="roomy", data_dir=roomy_fs / "data")
    for i in range(20):  # the store asked, and may now skip asking
        r = gate.put(f"/objects/roomy-{i}", i + 1, body=b"before")
        assert 200 <= r.status < 300, r
    asked_by = time.monotonic()

    fill(roomy_fs / "filler")
    # The fill of ~380 MiB outlasts RECHECK_S by far; should a machine fill
    # that fast, wait the rest of the interval the store's answer is valid.
    left = asked_by + RECHECK_S - time.monotonic()
    if left > 0:
        time.sleep(left)

    r = gate.put("/objects/roomy-after-fill", 100, body=b"must-not-arrive")
    assert_json_error(r, 503, "store_unavailable")
    assert "no space left for the token store" in r.json()["message"], r.json()
    assert not [x for x in backend.log() if x["body"] == "must-not-arrive"], \
        "a write refused with 503 reached the backend"
    assert readyz(gate) == 503

    os.unlink(roomy_fs / "filler")
    wait_ready(gate)
    r = gate.put("/objects/roomy-after-fill", 100, body=b"after")
    assert 200 <= r.status < 300, r
    assert gate.stop() == 0


# Small: the records fill it within a few hundred writes, and three cycles'
# WAL and table files share it.
EXT4_SIZE = 48 << 20
PAY = {"name": "pay", "path_prefix": "/pay/", "mode": "off",
       "idempotency": {"window": "1h", "max_response_bytes": "1MiB"}}
RECORD_BYTES = 100_000  # each response kept whole in its record


def pay(gate, key):
    """An idempotent POST whose record keeps an incompressible response."""
    return request(gate.proxy, "POST", f"/pay/{key}",
                   [("Idempotency-Key", key), ("X-Test-Seq", "1"),
                    ("X-Test-Incompressible", "1"), ("X-Test-Response-Bytes", str(RECORD_BYTES))],
                   b"x")


@pytest.fixture
def ext4(mount_tmpfs):
    return mount_tmpfs("ext4", EXT4_SIZE, kind="ext4")


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_own_writes_fill_ext4_fail_closed_and_recover_each_time(ext4, make_gate, backend,
                                                                  durability):
    """Three times: the disk is filled to 6 MiB from full (just above the
    store's floor), then idempotent writes fill the rest until the store
    refuses; fencegate stays up, refuses (503, or a response cut short when
    its record could not be stored after its head went) and says so on
    /readyz, and comes back by itself when the space is freed. Every
    response a client got whole is replayed after a restart."""
    data = ext4 / "data"
    gate = make_gate(name="ext4", data_dir=data, routes=[PAY],
                     storage={"engine": "rocksdb", "path": str(data), "durability": durability})
    answered = {}
    for cycle in range(3):
        fill_leaving(ext4 / "filler", 6 << 20)
        refused = 0
        for i in range(400):
            key = f"c{cycle}-{i}"
            try:
                r = pay(gate, key)
            except ConnectionClosed:
                # The response went in part, then its record could not be
                # stored: cut short, never whole.
                r = None
            assert gate.proc.poll() is None, f"fencegate exited ({gate.proc.returncode})"
            if r is None:
                refused += 1
                if refused == 5:
                    break
                continue
            if r.status == 503:
                assert_json_error(r, 503, "store_unavailable")
                refused += 1
                if refused == 5:
                    break
                continue
            assert r.status == 200, r
            answered[key] = r.body
        assert refused == 5, f"cycle {cycle}: no refusals after 400 writes of {RECORD_BYTES} bytes"
        assert readyz(gate) == 503, "/readyz must fail while the store cannot write"
        os.unlink(ext4 / "filler")
        wait_ready(gate)
        r = pay(gate, f"c{cycle}-after")
        assert r.status == 200, r
        answered[f"c{cycle}-after"] = r.body
    gate.restart()
    for key in list(answered)[::10]:
        again = pay(gate, key)
        assert again.status == 200 and again.header("Idempotent-Replayed") == "true", (key, again)
        assert again.body == answered[key], key
    assert gate.stop() == 0


def test_a_start_on_a_full_ext4_disk_exits_1_saying_what_to_do(ext4, make_gate, backend):
    data = ext4 / "data"
    gate = make_gate(name="ext4", data_dir=data, routes=[PAY],
                     storage={"engine": "rocksdb", "path": str(data), "durability": "sync"})
    assert pay(gate, "before").status == 200
    gate.proc.kill()  # the WAL is left to replay at the next start
    gate.proc.wait()
    fill(ext4 / "filler")
    started = subprocess.run([gate.binary, "--config", gate.config_path], capture_output=True,
                             text=True, timeout=START_TIMEOUT)
    assert started.returncode == 1, (started.returncode, started.stderr[-2000:])
    assert "no space left to open the token store" in started.stderr, started.stderr[-2000:]
    assert "free space there and start again" in started.stderr
    os.unlink(ext4 / "filler")
    gate.start()
    again = pay(gate, "before")
    assert again.header("Idempotent-Replayed") == "true", again
    assert gate.stop() == 0
