"""``max_rows`` over HTTP: the admin registers it, an analyst may lower it (or add one the owner
did not set), never raise it, and a refusal costs nothing."""

from __future__ import annotations

from service_support import SQL, Service


def _post(service: Service, who: str, path: str, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def test_the_owner_registers_max_rows_and_an_analyst_may_only_lower_it(service: Service) -> None:
    source = {"kind": "file", "path": str(service.dir / "other.parquet")}
    code, entry = _post(service, "root", "/v1/admin/datasets", {
        "name": "other", "source": source, "privacy_unit": "user_id", "replace": True,
        "max_groups": 2, "max_rows_per_group": 3, "max_rows": 4,
        "bounds": {"income": [0, 10_000]},
    })  # fmt: skip
    assert code == 201, entry
    assert entry["max_rows"] == 4
    code, listed = _post(service, "bob", "/v1/explain", {
        "dataset": "other", "sql": SQL.replace("people", "other"), "epsilon": 0.5, "max_rows": 2,
    })  # fmt: skip
    assert code == 200, listed
    assert "2 row(s) in all" in listed["contribution"]
    before = service.ledger.remaining("bob", "other")
    code, problem = _post(service, "bob", "/v1/query", {
        "dataset": "other", "sql": SQL.replace("people", "other"), "epsilon": 0.5, "max_rows": 5,
    })  # fmt: skip
    assert (code, problem["type"]) == (400, "urn:veil:problem:invalid-argument")
    assert "max_rows=5 raises the owner's limit of 4" in problem["detail"]
    assert service.ledger.remaining("bob", "other") == before


def test_a_total_the_owner_did_not_set_is_a_narrowing(service: Service) -> None:
    code, answer = _post(service, "alice", "/v1/query", {
        "dataset": "people", "sql": SQL, "epsilon": 0.5, "max_rows": 1,
    })  # fmt: skip
    assert code == 200, answer
    code, problem = _post(service, "alice", "/v1/query", {
        "dataset": "people", "sql": SQL, "epsilon": 0.5, "max_rows": 0,
    })  # fmt: skip
    assert (code, problem["type"]) == (422, "urn:veil:problem:invalid-request")
