"""Secrets outside the configuration file (docs/operations.md, "Secrets").
The admin bearer token from a file (admin.token_file) or an environment
variable (admin.token_env): an admin fence works with it and is 401 with
another; --check refuses a file it cannot use, an unset variable and two
sources at once, naming file, line and field. The etcd password from
storage.etcd.password_file, read by the same rules, against a real etcd
with authentication on."""

import pathlib
import shutil
import subprocess

import pytest

from fg_helpers import (ADMIN_TOKEN, ETCD_TIMERS, admin_key_path, assert_json_error, default_config,
                        write_config)

VARIABLE = "FENCEGATE_TEST_ADMIN_TOKEN"


def fence_with(gate, bearer, key="/objects/s", token=7):
    return gate.admin_post(admin_key_path(key) + "/fence", {"token": token}, bearer=bearer)


def assert_only_the_secret_opens(gate, secret):
    assert_json_error(fence_with(gate, ADMIN_TOKEN), 401, "unauthorized")
    assert_json_error(fence_with(gate, secret + "x"), 401, "unauthorized")
    assert_json_error(fence_with(gate, None), 401, "unauthorized")
    r = fence_with(gate, secret)
    assert r.status == 200 and r.json() == {"key": "/objects/s", "token": 7}, r
    assert_json_error(gate.put("/objects/s", 6), 409, "stale_token", current=7)


def test_admin_token_from_a_file(make_gate, tmp_path):
    secret_file = tmp_path / "admin-token"
    secret_file.write_text("file-secret\n")  # the newline is not part of the token
    secret_file.chmod(0o600)
    gate = make_gate(admin={"listen": "127.0.0.1:0", "token_file": str(secret_file)})
    assert_only_the_secret_opens(gate, "file-secret")


def test_admin_token_from_the_environment(make_gate, monkeypatch):
    monkeypatch.setenv(VARIABLE, "env-secret")  # the gate inherits the environment
    gate = make_gate(admin={"listen": "127.0.0.1:0", "token_env": VARIABLE})
    assert_only_the_secret_opens(gate, "env-secret")


def check(fencegate_bin, tmp_path, backend, admin, env=None):
    cfg = default_config(backend.port, tmp_path / "data", admin=admin)
    path = pathlib.Path(write_config(tmp_path / "check.yaml", cfg))
    r = subprocess.run([fencegate_bin, "--config", str(path), "--check"], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL, env=env)
    lines = path.read_text().splitlines()
    return r, path, lines


def line_of(lines, field):
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(field + ":"))


def test_check_refuses_an_unset_or_empty_variable(fencegate_bin, tmp_path, backend,
                                                  monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    r, path, lines = check(fencegate_bin, tmp_path, backend, {"token_env": VARIABLE})
    assert r.returncode == 2, r
    assert (f"{path}:{line_of(lines, 'token_env')}: field 'admin.token_env': the environment "
            f"variable {VARIABLE} is not set") in r.stderr, r.stderr
    monkeypatch.setenv(VARIABLE, "")
    r, path, _ = check(fencegate_bin, tmp_path, backend, {"token_env": VARIABLE})
    assert r.returncode == 2 and f"variable {VARIABLE} is empty" in r.stderr, r
    monkeypatch.setenv(VARIABLE, "set")
    r, _, _ = check(fencegate_bin, tmp_path, backend, {"token_env": VARIABLE})
    assert r.returncode == 0, r


def test_check_refuses_a_missing_or_empty_file(fencegate_bin, tmp_path, backend):
    missing = tmp_path / "no-such-token"
    r, path, lines = check(fencegate_bin, tmp_path, backend, {"token_file": str(missing)})
    assert r.returncode == 2, r
    assert (f"{path}:{line_of(lines, 'token_file')}: field 'admin.token_file': cannot read "
            f"'{missing}': No such file or directory") in r.stderr, r.stderr
    missing.write_text("\n")
    r, _, _ = check(fencegate_bin, tmp_path, backend, {"token_file": str(missing)})
    assert r.returncode == 2 and f"'{missing}' is empty" in r.stderr, r


def test_check_refuses_two_sources(fencegate_bin, tmp_path, backend):
    r, path, lines = check(fencegate_bin, tmp_path, backend,
                           {"token": "inline", "token_env": VARIABLE})
    assert r.returncode == 2, r
    assert (f"{path}:{line_of(lines, 'token_env')}: field 'admin.token_env': conflicts with "
            f"token on line {line_of(lines, 'token')}") in r.stderr, r.stderr


def etcdctl(etcd, *args):
    r = subprocess.run([shutil.which("etcdctl") or "/usr/bin/etcdctl", "--endpoints", etcd.url,
                        *args], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"etcdctl {args}: {r.stderr}"


def etcd_storage(etcd, password_file):
    return {"engine": "etcd",
            "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-secrets/", **ETCD_TIMERS,
                     "username": "root", "password_file": str(password_file)}}


@pytest.mark.skipif(shutil.which("etcd") is None and not pathlib.Path("/usr/bin/etcd").exists(),
                    reason="needs etcd")
def test_etcd_password_from_a_file(make_gate, fencegate_bin, backend, etcd, tmp_path):
    etcdctl(etcd, "user", "add", "root:etcd-secret", "--interactive=false")
    etcdctl(etcd, "auth", "enable")
    password = tmp_path / "etcd-password"
    password.write_text("etcd-secret\n")  # the newline is not part of the password
    gate = make_gate(name="right", storage=etcd_storage(etcd, password))
    r = gate.put("/objects/p", 5)
    assert 200 <= r.status < 300, f"with the right password: {r}"
    assert_json_error(gate.put("/objects/p", 4), 409, "stale_token", current=5)

    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-it\n")
    other = make_gate(name="wrong", storage=etcd_storage(etcd, wrong))
    assert_json_error(other.put("/objects/p", 6), 503, "store_unavailable")

    # An empty file stops the start, naming the field and its line.
    empty = tmp_path / "empty-password"
    empty.write_text("\n")
    cfg = default_config(backend.port, tmp_path / "data", storage=etcd_storage(etcd, empty))
    path = pathlib.Path(write_config(tmp_path / "empty.yaml", cfg))
    line = line_of(path.read_text().splitlines(), "password_file")
    r = subprocess.run([fencegate_bin, "--config", str(path)], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r
    assert (f"{path}:{line}: field 'storage.etcd.password_file': '{empty}' is empty"
            in r.stderr), r.stderr
