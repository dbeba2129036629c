"""`fencegate export` and `fencegate import` through the real binary: back
up a fence, move it to another data dir or engine, never lower a token,
refuse bad input with its line number and apply nothing; export the etcd
engine beside the replica that uses it."""

import base64
import json
import subprocess
import urllib.parse
import urllib.request

from fg_helpers import ETCD_TIMERS, IO_TIMEOUT, START_TIMEOUT, admin_key_path, assert_json_error


# The line of the key a store holds once its keys entered the tree of paths.
MARKER = '{"key":"\\u0000!tree-entered","token":1}\n'


def tool(binary, *args, stdin=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, input=stdin,
                          timeout=START_TIMEOUT)


def stored(gate, key):
    r = gate.admin_get(admin_key_path(key))
    return r.json()["token"] if r.status == 200 else None


def test_export_then_import_moves_the_fence(make_gate, fencegate_bin, tmp_path):
    src = make_gate(name="src")
    for key, token in [("/objects/b", 20), ("/objects/a", 10), ("/objects/c", 5)]:
        r = src.put(key, token)
        assert 200 <= r.status < 300, r

    # While fencegate runs it holds the store: export says to stop it.
    p = tool(fencegate_bin, "export", "--config", src.config_path)
    assert p.returncode == 1, p
    assert "stop the fencegate that uses it first" in p.stderr, p.stderr
    assert p.stdout == ""

    assert src.stop() == 0
    p = tool(fencegate_bin, "export", "--config", src.config_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # The store's marker (its keys entered the tree), the keys, then the
    # paths of the tree that the writes left (a PUT may replace a
    # collection: a subtree write).
    assert [json.loads(x) for x in lines] == [
        {"key": "\0!tree-entered", "token": 1},
        {"key": "/objects/a", "token": 10},
        {"key": "/objects/b", "token": 20},
        {"key": "/objects/c", "token": 5},
        {"path": "/objects/a", "key": "/objects/a", "token": 10, "subtree": 10},
        {"path": "/objects/b", "key": "/objects/b", "token": 20, "subtree": 20},
        {"path": "/objects/c", "key": "/objects/c", "token": 5, "subtree": 5},
    ]
    assert "3 keys and 3 paths" in p.stderr, p.stderr
    backup = tmp_path / "backup.jsonl"
    p = tool(fencegate_bin, "export", "--config", src.config_path, "--output", str(backup))
    assert p.returncode == 0, p.stderr
    assert backup.read_text().splitlines() == lines

    # A newer target: import raises what is lower, keeps what is higher.
    dst = make_gate(name="dst")
    assert 200 <= dst.put("/objects/b", 99).status < 300
    assert dst.stop() == 0
    p = tool(fencegate_bin, "import", "--config", dst.config_path, "--input", str(backup))
    assert p.returncode == 0, p.stderr
    assert "7 records" in p.stderr and "1 already higher" in p.stderr, p.stderr
    assert "3 paths of the tree" in p.stderr, p.stderr

    dst.start()
    assert stored(dst, "/objects/a") == 10
    assert stored(dst, "/objects/b") == 99, "import must never lower a token"
    assert stored(dst, "/objects/c") == 5
    assert_json_error(dst.put("/objects/a", 9), 409, "stale_token")
    assert 200 <= dst.put("/objects/a", 10).status < 300


def test_import_from_stdin_and_hex_keys(make_gate, fencegate_bin):
    gate = make_gate(name="stdin", start=False)
    data = '{"key":"/objects/x","token":18446744073709551615}\n\n{"key_hex":"2f6f626a656374732f79","token":3}\n'
    p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", "-", stdin=data)
    assert p.returncode == 0, p.stderr
    gate.start()
    assert stored(gate, "/objects/x") == 18446744073709551615
    assert stored(gate, "/objects/y") == 3
    assert gate.stop() == 0
    p = tool(fencegate_bin, "export", "--config", gate.config_path)
    # Keys from a file without the marker entered the tree as they came.
    assert p.stdout.splitlines() == [
        MARKER.strip(),
        '{"key":"/objects/x","token":18446744073709551615}',
        '{"key":"/objects/y","token":3}',
        '{"path":"/objects/x","key":"/objects/x","token":18446744073709551615}',
        '{"path":"/objects/y","key":"/objects/y","token":3}']


def test_bad_line_names_its_number_and_applies_nothing(make_gate, fencegate_bin, tmp_path):
    gate = make_gate(name="bad", start=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key":"/objects/ok","token":5}\n{"key":"/objects/neg","token":-1}\n')
    p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", str(bad))
    assert p.returncode == 2, p
    assert "line 2" in p.stderr and "negative" in p.stderr and "nothing was imported" in p.stderr, \
        p.stderr
    gate.start()
    assert stored(gate, "/objects/ok") is None, "a bad file must apply nothing"


def test_export_of_a_missing_store_creates_nothing(make_gate, fencegate_bin, tmp_path):
    gate = make_gate(name="none", start=False, data_dir=tmp_path / "does-not-exist")
    p = tool(fencegate_bin, "export", "--config", gate.config_path)
    assert p.returncode == 1
    assert "no token store" in p.stderr, p.stderr
    assert not (tmp_path / "does-not-exist").exists()


def test_plain_run_and_check_are_unchanged(make_gate, fencegate_bin):
    gate = make_gate(name="plain", start=False)
    p = tool(fencegate_bin, "--config", gate.config_path, "--check")
    assert p.returncode == 0 and "configuration OK" in p.stdout, p
    p = tool(fencegate_bin, "export", "--config", gate.config_path, "--check")
    assert p.returncode == 2, p


def etcd_storage(etcd, prefix):
    return {"engine": "etcd", "etcd": {"endpoints": [etcd.url], "prefix": prefix, **ETCD_TIMERS}}


def etcd_put(etcd, key, value):
    body = json.dumps({"key": base64.b64encode(key).decode(),
                       "value": base64.b64encode(value).decode()}).encode()
    req = urllib.request.Request(f"{etcd.url}/v3/kv/put", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
        assert r.status == 200


def etcd_revision(etcd):
    body = json.dumps({"key": base64.b64encode(b"\0").decode(), "limit": "1"}).encode()
    req = urllib.request.Request(f"{etcd.url}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=IO_TIMEOUT) as r:
        return int(json.loads(r.read())["header"]["revision"])


def test_etcd_max_batch_is_the_keys_per_transaction(make_gate, fencegate_bin, etcd):
    """Import queues many raises at once: each transaction that writes is
    one etcd revision, so the revisions count the transactions."""
    # The file says its keys entered the tree (the marker line), so the
    # import raises the keys and nothing else.
    records = MARKER + "".join(json.dumps({"key": f"/objects/{i}", "token": 1}) + "\n"
                               for i in range(200))
    counted = {}
    for max_batch in (1, 40):
        storage = etcd_storage(etcd, f"fg-batch-{max_batch}/")
        storage["etcd"]["max_batch"] = max_batch
        gate = make_gate(name=f"batch-{max_batch}", start=False, storage=storage)
        # A new store enters the tree (it has nothing to enter) before the
        # first import into it.
        p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", "-",
                 stdin=MARKER)
        assert p.returncode == 0, p.stderr
        before = etcd_revision(etcd)
        p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", "-",
                 stdin=records)
        assert p.returncode == 0, p.stderr
        counted[max_batch] = etcd_revision(etcd) - before
    assert counted[1] == 200, counted
    assert counted[40] < 200 // 4, counted


def test_export_from_etcd_imports_into_rocksdb_and_another_prefix(make_gate, fencegate_bin,
                                                                   etcd, tmp_path):
    src = make_gate(name="etcd-src", storage=etcd_storage(etcd, "fg-src/"))
    advanced = {"/objects/a": 10, "/objects/b": 20, "/objects/\u00e9t\u00e9": 7,
                "/objects/z": 18446744073709551615}
    for key, token in advanced.items():
        r = src.put(urllib.parse.quote(key), token)
        assert 200 <= r.status < 300, r
    # More keys than one range read of the export holds (1000).
    bulk = {f"/bulk/{i:05d}": i for i in range(2500)}
    lines = "".join(json.dumps({"key": k, "token": t}) + "\n" for k, t in bulk.items())
    p = tool(fencegate_bin, "import", "--config", src.config_path, "--input", "-", stdin=lines)
    assert p.returncode == 0, p.stderr

    # The etcd engine is exported while the replica that uses it runs.
    p = tool(fencegate_bin, "export", "--config", src.config_path)
    assert p.returncode == 0, p.stderr
    want = sorted({**advanced, **bulk, "\0!tree-entered": 1}.items(),
                  key=lambda kv: kv[0].encode())
    paths = sorted(advanced.items(), key=lambda kv: kv[0].encode())
    assert [json.loads(x) for x in p.stdout.splitlines()] == \
        [{"key": k, "token": t} for k, t in want] + \
        [{"path": k, "key": k, "token": t, "subtree": t} for k, t in paths]
    assert f"{len(want) - 1} keys and {len(paths)} paths" in p.stderr, p.stderr  # not the marker
    backup = tmp_path / "etcd-backup.jsonl"
    backup.write_text(p.stdout)

    # Imported into a fresh rocksdb store and into another etcd prefix, each
    # exports the very same lines.
    rocks = make_gate(name="rocks-dst", start=False)
    other = make_gate(name="etcd-dst", start=False, storage=etcd_storage(etcd, "fg-dst/"))
    for gate in (rocks, other):
        p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", str(backup))
        assert p.returncode == 0, p.stderr
        assert f"{len(want) + len(paths)} records" in p.stderr, p.stderr
        p = tool(fencegate_bin, "export", "--config", gate.config_path)
        assert p.returncode == 0, p.stderr
        assert p.stdout == backup.read_text()
    for gate in (rocks, other):
        gate.start()
        assert stored(gate, "/objects/b") == 20
        assert_json_error(gate.put("/objects/a", 9), 409, "stale_token", current=10)


def test_export_from_etcd_names_a_damaged_value(make_gate, fencegate_bin, etcd):
    gate = make_gate(name="etcd-damaged", start=False, storage=etcd_storage(etcd, "fg-bad/"))
    p = tool(fencegate_bin, "import", "--config", gate.config_path, "--input", "-",
             stdin='{"key":"/objects/a","token":1}\n{"key":"/objects/c","token":3}\n')
    assert p.returncode == 0, p.stderr
    etcd_put(etcd, b"fg-bad/t//objects/b", b"12")
    p = tool(fencegate_bin, "export", "--config", gate.config_path)
    assert p.returncode == 1, p
    assert "etcd key 'fg-bad/t//objects/b' holds '12', not a token" in p.stderr, p.stderr
