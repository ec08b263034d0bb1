"""Strict inputs over HTTP: booleans and strings are not numbers, flags or integers; text
veil cannot read is refused; a refusal decidable without data is made before any job; and,
whatever the body, only veil's documented problem types come back, nothing charged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service_support import SQL, Service
from veil.service.problems import PROBLEMS

QUERY: dict[str, Any] = {"dataset": "people", "sql": SQL, "epsilon": 0.5}
CHAIN = " AND ".join(f"income <> {i}" for i in range(1_000))  # 17,000 characters


def _remaining(service: Service) -> str:
    return service.ledger.remaining("alice", "people").precise()


def _post(service: Service, path: str, body: Any, who: str = "alice") -> tuple[int, Any]:
    raw = json.dumps(body)  # escapes lone surrogates as \ud800, as any JSON client may
    r = service.client.post(
        path,
        content=raw.encode("ascii"),
        headers={**service.headers(who), "content-type": "application/json"},
    )
    if r.status_code >= 400:
        assert r.headers["content-type"] == "application/problem+json", r.text
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epsilon", True),
        ("epsilon", False),
        ("epsilon", "1e-1"),
        ("epsilon", "inf"),
        ("epsilon", " 0.5e0"),
        ("epsilon", [0.5]),
        ("delta", True),
        ("max_groups", "1"),
        ("max_groups", True),
        ("max_groups", 1.0),
        ("max_rows_per_group", "1"),
        ("max_rows", False),
        ("consistent", "true"),
        ("consistent", 1),
        ("bounds_share", True),
    ],
)
def test_a_boolean_or_a_string_is_not_a_number_on_the_wire(
    service: Service, field: str, value: object
) -> None:
    before = _remaining(service)
    code, body = _post(service, "/v1/query", QUERY | {field: value})
    assert code == 422, body
    assert body["type"] == "urn:veil:problem:invalid-request"
    assert body["detail"].startswith(f"body.{field}")
    assert _remaining(service) == before


def test_exact_strings_stay_numbers(service: Service) -> None:
    code, body = _post(service, "/v1/query", QUERY | {"epsilon": "1/4"})
    assert code == 200, body
    assert body["cost"]["exact"]["epsilon"] == "1/4"


@pytest.mark.parametrize("value", [True, "2e0", 1e400, "1e3", " "])
def test_an_administrators_grant_takes_numbers_only(service: Service, value: object) -> None:
    body = {"analyst": "bob", "dataset": "people", "epsilon": value}
    code, problem = _post(service, "/v1/admin/grants", body, who="root")
    assert code in (400, 422), problem  # 400: JSON's non-standard Infinity, read and refused
    assert "epsilon" in problem["detail"]
    code, _ = _post(service, "/v1/admin/grants", body | {"epsilon": 1}, who="root")
    assert code == 201


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/mechanisms/laplace", {"values": [1, True], "epsilon": 0.1}),
        ("/v1/mechanisms/laplace", {"values": [1], "epsilon": 0.1, "integer": "yes"}),
        ("/v1/mechanisms/laplace", {"values": [1], "epsilon": "0.1", "sensitivity": True}),
    ],
)
def test_the_mechanisms_take_numbers_only(
    service: Service, path: str, body: dict[str, Any]
) -> None:
    before = service.ledger.remaining("alice", "app").precise()
    code, problem = _post(service, path, {"dataset": "app", "sensitivity": 1} | body)
    assert code == 422, problem
    assert service.ledger.remaining("alice", "app").precise() == before


@pytest.mark.parametrize(
    ("sql", "status", "slug"),
    [
        (SQL + " WHERE grp = '\ud800'", 422, "invalid-request"),
        (SQL + " WHERE " + "(" * 40 + "income > 1" + ")" * 40, 400, "unsupported-query"),
        (SQL + " WHERE " + "NOT " * 3_000 + "income > 1", 400, "unsupported-query"),
        (SQL + " WHERE income > " + "9" * 5_000, 400, "schema"),
    ],
)
def test_text_veil_cannot_read_is_refused_free(
    service: Service, sql: str, status: int, slug: str
) -> None:
    before = _remaining(service)
    code, body = _post(service, "/v1/query", QUERY | {"sql": sql})
    assert (code, body["type"]) == (status, f"urn:veil:problem:{slug}"), body
    assert _remaining(service) == before


@pytest.mark.parametrize(
    "changes",
    [{"sql": SQL + " WHERE grp = '\ud800'"}, {"dataset": "\udfff"}, {"bounds": {"\ud800": [0, 1]}}],
)
def test_a_lone_surrogate_anywhere_in_a_body_is_named_and_refused(
    service: Service, changes: dict[str, object]
) -> None:
    before = _remaining(service)
    code, body = _post(service, "/v1/query", QUERY | changes)
    assert (code, body["type"]) == (422, "urn:veil:problem:invalid-request"), body
    assert "holds a lone surrogate escape" in body["detail"]
    assert _remaining(service) == before


def test_a_thousand_term_and_chain_is_answered(service: Service) -> None:
    code, body = _post(service, "/v1/query", QUERY | {"sql": f"{SQL} WHERE {CHAIN}"})
    assert code == 200, body


@pytest.mark.parametrize(
    ("changes", "status", "slug"),
    [
        ({"epsilon": 3}, 400, "invalid-argument"),  # above the owner's per-query cap of 2
        ({"epsilon": None}, 400, "invalid-argument"),
        ({"sql": "SELECT SUM(nope) FROM people"}, 400, "schema"),
        ({"sql": "SELECT COUNT(* FROM people"}, 400, "unsupported-query"),
        ({"max_groups": 5}, 400, "invalid-argument"),
    ],
)
def test_an_async_query_refused_without_data_is_refused_at_once_not_as_a_job(
    service: Service, changes: dict[str, object], status: int, slug: str
) -> None:
    before = _remaining(service)
    code, body = _post(service, "/v1/query?async=true", QUERY | changes)
    assert (code, body["type"]) == (status, f"urn:veil:problem:{slug}"), body
    assert _remaining(service) == before


def test_an_async_query_beyond_the_grant_is_refused_at_once(service: Service) -> None:
    for floor in (1, 2):  # two different queries at ε = 2: 1 of alice's 5 is left
        spend = QUERY | {"epsilon": 2, "sql": f"{SQL} WHERE income > {floor}"}
        assert _post(service, "/v1/query", spend)[0] == 200
    before = _remaining(service)
    code, body = _post(service, "/v1/query?async=true", QUERY | {"epsilon": 2})
    assert body["type"] == "urn:veil:problem:budget-exhausted", body
    assert code == PROBLEMS["budget-exhausted"].status
    assert _remaining(service) == before


def test_bounds_where_is_one_condition_over_http(service: Service) -> None:
    before = _remaining(service)
    body = {"dataset": "people", "columns": ["income"], "epsilon": 0.1}
    code, problem = _post(service, "/v1/bounds", body | {"where": "income > 0 GROUP BY grp --"})
    assert (code, problem["type"]) == (400, "urn:veil:problem:invalid-argument")
    assert "must be one SQL condition" in problem["detail"]
    assert _remaining(service) == before


# ── the property: whatever the body, a documented problem, nothing charged ──────────────────

_DOCUMENTED = {f"urn:veil:problem:{slug}" for slug in PROBLEMS}
_WEIRD_NUMBERS = st.sampled_from(
    [True, False, None, "1", "0.5", "1/3", "1e400", "-1", "nan", "inf", "", " ", "\ud800",
     10**400, -(10**30), 2**63, 0, -0.0, 1e-300, 1e308, [], {}, [1], {"a": 1}]
)  # fmt: skip
_WEIRD_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            SQL,
            f"{SQL} WHERE {CHAIN}",
            SQL + " WHERE grp = '\ud800'",
            SQL + " WHERE " + "(" * 60 + "income > 1" + ")" * 60,
            SQL + " WHERE " + " + ".join(["income"] * 300) + " > 1",
            SQL + " WHERE " + "NOT " * 1_000 + "income > 1",
            SQL + " WHERE income IN (" + ", ".join(str(i) for i in range(5_000)) + ")",
            SQL + " WHERE income > " + "9" * 4_000,
            "\x00\x01\xff" * 10,
            "SELECT COUNT(*) AS n FROM people; DROP TABLE people",
        ]
    ),
)
_FIELDS = {
    "epsilon": _WEIRD_NUMBERS,
    "delta": _WEIRD_NUMBERS,
    "max_groups": _WEIRD_NUMBERS,
    "max_rows_per_group": _WEIRD_NUMBERS,
    "consistent": _WEIRD_NUMBERS,
    "bounds": st.one_of(_WEIRD_NUMBERS, st.just({"income": [True, "1e9"]})),
    "sql": _WEIRD_TEXT,
    "dataset": st.one_of(_WEIRD_NUMBERS, st.sampled_from(["people", "\ud800", "x" * 300])),
}


@settings(
    max_examples=100,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    changes=st.dictionaries(st.sampled_from(sorted(_FIELDS)), st.none(), max_size=4).flatmap(
        lambda keys: st.fixed_dictionaries({k: _FIELDS[k] for k in keys})
    ),
    path=st.sampled_from(["/v1/query", "/v1/query?async=true", "/v1/explain"]),
)
def test_any_body_answers_a_documented_problem_or_an_answer_and_refusals_are_free(
    service: Service, changes: dict[str, Any], path: str
) -> None:
    before = _remaining(service)
    code, body = _post(service, path, QUERY | changes)
    assert code < 500, body
    if code >= 400:
        assert body["type"] in _DOCUMENTED, body
        assert body["status"] == code
        assert _remaining(service) == before
