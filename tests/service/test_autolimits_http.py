"""``limits: "auto"`` over HTTP: contribution limits chosen under DP in query and explain
requests, the choice in the answer (and in the Python client's Result), the owner's limits as
the cap, and problem documents (free) for bad requests."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest

import veil
from service_support import Service

SQL = "SELECT grp, COUNT(*) AS n, SUM(income) AS s FROM heavy GROUP BY grp"


def _post(service: Service, who: str, path: str, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def _heavy(service: Service, **limits: int) -> None:
    """Users with 1–6 rows each (the owner's public groups a/b), granted to bob."""
    path = service.dir / "heavy.parquet"
    duckdb.sql(
        "COPY (SELECT u AS user_id, (u * 7 + j) % 1000 * 1.0 AS income, "
        "CASE WHEN j % 2 = 0 THEN 'a' ELSE 'b' END AS grp FROM range(600) t(u), "
        f"range(1 + u % 6) s(j)) TO '{path}' (FORMAT parquet)"
    )
    code, entry = _post(service, "root", "/v1/admin/datasets", {
        "name": "heavy", "source": {"kind": "file", "path": str(path)}, "replace": True,
        "privacy_unit": "user_id", "bounds": {"income": [0, 1000]},
        "domains": {"grp": ["a", "b"]}, **limits,
    })  # fmt: skip
    assert code == 201, entry
    code, granted = _post(service, "root", "/v1/admin/grants", {
        "analyst": "bob", "dataset": "heavy", "epsilon": 10,
    })  # fmt: skip
    assert code == 201, granted


def test_auto_limits_cost_what_explain_says_and_the_answer_shows_the_choice(
    service: Service,
) -> None:
    _heavy(service, max_groups=2, max_rows_per_group=8)
    body = {"dataset": "heavy", "sql": SQL, "epsilon": 1, "limits": "auto",
            "limits_share": "1/5"}  # fmt: skip
    before = service.ledger.remaining("bob", "heavy")
    code, explained = _post(service, "bob", "/v1/explain", body)
    assert code == 200, explained
    assert explained["cost"]["exact"]["epsilon"] == "1"
    assert service.ledger.remaining("bob", "heavy") == before  # explain is free
    code, answer = _post(service, "bob", "/v1/query", body)
    assert code == 200, answer
    chosen = answer["auto_limits"]
    assert chosen["loss"]["exact"]["epsilon"] == "1/5"
    assert 1 <= chosen["max_rows"] <= chosen["cap"] <= 16  # the owner's 2 × 8 caps it
    assert 0 <= chosen["dropped"] <= 1
    assert answer["cost"]["exact"]["epsilon"] == "1"
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)
    assert any(n.startswith("auto limits: max_rows=") for n in answer["notes"])
    # a repeat: both the limits step and the query come from the cache, free
    code, again = _post(service, "bob", "/v1/query", body)
    assert code == 200, again
    assert again["cached"]
    assert again["auto_limits"]["cached"]
    assert again["rows"] == answer["rows"]
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)


BAD = [
    ({"limits": "automatic"}, 422, "limits"),
    ({"limits": "auto", "limits_share": 1}, 400, "limits_share"),
    ({"limits": "auto", "max_rows": 2}, 400, "max_rows"),
]


@pytest.mark.parametrize(("extra", "status", "said"), BAD)
def test_bad_auto_limits_requests_are_problem_documents_and_free(
    service: Service, extra: dict[str, object], status: int, said: str
) -> None:
    _heavy(service, max_groups=2, max_rows_per_group=8)
    body = {"dataset": "heavy", "sql": SQL, "epsilon": 1, **extra}
    before = service.ledger.remaining("bob", "heavy")
    for path in ("/v1/query", "/v1/explain"):
        code, problem = _post(service, "bob", path, body)
        assert code == status, problem
        assert said in str(problem.get("detail", "")) + str(problem.get("errors", "")), problem
    assert service.ledger.remaining("bob", "heavy") == before


def test_the_python_client_asks_for_auto_limits(service: Service) -> None:
    from veil.autolimits import ChosenLimits
    from veil.client import Client

    _heavy(service, max_groups=2, max_rows_per_group=8)
    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        e = bob.explain("heavy", SQL, epsilon=1, limits="auto", limits_share=Fraction(1, 10))
        r = bob.query("heavy", SQL, epsilon=1, limits="auto", limits_share=Fraction(1, 10))
    assert e.cost == veil.Budget(epsilon=1)
    assert isinstance(r.auto_limits, ChosenLimits)
    assert r.auto_limits.loss == veil.Budget(epsilon=Fraction(1, 10))
    assert r.cost == veil.Budget(epsilon=1)
    assert not r.auto_limits.cached


def test_auto_groups_over_http_choose_both_limits_within_the_owners(service: Service) -> None:
    _heavy(service, max_groups=2, max_rows_per_group=8)
    body = {"dataset": "heavy", "sql": SQL, "epsilon": 1, "limits": "auto_groups"}
    code, explained = _post(service, "bob", "/v1/explain", body)
    assert code == 200, explained
    assert explained["cost"]["exact"]["epsilon"] == "1"
    assert any("distinct groups × rows per unit" in n for n in explained["notes"])
    code, answer = _post(service, "bob", "/v1/query", body)
    assert code == 200, answer
    chosen = answer["auto_limits"]
    assert chosen["mode"] == "auto_groups"
    assert 1 <= chosen["max_groups"] <= 2
    assert 1 <= chosen["max_rows_per_group"] <= 8
    assert chosen["loss"]["exact"]["epsilon"] == "1/10"
    assert answer["cost"]["exact"]["epsilon"] == "1"
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=9)
    from veil.client import Client

    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        got = bob.query("heavy", SQL, epsilon=1, limits="auto_groups")
    assert got.auto_limits is not None
    assert got.auto_limits.mode == "auto_groups"
    assert got.auto_limits.cached  # the same histograms as above


def test_targets_with_auto_limits_over_http_and_in_the_python_client(service: Service) -> None:
    _heavy(service, max_groups=2, max_rows_per_group=8)
    body = {"dataset": "heavy", "sql": SQL, "target": ["n=±40"], "limits": "auto"}
    before = service.ledger.remaining("bob", "heavy")
    code, explained = _post(service, "bob", "/v1/explain", body)
    assert code == 200, explained
    limits = explained["target"]["limits"]
    assert limits["cheapest"]["max_rows"] == 1
    assert limits["dearest"]["max_rows"] == 16  # the owner's 2 × 8 caps the candidates
    step = Fraction(limits["limits_epsilon_exact"])
    top = step + Fraction(limits["epsilon_max_exact"])
    assert Fraction(explained["cost"]["exact"]["epsilon"]) == top
    assert limits["covers_dearest"] is True
    assert service.ledger.remaining("bob", "heavy") == before  # explain is free
    code, answer = _post(service, "bob", "/v1/query", body)
    assert code == 200, answer
    eps = Fraction(answer["target"]["epsilon_exact"])
    assert answer["target"]["limits"]["limits_epsilon_exact"] == str(step)
    assert Fraction(answer["cost"]["exact"]["epsilon"]) == step + eps
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=10 - step - eps)
    n = answer["columns"].index("n")
    assert all(row[n] <= 40 for row in answer["error_bars"])
    assert 1 <= answer["auto_limits"]["max_rows"] <= 16
    from veil.client import Client

    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        again = bob.query("heavy", SQL, target="n=±40", limits="auto")
        e = bob.explain("heavy", SQL, target="n=±40", limits="auto")
    assert again.cached  # the same steps: from the cache, free
    assert again.cost == veil.Budget(epsilon=0)
    assert any("at the limits chosen" in note for note in again.notes)
    assert e.cost == veil.Budget(epsilon=top)
    assert service.ledger.remaining("bob", "heavy") == veil.Budget(epsilon=10 - step - eps)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"limits_share": "1/5"}, "with target= the limits step's ε is set by the targets"),
        ({"epsilon": 1}, "give target or epsilon=1.0, not both"),
        ({"bounds": "auto"}, "and limits='auto' together is not supported"),
    ],
)
def test_targets_with_auto_limits_refuse_free_over_http(
    service: Service, extra: dict[str, object], said: str
) -> None:
    _heavy(service, max_groups=2, max_rows_per_group=8)
    body = {"dataset": "heavy", "sql": SQL, "target": ["n=±40"], "limits": "auto", **extra}
    before = service.ledger.remaining("bob", "heavy")
    for path in ("/v1/query", "/v1/explain"):
        code, problem = _post(service, "bob", path, body)
        assert code == 400, problem
        assert said in problem["detail"], problem
    assert service.ledger.remaining("bob", "heavy") == before
