"""Each veil error answers with its problem type; refusals cost nothing; limits hold."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from service_support import SQL, Service
from veil.service.app import OPENAPI_PATH
from veil.service.config import ServiceLimits
from veil.service.openapi import render

QUERY = {"dataset": "people", "sql": SQL, "epsilon": 0.5}


def _remaining(service: Service) -> str:
    return service.ledger.remaining("alice", "people").precise()


def _ask(service: Service, **changes: object) -> tuple[int, dict[str, object]]:
    r = service.client.post("/v1/query", json=QUERY | changes, headers=service.headers("alice"))
    if r.status_code >= 400:
        assert r.headers["content-type"] == "application/problem+json"
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("changes", "status", "slug"),
    [
        ({"bounds": {"income": [0, 1e9]}}, 400, "bounds"),
        ({"max_groups": 3}, 400, "invalid-argument"),
        ({"max_rows_per_group": 2}, 400, "invalid-argument"),
        ({"privacy_unit": None}, 400, "invalid-argument"),
        ({"privacy_unit": "grp"}, 400, "invalid-argument"),
        ({"epsilon": 3}, 400, "invalid-argument"),
        ({"epsilon": None}, 400, "invalid-argument"),
        ({"sql": "SELECT COUNT(* FROM people"}, 400, "unsupported-query"),
        ({"sql": "SELECT SUM(nope) FROM people"}, 400, "schema"),
        ({"epsilon": "1e999999"}, 422, "invalid-request"),  # a string, not an exact one
        ({"surprise": 1}, 422, "invalid-request"),
        ({"dataset": "nowhere"}, 404, "not-found"),
    ],
)
def test_a_refusal_has_its_problem_type_and_costs_nothing(
    service: Service, changes: dict[str, object], status: int, slug: str
) -> None:
    before = _remaining(service)
    code, body = _ask(service, **changes)
    assert (code, body["type"]) == (status, f"urn:veil:problem:{slug}"), body
    assert body["status"] == status
    assert _remaining(service) == before


def test_unsupported_query_gives_line_and_column(service: Service) -> None:
    _, body = _ask(service, sql="SELECT COUNT(*)\nFROM people\nWHERE income >")
    assert body["type"] == "urn:veil:problem:unsupported-query"
    assert isinstance(body["line"], int)
    assert isinstance(body["column"], int)


def test_budget_exhaustion_reports_requested_and_remaining(service: Service) -> None:
    for _ in range(2):
        assert _ask(service, epsilon=2, sql=SQL.replace("n,", "n2,"))[0] == 200
        assert _ask(service, epsilon=2, sql=SQL.replace("COUNT(*)", "COUNT(user_id)"))[0] in (
            200,
            403,
        )
    code, body = _ask(service, epsilon=2, sql="SELECT COUNT(*) AS m FROM people WHERE grp = 'a'")
    assert code == 403
    assert body["type"] == "urn:veil:problem:budget-exhausted"
    assert body["requested"]["epsilon"] == 2.0
    assert body["remaining"]["epsilon"] < 2.0


def test_identical_query_is_answered_from_the_cache_at_no_cost(service: Service) -> None:
    code, first = _ask(service)
    assert code == 200
    after = _remaining(service)
    code, again = _ask(service)
    assert (code, again["cached"], again["rows"]) == (200, True, first["rows"])
    assert _remaining(service) == after
    assert again["cost"]["epsilon"] == 0.0


def test_sql_and_body_size_limits_answer_413(make_service: Callable[..., Service]) -> None:
    service = make_service(ServiceLimits(max_sql_chars=100, max_request_bytes=2000))
    code, body = _ask(service, sql=SQL + " " * 200)
    assert (code, body["type"]) == (413, "urn:veil:problem:payload-too-large")
    code, body = _ask(service, sql=SQL + " " * 5000)
    assert (code, body["type"]) == (413, "urn:veil:problem:payload-too-large")


def test_rate_limit_answers_429_with_retry_after(make_service: Callable[..., Service]) -> None:
    service = make_service(ServiceLimits(rate_limit=3))
    codes = [service.client.get("/v1/budget", headers=service.headers("alice")) for _ in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    assert int(codes[-1].headers["retry-after"]) >= 1
    assert codes[-1].json()["type"] == "urn:veil:problem:rate-limited"
    # another analyst has a bucket of their own
    assert service.client.get("/v1/budget", headers=service.headers("bob")).status_code == 200


def test_an_unexpected_exception_is_a_500_that_says_nothing(
    service: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    state = service.client.app.state.veil  # type: ignore[attr-defined]

    def broken(*_a: object, **_k: object) -> object:
        raise RuntimeError("secret value 12345")

    monkeypatch.setattr(state.ledger, "grants", broken)
    r = service.client.get("/v1/budget", headers=service.headers("alice"))
    assert r.status_code == 500
    assert r.json()["type"] == "urn:veil:problem:internal-error"
    assert "12345" not in r.text
    assert "secret value 12345" in caplog.text  # for the operator


def test_padding_answers_success_and_refusal_no_earlier_than_the_pad(
    make_service: Callable[..., Service],
) -> None:
    service = make_service(pad_ms=400)
    for changes in ({}, {"max_groups": 9}):
        t = time.monotonic()
        code, _ = _ask(service, **changes)
        assert code in (200, 400)
        assert time.monotonic() - t >= 0.4


def test_an_async_query_answers_202_then_its_result(service: Service) -> None:
    r = service.client.post("/v1/query?async=true", json=QUERY, headers=service.headers("alice"))
    assert r.status_code == 202
    deadline = time.monotonic() + 120  # a safety net only: the job ends when it ends
    location = r.headers["location"]
    job = service.client.get(location, headers=service.headers("alice")).json()
    while job["state"] != "done" and time.monotonic() < deadline:
        time.sleep(0.05)
        job = service.client.get(location, headers=service.headers("alice")).json()
    assert job["status"] == 200
    assert job["answer"]["columns"] == ["n", "total"]


def test_metrics_count_queries_cache_hits_refusals_and_ledger_spend(service: Service) -> None:
    _ask(service)
    _ask(service)
    _ask(service, max_groups=9)
    text = service.client.get("/metrics", headers=service.headers("root")).text
    assert 'veil_queries_total{dataset="people"} 2' in text
    assert 'veil_cache_hits_total{dataset="people"} 1' in text
    assert 'veil_refusals_total{dataset="people",problem="invalid-argument"} 1' in text
    assert "pid=" not in text
    assert 'veil_budget_spent_epsilon{dataset="people"} 0.5' in text
    assert "veil_request_duration_seconds_bucket" in text


def test_keys_are_stored_as_sha256_only(service: Service) -> None:
    import sqlite3

    db = sqlite3.connect(service.dir / "ledger.db")
    stored = " ".join(str(r) for r in db.execute("SELECT * FROM veil_principals"))
    db.close()
    for key in service.keys.values():
        assert key not in stored
    rotated = service.client.post(
        "/v1/admin/principals/alice/rotate", headers=service.headers("root")
    ).json()["key"]
    assert service.client.get("/v1/budget", headers=service.headers("alice")).status_code == 401
    fresh = {"Authorization": f"Bearer {rotated}"}
    assert service.client.get("/v1/budget", headers=fresh).status_code == 200


def test_the_committed_openapi_document_is_the_served_one(service: Service) -> None:
    served = service.client.get("/openapi.json").json()
    committed = json.loads(OPENAPI_PATH.read_text(encoding="utf-8"))
    assert render(served) == render(committed), "run: python -m veil.service.openapi"


def test_alerts_reach_the_metrics_and_the_admin_endpoint_from_the_ledger(service: Service) -> None:
    # alice holds ε = 5 on people: 3 × 1 crosses the 1/2 alert threshold (not 4/5)
    for bound in (10_000, 9_000, 8_000):
        r = service.client.post(
            "/v1/query",
            headers=service.headers("alice"),
            json={
                "dataset": "people",
                "sql": SQL,
                "epsilon": "1",
                "bounds": {"income": [0, bound]},
            },
        )
        assert r.status_code == 200, r.text
    text = service.client.get("/metrics", headers=service.headers("root")).text
    assert 'veil_alerts{dataset="people"} 1' in text
    assert 'veil_budget_spent_epsilon{dataset="people"} 3.0' in text
    assert 'veil_budget_spent_rho{dataset="people"} 0.0' in text
    alerts = service.client.get("/v1/admin/alerts", headers=service.headers("root")).json()
    assert [(a["analyst"], a["dataset"], a["threshold"], a["used"]) for a in alerts["alerts"]] == [
        ("alice", "people", 0.5, 0.6)
    ]
