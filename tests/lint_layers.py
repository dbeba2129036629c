#!/usr/bin/env python3
"""The layers of fencegate's product folders: which folder may include which.

Reads every `#include "folder/file.h"` in the tracked sources of the product
folders (and every fencegate_* library a folder's CMakeLists.txt links) and
fails when one points at a folder the table below does not allow, or when
the folders' includes form a cycle. Needs no build; reads git ls-files.

    python3 tests/lint_layers.py        # exit 1 on any finding
    python3 tests/lint_layers.py --root DIR   # another tree (a git work tree)

Prints FILE:LINE: [rule] TEXT for each finding. tests/lint.sh runs it (the
"layers" tool). docs/architecture.md, "The layers", draws the same table.

Rules:
  layer   an include or a link to a folder the table does not allow
  narrow  an include through one of the narrow edges of a header other than
          the ones the edge names
  path    an include that does not name its header by its path from the
          repository root, or names one outside the product folders
  socket  fence/ includes an Asio or Beast socket or stream header
  cycle   the folders' includes form a cycle
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Which folders each folder may use, top to bottom: an include or a link
# points only down this list, never up or sideways. app/ wires everything
# together; proxy/ (the data plane) and admin/ sit on fence/ (classification
# and the per-key queue); locks/ (the lock service) stands beside them on
# net/ and storage/, never on the proxy or the fence; fence/ has no sockets.
# metrics/ (counters and histograms kept as relaxed atomics, and the
# collector that reads them at scrape time) is the floor: it uses nothing of
# ours, and every folder may count with it.
ALLOWED = {
    "app": {"proxy", "admin", "locks", "fence", "net", "storage", "tls", "config", "metrics"},
    "proxy": {"fence", "net", "storage", "tls", "config", "metrics"},
    "admin": {"fence", "net", "storage", "config", "metrics"},
    "locks": {"net", "storage", "config", "metrics"},
    "fence": {"storage", "config", "metrics"},
    "net": {"config", "tls", "metrics"},
    "storage": {"config", "metrics"},
    "tls": {"config", "metrics"},
    "config": {"metrics"},
    "metrics": set(),
}

# Edges that allow one header each, not the whole folder; both point down.
# fence/ answers what it refuses (400, 409, 428, 503) with fencegate's own
# replies, which every listener shares: net/replies.h, a Beast message and no
# socket. Those replies map a storage::Status to the 503 in one function:
# storage/status.h, the error vocabulary, not a store.
NARROW = {
    ("fence", "net"): {"net/replies.h"},
    ("net", "storage"): {"storage/status.h"},
}

# fence/ holds no socket types: none of these headers (or the umbrella
# headers that include them).
SOCKET_HEADERS = re.compile(
    r"^boost/(asio\.hpp|beast\.hpp|beast/core\.hpp|asio/ip/|asio/ssl|asio/local/|asio/posix/"
    r"|asio/basic_socket|asio/basic_stream_socket|asio/basic_socket_acceptor|asio/socket_base"
    r"|beast/core/tcp_stream|beast/core/basic_stream|beast/ssl|beast/websocket)")

SOURCE = re.compile(r"\.(h|hh|hpp|cc|cpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
LINK = re.compile(r"target_link_libraries\s*\(\s*([A-Za-z0-9_]+)([^)]*)\)", re.S)


def library_folder(name):
    """The folder a fencegate library lives in, or None."""
    if name == "fencegate":
        return "app"
    m = re.match(r"^fencegate_([a-z]+)", name)
    if m and m.group(1) in ALLOWED:
        return m.group(1)
    return None


def allowed(src, dst, header=None):
    """Whether folder `src` may use folder `dst` (through `header`, for an include)."""
    if src == dst or dst in ALLOWED[src]:
        return True
    edge = NARROW.get((src, dst))
    return edge is not None and (header is None or header in edge)


def find_cycle(edges):
    """One cycle of folders in `edges` ({folder: {folder: where}}), or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def main(root=ROOT):
    files = subprocess.run(["git", "-C", root, "ls-files", "--"] + sorted(ALLOWED),
                           check=True, capture_output=True, text=True).stdout.splitlines()
    findings = []
    edges = {}  # folder -> {folder: first "file:line" that includes it}
    sources = 0
    for path in files:
        folder = path.split("/", 1)[0]
        is_cmake = os.path.basename(path) == "CMakeLists.txt"
        if not (SOURCE.search(path) or is_cmake):
            continue
        full = os.path.join(root, path)
        if not os.path.exists(full):  # deleted in the work tree, not yet in the index
            continue
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if is_cmake:
            for m in LINK.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                for lib in m.group(2).split():
                    dst = library_folder(lib)
                    if dst is not None and not allowed(folder, dst):
                        findings.append(f"{path}:{line}: [layer] {m.group(1)} links {lib}: "
                                        f"{folder}/ may not use {dst}/ "
                                        f"({describe_allowed(folder)})")
            continue
        sources += 1
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = m.group(2)
            if m.group(1) == "<":
                if folder == "fence" and SOCKET_HEADERS.match(header):
                    findings.append(f"{path}:{n}: [socket] fence/ includes <{header}>: "
                                    "fence/ holds no socket or stream types")
                continue
            dst = header.split("/", 1)[0] if "/" in header else None
            if dst not in ALLOWED:
                findings.append(f'{path}:{n}: [path] #include "{header}": name a header of '
                                "a product folder by its path from the repository root")
                continue
            if dst != folder:
                edges.setdefault(folder, {}).setdefault(dst, f"{path}:{n}")
            if allowed(folder, dst, header):
                continue
            if (folder, dst) in NARROW:
                findings.append(f'{path}:{n}: [narrow] #include "{header}": {folder}/ may '
                                f"include only {', '.join(sorted(NARROW[(folder, dst)]))} "
                                f"of {dst}/ ({describe_allowed(folder)})")
            else:
                findings.append(f'{path}:{n}: [layer] #include "{header}": {folder}/ may not '
                                f"include {dst}/ ({describe_allowed(folder)})")
    cycle = find_cycle(edges)
    if cycle:
        where = "; ".join(f"{a} -> {b} at {edges[a][b]}" for a, b in zip(cycle, cycle[1:]))
        first = edges[cycle[0]][cycle[1]]
        findings.append(f"{first}: [cycle] the folders include each other in a cycle: "
                        f"{' -> '.join(cycle)} ({where})")
    for finding in findings:
        print(finding)
    print(f"lint_layers: {sources} sources in {len(ALLOWED)} folders, "
          f"{len(findings)} findings", file=sys.stderr)
    return 1 if findings else 0


def describe_allowed(folder):
    """What `folder` may use, for a message."""
    names = sorted(ALLOWED[folder], key=list(ALLOWED).index)
    narrow = [h for (src, _), hs in sorted(NARROW.items()) if src == folder for h in sorted(hs)]
    used = ", ".join(f"{n}/" for n in names) or "nothing of ours"
    return f"it may use {used}" + (f", and {', '.join(narrow)}" if narrow else "")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--root":
        sys.exit(main(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: lint_layers.py [--root DIR]")
    sys.exit(main())
