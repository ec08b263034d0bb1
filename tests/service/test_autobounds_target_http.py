"""Accuracy targets with ``bounds: "auto"`` over HTTP: the owner's range is the declared one,
explain's cost is the dearest whole, the answer's ``target`` at the bounds chosen (and the
Python client's Result), and problem documents (free) for what is refused — a target on the
sum of the auto column among them (its error would rest on the clamping)."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import pytest

import veil
from service_support import Service

SQL = "SELECT grp, COUNT(*) AS n, SUM(income) AS s FROM incomes GROUP BY grp"


def _post(service: Service, who: str, path: str, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def _incomes(service: Service, bounds: dict[str, object] | None = None) -> None:
    """3,000 users, one row each, incomes 5,000–100,000 in the owner's public groups a/b (the
    owner's range [0, 10⁶]), granted ε = 10 to bob."""
    path = service.dir / "incomes.parquet"
    duckdb.sql(
        "COPY (SELECT u AS user_id, 5000 * pow(20, u / 2999.0) AS income, "
        "CASE WHEN u % 2 = 0 THEN 'a' ELSE 'b' END AS grp FROM range(3000) t(u)) "
        f"TO '{path}' (FORMAT parquet)"
    )
    code, entry = _post(service, "root", "/v1/admin/datasets", {
        "name": "incomes", "source": {"kind": "file", "path": str(path)}, "replace": True,
        "privacy_unit": "user_id", "domains": {"grp": ["a", "b"]},
        **({"bounds": {"income": [0, 1_000_000]}} if bounds is None else bounds),
    })  # fmt: skip
    assert code == 201, entry
    code, granted = _post(service, "root", "/v1/admin/grants", {
        "analyst": "bob", "dataset": "incomes", "epsilon": 10,
    })  # fmt: skip
    assert code == 201, granted


def test_targets_with_auto_bounds_over_http_and_in_the_python_client(service: Service) -> None:
    _incomes(service)
    body = {"dataset": "incomes", "sql": SQL, "target": ["n=±10"], "bounds": "auto"}
    before = service.ledger.remaining("bob", "incomes")
    code, explained = _post(service, "bob", "/v1/explain", body)
    assert code == 200, explained
    bounds = explained["target"]["bounds"]
    assert bounds["widest"] == {"income": {"lower": 0.0, "upper": 1_000_000.0}}
    assert bounds["chosen"] is None
    step = Fraction(bounds["bounds_epsilon_exact"])
    top = step + Fraction(bounds["epsilon_max_exact"])
    assert Fraction(explained["cost"]["exact"]["epsilon"]) == top
    assert bounds["covers_dearest"] is True
    assert service.ledger.remaining("bob", "incomes") == before  # explain is free
    code, answer = _post(service, "bob", "/v1/query", body)
    assert code == 200, answer
    eps = Fraction(answer["target"]["epsilon_exact"])
    assert answer["target"]["bounds"]["bounds_epsilon_exact"] == str(step)
    assert answer["target"]["bounds"]["chosen"] == {"income": {"lower": 0.0, "upper": 131072.0}}
    assert Fraction(answer["cost"]["exact"]["epsilon"]) == step + eps
    assert service.ledger.remaining("bob", "incomes") == veil.Budget(epsilon=10 - step - eps)
    n = answer["columns"].index("n")
    assert all(row[n] <= 10 for row in answer["error_bars"])
    assert answer["auto_bounds"][0]["upper"] == 131072.0
    from veil.autobounds_target import TargetedBounds
    from veil.client import Client

    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        again = bob.query("incomes", SQL, target="n=±10", bounds="auto")
        e = bob.explain("incomes", SQL, target="n=±10", bounds="auto")
    assert isinstance(again, veil.Result)
    assert again.cached  # the same steps: from the cache, free
    assert again.cost == veil.Budget(epsilon=0)
    assert isinstance(again.targeted, TargetedBounds)
    assert again.targeted.epsilon == eps
    assert again.targeted.chosen == (("income", 0, 131072),)
    assert any("at the bounds chosen (income: [0, 131072])" in n for n in again.notes)
    assert e.cost == veil.Budget(epsilon=top)
    assert service.ledger.remaining("bob", "incomes") == veil.Budget(epsilon=10 - step - eps)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"bounds_share": "1/5"}, "with target= the bounds step's ε is set by the targets"),
        ({"epsilon": 1}, "give target or epsilon=1.0, not both"),
        ({"limits": "auto"}, "and limits='auto' together is not supported"),
        ({"target": ["n=±10", "s=±10"]}, "the target on 's' (SUM of 'income', whose bounds are"),
    ],
)
def test_targets_with_auto_bounds_refuse_free_over_http(
    service: Service, extra: dict[str, object], said: str
) -> None:
    _incomes(service)
    body = {"dataset": "incomes", "sql": SQL, "target": ["n=±10"], "bounds": "auto", **extra}
    before = service.ledger.remaining("bob", "incomes")
    for path in ("/v1/query", "/v1/explain"):
        code, problem = _post(service, "bob", path, body)
        assert code == 400, problem
        assert said in problem["detail"], problem
    assert service.ledger.remaining("bob", "incomes") == before


def test_a_dataset_without_bounds_for_the_column_refuses_targets_with_auto_free(
    service: Service,
) -> None:
    _incomes(service, bounds={})
    body = {"dataset": "incomes", "sql": SQL, "target": ["n=±10"], "bounds": "auto"}
    for path in ("/v1/query", "/v1/explain"):
        code, problem = _post(service, "bob", path, body)
        assert code == 400, problem
        assert "needs a declared range for 'income'" in problem["detail"], problem
    assert service.ledger.remaining("bob", "incomes") == veil.Budget(epsilon=10)
