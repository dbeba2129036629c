#!/usr/bin/env python3
"""An idempotent-workload chaos client: payments that must run once.

It loops until its deadline, one operation at a time: a POST
/pay/<account> whose body names the operation, with a fresh
Idempotency-Key. Whenever the outcome is unknown (a time-out, a reset or
refused connection, a 5xx such as fencegate's 502 and 504, a 409
idempotency_in_flight) it sends the same key and body again, after a
backoff that doubles up to a second, until it has a definitive answer: a
2xx (the backend's answer, or a replay marked Idempotent-Replayed: true),
or a refusal that a retry cannot change (any other 4xx). It gives up on
an operation after RETRY_BUDGET_S and starts no new one after its
deadline; the operation under way is carried on until its answer.

Some attempts are hedged: sent twice at once on two connections, as a
client that hedges slow requests does. One copy may run; the other must
get 409 idempotency_in_flight or the replay.

Every step goes to the history file as one JSON line with CLOCK_MONOTONIC
time; an attempt's id travels in the X-Chaos-Attempt header, which the
backend logs with the run (chaos/backend.py):
  {"t":..., "client":"c1", "type":"invoke",  "op":"c1-5", "key":"...", "account":"a2"}
  {"t":..., "client":"c1", "type":"attempt", "op":"c1-5", "attempt":"c1-5.2"}
  {"t":..., "client":"c1", "type":"answer",  "op":"c1-5", "attempt":"c1-5.2",
   "status":200, "replayed":false, "error":"", "body":"..."}
  {"t":..., "client":"c1", "type":"ok",      "op":"c1-5", "key":"...", "replayed":false}
`attempt` is written just before the request is sent, `answer` when it
ended (status null: no HTTP response; body only for a 2xx); the operation
ends `ok` (a 2xx), `fail` (a definitive refusal) or `info` (given up).
"""

import argparse
import http.client
import json
import random
import sys
import threading
import time
import uuid
from urllib.parse import urlsplit

ATTEMPT_TIMEOUT_S = 3.0
RETRY_BUDGET_S = 15.0
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
HEDGE_CHANCE = 0.15
HEDGE_GAP_S = 0.02  # the second copy of a hedged attempt follows within this


class History:
    """Line-buffered JSON lines; the copies of a hedged attempt write from
    two threads."""

    def __init__(self, path, client):
        self.f = open(path, "a", buffering=1)
        self.client = client
        self.lock = threading.Lock()

    def add(self, type_, **fields):
        with self.lock:
            rec = {"t": time.monotonic(), "client": self.client, "type": type_, **fields}
            self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return rec


def send(hist, url, op, attempt, path, body, key):
    """One attempt on a fresh connection. Returns its answer record."""
    headers = {"Idempotency-Key": key, "X-Chaos-Client": hist.client,
               "X-Chaos-Attempt": attempt, "Content-Type": "application/json"}
    hist.add("attempt", op=op, attempt=attempt)
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=ATTEMPT_TIMEOUT_S)
    try:
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        status, data = r.status, r.read()
        replayed = (r.getheader("Idempotent-Replayed") or "").lower() == "true"
    except (OSError, http.client.HTTPException) as e:
        return hist.add("answer", op=op, attempt=attempt, status=None, replayed=False,
                        error=str(e) or type(e).__name__)
    finally:
        conn.close()
    fields = {"op": op, "attempt": attempt, "status": status, "replayed": replayed}
    if 200 <= status < 300:
        return hist.add("answer", **fields, error="", body=data.decode("utf-8", "replace"))
    try:
        error = json.loads(data).get("error", "")
    except (ValueError, AttributeError):
        error = ""
    return hist.add("answer", **fields, error=error)


def definitive(answer):
    """A 2xx, or a refusal that the same request sent again cannot change."""
    status = answer["status"]
    if status is None or status >= 500 or status in (408, 409, 429):
        return False
    return True


def run_op(hist, args, rng, op, account):
    key = uuid.uuid4().hex
    path = f"/pay/{account}"
    body = json.dumps({"op": op, "key": key, "client": hist.client, "account": account,
                       "amount": rng.randint(1, 1000)}, separators=(",", ":")).encode()
    hist.add("invoke", op=op, key=key, account=account)
    start = time.monotonic()
    backoff = FIRST_BACKOFF_S
    n = 0
    while True:
        n += 1
        answers = []
        if rng.random() < HEDGE_CHANCE:
            n += 1
            gap = rng.uniform(0, HEDGE_GAP_S)
            first = threading.Thread(target=lambda a=f"{op}.{n - 1}": answers.append(
                send(hist, args.write_url, op, a, path, body, key)))
            first.start()
            time.sleep(gap)
            answers.append(send(hist, args.write_url, op, f"{op}.{n}", path, body, key))
            first.join()
        else:
            answers.append(send(hist, args.write_url, op, f"{op}.{n}", path, body, key))
        done = [a for a in answers if definitive(a)]
        ok = [a for a in done if 200 <= a["status"] < 300]
        if ok:
            return hist.add("ok", op=op, key=key, status=ok[0]["status"],
                            replayed=ok[0]["replayed"], attempts=n)
        if done:
            return hist.add("fail", op=op, key=key, status=done[0]["status"],
                            error=done[0]["error"], attempts=n)
        if time.monotonic() - start > RETRY_BUDGET_S:
            return hist.add("info", op=op, key=key, error="gave up", attempts=n)
        time.sleep(rng.uniform(0.5, 1.0) * backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--id", required=True)
    ap.add_argument("--write-url", required=True)
    ap.add_argument("--accounts", required=True, help="comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--until", type=float, required=True, help="CLOCK_MONOTONIC deadline")
    ap.add_argument("--history", required=True)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    hist = History(args.history, args.id)
    accounts = args.accounts.split(",")
    seq = 0
    while time.monotonic() < args.until:
        seq += 1
        run_op(hist, args, rng, f"{args.id}-{seq}", rng.choice(accounts))
        time.sleep(rng.uniform(0, 0.1))  # the next payment's think time
    return 0


if __name__ == "__main__":
    sys.exit(main())
