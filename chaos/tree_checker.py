"""The chaos checker of the tree workload: did a stale write change a member
of a collection, directly or through a write to a whole subtree?

Inputs: nginx's request log (requests.jsonl, one line per request in the
order nginx finished them, LOG_FORMAT below), the clients' histories
(chaos/tree_client.py), the fence values fencegate reported right after each
restart, the staging area the harness wrote before the clients started, and
nginx's root directory on disk at the end of the run.

nginx runs one single-threaded worker and applies a WebDAV write whole
while it handles the request (a PUT renames its body into place, a
DELETE, COPY or MOVE walks its trees), then logs it: the log's order is the
order in which the writes changed the files. A write is applied when its
status is 2xx.

What a write touches, as paths of the tree (`/objects/d0/` and `/objects/d0`
are one node):

  PUT P          the point P
  DELETE P       the subtree at P
  COPY S -> D    the subtree at D (the source is only read)
  MOVE S -> D    the subtrees at S and at D

Two writes overlap when a point of one lies in a subtree of the other, two
subtrees nest, or two points are equal. The properties:

  tree-order     in apply order, each applied write's token is at least the
                 highest token of every earlier applied write it overlaps
                 (equal is allowed: one lease writes more than once)
  exactly-once   as in checker.py: every acknowledged write applied once,
                 every certain refusal (fencegate's, or nginx's own 4xx)
                 never, none twice, none that no client sent
  fence-restart  as in checker.py, for each key a write was fenced under
                 (its path and, for a MOVE, its destination's)
  final-tree     the applied writes replayed on a model of the tree (the
                 staging area as the harness wrote it; PUT sets a file,
                 DELETE removes a subtree, COPY and MOVE copy and move one
                 with Overwrite: T) give exactly the files nginx holds under
                 /objects/ at the end: none missing, none extra, each body
                 equal

Every violation comes with its witness: the two writes (method, path,
write id, client, token, CLOCK_MONOTONIC time), or the file and the last
write that set or removed it. nginx logs wall-clock time; meta.json's
clock_offset (time.time() - time.monotonic() at the start) turns it into
the clients' clock.
"""

import os
from collections import defaultdict
from urllib.parse import unquote, urlsplit

import checker

PROPERTIES = ("tree-order", "exactly-once", "fence-restart", "final-tree")
# nginx's log_format for requests.jsonl (escape=json): one JSON object per
# request, written when nginx has answered it.
LOG_FORMAT = ('{"t":$msec,"method":"$request_method","uri":"$uri",'
              '"dest":"$http_destination","token":"$http_fencing_token",'
              '"write":"$http_x_chaos_write","client":"$http_x_chaos_client","status":$status}')
FENCED_ROOT = ("objects",)
# Methods that change nothing on nginx's WebDAV module.
READS = ("GET", "HEAD", "OPTIONS", "TRACE", "PROPFIND")
HARNESS = "harness"  # the X-Chaos-Client of the staging writes


def member_body(write, token):
    """The body a client PUTs: it names the write and its token."""
    return f"{write} token {token}\n".encode()


def node(path):
    """The tree node of a path (or of an absolute URL's path): its segments,
    so that a trailing slash, repeated slashes and dot segments do not
    count."""
    if "://" in path:
        path = urlsplit(path).path
    out = []
    for seg in unquote(path).split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    return tuple(out)


def show(n):
    return "/" + "/".join(n)


def touches(method, path, dest):
    """[(node, is_subtree)] of what a write may change."""
    if method == "PUT":
        return [(node(path), False)]
    if method == "COPY":
        return [(node(dest), True)]
    if method == "MOVE":
        return [(node(path), True), (node(dest), True)]
    return [(node(path), True)]  # DELETE, and anything else: the whole subtree


def keys_of(method, path, dest):
    """The fence keys of a write on a {path}-keyed route under /objects/:
    its canonical path and, for COPY and MOVE, its destination's, each when
    it lies inside the route."""
    nodes = [node(path)] + ([node(dest)] if method in ("COPY", "MOVE") else [])
    return [show(n) for n in nodes if n[:len(FENCED_ROOT)] == FENCED_ROOT and n != FENCED_ROOT]


def ancestors_or_self(n):
    return [n[:i] for i in range(len(n) + 1)]


def _w(rec):
    return f"{rec['method']} {rec['what']} {checker._w(rec)}"


class Overlaps:
    """The highest-token applied write so far at each node: targeted as a
    point, as a subtree, and anywhere at or below it. A write's tree-order
    check reads the nodes on its targets' paths to the root (and, for a
    subtree, what lies below), never a whole subtree."""

    def __init__(self):
        self.point, self.sub, self.below = {}, {}, {}

    @staticmethod
    def _higher(a, b):
        return b if a is None or (b is not None and b["token"] > a["token"]) else a

    def highest(self, target, is_subtree):
        """The highest-token earlier write that overlaps `target`."""
        best = None
        for a in ancestors_or_self(target):
            best = self._higher(best, self.sub.get(a))
        best = self._higher(best, (self.below if is_subtree else self.point).get(target))
        return best

    def add(self, target, is_subtree, rec):
        table = self.sub if is_subtree else self.point
        table[target] = self._higher(table.get(target), rec)
        for a in ancestors_or_self(target):
            self.below[a] = self._higher(self.below.get(a), rec)


class Model:
    """The files the applied writes leave, as {node: body}, each with the
    write that last set or removed it."""

    def __init__(self, files):
        self.files = dict(files)
        self.last = {}

    def under(self, n):
        return [k for k in self.files if k[:len(n)] == n]

    def remove(self, n, rec):
        for k in self.under(n):
            del self.files[k]
            self.last[k] = rec

    def apply(self, rec, method, path, dest):
        if method == "PUT":
            n = node(path)
            self.files[n] = member_body(rec["write"], rec["token"])
            self.last[n] = rec
        elif method in ("COPY", "MOVE"):
            src, dst = node(path), node(dest)
            moved = {k[len(src):]: self.files[k] for k in self.under(src)}
            self.remove(dst, rec)  # Overwrite: T
            if method == "MOVE":
                self.remove(src, rec)
            for rel, body in moved.items():
                self.files[dst + rel] = body
                self.last[dst + rel] = rec
        elif method == "DELETE":
            self.remove(node(path), rec)
        # MKCOL and the like add no file.


def check(requests, history, restarts, staging, disk, clock_offset=0.0, check_fence=True):
    """requests: nginx's log records in its order; staging: {path: bytes}
    the harness wrote before the run; disk: {path: bytes} of every file
    under /objects/ at the end. Returns {"violations", "counts", "stats"}
    as checker.check does."""
    findings = checker.Findings(PROPERTIES)
    outcomes = checker.Outcomes(history)
    overlaps = Overlaps()
    model = Model({node(p): body for p, body in staging.items()})
    n_applied, by_method, nodes = 0, defaultdict(int), set()
    for raw in requests:
        method, status = raw.get("method"), raw.get("status")
        if method in READS or not (isinstance(status, int) and 200 <= status < 300):
            continue
        if raw.get("client") == HARNESS:
            continue  # the staging area, which the model starts from
        path, dest = raw.get("uri", ""), raw.get("dest") or ""
        token = int(raw["token"]) if str(raw.get("token", "")).isdigit() else None
        what = path + (f" -> {urlsplit(dest).path}" if dest else "")
        rec = {"method": method, "what": what, "token": token, "write": raw.get("write") or None,
               "client": raw.get("client") or None, "t": raw["t"] - clock_offset}
        n_applied += 1
        by_method[method] += 1
        outcomes.applied(rec["write"])
        targets = touches(method, path, dest)
        nodes.update(t for t, _ in targets)
        if token is None:
            findings.flag("tree-order", f"{_w(rec)} was applied without a token")
        else:
            for target, is_subtree in targets:
                best = overlaps.highest(target, is_subtree)
                if best is not None and best["token"] > token:
                    findings.flag("tree-order", f"at {show(target)}: {_w(rec)} applied after "
                                                f"{_w(best)}, which it overlaps")
                    break
            for target, is_subtree in targets:
                overlaps.add(target, is_subtree, rec)
        model.apply(rec, method, path, dest)

    outcomes.exactly_once(findings)
    if check_fence:
        outcomes.fence_restart(findings, restarts)

    # final-tree: the files under /objects/, the model's against the disk's.
    want = {k: v for k, v in model.files.items() if k[:len(FENCED_ROOT)] == FENCED_ROOT}
    have = {node(p): body for p, body in disk.items()}
    for n in sorted(set(want) | set(have)):
        last = model.last.get(n)
        by = f"; last written by {_w(last)}" if last else ""
        if n not in have:
            findings.flag("final-tree", f"{show(n)} is missing on disk, the applied writes "
                                        f"leave it as {want[n]!r}{by}")
        elif n not in want:
            findings.flag("final-tree", f"{show(n)} is on disk as {have[n]!r}, the applied "
                                        f"writes leave no such file{by}")
        elif want[n] != have[n]:
            findings.flag("final-tree", f"{show(n)} is {have[n]!r} on disk, the applied "
                                        f"writes leave {want[n]!r}{by}")

    stats = dict(outcomes.stats(n_applied), keys=len(nodes), applied_by_method=dict(by_method),
                 files=len(have))
    return findings.result(stats)


def read_tree(root, under=FENCED_ROOT):
    """{path: bytes} of every file below `root`/`under` on disk."""
    top = os.path.join(root, *under)
    out = {}
    for dirpath, _, files in os.walk(top):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out["/" + os.path.relpath(full, root).replace(os.sep, "/")] = f.read()
    return out


def check_run(run_dir, meta, history, restarts):
    requests = checker.iter_jsonl(os.path.join(run_dir, "requests.jsonl"))
    staging = {p: body.encode() for p, body in meta["staging"].items()}
    disk = read_tree(os.path.join(run_dir, meta["nginx_root"]))
    return check(requests, history, restarts, staging, disk, meta["clock_offset"],
                 check_fence=meta.get("through_fencegate", True))

