#!/usr/bin/env python3
"""One chaos client of the tree workload: a process of its own, so the
nemesis can freeze it.

The tree: collections /objects/d0/ .. /objects/d{C-1}/, each with members
x0 .. x{M-1}, on a WebDAV backend (nginx), and a staging area
/staging/s0/ .. /staging/s{S-1}/ outside the fenced route that the harness
wrote before the clients started. Each collection and each member has an
etcd lock of its own (client.py's EtcdLocks); every token is an etcd
revision, one counter for all of them, which is what a route with
`nesting: shared` needs.

It loops until its deadline: pick a write, take its lock, do a little
"work" (a short random sleep, where a SIGSTOP makes the token stale), and
send it through fencegate with the token:

  PUT    /objects/dI/xJ                       member lock; 1 to 3 writes
  DELETE /objects/dI/                         collection lock
  COPY   /staging/sK/ -> /objects/dI/         collection lock (destination)
  MOVE   /objects/dI/ -> /objects/dJ/         both collections' locks, taken
                                              in name order; the higher
                                              token (the later grant)

COPY and MOVE carry `Overwrite: T` and an absolute `Destination` URL. A
PUT's body names its write and token (tree_checker.member_body). It usually
releases the locks, and sometimes lets the leases run out.

Every step goes to the history file as client.py writes it (lease, invoke,
ok, fail, info), with the write's `method`, `path`, `dest` (for COPY and
MOVE), `key` (its fenced path) and `keys` (every key it is fenced under).
A 4xx that nginx answered itself (404: the collection is not there; 409:
its parent is not) certainly changed nothing, and is a `fail`, as
fencegate's refusals are.
"""

import random
import sys
import time

from client import (DEFINITE_REFUSALS, EtcdLocks, History, client_arguments, send, try_acquire,
                    try_release)
from tree_checker import keys_of, member_body

# fencegate's refusal of a subtree write that no token of it can order:
# certain too, nothing was forwarded.
REFUSALS = DEFINITE_REFUSALS | {"nested_keys"}
# How often each kind of write is picked.
WEIGHTS = {"PUT": 5, "DELETE": 2, "COPY": 2, "MOVE": 2}


def plan(rng, collections, members, staging):
    """(method, path, destination or None, [lock paths]) of the next write."""
    method = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    i = rng.randrange(collections)
    coll = f"/objects/d{i}/"
    if method == "PUT":
        member = f"{coll}x{rng.randrange(members)}"
        return method, member, None, [member]
    if method == "DELETE":
        return method, coll, None, [coll]
    if method == "COPY":
        return method, f"/staging/s{rng.randrange(staging)}/", coll, [coll]
    j = rng.choice([j for j in range(collections) if j != i])
    dest = f"/objects/d{j}/"
    return method, coll, dest, sorted([coll, dest])


def acquire_all(locks, paths):
    """Takes the locks in the order given; [(name, token, lease)], or None
    (and none held) when one was not granted."""
    held = []
    for path in paths:
        name = f"chaos-tree{path}"
        grant = try_acquire(locks, name)
        if grant is None:
            for held_name, _, lease in held:
                try_release(locks, held_name, lease)
            return None
        held.append((name, *grant))
    return held


def main():
    ap = client_arguments(__doc__.splitlines()[0])
    ap.add_argument("--lock-url", required=True, help="etcd's client URL")
    ap.add_argument("--write-url", required=True)
    ap.add_argument("--dest-url", required=True, help="scheme and authority of a Destination")
    ap.add_argument("--collections", type=int, default=3)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--staging", type=int, default=3)
    ap.add_argument("--ttl-ms", type=int, default=2000)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    hist = History(args.history, args.id)
    locks = EtcdLocks(args.lock_url, args.ttl_ms)
    ttl_s = args.ttl_ms / 1000.0
    seq = 0
    while time.monotonic() < args.until:
        method, path, dest, lock_paths = plan(rng, args.collections, args.members, args.staging)
        held = acquire_all(locks, lock_paths)
        if held is None:
            hist.add("no-lease", key=",".join(lock_paths))
            time.sleep(rng.uniform(0.01, 0.1))  # back off before the next try
            continue
        token = max(t for _, t, _ in held)
        hist.add("lease", key=",".join(lock_paths), token=token)
        for _ in range(rng.randint(1, 3) if method == "PUT" else 1):
            time.sleep(rng.uniform(0, 0.25 * ttl_s))  # the work under the lock
            seq += 1
            write_id = f"{args.id}-{seq}"
            keys = keys_of(method, path, dest or "")
            fields = {"key": keys[0], "keys": keys, "token": token, "write": write_id,
                      "method": method, "path": path}
            headers = {}
            body = b""
            if dest:
                fields["dest"] = dest
                headers = {"Destination": args.dest_url + dest, "Overwrite": "T"}
            if method == "PUT":
                body = member_body(write_id, token)
                headers = {"Content-Type": "application/octet-stream"}
            send(hist, args.write_url, method, path, fields, body, headers,
                 refusals=REFUSALS, backend_refusals=True)
        if rng.random() < 0.8:
            for name, _, lease in reversed(held):
                try_release(locks, name, lease)
    return 0


if __name__ == "__main__":
    sys.exit(main())
