"""The admin listener's view of idempotency keys (docs/contract.md, "Admin
API"): GET /v1/idempotency counts what the gates did, without a
credential; GET /v1/idempotency/{route}/{key} shows a key's record, with
the admin bearer only, and never the stored body or a header's value."""

from urllib.parse import quote

from fg_helpers import ADMIN_TOKEN, RawConnection, assert_json_error, request

PAY = {"name": "pay", "path_prefix": "/pay/", "mode": "off", "idempotency": "1h"}
TENANT = {"name": "tenant", "path_prefix": "/tenant/", "mode": "off",
          "idempotency": {"window": "1h", "scope": "{header:X-Tenant}"}}
OBJECTS = {"name": "objects", "path_prefix": "/objects/"}
ROUTES = [PAY, TENANT, OBJECTS]
# The backend's answer: X-Backend-Seq, and a body of 40 bytes "seq=N;xxx...".
SEQ = [("X-Test-Seq", "1"), ("X-Test-Response-Bytes", "40")]
HOUR_MS = 3600 * 1000


def post(gate, target, key, headers=(), body=b"amount=10"):
    """POST through the proxy with an idempotency key, then read until the
    proxy closes the connection (the request says Connection: close): it
    closes once the key's record is settled in the store, so the admin
    listener shows the finished record next."""
    with RawConnection(gate.proxy) as c:
        c.send("POST", target, [("Idempotency-Key", key), *SEQ, *headers], body)
        r = c.read_response()
        while c.sock.recv(65536):
            pass
    return r


def record(gate, route, key, scope=None, bearer=ADMIN_TOKEN, method="GET"):
    path = f"/v1/idempotency/{quote(route, safe='')}/{quote(key, safe='')}"
    if scope is not None:
        path += "?scope=" + quote(scope, safe="")
    headers = [] if bearer is None else [("Authorization", f"Bearer {bearer}")]
    return request(gate.admin, method, path, headers)


def counters(gate):
    r = gate.admin_get("/v1/idempotency")
    assert r.status == 200, r
    return r.json()


def test_a_record_needs_the_admin_bearer(make_gate):
    gate = make_gate(routes=ROUTES)
    assert post(gate, "/pay/1", "k1").status == 200
    r = record(gate, "pay", "k1", bearer=None)
    assert_json_error(r, 401, "unauthorized")
    assert r.header("WWW-Authenticate") == 'Bearer realm="fencegate-admin"', r
    assert_json_error(record(gate, "pay", "k1", bearer="wrong"), 401, "unauthorized")
    # Which routes exist is not told without it either.
    assert_json_error(record(gate, "nope", "k1", bearer=None), 401, "unauthorized")


def test_without_an_admin_token_records_are_not_shown(make_gate):
    gate = make_gate(routes=ROUTES, admin={"listen": "127.0.0.1:0", "token": ""})
    assert post(gate, "/pay/1", "k1").status == 200
    assert_json_error(record(gate, "pay", "k1"), 403, "admin_writes_disabled")
    assert counters(gate)["executions"] == 1


def test_a_finished_record_shows_its_response_but_not_its_content(make_gate):
    gate = make_gate(routes=ROUTES)
    r = post(gate, "/pay/1", "k1")
    assert r.status == 200 and r.body.startswith(b"seq=1;x"), r
    r = record(gate, "pay", "k1")
    assert r.status == 200, r
    doc = r.json()
    assert (doc["route"], doc["key"], doc["scoped"], doc["state"]) == \
        ("pay", "k1", False, "finished"), doc
    assert HOUR_MS <= doc["expires_ms"] - doc["created_ms"] < HOUR_MS + 60_000, doc
    head, body = doc["fingerprint"]["head"], doc["fingerprint"]["body"]
    assert len(head) == 64 and len(body) == 64 and head != body, doc
    response = doc["response"]
    assert (response["status"], response["body_bytes"], response["body_kept"]) == \
        (200, 40, True), doc
    names = [n.lower() for n in response["header_names"]]
    assert "x-backend-seq" in names and "content-type" in names, doc
    # Neither the stored body nor a header's value.
    text = r.body.decode()
    for private in ("seq=1", "xxxx", "application/json", "Python"):
        assert private not in text, f"{private!r} in {text}"
    assert set(doc) == {"route", "key", "scoped", "state", "created_ms", "expires_ms",
                        "fingerprint", "response"}, doc
    assert set(response) == {"status", "body_bytes", "body_kept", "header_names"}, doc


def test_what_is_not_a_record_is_said(make_gate):
    gate = make_gate(routes=ROUTES)
    assert post(gate, "/pay/1", "k1").status == 200
    assert_json_error(record(gate, "pay", "k2"), 404, "no_record", route="pay", key="k2")
    assert_json_error(record(gate, "billing", "k1"), 404, "unknown_route", route="billing")
    assert_json_error(record(gate, "objects", "k1"), 404, "not_idempotent", route="objects")
    assert_json_error(record(gate, "pay", "k 1"), 400, "bad_idempotency_key")
    assert_json_error(record(gate, "pay", "k" * 256), 400, "bad_idempotency_key")
    auth = [("Authorization", f"Bearer {ADMIN_TOKEN}")]
    for target in ("/v1/idempotency/pay", "/v1/idempotency/pay/k1/x",
                   "/v1/idempotency/pay/k1?tenant=a", "/v1/idempotency/pay/%zz"):
        assert_json_error(request(gate.admin, "GET", target, auth), 400, "bad_request")
    assert_json_error(record(gate, "pay", "k1", method="DELETE"), 405, "method_not_allowed")
    # The key that is there, for contrast.
    assert record(gate, "pay", "k1").status == 200


def test_counters_count_executions_and_replays(make_gate, backend):
    gate = make_gate(routes=ROUTES)
    zero = {"executions": 0, "replays": 0, "mismatches": 0, "conflicts": 0, "waits": 0,
            "expirations": 0, "releases": 0, "not_kept": 0, "store_errors": 0}
    assert counters(gate) == zero
    first = post(gate, "/pay/1", "k1")
    assert first.status == 200, first
    assert counters(gate) == {**zero, "executions": 1}
    again = post(gate, "/pay/1", "k1")
    assert again.status == 200 and again.body == first.body, again
    assert again.header("Idempotent-Replayed") == "true", again
    assert counters(gate) == {**zero, "executions": 1, "replays": 1}
    other = post(gate, "/pay/1", "k1", body=b"amount=11")
    assert_json_error(other, 422, "idempotency_mismatch")
    assert counters(gate) == {**zero, "executions": 1, "replays": 1, "mismatches": 1}
    assert len(backend.log()) == 1, backend.log()
    assert_json_error(request(gate.admin, "POST", "/v1/idempotency"), 405, "method_not_allowed")


def test_a_scoped_record_is_found_with_its_scope_only(make_gate):
    gate = make_gate(routes=ROUTES)
    tenant = "acme corp/1+2"
    assert post(gate, "/tenant/1", "k1", [("X-Tenant", tenant)]).status == 200
    doc = assert_json_error(record(gate, "tenant", "k1"), 404, "no_record")
    assert "?scope=" in doc["message"], doc
    assert_json_error(record(gate, "tenant", "k1", scope="acme"), 404, "no_record")
    r = record(gate, "tenant", "k1", scope=tenant)
    assert r.status == 200, r
    doc = r.json()
    assert (doc["route"], doc["key"], doc["scoped"], doc["state"]) == \
        ("tenant", "k1", True, "finished"), doc
    assert tenant not in r.body.decode(), r
    # '+' in the query is a plus sign, not a space.
    auth = [("Authorization", f"Bearer {ADMIN_TOKEN}")]
    r = request(gate.admin, "GET", "/v1/idempotency/tenant/k1?scope=acme%20corp%2F1+2", auth)
    assert r.status == 200, r
    # The same key unscoped on another route is another record.
    assert_json_error(record(gate, "pay", "k1", scope=tenant), 404, "no_record")
