"""A per-query ``max_rows`` over HTTP on an owner's dataset (issue 40): the owner's limits
(here 1 and 1) may only be lowered, so a ``max_rows`` above them would bound nothing and is
refused, free, with the fix; one within them is taken."""

from __future__ import annotations

from service_support import Service


def test_over_http_a_max_rows_the_owners_limits_make_a_no_op_is_refused_free(
    service: Service,
) -> None:
    body = {"dataset": "people", "sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.5}
    before = service.ledger.remaining("alice", "people")
    r = service.client.post(
        "/v1/query", json={**body, "max_rows": 3}, headers=service.headers("alice")
    )
    assert r.status_code == 400, r.json()
    assert r.json()["type"] == "urn:veil:problem:invalid-argument"
    assert "max_rows=3 bounds nothing here: the data owner's limits" in r.json()["detail"]
    assert service.ledger.remaining("alice", "people") == before
    r = service.client.post(
        "/v1/explain", json={**body, "max_rows": 1}, headers=service.headers("alice")
    )
    assert r.status_code == 200, r.json()
