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

Some operations are slow by shape (--slow-chance each): a slow upload
(the body sent in pieces over 1.5 x --in-flight-s) or a streamed response
(X-Chaos-Stream-Ms: the backend sends its answer in pieces over as long).
Half of their attempts are hedged late: the second copy goes once
--in-flight-s has passed since the first, while the first still lives, so
that a reservation which expired while its request lived lets the copy
run a second time.

Every step goes to the history file as one JSON line with CLOCK_MONOTONIC
time; an attempt's id travels in the X-Chaos-Attempt header, which the
backend logs with the run (chaos/backend.py):
  {"t":..., "client":"c1", "type":"invoke",  "op":"c1-5", "key":"...", "account":"a2",
   "shape":"plain"}
  {"t":..., "client":"c1", "type":"attempt", "op":"c1-5", "attempt":"c1-5.2", "late":false}
  {"t":..., "client":"c1", "type":"answer",  "op":"c1-5", "attempt":"c1-5.2",
   "status":200, "replayed":false, "error":"", "body":"..."}
  {"t":..., "client":"c1", "type":"ok",      "op":"c1-5", "key":"...", "replayed":false}
`shape` is plain, slow-upload or stream; `late` marks the late copy of a
hedged attempt. `attempt` is written just before the request is sent, `answer` when it
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
SLOW_PIECES = 6  # a slow upload's body, or a streamed answer, in this many pieces
LATE_HEDGE_CHANCE = 0.5  # of a slow operation's attempts


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


def send(hist, url, op, attempt, path, body, key, shape="plain", span_s=0.0, late=False):
    """One attempt on a fresh connection, in the operation's shape (a late
    hedge copy goes plain). Returns its answer record."""
    headers = {"Idempotency-Key": key, "X-Chaos-Client": hist.client,
               "X-Chaos-Attempt": attempt, "Content-Type": "application/json",
               "Content-Length": str(len(body))}
    gap_s = span_s / SLOW_PIECES
    if shape == "stream" and not late:
        headers["X-Chaos-Stream-Ms"] = str(int(gap_s * 1000))
    hist.add("attempt", op=op, attempt=attempt, late=late)
    u = urlsplit(url)
    # fencegate reads a small answer whole before it relays it: a streamed
    # one is silent for its whole span.
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=ATTEMPT_TIMEOUT_S + span_s)
    try:
        if shape == "slow-upload" and not late:
            conn.putrequest("POST", path)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            step = -(-len(body) // SLOW_PIECES)
            for i in range(0, len(body), step):
                time.sleep(gap_s)
                conn.send(body[i:i + step])
        else:
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
    draw = rng.random()
    shape = ("slow-upload" if draw < args.slow_chance else
             "stream" if draw < 2 * args.slow_chance else "plain")
    span_s = 1.5 * args.in_flight_s if shape != "plain" else 0.0
    hist.add("invoke", op=op, key=key, account=account, shape=shape)
    start = time.monotonic()
    backoff = FIRST_BACKOFF_S
    n = 0
    while True:
        n += 1
        answers = []
        late = shape != "plain" and rng.random() < LATE_HEDGE_CHANCE
        if late or rng.random() < HEDGE_CHANCE:
            n += 1
            gap = (rng.uniform(1.05, 1.3) * args.in_flight_s if late
                   else rng.uniform(0, HEDGE_GAP_S))
            first = threading.Thread(target=lambda a=f"{op}.{n - 1}": answers.append(
                send(hist, args.write_url, op, a, path, body, key, shape, span_s)))
            first.start()
            time.sleep(gap)
            answers.append(send(hist, args.write_url, op, f"{op}.{n}", path, body, key,
                                shape, span_s, late=late))
            first.join()
        else:
            answers.append(send(hist, args.write_url, op, f"{op}.{n}", path, body, key,
                                shape, span_s))
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
    ap.add_argument("--slow-chance", type=float, default=0.1,
                    help="of the operations, each: slow uploads, and as many streamed answers")
    ap.add_argument("--in-flight-s", type=float, default=2.0,
                    help="the route's in_flight_timeout: slow operations last 1.5 times it")
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
