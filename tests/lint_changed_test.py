"""Which sources clang-tidy reads for a change (tests/lint_changed.py), on a
small git tree made here: a changed source, a source behind a chain of
headers, a folder's build file, the checks' own files, and the bases.

    python3 -m pytest -q tests/lint_changed_test.py
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "lint_changed.py")
HOUR = 3600


def git(tree, *args, when=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{when} +0000"
    return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True,
                          text=True, env=env).stdout


def write(tree, path, text):
    full = tree / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


FILES = {
    "CMakeLists.txt": "project(x)\n",
    ".clang-tidy": "Checks: '-*'\n",
    "net/CMakeLists.txt": "add_library(n)\n",
    "net/low.h": "#pragma once\n",
    "net/mid.h": '#pragma once\n#include "net/low.h"\n',
    "net/a.cc": '#include "net/mid.h"\n',
    "net/mid.cc": '#include "net/mid.h"\n',
    "net/b.cc": "int b;\n",
    "proxy/CMakeLists.txt": "add_library(p)\n",
    "proxy/top.h": '#pragma once\n#include <net/mid.h>\n',
    "proxy/c.cc": '#include "proxy/top.h"\n',
    "proxy/d.cc": "int d;\n",
}
SOURCES = ["net/a.cc", "net/b.cc", "net/mid.cc", "proxy/c.cc", "proxy/d.cc"]
T0 = 1_700_000_000


@pytest.fixture
def tree(tmp_path):
    git(tmp_path, "init", "-q")
    for path, text in FILES.items():
        write(tmp_path, path, text)
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "first", when=T0)
    return tmp_path


def selected(tree, base=None):
    env = dict(os.environ)
    env.pop("FENCEGATE_TIDY_BASE", None)
    if base is not None:
        env["FENCEGATE_TIDY_BASE"] = base
    stdin = "".join(f"{tree / s}\n" for s in SOURCES)
    out = subprocess.run([sys.executable, SCRIPT, "--root", str(tree)], input=stdin,
                         capture_output=True, text=True, check=True, env=env).stdout
    return sorted(os.path.relpath(line, tree) for line in out.splitlines())


def test_nothing_changed_reads_nothing(tree):
    assert selected(tree, base="HEAD") == []


def test_a_changed_source_alone(tree):
    write(tree, "net/b.cc", "int b = 1;\n")
    assert selected(tree, base="HEAD") == ["net/b.cc"]


def test_a_header_is_read_through_one_source_that_reaches_it(tree):
    # low.h <- mid.h <- a.cc and mid.cc, and mid.h <- top.h (spelled <...>) <- c.cc:
    # low.h has no source of its own, and a.cc is the first that reaches it.
    write(tree, "net/low.h", "#pragma once\nint low;\n")
    assert selected(tree, base="HEAD") == ["net/a.cc"]


def test_a_header_is_read_through_its_own_source(tree):
    write(tree, "net/mid.h", FILES["net/mid.h"] + "int mid;\n")
    assert selected(tree, base="HEAD") == ["net/mid.cc"]


def test_a_changed_source_that_reaches_the_header_reads_it(tree):
    write(tree, "net/low.h", "#pragma once\nint low;\n")
    write(tree, "proxy/c.cc", FILES["proxy/c.cc"] + "int c;\n")
    assert selected(tree, base="HEAD") == ["proxy/c.cc"]


def test_a_new_untracked_header_and_its_includer(tree):
    write(tree, "proxy/new.h", "#pragma once\n")
    write(tree, "proxy/d.cc", '#include "proxy/new.h"\n')
    assert selected(tree, base="HEAD") == ["proxy/d.cc"]


def test_a_folders_build_file_reads_that_folder(tree):
    write(tree, "proxy/CMakeLists.txt", "add_library(p)\nadd_compile_definitions(X)\n")
    assert selected(tree, base="HEAD") == ["proxy/c.cc", "proxy/d.cc"]


def test_the_checks_read_everything(tree):
    write(tree, ".clang-tidy", FILES[".clang-tidy"] + "# changed\n")
    assert selected(tree, base="HEAD") == sorted(SOURCES)


def test_the_top_build_file_alone_reads_nothing(tree):
    write(tree, "CMakeLists.txt", FILES["CMakeLists.txt"] + "# changed\n")
    assert selected(tree, base="HEAD") == []


def test_without_a_base_the_commits_of_the_last_hours_are_the_change(tree):
    # A commit a day after the first, then two within the window before HEAD.
    write(tree, "net/b.cc", "int b = 1;\n")
    git(tree, "commit", "-qam", "old", when=T0 + 24 * HOUR)
    write(tree, "proxy/d.cc", "int d = 1;\n")
    git(tree, "commit", "-qam", "recent", when=T0 + 40 * HOUR)
    write(tree, "net/low.h", "#pragma once\nint low;\n")
    git(tree, "commit", "-qam", "head", when=T0 + 42 * HOUR)
    assert selected(tree) == ["net/a.cc", "proxy/d.cc"]


def test_without_an_older_commit_everything_since_the_first(tree):
    write(tree, "net/b.cc", "int b = 1;\n")
    git(tree, "commit", "-qam", "soon after", when=T0 + HOUR)
    assert selected(tree) == ["net/b.cc"]


def test_a_shallow_clone_reads_everything(tree, tmp_path):
    write(tree, "net/b.cc", "int b = 1;\n")
    git(tree, "commit", "-qam", "second", when=T0 + 24 * HOUR)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{tree}", str(shallow)],
                   check=True, capture_output=True)
    assert selected(shallow) == sorted(SOURCES)
