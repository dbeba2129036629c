"""When the token store cannot write, fencegate fails closed: 503 and
nothing is forwarded; /readyz says so."""

from fg_helpers import ADMIN_TOKEN, admin_key_path, assert_json_error, tokens_seen

FAULTS = "/v1/test/store-faults"


def set_faults(gate, fail_writes=False, fail_reads=False, delay_ms=0, bearer=ADMIN_TOKEN):
    body = {"fail_writes": fail_writes, "fail_reads": fail_reads, "delay_ms": delay_ms}
    return gate.admin_post(FAULTS, body, bearer=bearer, method="PUT")


def test_store_write_failure_fails_closed(make_gate, backend):
    gate = make_gate(extra_args=["--enable-test-faults"])
    r = gate.admin_get("/readyz")
    assert r.status == 200, f"readyz before faults: {r}"

    r = set_faults(gate, fail_writes=True)
    assert r.status == 200, r

    r = gate.put("/objects/f", 5, b"must not arrive")
    assert_json_error(r, 503, "store_unavailable")
    assert backend.log() == [], "fail closed: nothing may be forwarded when the store fails"

    r = gate.admin_get("/readyz")
    assert r.status == 503, f"readyz while the store fails: want 503, got {r}"

    r = set_faults(gate)
    assert r.status == 200, r

    r = gate.put("/objects/f", 5, b"after recovery")
    assert 200 <= r.status < 300, r
    assert tokens_seen(backend.log()) == ["5"]
    assert backend.log()[0]["body"] == "after recovery"

    r = gate.admin_get("/readyz")
    assert r.status == 200, f"readyz after clearing faults: {r}"
    r = gate.admin_get(admin_key_path("/objects/f"))
    assert r.status == 200 and r.json()["token"] == 5, r


def test_fault_endpoint_needs_the_bearer(make_gate, backend):
    gate = make_gate(extra_args=["--enable-test-faults"])
    assert set_faults(gate, fail_writes=True, bearer=None).status == 401
    assert set_faults(gate, fail_writes=True, bearer="wrong").status == 401
    r = gate.put("/objects/g", 1)
    assert 200 <= r.status < 300, f"faults must not be set by an unauthorised call: {r}"


def test_fault_endpoint_absent_without_flag(gate, backend):
    r = set_faults(gate, fail_writes=True)
    assert r.status in (404, 405), f"without --enable-test-faults: want 404, got {r}"
    r = gate.put("/objects/h", 1)
    assert 200 <= r.status < 300, r
