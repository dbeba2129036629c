"""GET /metrics on the admin listener (docs/contract.md, "Metrics"): a
known mix of requests through the real binary, then one scrape whose every
request counter must hold exactly what was sent; the text must parse as the
Prometheus exposition format, and no label value may be a key, a path or a
token."""

import json
import threading
import time

import pytest

from fg_helpers import (ETCD_TIMERS, IO_TIMEOUT, RawConnection, assert_json_error, parse_addr,
                        request)

prometheus_parser = pytest.importorskip(
    "prometheus_client.parser", reason="python3-prometheus-client is not installed")

OUTCOMES = {"forwarded", "stale", "token_required", "bad_request", "store_unavailable",
            "upstream_error", "overloaded", "expired", "replayed", "idempotency_mismatch",
            "idempotency_in_flight", "idempotency_response_not_kept", "client_error", "nested_keys",
            "key_moving"}
ROUTES = {"", "objects", "shadowed", "pay"}
FAULTS = "/v1/test/store-faults"


def routes():
    return [{"name": "objects", "path_prefix": "/objects/"},
            {"name": "shadowed", "path_prefix": "/shadow/", "mode": "shadow"},
            {"name": "pay", "path_prefix": "/pay/", "mode": "off", "idempotency": "1h"}]


def scrape(gate):
    r = gate.admin_get("/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8", r
    text = r.body.decode()
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    return text, families


def ended(families):
    """Requests counted as ended (the request duration histogram's count)."""
    return samples(families, "fencegate_request_duration_seconds",
                   "fencegate_request_duration_seconds_count").get(frozenset(), 0)


def scrape_when(gate, predicate, what):
    """Scrapes until predicate(families) holds: for what may come after an
    answer (a connection's close, the lock service's counters)."""
    deadline = time.monotonic() + IO_TIMEOUT
    while True:
        text, families = scrape(gate)
        if predicate(families):
            return text, families
        assert time.monotonic() < deadline, f"never saw {what}:\n{text}"


def samples(families, family, sample_name=None):
    """{frozenset(labels): value} of one family's samples (sample_name:
    e.g. the _bucket series of a histogram)."""
    f = families[family]
    name = sample_name or f.name + ("_total" if f.type == "counter" else "")
    return {frozenset(s.labels.items()): s.value for s in f.samples if s.name == name}


def single(families, family, sample_name=None):
    """The value of a family that has one sample (without labels)."""
    (value,) = samples(families, family, sample_name).values()
    return value


def requests_total(families):
    got = {}
    for labels, value in samples(families, "fencegate_requests", "fencegate_requests_total").items():
        d = dict(labels)
        got[(d["route"], d["outcome"])] = value
    return got


def set_faults(gate, fail_writes):
    r = gate.admin_post(FAULTS, {"fail_writes": fail_writes}, method="PUT")
    assert r.status == 200, r


def test_every_counter_holds_what_was_sent(make_gate, backend):
    # upstream.timeout answers one request here (held at the backend until it
    # has); every other exchange must end well within it on a busy machine.
    gate = make_gate(extra_args=["--enable-test-faults"], routes=routes(),
                     upstream={"url": f"http://127.0.0.1:{backend.port}",
                               "connect_timeout": "1s", "timeout": "5s"})
    _, before = scrape(gate)
    assert set(requests_total(before).values()) == {0}, "nothing counted before any request"

    # objects (enforce): 3 forwarded, 1 stale, 2 token_required, 2 bad_request,
    # 1 store_unavailable, 1 upstream_error (504).
    for token in (5, 6, 7):
        assert gate.put("/objects/a", token).status in (200, 201)
    assert_json_error(gate.put("/objects/a", 4), 409, "stale_token")
    assert_json_error(gate.put("/objects/b"), 428, "token_required")
    assert_json_error(gate.put("/objects/c"), 428, "token_required")
    assert_json_error(gate.put("/objects/a", "abc"), 400, "bad_token")
    assert_json_error(gate.put("/objects/a", "-1"), 400, "bad_token")
    set_faults(gate, fail_writes=True)
    assert_json_error(gate.put("/objects/d", 1), 503, "store_unavailable")
    set_faults(gate, fail_writes=False)
    slow = gate.put("/objects/slow", 1, headers=[("X-Test-Hold-Until", "slow")])
    backend.release("slow")
    assert_json_error(slow, 504, "upstream_timeout")

    # shadowed: 3 forwarded, 2 of them violations (no token; a stale one).
    assert gate.put("/shadow/x").status in (200, 201)
    assert gate.put("/shadow/x", 9).status in (200, 201)
    assert gate.put("/shadow/x", 3).status in (200, 201)

    # pay (idempotency keys, not fenced): 1 forwarded, 1 replayed.
    h = [("Idempotency-Key", "k-123")]
    assert request(gate.proxy, "POST", "/pay/1", h, b"amount=5").status == 200
    again = request(gate.proxy, "POST", "/pay/1", h, b"amount=5")
    assert again.status == 200 and again.header("Idempotent-Replayed") == "true", again

    # No route: 2 forwarded (a GET and an unfenced PUT), 2 bad_request (a path
    # refused before routing, a head over the limit).
    assert request(gate.proxy, "GET", "/elsewhere").status in (200, 404)
    assert gate.put("/elsewhere/p", body=b"x").status in (200, 201)
    assert_json_error(request(gate.proxy, "GET", "/a%2Fb"), 400, "bad_path")
    r = request(gate.proxy, "GET", "/big", [("X-Big", "x" * 20000)])
    assert r.status == 431, r

    want = {
        ("objects", "forwarded"): 3, ("objects", "stale"): 1, ("objects", "token_required"): 2,
        ("objects", "bad_request"): 2, ("objects", "store_unavailable"): 1,
        ("objects", "upstream_error"): 1,
        ("shadowed", "forwarded"): 3,
        ("pay", "forwarded"): 1, ("pay", "replayed"): 1,
        ("", "forwarded"): 2, ("", "bad_request"): 2,
    }
    sent = sum(want.values())
    # Every answer was read, so every request is counted; the connections
    # close after their answers, so the scrape may have to wait for those.
    text, families = scrape_when(
        gate, lambda f: single(f, "fencegate_connections_active") == 0,
        "every connection closed")
    assert ended(families) == sent
    got = requests_total(families)
    assert set(got) == {(r, o) for r in ROUTES for o in OUTCOMES}, "every route and outcome"
    wrong = {k: (v, want.get(k, 0)) for k, v in got.items() if v != want.get(k, 0)}
    assert not wrong, f"(route, outcome): (scraped, sent) {wrong}\n{text}"

    shadow = samples(families, "fencegate_shadow_violations")
    assert shadow == {frozenset({("route", "shadowed")}): 2}, shadow

    durations = samples(families, "fencegate_request_duration_seconds",
                        "fencegate_request_duration_seconds_count")
    assert durations == {frozenset(): sent}, durations
    inf = samples(families, "fencegate_request_duration_seconds",
                  "fencegate_request_duration_seconds_bucket")[frozenset({("le", "+Inf")})]
    assert inf == sent
    # The backend answered 3 + 3 + 1 + 2 requests; the timed-out one had an
    # exchange too (cut at upstream.timeout).
    upstream = samples(families, "fencegate_upstream_duration_seconds",
                       "fencegate_upstream_duration_seconds_count")
    assert upstream == {frozenset(): 10}, upstream
    # Every fenced write with a token made a check-and-advance: 3 + 1
    # (stale) + 1 (the injected store fault answers it) + 1 (the 504) + 2
    # (shadow, with a token).
    advances = samples(families, "fencegate_store_advance_duration_seconds",
                       "fencegate_store_advance_duration_seconds_count")
    assert advances == {frozenset(): 8}, advances

    assert single(families, "fencegate_idempotency_executions") == 1
    assert single(families, "fencegate_idempotency_replays") == 1
    assert single(families, "fencegate_idempotency_mismatches") == 0
    assert single(families, "fencegate_keys_waiting") == 0
    assert single(families, "fencegate_requests_in_flight") == 0
    # The injected faults answer before the engine: it saw no failed write.
    assert single(families, "fencegate_store_write_errors") == 0
    assert single(families, "fencegate_store_syncs") >= 1
    # Every exchange took a connection: a new one or an idle one again.
    opened = single(families, "fencegate_upstream_connections_opened")
    reused = single(families, "fencegate_upstream_connections_reused")
    assert opened >= 1 and 10 <= opened + reused <= 20, (opened, reused)
    assert single(families, "fencegate_upstream_connect_failures") == 0
    assert single(families, "fencegate_upstream_connections_dropped") <= 10
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "process_start_time_seconds"):
        family = name.removesuffix("_total")
        assert family in families, name
        assert single(families, family, name) > 0, name


def test_upstream_down_counts_502_and_connect_failures(make_gate, backend):
    gate = make_gate(routes=routes())
    assert gate.put("/objects/u", 1).status in (200, 201)
    assert backend.stop() == 0
    assert_json_error(gate.put("/objects/u", 2), 502, "upstream_error")
    _, families = scrape(gate)  # counted by the time the 502 was read: no retry
    assert ended(families) == 2
    got = requests_total(families)
    assert got[("objects", "forwarded")] == 1
    assert got[("objects", "upstream_error")] == 1
    assert 1 <= single(families, "fencegate_upstream_connect_failures") <= 4


def test_each_answer_is_counted_by_the_time_it_is_read(make_gate, backend):
    """docs/contract.md, "Metrics": a request is counted as the last bytes
    of its answer go, so the one scrape made right after reading an answer
    holds it, with no retry: a relayed response in one write, one streamed
    in pieces (a 1 MiB body, and one the backend ends by closing: chunked
    to the client), fencegate's own refusal, and a replay. The window this
    closes is short: the rounds give a busy machine many chances to hit it."""
    gate = make_gate(routes=routes())
    want = {k: 0 for k in [("objects", "forwarded"), ("objects", "stale"), ("", "forwarded"),
                           ("pay", "forwarded"), ("pay", "replayed")]}
    total = 0
    pay = [("Idempotency-Key", "k-seen")]
    with RawConnection(gate.proxy) as c:
        for i in range(40):
            rounds = [
                (("objects", "forwarded"), "PUT", "/objects/v",
                 [("Fencing-Token", str(i + 1))], b"x", (200, 201)),
                (("objects", "stale"), "PUT", "/objects/v", [("Fencing-Token", "0")], b"x",
                 (409,)),
                (("", "forwarded"), "GET", "/big",
                 [("X-Test-Seq", "1"), ("X-Test-Response-Bytes", str(1 << 20))], b"", (200, 404)),
                (("", "forwarded"), "GET", "/eof", [("X-Test-EOF-Body", "1")], b"", (200, 404)),
                (("pay", "replayed" if i else "forwarded"), "POST", "/pay/seen", pay, b"amount=1",
                 (200,)),
            ]
            for key, method, target, headers, body, statuses in rounds:
                c.send(method, target, headers, body, close=False)
                r = c.read_response(method)
                assert r.status in statuses, (key, r)
                want[key] += 1
                total += 1
                _, families = scrape(gate)
                got = requests_total(families)
                assert (ended(families), {k: got[k] for k in want}) == (total, want), \
                    f"round {i}: {method} {target} answered, not yet counted"


def test_a_connection_is_counted_while_open(make_gate, backend):
    gate = make_gate(routes=routes())
    with RawConnection(gate.proxy) as c:
        c.send("GET", "/elsewhere", close=False)
        assert c.read_response().status in (200, 404)
        _, families = scrape(gate)
        assert single(families, "fencegate_connections_active") == 1
    scrape_when(gate, lambda f: single(f, "fencegate_connections_active") == 0,
                "the connection closed")


def test_no_label_value_is_a_key_path_or_token(make_gate, backend):
    gate = make_gate(routes=routes())
    sent = ["/objects/secret-key-1", "/objects/%E2%82%AC", "/shadow/other-key", "/unrouted/p"]
    for i, path in enumerate(sent):
        gate.put(path, 1000 + i)
        gate.put(path)
    request(gate.proxy, "POST", "/pay/2", [("Idempotency-Key", "idem-key-77")], b"x")
    _, families = scrape(gate)
    assert ended(families) == 2 * len(sent) + 1
    allowed = {"route": ROUTES, "outcome": OUTCOMES}
    seen = set()
    for family in families.values():
        for s in family.samples:
            for name, value in s.labels.items():
                seen.add(name)
                if name == "le":
                    assert value == "+Inf" or float(value) > 0, (s.name, value)
                    continue
                assert name in allowed, f"{s.name}: unexpected label {name}={value!r}"
                assert value in allowed[name], f"{s.name}: {name}={value!r}"
                assert "/" not in value, (s.name, value)
                assert "key" not in value or value in OUTCOMES, (s.name, value)
                assert not value.isdigit(), (s.name, value)
    assert seen == {"route", "outcome", "le"}


def test_metrics_answers_get_only(gate):
    r = request(gate.admin, "POST", "/metrics", body=b"")
    assert_json_error(r, 405, "method_not_allowed")
    r = request(gate.admin, "HEAD", "/metrics")
    assert r.status == 200 and r.body == b"", r


def test_scrapes_while_requests_run_lose_no_count(make_gate, backend):
    """The I/O threads count while the admin listener reads: every scrape
    sees counts that only grow, and the last one all of them."""
    gate = make_gate(routes=routes())
    clients, each = 4, 40
    errors = []

    def client(c):
        try:
            with RawConnection(gate.proxy) as conn:
                for i in range(each):
                    conn.send("PUT", f"/objects/c{c}", [("Fencing-Token", str(i + 1))], b"x",
                              close=False)
                    r = conn.read_response()
                    assert r.status in (200, 201), r
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    last = 0
    while any(t.is_alive() for t in threads):
        _, families = scrape(gate)
        now = requests_total(families)[("objects", "forwarded")]
        assert now >= last
        last = now
    for t in threads:
        t.join()
    assert not errors, errors
    _, families = scrape(gate)
    assert ended(families) == clients * each
    assert requests_total(families)[("objects", "forwarded")] == clients * each
    advances = samples(families, "fencegate_store_advance_duration_seconds",
                       "fencegate_store_advance_duration_seconds_count")
    assert advances == {frozenset(): clients * each}


def test_the_etcd_engine_counts_its_writes(make_gate, backend, etcd):
    storage = {"engine": "etcd",
               "etcd": {"endpoints": [etcd.url], "prefix": "fencegate-test/", **ETCD_TIMERS}}
    gate = make_gate(routes=routes(), storage=storage)
    for token in (5, 6):
        assert gate.put("/objects/e", token).status in (200, 201)
    assert_json_error(gate.put("/objects/e", 4), 409, "stale_token")
    _, families = scrape(gate)
    assert ended(families) == 3
    # One request at a time: each check-and-advance is a transaction of its own.
    assert single(families, "fencegate_store_requests") == 3
    assert samples(families, "fencegate_store_batch_size", "fencegate_store_batch_size_count") \
        == {frozenset(): 3}
    # Each accepted write stores its key and the tree's nodes of /, /objects
    # and /objects/e (its token rises in each); the stale one wrote nothing.
    assert single(families, "fencegate_store_writes") == 2 * 4
    assert single(families, "fencegate_store_write_errors") == 0
    # etcd makes its writes durable itself: no fsync or reopen of ours to count.
    assert "fencegate_store_syncs" not in families
    assert "fencegate_store_recoveries" not in families


def test_the_lock_service_counts_what_it_did(make_gate):
    """Grants, a refusal while held, a renewal, a release, an expiry and a
    grant the store could not make durable, each counted once."""
    gate = make_gate(name="locks", locks={"listen": "127.0.0.1:0", "max_ttl": "30s"},
                     extra_args=["--enable-test-faults"])
    addr = parse_addr(gate.listening["locks"])

    def call(name, op, body):
        return request(addr, "POST", f"/v1/locks/{name}/{op}",
                       [("Content-Type", "application/json")], json.dumps(body))

    def locks(families):
        return {f: single(families, f) for f in families if f.startswith("fencegate_locks_")}

    _, families = scrape(gate)
    assert set(locks(families).values()) == {0}, locks(families)
    # "a" must not expire before its release: the longest ttl locks.max_ttl allows.
    first = call("a", "acquire", {"ttl": "30s"}).json()
    assert call("a", "acquire", {"ttl": "30s"}).status == 409
    assert call("a", "renew", {"lease": first["lease"]}).status == 200
    assert call("a", "release", {"lease": first["lease"]}).status == 200
    assert call("b", "acquire", {"ttl": "50ms"}).status == 200
    set_faults(gate, True)
    assert call("c", "acquire", {"ttl": "10s"}).status == 503
    set_faults(gate, False)
    want = {"fencegate_locks_grants": 2, "fencegate_locks_refused_held": 1,
            "fencegate_locks_renewals": 1, "fencegate_locks_releases": 1,
            "fencegate_locks_expirations": 1, "fencegate_locks_store_errors": 1}
    # The 50 ms lease runs out on the service's timer.
    scrape_when(gate, lambda f: locks(f) == want, f"the lock counters {want}")
