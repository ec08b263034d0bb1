"""Every problem type the service answers with becomes its veil exception (by the ``type``
URN), and a 503 is retried for a read, never for a query. The problem bodies are the
service's own (``veil.service.problems``); the 503s come from an httpx ``MockTransport``
standing in for an overloaded proxy."""

from __future__ import annotations

import httpx
import pytest

import veil
from veil.client import ERRORS, Client
from veil.client.errors import Asked, problem_error
from veil.errors import (
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    RateLimitedError,
    ServiceError,
    ServiceUnavailableError,
    UnknownDatasetError,
    UnsupportedQueryError,
)
from veil.service.problems import PROBLEMS, Problem, from_error

EXTENSIONS = {
    "budget-exhausted": from_error(
        BudgetExhaustedError(veil.Budget(epsilon=1), veil.Budget(epsilon="1/3"))
    ).extensions,
    "unsupported-query": {"line": 2, "column": 7},
    "invalid-request": {"errors": [{"loc": ["body", "epsilon"], "msg": "not a number"}]},
}


@pytest.mark.parametrize("slug", sorted(PROBLEMS))
def test_each_problem_type_becomes_its_exception(slug: str) -> None:
    body = Problem(slug, f"the {slug} detail", EXTENSIONS.get(slug)).body()
    error = problem_error(PROBLEMS[slug].status, body, {"Retry-After": "7"}, Asked("people"))
    assert isinstance(error, ERRORS[slug])
    assert "detail" in str(error) or slug == "not-found"


def test_the_extension_members_are_carried() -> None:
    exhausted = problem_error(
        403, Problem("budget-exhausted", "d", EXTENSIONS["budget-exhausted"]).body()
    )
    assert isinstance(exhausted, BudgetExhaustedError)
    assert exhausted.requested == veil.Budget(epsilon=1)
    assert exhausted.remaining == veil.Budget(epsilon="1/3")
    assert str(exhausted) == "d"
    assert exhausted.for_cli() == "d"
    where = EXTENSIONS["unsupported-query"]
    unsupported = problem_error(400, Problem("unsupported-query", "u", where).body())
    assert isinstance(unsupported, UnsupportedQueryError)
    assert unsupported.position == (2, 7)
    fields = EXTENSIONS["invalid-request"]
    invalid = problem_error(422, Problem("invalid-request", "bad", fields).body())
    assert str(invalid) == "bad (body.epsilon: not a number)"
    limited = problem_error(429, Problem("rate-limited", "slow down").body(), {"retry-after": "12"})
    assert isinstance(limited, RateLimitedError)
    assert limited.retry_after == 12


def test_a_not_found_is_worded_by_what_was_asked() -> None:
    body = Problem("not-found", "no such dataset").body()
    assert isinstance(problem_error(404, body, asked=Asked("people")), UnknownDatasetError)
    job = problem_error(404, Problem("not-found", "no such job").body(), asked=Asked(job="j"))
    assert isinstance(job, InvalidArgumentError)
    assert "no job 'j'" in str(job)
    wrong_url = problem_error(404, Problem("not-found", "Not Found").body())
    assert type(wrong_url) is ServiceError


def test_unknown_or_malformed_problems_are_service_errors() -> None:
    future = problem_error(418, {"type": "urn:veil:problem:teapot", "detail": "short and stout"})
    assert type(future) is ServiceError
    assert "teapot" in str(future)
    empty = problem_error(403, {"type": "urn:veil:problem:budget-exhausted", "detail": "x"})
    assert type(empty) is ServiceError
    assert "without budgets" in str(empty)
    other = problem_error(500, {"type": "about:blank", "title": "Internal Server Error"})
    assert type(other) is ServiceError
    assert isinstance(problem_error(500, Problem("internal-error", "bug").body()), InternalError)


def test_a_503_is_tried_again_for_a_read_and_never_for_a_query() -> None:
    calls: list[str] = []
    unavailable = Problem("unavailable", "the ledger is unavailable; retry later").body()

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) == 1 or request.method == "POST":
            return httpx.Response(503, json=unavailable)
        return httpx.Response(200, json={"analyst": "a", "budgets": []})

    with Client("http://127.0.0.1:9", "k", transport=httpx.MockTransport(answer)) as c:
        assert c.budget() == []
        assert calls == ["GET", "GET"]
        with pytest.raises(ServiceUnavailableError, match="ledger is unavailable"):
            c.query("people", "SELECT COUNT(*) FROM people", epsilon=0.1)
        assert calls == ["GET", "GET", "POST"]
