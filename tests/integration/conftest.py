"""Fixtures for the integration tests: the real fencegate binary in front of
the recording backend, everything on 127.0.0.1 with kernel-chosen ports and
per-test temporary directories."""

import os

import pytest

from fg_helpers import Backend, Fencegate, default_config, write_config
from fencegate_proc import Etcd, Processes  # after fg_helpers, which puts it on the path


def pytest_addoption(parser):
    parser.addoption("--fencegate", action="store", default=os.environ.get("FENCEGATE_BIN"),
                     help="path to the fencegate binary (or set FENCEGATE_BIN)")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def fencegate_bin(pytestconfig):
    path = pytestconfig.getoption("--fencegate")
    if not path:
        pytest.fail("no fencegate binary: pass --fencegate=PATH or set FENCEGATE_BIN")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"fencegate binary not found or not executable: {path}")
    return os.path.abspath(path)


@pytest.fixture
def backend(tmp_path):
    b = Backend(str(tmp_path))
    yield b
    b.stop()


@pytest.fixture
def make_gate(request, fencegate_bin, backend, tmp_path):
    """Factory: make_gate(cfg_overrides..., extra_args=(), name=..., start=True).
    Every gate it made is stopped at teardown; when the test failed, the
    tail of each gate's stderr is printed."""
    gates = []

    def make(extra_args=(), name=None, start=True, data_dir=None, **overrides):
        name = name or f"fencegate{len(gates)}"
        data = data_dir or (tmp_path / f"{name}-data")
        cfg = default_config(backend.port, data, **overrides)
        path = write_config(tmp_path / f"{name}.yaml", cfg)
        g = Fencegate(fencegate_bin, path, str(tmp_path), extra_args, name)
        gates.append(g)
        if start:
            g.start()
        return g

    yield make

    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for g in gates:
        if failed:
            print(f"--- {g.name} stderr (last lines) ---\n{g.stderr_tail()}")
        # Cleanup only: a short grace, then SIGKILL. Clean shutdown on SIGTERM
        # is asserted where it matters (restart, test_shutdown.py).
        try:
            g.stop(timeout=5)
        except AssertionError as e:  # it was killed; report, do not mask the test
            print(f"teardown: {e}")
    # A sanitizer build reports on stderr (and may exit 0): make it a failure.
    reports = [f"{g.name}: {line}" for g in gates for line in g.sanitizer_reports()]
    if reports:
        pytest.fail("sanitizer report on fencegate's stderr:\n" + "\n".join(reports[:20]))


@pytest.fixture
def gate(make_gate):
    """fencegate with the default config: route 'objects' on /objects/,
    enforce mode, admin on with a token."""
    return make_gate(name="fencegate")


@pytest.fixture
def etcd(tmp_path):
    """One etcd member (fencegate_proc.Etcd), stopped at teardown."""
    procs = Processes()
    member = Etcd(procs, str(tmp_path / "etcd"), str(tmp_path / "etcd.stderr")).start()
    yield member
    procs.stop_all()
