"""Crash safety through the real binary: fenced writes at full speed, the
process killed with SIGKILL at random moments, restarted on the same data
dir; every acknowledged (2xx) write must still be fenced afterwards.

    FENCEGATE_CRASH_ROUNDS   crashes to run (default 20, the CI run)
    FENCEGATE_CRASH_SEED     seed of the kill moments (default: random, printed)

Long mode: FENCEGATE_CRASH_ROUNDS=500 /usr/bin/python3 -m pytest -q -s \
    tests/integration/test_crash.py --fencegate=build/app/fencegate

The moment of each kill is chosen by the seed as a number of writes
acknowledged in the round (0 = right after start), so the test waits on a
condition, never on a timer, and the kill always lands while every writer
has a request in flight.
"""

import os
import random
import signal
import threading

import pytest

from fg_helpers import ConnectionClosed, RawConnection, admin_key_path

ROUNDS = int(os.environ.get("FENCEGATE_CRASH_ROUNDS", "20"))
KEYS = 64
WRITERS = 16
MAX_ACKS_BEFORE_KILL = 400


def key_path(i):
    return f"/objects/crash-{i:03d}"


class History:
    """What the clients were told. acked[key] = highest token acknowledged
    with a 2xx; count = acknowledged writes in all."""

    def __init__(self):
        self.lock = threading.Condition()
        self.acked = {}            # guarded by lock
        self.count = 0             # guarded by lock
        self.round_count = 0       # guarded by lock
        self.unexpected = []       # guarded by lock: answers that must not happen

    def ack(self, key, token):
        with self.lock:
            if token > self.acked.get(key, -1):
                self.acked[key] = token
            self.count += 1
            self.round_count += 1
            self.lock.notify_all()

    def wait_round_acks(self, n, timeout):
        with self.lock:
            ok = self.lock.wait_for(lambda: self.round_count >= n, timeout)
            assert ok, f"only {self.round_count} writes acknowledged within {timeout}s, want {n}"

    def new_round(self):
        with self.lock:
            self.round_count = 0


def find_violations(acked, stored, probes):
    """The checker. acked: {key: highest acknowledged token}; stored: {key:
    token read back after the restart, or None when the key is unknown};
    probes: {key: HTTP status of a write with token acked-1}. Returns one
    line per broken promise."""
    out = []
    for key, token in sorted(acked.items()):
        got = stored.get(key)
        if got is None or got < token:
            out.append(f"{key}: acknowledged token {token}, stored {got}")
        if token >= 1 and key in probes and probes[key] != 409:
            out.append(f"{key}: write with token {token - 1} < acknowledged {token} "
                       f"answered {probes[key]}, want 409")
    return out


class Writers:
    """WRITERS threads, each owning KEYS/WRITERS keys, sending fenced PUTs
    over keep-alive connections as fast as fencegate answers. Tokens per
    key only go up, across rounds, whether or not a write was answered."""

    def __init__(self, history, next_token):
        self.history = history
        self.next_token = next_token  # key -> next token to send (persists)
        self.stop = threading.Event()
        self.threads = []

    def run(self, addr):
        self.stop.clear()
        self.threads = [threading.Thread(target=self._loop, args=(w, addr), daemon=True)
                        for w in range(WRITERS)]
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a writer thread did not stop"

    def _loop(self, w, addr):
        keys = [key_path(i) for i in range(w, KEYS, WRITERS)]
        conn = None
        n = 0
        while not self.stop.is_set():
            key = keys[n % len(keys)]
            n += 1
            token = self.next_token[key]
            self.next_token[key] = token + 1
            try:
                if conn is None:
                    conn = RawConnection(addr, timeout=10)
                conn.send("PUT", key, [("Fencing-Token", str(token))], f"w{token}", close=False)
                r = conn.read_response("PUT")
            except (OSError, ConnectionClosed, AssertionError):
                if conn is not None:
                    conn.close()
                conn = None
                continue  # killed mid-request: the outcome is unknown, not acknowledged
            if 200 <= r.status < 300:
                self.history.ack(key, token)
            elif r.status != 503:  # 503 is fail-closed, allowed; 409 is not: tokens only go up
                with self.history.lock:
                    self.history.unexpected.append(f"{key} token {token}: {r.status} {r.body[:200]!r}")
            if r.header("Connection") == "close":
                conn.close()
                conn = None
        if conn is not None:
            conn.close()


def read_back(gate, history):
    """Admin GET of every acknowledged key, and a write one below each
    acknowledged token (which must be refused)."""
    with history.lock:
        acked = dict(history.acked)
    stored, probes = {}, {}
    for key, token in acked.items():
        r = gate.admin_get(admin_key_path(key))
        stored[key] = r.json()["token"] if r.status == 200 else None
        if token >= 1:
            p = gate.put(key, token - 1, body=b"stale-probe")
            probes[key] = p.status
    return acked, stored, probes


def crash_rounds(gate, rounds, rng, history, next_token):
    writers = Writers(history, next_token)
    violations = []
    for _ in range(rounds):
        target = rng.randint(0, MAX_ACKS_BEFORE_KILL)
        history.new_round()
        writers.run(gate.proxy)
        history.wait_round_acks(target, timeout=120)
        gate.stop(sig=signal.SIGKILL)          # while every writer has a write in flight
        writers.join()
        gate.start()                           # same config, same data dir
        acked, stored, probes = read_back(gate, history)
        violations += find_violations(acked, stored, probes)
    return violations


# Under async durability a write that finds the store idle is decided and
# its WAL record appended on the I/O thread itself (storage/rocksdb_store.h):
# the record is in the page cache before the write is forwarded, so a SIGKILL
# loses nothing acknowledged there either.
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_acknowledged_writes_survive_sigkill(make_gate, backend, tmp_path, capsys, durability):
    seed = int(os.environ.get("FENCEGATE_CRASH_SEED", str(random.randrange(2**32))))
    rng = random.Random(seed)
    data = tmp_path / "crash-data"
    gate = make_gate(name="crash", threads=2, data_dir=data,
                     storage={"engine": "rocksdb", "path": str(data), "durability": durability})
    history = History()
    next_token = {key_path(i): 1 for i in range(KEYS)}

    violations = crash_rounds(gate, ROUNDS, rng, history, next_token)

    probes_forwarded = [r for r in backend.log() if r["body"] == "stale-probe"]
    summary = (f"crash test ({durability}): seed={seed} crashes={ROUNDS} keys={KEYS} writers={WRITERS} "
               f"acknowledged_writes_checked={history.count} violations={len(violations)} "
               f"stale_probes_forwarded={len(probes_forwarded)} "
               f"unexpected_answers={len(history.unexpected)}")
    with capsys.disabled():
        print("\n" + summary)
    assert history.count > 0, "no write was ever acknowledged"
    assert violations == [], summary + "\n" + "\n".join(violations[:20])
    assert probes_forwarded == [], f"{summary}\nstale writes reached the backend: {probes_forwarded[:5]}"
    assert history.unexpected == [], summary + "\n" + "\n".join(history.unexpected[:20])


# --- the checker can fail ----------------------------------------------------

def test_checker_flags_a_fabricated_bad_history():
    acked = {"/a": 10, "/b": 7, "/c": 3}
    assert find_violations(acked, {"/a": 10, "/b": 9, "/c": 3},
                           {"/a": 409, "/b": 409, "/c": 409}) == []
    bad = find_violations(acked, {"/a": 9, "/b": None, "/c": 3},
                          {"/a": 409, "/b": 409, "/c": 201})
    assert bad == ["/a: acknowledged token 10, stored 9",
                   "/b: acknowledged token 7, stored None",
                   "/c: write with token 2 < acknowledged 3 answered 201, want 409"]


def test_checker_catches_a_store_that_lost_its_data(make_gate, backend, tmp_path, capsys):
    """The same rounds, but the restart comes up on an EMPTY data dir, as a
    store that lost everything would: the checker must report it."""
    gate = make_gate(name="lossy", threads=2)
    history = History()
    next_token = {key_path(i): 1 for i in range(KEYS)}
    writers = Writers(history, next_token)
    writers.run(gate.proxy)
    history.wait_round_acks(50, timeout=120)
    gate.stop(sig=signal.SIGKILL)
    writers.join()

    lost = make_gate(name="lossy-restarted", threads=2, data_dir=tmp_path / "empty-data")
    acked, stored, probes = read_back(lost, history)
    violations = find_violations(acked, stored, probes)
    with capsys.disabled():
        print(f"\ncrash checker on a store that lost its data: acknowledged_writes_checked="
              f"{history.count} violations={len(violations)} (must be > 0)")
    assert len(violations) >= len(acked), violations[:5]
