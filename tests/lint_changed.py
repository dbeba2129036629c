#!/usr/bin/env python3
"""Which sources a change touches, for clang-tidy over a change
(tests/lint.sh tidy-change).

Reads candidate sources (absolute paths, one a line) on standard input and
prints those that the change touches: each source that changed, and for each
header that changed one source that includes it, directly or through other
project headers (clang-tidy reports a header's findings through any source
that includes it: HeaderFilterRegex). That source is, first of these: a
changed source that includes it, the header's own source (fence/x.cc for
fence/x.h), the first in name order. An unchanged source's own lines are
the full mode's to read.
Every candidate is printed when the change touches the checks themselves
(.clang-tidy); every candidate of a folder, when that folder's
CMakeLists.txt changed (its sources' definitions and options). A change to
the build's top (compile flags of every source) or to the lint scripts
reads what else it touches: the full mode (tests/lint.sh tidy, weekly, in
tests/long.sh) covers every source whatever changed.

The change is what lies between a base commit and the work tree (commits,
staged and unstaged edits and new files alike). The base is, first of
these that applies:
  - $FENCEGATE_TIDY_BASE, any commit git can name;
  - the merge base with the branch's upstream, when HEAD is ahead of it;
  - the last commit made three hours or more before HEAD (by committer
    date): the work of the hours that end at HEAD, which in a fresh clone
    of the main branch holds the submission that landed last, whatever its
    number of commits (a working session lasts at most three hours; a
    rebase or a merge dates its commits anew);
  - the repository's first commit, when nothing is that old.
A shallow clone cannot tell what changed: every candidate is printed.

    python3 tests/lint_changed.py --root . < sources.txt
    python3 tests/lint_changed.py --root . --explain < sources.txt   # the base and the changed files, on stderr
"""

import argparse
import os
import re
import subprocess
import sys

CHECK_FILES = {".clang-tidy"}
HEADER = re.compile(r'\.(h|hh|hpp)$')
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
WINDOW_S = 3 * 3600


def git(root, *args):
    return subprocess.run(["git", "-C", root, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def base_commit(root):
    named = os.environ.get("FENCEGATE_TIDY_BASE", "")
    if named:
        return git(root, "rev-parse", "--verify", named + "^{commit}"), "FENCEGATE_TIDY_BASE"
    try:
        upstream = git(root, "merge-base", "HEAD", "@{upstream}")
        if upstream and upstream != git(root, "rev-parse", "HEAD"):
            return upstream, "the merge base with the upstream branch"
    except subprocess.CalledProcessError:
        pass  # no upstream: a detached HEAD, or a branch that tracks nothing
    head_time = int(git(root, "log", "-1", "--format=%ct", "HEAD"))
    older = git(root, "rev-list", "-1", f"--before={head_time - WINDOW_S}", "HEAD")
    if older:
        return older, "the last commit three hours or more before HEAD"
    first = git(root, "rev-list", "--max-parents=0", "HEAD").splitlines()
    return first[-1], "the first commit (nothing is three hours older than HEAD)"


def changed_files(root, base):
    names = set(git(root, "diff", "--name-only", base, "--").splitlines())
    names |= set(git(root, "ls-files", "--others", "--exclude-standard").splitlines())
    return {n for n in names if n}


def includers(root, files):
    """Each project file -> the project files that include it directly."""
    by = {}
    for rel in files:
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for inc in INCLUDE.findall(text):
            # Project headers are named from the repository root ("fence/x.h").
            by.setdefault(os.path.normpath(inc), set()).add(rel)
    return by


def sources_reaching(header, by, is_candidate):
    """The candidate sources that include header, directly or through others."""
    seen, todo = set(), [header]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(by.get(f, ()))
    return {f for f in seen if f in is_candidate}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--explain", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    candidates = [line.strip() for line in sys.stdin if line.strip()]
    if git(root, "rev-parse", "--is-shallow-repository") == "true":
        if args.explain:
            print("lint_changed: a shallow clone: every source", file=sys.stderr)
        print("\n".join(candidates))
        return 0
    base, why = base_commit(root)
    changed = changed_files(root, base)
    if args.explain:
        print(f"lint_changed: base {base[:12]} ({why}); {len(changed)} files changed",
              file=sys.stderr)
    if changed & CHECK_FILES:
        print("\n".join(candidates))
        return 0
    # A folder's CMakeLists.txt sets its sources' definitions and options.
    folders = {os.path.dirname(n) + "/" for n in changed
               if os.path.basename(n) == "CMakeLists.txt"}
    tracked = [f for f in git(root, "ls-files").splitlines()
               if re.search(r'\.(h|hh|hpp|cc|cpp)$', f)]
    by = includers(root, set(tracked) | {c for c in changed if re.search(r'\.(h|hh|hpp|cc|cpp)$', c)})
    rel_candidates = sorted(os.path.relpath(c, root) for c in candidates)
    is_candidate = set(rel_candidates)
    selected = {c for c in changed if c in is_candidate}
    selected |= {c for c in rel_candidates if any(c.startswith(folder) for folder in folders)}
    for header in sorted(c for c in changed if HEADER.search(c)):
        reaching = sources_reaching(header, by, is_candidate)
        if not reaching or reaching & selected:
            continue
        own = re.sub(r'\.(h|hh|hpp)$', ".cc", header)
        selected.add(own if own in reaching else min(reaching))
    for c in candidates:
        if os.path.relpath(c, root) in selected:
            print(c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
