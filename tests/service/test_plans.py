"""Queries as the builder's JSON plan (``"plan"`` instead of ``"sql"``): the same plans,
fingerprints and charges as the equivalent SQL; every refusal free."""

from __future__ import annotations

from typing import Any

from service_support import Service

SQL = (
    "SELECT grp, COUNT(*) AS n, AVG(income) AS a FROM people "
    "WHERE income >= 1000 AND grp IN ('a', 'b') GROUP BY grp ORDER BY grp"
)
PLAN: dict[str, Any] = {  # the keys' public list declared by WHERE … IN, as in the SQL
    "where": ["income >= 1000", "grp IN ('a', 'b')"],
    "group_by": ["grp"],
    "aggregates": [
        {"function": "count", "alias": "n"},
        {"function": "avg", "column": "income", "alias": "a"},
    ],
    "order_by": ["grp"],
}


def _post(service: Service, path: str, **body: Any) -> tuple[int, dict[str, Any]]:
    r = service.client.post(
        path, json={"dataset": "people", **body}, headers=service.headers("alice")
    )
    return r.status_code, r.json()


def _remaining(service: Service) -> str:
    budgets = service.client.get("/v1/budget", headers=service.headers("alice")).json()
    (line,) = [b for b in budgets["budgets"] if b["dataset"] == "people"]
    return str(line["remaining"]["exact"]["epsilon"])


def test_a_plan_is_the_same_query_as_its_sql_one_charge_for_both(service: Service) -> None:
    status, by_sql = _post(service, "/v1/query", sql=SQL, epsilon="0.5")
    assert status == 200, by_sql
    after_sql = _remaining(service)
    status, by_plan = _post(service, "/v1/query", plan=PLAN, epsilon="0.5")
    assert status == 200, by_plan
    assert by_plan["cached"] is True
    assert by_plan["fingerprint"] == by_sql["fingerprint"]
    assert by_plan["rows"] == by_sql["rows"]
    assert [row[0] for row in by_sql["rows"]] == ["a", "b"]
    assert by_plan["columns"] == ["grp", "n", "a"]
    assert _remaining(service) == after_sql == "9/2"


def test_explain_takes_a_plan_and_charges_nothing(service: Service) -> None:
    status, sql_explained = _post(service, "/v1/explain", sql=SQL, epsilon="0.5")
    assert status == 200
    status, explained = _post(service, "/v1/explain", plan=PLAN, epsilon="0.5")
    assert status == 200, explained
    assert explained["cost"] == sql_explained["cost"]
    assert explained["expected_error_bars"] == sql_explained["expected_error_bars"]
    assert _remaining(service) == "5"


def test_bins_quantiles_having_limit_and_select(service: Service) -> None:
    plan = {
        "group_by": [{"column": "income", "bins": [0, 3000, 7000], "alias": "band"}],
        "aggregates": [
            {"function": "count", "alias": "n"},
            {"function": "quantile", "column": "income", "quantile": "1/2", "alias": "mid"},
        ],
        "having": "n > -1000",
        "order_by": [{"column": "band", "descending": True}],
        "limit": 1,
        "select": ["band", "n"],
    }
    status, body = _post(service, "/v1/query", plan=plan, epsilon="0.5")
    assert status == 200, body
    assert body["columns"] == ["band", "n"]
    assert len(body["rows"]) == 1


def test_what_the_builder_refuses_is_refused_free_with_its_message(service: Service) -> None:
    cases = [
        ({**PLAN, "aggregates": [{"function": "mode", "column": "income"}]}, "mode"),
        ({**PLAN, "where": ["user_id = 3 OR random() > 0"]}, "random"),
        ({**PLAN, "aggregates": [{"function": "avg", "column": "nope"}]}, "nope"),
        (
            {**PLAN, "group_by": [{"column": "grp", "keys": ["a"], "bins": [0, 1]}]},
            "not both",
        ),
    ]
    for plan, word in cases:
        status, problem = _post(service, "/v1/query", plan=plan, epsilon="0.5")
        assert status in (400, 422), problem
        assert word in problem["detail"].lower(), problem
    assert _remaining(service) == "5"


def test_median_is_the_quantile_one_half_as_in_the_builder(service: Service) -> None:
    sql = "SELECT grp, MEDIAN(income) AS mid FROM people WHERE grp IN ('a', 'b') GROUP BY grp"
    plan = {
        "where": ["grp IN ('a', 'b')"],
        "group_by": ["grp"],
        "aggregates": [{"function": "median", "column": "income", "alias": "mid"}],
    }
    status, by_sql = _post(service, "/v1/query", sql=sql, epsilon="0.5")
    assert status == 200, by_sql
    status, by_plan = _post(service, "/v1/query", plan=plan, epsilon="0.5")
    assert status == 200, by_plan
    assert by_plan["cached"] is True
    assert by_plan["fingerprint"] == by_sql["fingerprint"]
    median = {"function": "median", "column": "income", "quantile": "0.9"}
    status, problem = _post(service, "/v1/query", plan={"aggregates": [median]}, epsilon="0.5")
    assert status == 400, problem
    assert "median is the quantile 1/2 and takes no quantile" in problem["detail"]
    assert _remaining(service) == "9/2"


def test_exactly_one_of_sql_and_plan(service: Service) -> None:
    for body in ({"sql": SQL, "plan": PLAN}, {}):
        status, problem = _post(service, "/v1/query", epsilon="0.5", **body)
        assert status == 422, problem
        assert "exactly one of sql" in str(problem)


def test_a_public_list_of_keys_releases_every_key_and_spends_no_delta(service: Service) -> None:
    plan = {
        "group_by": [{"column": "grp", "keys": ["a", "b", "zz"]}],
        "aggregates": [{"function": "count", "alias": "n"}],
        "order_by": ["grp"],
    }
    status, body = _post(service, "/v1/query", plan=plan, epsilon="0.5")
    assert status == 200, body
    assert [row[0] for row in body["rows"]] == ["a", "b", "zz"]
    assert body["cost"]["delta"] == 0.0
