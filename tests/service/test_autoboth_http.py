"""``"bounds": "auto"`` on a query given as a JSON plan, alone and with ``"limits": "auto"`` /
``"auto_groups"``, over HTTP: the same charges (exact fractions adding to ε) and fingerprints
as the SQL of the same question, a repeat of either a free cache hit, explain writing no
ledger row, and problem documents (free) for what is refused without data."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import duckdb
import pytest

import veil
from service_support import Service

SQL = "SELECT grp, COUNT(*) AS n, SUM(income) AS s FROM heavy GROUP BY grp"
PLAN: dict[str, Any] = {
    "group_by": ["grp"],
    "aggregates": [
        {"function": "count", "alias": "n"},
        {"function": "sum", "column": "income", "alias": "s"},
    ],
}


def _post(service: Service, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    r = service.client.post(path, json={"dataset": "heavy", **body}, headers=service.headers("bob"))
    return r.status_code, r.json()


def _heavy(service: Service) -> None:
    """Users with 1–6 rows each in the owner's public groups a/b, bounds [0, 1000], granted
    ε = 10 to bob."""
    path = service.dir / "heavy.parquet"
    duckdb.sql(
        "COPY (SELECT u AS user_id, (u * 7 + j) % 1000 * 1.0 AS income, "
        "CASE WHEN j % 2 = 0 THEN 'a' ELSE 'b' END AS grp FROM range(600) t(u), "
        f"range(1 + u % 6) s(j)) TO '{path}' (FORMAT parquet)"
    )
    r = service.client.post("/v1/admin/datasets", headers=service.headers("root"), json={
        "name": "heavy", "source": {"kind": "file", "path": str(path)}, "replace": True,
        "privacy_unit": "user_id", "bounds": {"income": [0, 1000]},
        "domains": {"grp": ["a", "b"]}, "max_groups": 2, "max_rows_per_group": 8,
    })  # fmt: skip
    assert r.status_code == 201, r.json()
    r = service.client.post("/v1/admin/grants", headers=service.headers("root"), json={
        "analyst": "bob", "dataset": "heavy", "epsilon": 10,
    })  # fmt: skip
    assert r.status_code == 201, r.json()


def _events(service: Service) -> list[tuple[str, Fraction, str | None]]:
    return [(r.event, r.loss.eps, r.fingerprint) for r in service.ledger.history("bob", "heavy")]


def _charges(service: Service) -> list[tuple[Fraction, str | None]]:
    return [(eps, fp) for event, eps, fp in _events(service) if event == "charge"]


CASES = [
    pytest.param({"limits": "auto", "bounds": "auto"}, id="auto+all"),
    pytest.param({"limits": "auto_groups", "bounds": {"income": "auto"}}, id="groups+column"),
    pytest.param({"limits": "auto_groups", "bounds": {"income": {"auto": "grp"}}},
                 id="groups+per-group"),
]  # fmt: skip


@pytest.mark.parametrize("auto", CASES)
def test_a_plan_with_auto_limits_and_bounds_charges_what_its_sql_does(
    service: Service, auto: dict[str, Any]
) -> None:
    _heavy(service)
    shares = {"epsilon": 1, "limits_share": "1/5", "bounds_share": "1/4", **auto}
    code, explained = _post(service, "/v1/explain", {"plan": PLAN, **shares})
    assert code == 200, explained
    assert explained["cost"]["exact"]["epsilon"] == "1"
    assert any("auto bounds for 'income'" in n for n in explained["notes"])
    code, by_sql = _post(service, "/v1/explain", {"sql": SQL, **shares})
    assert code == 200, by_sql
    assert explained["notes"] == by_sql["notes"]
    assert [e for e, _, _ in _events(service)] == ["grant"]  # explain writes no ledger row

    code, answer = _post(service, "/v1/query", {"plan": PLAN, **shares})
    assert code == 200, answer
    assert not answer["cached"]
    charges = _charges(service)
    # the limits step, the bounds step (one histogram, per group or not), the query
    assert [eps for eps, _ in charges] == [Fraction(1, 5), Fraction(1, 4), Fraction(11, 20)]
    assert sum(eps for eps, _ in charges) == 1
    assert answer["cost"]["exact"]["epsilon"] == "1"
    assert answer["auto_limits"]["loss"]["exact"]["epsilon"] == "1/5"
    (chosen,) = answer["auto_bounds"]
    assert chosen["loss"]["exact"]["epsilon"] == "1/4"
    assert chosen["within"] == [0, 1000]  # the owner's bounds: only ever narrowed
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)

    # the same question as SQL: every step and the query from the cache, free
    code, again = _post(service, "/v1/query", {"sql": SQL, **shares})
    assert code == 200, again
    assert again["cached"]
    assert again["auto_limits"]["cached"]
    assert again["auto_bounds"][0]["cached"]
    assert again["fingerprint"] == answer["fingerprint"]
    assert again["rows"] == answer["rows"]
    assert again["cost"]["exact"]["epsilon"] == "0"
    # and the plan again
    code, repeat = _post(service, "/v1/query", {"plan": PLAN, **shares})
    assert code == 200, repeat
    assert repeat["cached"]
    assert repeat["rows"] == answer["rows"]
    assert _charges(service) == charges
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)


def test_a_plan_with_auto_bounds_alone_is_its_sql_once_charged(service: Service) -> None:
    _heavy(service)
    body = {"epsilon": 1, "bounds": "auto", "bounds_share": "1/4"}
    code, answer = _post(service, "/v1/query", {"plan": PLAN, **body})
    assert code == 200, answer
    assert [eps for eps, _ in _charges(service)] == [Fraction(1, 4), Fraction(3, 4)]
    code, again = _post(service, "/v1/query", {"sql": SQL, **body})
    assert code == 200, again
    assert again["cached"]
    assert again["fingerprint"] == answer["fingerprint"]
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)


BAD = [
    ({"bounds": {"income": [0, 500]}, "bounds_share": "1/10"}, 400, "no bounds are 'auto'"),
    ({"bounds": {"income": [0, 500]}, "bounds_share": "1/10", "limits": "auto"}, 400,
     "no bounds are 'auto'"),
    ({"bounds": "auto", "bounds_share": "3/2"}, 400, "bounds_share must lie strictly between"),
    ({"bounds": "auto", "bounds_share": "0"}, 400, "bounds_share must lie strictly between"),
    ({"bounds": "auto", "bounds_share": "1/2", "limits": "auto", "limits_share": "1/2"}, 400,
     "leave nothing of epsilon for the query itself"),
    ({"bounds": {"grp": "auto"}}, 400, "no aggregate of this query clamps 'grp'"),
    ({"bounds": {"income": {"auto": "nope"}}, "limits": "auto"}, 400, "no GROUP BY key 'nope'"),
    ({"bounds": "automatic"}, 422, "invalid-request"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "status", "said"), BAD)
def test_bad_auto_requests_on_plans_are_problem_documents_and_free(
    service: Service, extra: dict[str, Any], status: int, said: str
) -> None:
    _heavy(service)
    for path in ("/v1/query", "/v1/explain"):
        code, problem = _post(service, path, {"plan": PLAN, "epsilon": 1, **extra})
        assert code == status, problem
        assert said in problem["detail"] or said in problem["type"], problem
    assert [e for e, _, _ in _events(service)] == ["grant"]


def test_auto_bounds_on_a_text_column_of_a_plan_are_refused_free(service: Service) -> None:
    _heavy(service)
    plan = {"aggregates": [{"function": "avg", "column": "grp", "alias": "m"}]}
    for auto in ({"bounds": "auto"}, {"bounds": {"grp": "auto"}, "limits": "auto"}):
        for path in ("/v1/query", "/v1/explain"):
            code, problem = _post(service, path, {"plan": plan, "epsilon": 1, **auto})
            assert code == 400, problem
            assert "grp" in problem["detail"], problem
    assert [e for e, _, _ in _events(service)] == ["grant"]
