"""The Python client when the service's ledger fails (issue 34): ``outcome-unknown`` is an
:class:`OutcomeUnknownError` naming the charge, never sent again; a job that cannot be read is
one too, never "retry later"; a charge is looked up by its id; the history comes a page at a
time. The answers are the service's own problem bodies, from an httpx ``MockTransport``."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from veil.client import Client
from veil.errors import InvalidArgumentError, OutcomeUnknownError, ServiceUnavailableError
from veil.service.problems import Problem, unknown_outcome

EVENT = {
    "id": 7,
    "at": "2025-01-02T03:04:05+00:00",
    "event": "charge",
    "status": "reserved",
    "loss": {"kind": "pure", "epsilon": 0.5, "delta": 0.0, "exact": {"epsilon": "1/2"}},
    "fingerprint": "fp7",
    "detail": None,
    "query": "SELECT COUNT(*) FROM people",
}


def _client(answer: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client("http://127.0.0.1:9", "k", transport=httpx.MockTransport(answer))


def test_outcome_unknown_names_the_charge_and_the_query_is_not_sent_again() -> None:
    sent: list[str] = []
    body = unknown_outcome(7, "fp7", "the ledger failed after reserving").body()

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(500, json=body)

    with _client(answer) as c, pytest.raises(OutcomeUnknownError) as info:
        c.query("people", "SELECT COUNT(*) FROM people", epsilon=0.5)
    assert sent == ["/v1/query"]
    error = info.value
    assert (error.reservation, error.fingerprint, error.job) == (7, "fp7", None)
    assert "client.charge(7, fingerprint='fp7')" in str(error)
    assert "'abandoned': charged, nothing was released" in str(error)


def test_a_charge_is_looked_up_by_its_id_and_fingerprint() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/charges/7":
            return httpx.Response(200, json={**EVENT, "dataset": "people"})
        return httpx.Response(404, json=Problem("not-found", "no such charge of yours").body())

    with _client(answer) as c:
        found = c.charge(7)
        assert found is not None
        assert (found.id, found.status, found.dataset) == (7, "reserved", "people")
        assert c.charge(7, fingerprint="fp7") == found
        assert c.charge(7, fingerprint="another") is None  # the id, reused by another query
        assert c.charge(8) is None


def test_a_job_that_cannot_be_read_is_outcome_unknown_not_retry_later() -> None:
    unavailable = Problem("unavailable", "the ledger's database is unavailable").body()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json={"job": "j1", "url": "/v1/jobs/j1", "state": "running"})
        return httpx.Response(503, json=unavailable)

    with _client(answer) as c, pytest.raises(OutcomeUnknownError, match="job j1") as info:
        c.query("people", "SELECT COUNT(*) FROM people", epsilon=0.5)
    assert info.value.job == "j1"
    assert not isinstance(info.value, ServiceUnavailableError)


def test_the_history_is_read_a_page_at_a_time() -> None:
    asked: list[dict[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        older = "before" in request.url.params
        return httpx.Response(
            200,
            json={
                "analyst": "alice",
                "dataset": "people",
                "remaining": EVENT["loss"],
                "history": [{**EVENT, "id": 3 if older else 7}],
                "next": None if older else "7",
            },
        )

    with _client(answer) as c:
        page = c.history("people", limit=1)
        assert [r.id for r in page] == [7]
        assert page.next == 7
        older = c.history("people", limit=1, before=page.next)
        assert [r.id for r in older] == [3]
        assert older.next is None
        assert asked == [
            {"dataset": "people", "limit": "1"},
            {"dataset": "people", "limit": "1", "before": "7"},
        ]
        with pytest.raises(InvalidArgumentError, match="from 1 to 1000"):
            c.history("people", limit=5000)
        assert len(asked) == 2  # refused before sending
