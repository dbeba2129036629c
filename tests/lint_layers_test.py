"""The layers check (tests/lint_layers.py) on a copy of the product folders:
clean as the tree is, and failing on each kind of planted crossing.

    python3 -m pytest -q tests/lint_layers_test.py
"""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import lint_layers  # noqa: E402


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The tracked files of the product folders, copied into a git tree."""
    base = tmp_path_factory.mktemp("layers")
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "--"] + sorted(lint_layers.ALLOWED),
                           check=True, capture_output=True, text=True).stdout.splitlines()
    for path in files:
        src = os.path.join(ROOT, path)
        if not os.path.exists(src):
            continue
        os.makedirs(os.path.join(base, os.path.dirname(path)), exist_ok=True)
        shutil.copyfile(src, os.path.join(base, path))
    subprocess.run(["git", "init", "-q", str(base)], check=True)
    subprocess.run(["git", "-C", str(base), "add", "-A"], check=True)
    return base


@pytest.fixture
def tree(pristine, tmp_path):
    dst = tmp_path / "tree"
    shutil.copytree(pristine, dst, symlinks=True)
    return dst


def run(tree):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "lint_layers.py"), "--root", str(tree)],
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout


def plant(tree, path, text, new=False):
    full = os.path.join(tree, path)
    if new:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
        subprocess.run(["git", "-C", str(tree), "add", path], check=True)
        return
    with open(full, encoding="utf-8") as f:
        body = f.read()
    with open(full, "w", encoding="utf-8") as f:
        f.write(text + body)


def test_the_tree_as_it_is_passes(tree):
    rc, out = run(tree)
    assert (rc, out) == (0, "")


def test_an_upward_include_fails(tree):
    plant(tree, "storage/rocksdb_store.cc", '#include "proxy/http_session.h"\n')
    rc, out = run(tree)
    assert rc == 1
    assert 'storage/rocksdb_store.cc:1: [layer] #include "proxy/http_session.h": storage/ may not include proxy/' in out


def test_a_sideways_include_between_listeners_fails(tree):
    plant(tree, "locks/lock_server.cc", '#include "proxy/upstream_pool.h"\n')
    rc, out = run(tree)
    assert rc == 1
    assert "locks/lock_server.cc:1: [layer]" in out


def test_an_upward_link_fails(tree):
    with open(os.path.join(tree, "storage/CMakeLists.txt"), "a", encoding="utf-8") as f:
        f.write("\ntarget_link_libraries(fencegate_storage PRIVATE fencegate_net)\n")
    rc, out = run(tree)
    assert rc == 1
    assert "[layer] fencegate_storage links fencegate_net: storage/ may not use net/" in out


def test_a_narrow_edge_admits_only_its_header(tree):
    plant(tree, "fence/classify.cc", '#include "net/listener.h"\n')
    rc, out = run(tree)
    assert rc == 1
    assert 'fence/classify.cc:1: [narrow] #include "net/listener.h": fence/ may include only net/replies.h' in out


def test_a_socket_header_in_fence_fails(tree):
    plant(tree, "fence/key_queue.cc", "#include <boost/asio/ip/tcp.hpp>\n")
    rc, out = run(tree)
    assert rc == 1
    assert "fence/key_queue.cc:1: [socket]" in out


def test_a_relative_include_fails(tree):
    plant(tree, "proxy/http_session.cc", '#include "../fence/classify.h"\n')
    rc, out = run(tree)
    assert rc == 1
    assert "proxy/http_session.cc:1: [path]" in out


def test_a_cycle_fails(tree, monkeypatch, capsys):
    # A table that allows both directions: only the cycle rule can catch it.
    plant(tree, "config/config.cc", '#include "tls/tls_context.h"\n')
    table = dict(lint_layers.ALLOWED, config={"tls"})
    monkeypatch.setattr(lint_layers, "ALLOWED", table)
    assert lint_layers.main(str(tree)) == 1
    out = capsys.readouterr().out
    assert "[cycle] the folders include each other in a cycle: config -> tls -> config" in out
    assert "[layer]" not in out
