"""Accuracy targets over HTTP: ``target`` on ``/v1/explain`` and ``/v1/query`` runs at the
smallest ε meeting every target; a target the grant cannot pay is a problem document naming the
cost it needs, charged nothing."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import veil
from service_support import SQL, Service
from veil.accuracy import choose_epsilon
from veil.service.models import ExplainRequest


def _post(service: Service, who: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def test_explain_and_query_run_at_the_smallest_epsilon_meeting_the_targets(
    service: Service,
) -> None:
    body = {"dataset": "people", "sql": SQL, "target": ["n=±20", "total=±30000"]}
    code, explained = _post(service, "alice", "/v1/explain", body)
    assert code == 200, explained
    chosen = explained["target"]
    eps = Fraction(chosen["epsilon_exact"])
    assert all(t["met"] for t in chosen["targets"])
    assert Fraction(explained["cost"]["exact"]["epsilon"]) == eps
    # the same choice as in Python, on a session like the service's
    with veil.Session.local(
        {"people": str(service.dir / "people.parquet")}, privacy_unit="user_id",
        budget=veil.Budget(epsilon=5),
    ) as s:  # fmt: skip
        assert choose_epsilon(s, SQL, body["target"], bounds={"income": (0, 10_000)}).epsilon == eps
    before = service.ledger.remaining("alice", "people")
    code, answer = _post(service, "alice", "/v1/query", body)
    assert code == 200, answer
    assert Fraction(answer["cost"]["exact"]["epsilon"]) == eps
    assert answer["target"]["epsilon_exact"] == str(eps)
    n, total = answer["columns"].index("n"), answer["columns"].index("total")
    assert answer["error_bars"][0][n] <= 20
    assert answer["error_bars"][0][total] <= 30000
    after = service.ledger.remaining("alice", "people")
    assert after.eps == before.eps - eps


def test_targets_beyond_the_grant_or_the_owner_s_limit_are_a_free_problem(
    service: Service,
) -> None:
    code, problem = _post(
        service, "alice", "/v1/explain", {"dataset": "people", "sql": SQL, "target": ["n=±0.5"]}
    )
    assert code == 400, problem
    assert (
        "need more than epsilon=2, the largest cost of one query on dataset 'people'"
        in (problem["detail"])
    )
    for eps in ("2", "1.9"):  # spend 3.9 of alice's 5 (two costs: no cached answer)
        body = {"dataset": "people", "sql": SQL, "epsilon": eps}
        code, _ = _post(service, "alice", "/v1/query", body)
        assert code == 200
    before = service.ledger.remaining("alice", "people")
    for path in ("/v1/explain", "/v1/query"):
        code, problem = _post(
            service, "alice", path, {"dataset": "people", "sql": SQL, "target": ["n=±3"]}
        )
        assert code == 403, problem
        assert problem["type"] == "urn:veil:problem:budget-exhausted"
        assert 1 < Fraction(problem["requested"]["exact"]["epsilon"]) < 2  # the cost it needs
        assert problem["remaining"]["exact"]["epsilon"] == "11/10"
        assert "loosen the targets" in problem["detail"]
    assert service.ledger.remaining("alice", "people") == before


def test_bad_targets_are_refused_free_with_the_fix(service: Service) -> None:
    before = service.ledger.remaining("alice", "people")
    for extra, message in (
        ({"target": ["n=50"]}, "malformed target 'n=50'"),
        ({"target": ["n=±5"], "epsilon": 1}, "give target or epsilon=1.0, not both"),
        ({"target": ["n=±5%"]}, "needs a public reference value"),
        ({"min_group_size": 10}, "qualify accuracy targets"),
        ({"target": ["x=±5"]}, "target for unknown column 'x'"),
    ):
        body = {"dataset": "people", "sql": SQL, "epsilon": 0.5} | extra
        if "target" in extra and "epsilon" not in extra:
            del body["epsilon"]
        code, problem = _post(service, "alice", "/v1/query", body)
        assert code == 400, (extra, problem)
        assert message in problem["detail"], problem
    plan = {"aggregates": [{"function": "count", "alias": "n"}]}
    code, problem = _post(
        service, "alice", "/v1/explain", {"dataset": "people", "plan": plan, "target": ["n=±5"]}
    )
    assert code == 400
    assert "target is for a query given as sql" in problem["detail"]
    assert service.ledger.remaining("alice", "people") == before


def test_the_request_model_documents_the_targets() -> None:
    fields = ExplainRequest.model_fields
    assert {"target", "references", "min_group_size"} <= set(fields)
