"""A worker shows a cached answer again without a session (veil.service.hot), and only while
every fact that answer depends on is unchanged: the key, the grant, the catalog entry, the
data. Each test asks the same query until it is shown from the worker's memory, changes one
fact, and checks that the answer is then what the full path gives."""

from __future__ import annotations

import os
import time
from fractions import Fraction
from typing import Any

import pytest

import veil
from service_support import SQL, Service, write_people
from veil.catalog import Source
from veil.service.state import ServiceState


def _ask(service: Service, who: str = "alice", sql: str = SQL) -> tuple[int, dict[str, Any]]:
    r = service.client.post(
        "/v1/query",
        json={"dataset": "people", "sql": sql, "epsilon": "1/2"},
        headers=service.headers(who),
    )
    return r.status_code, r.json()


def _hits(service: Service) -> int:
    service.ledger.flush_cache_hits()
    return sum(r.event == "cache_hit" for r in service.ledger.history("alice", "people"))


def _kept(service: Service) -> int:
    return len(service.client.app.state.veil.hot)  # type: ignore[attr-defined]


def _shown_from_memory(service: Service) -> dict[str, Any]:
    """Ask until the worker keeps the cached answer (the first release, then a ledger cache
    hit through the session); return that hit's body."""
    first_code, first = _ask(service)
    code, hit = _ask(service)
    assert (first_code, first["cached"], code, hit["cached"]) == (200, False, 200, True)
    assert _kept(service) == 1
    return hit


def test_an_answer_shown_again_is_the_full_paths_answer_with_its_hit_recorded(
    service: Service,
) -> None:
    hit = _shown_from_memory(service)
    before = _hits(service)
    code, again = _ask(service)
    assert code == 200
    assert again == hit  # the same body, byte for byte as JSON, remaining included
    assert _hits(service) == before + 1  # the history shows it, as for any cache hit


def test_the_remaining_budget_shown_again_is_read_fresh(service: Service) -> None:
    _shown_from_memory(service)
    other = "SELECT COUNT(*) AS n FROM people WHERE income > 0"
    code, spent = _ask(service, sql=other)  # a charge the kept body knows nothing of
    assert (code, spent["cached"]) == (200, False)
    code, again = _ask(service)
    assert (code, again["cached"]) == (200, True)
    assert again["remaining"] == spent["remaining"]
    left = service.ledger.remaining("alice", "people")
    assert Fraction(again["remaining"]["epsilon"]) == left.epsilon


def test_a_revoked_key_is_refused_though_its_answer_is_kept(service: Service) -> None:
    _shown_from_memory(service)
    service.client.app.state.veil.principals.revoke("alice")  # type: ignore[attr-defined]
    code, body = _ask(service)
    assert code == 401, body


def test_another_analyst_is_not_shown_what_a_first_one_was_shown(service: Service) -> None:
    _shown_from_memory(service)
    code, body = _ask(service, who="bob")  # bob has no grant on people
    assert code == 404, body


def test_a_changed_catalog_entry_is_answered_by_the_full_path(service: Service) -> None:
    _shown_from_memory(service)
    spent = service.ledger.spent("alice", "people")
    catalog = service.client.app.state.veil.catalog  # type: ignore[attr-defined]
    catalog.add_dataset(
        "people",
        source=Source("file", path=str(service.dir / "people.parquet")),
        privacy_unit="user_id",
        bounds={"income": (0, 5_000)},  # the data owner narrows the bounds
        max_epsilon=2,
        replace=True,
    )
    code, body = _ask(service)
    assert (code, body["cached"]) == (200, False)  # a new measurement, charged
    assert service.ledger.spent("alice", "people").epsilon == spent.epsilon + Fraction(1, 2)


def test_changed_data_is_answered_by_the_full_path(service: Service) -> None:
    _shown_from_memory(service)
    path = service.dir / "people.parquet"
    write_people(path, rows=201)
    later = time.time_ns() + 2_000_000_000
    os.utime(path, ns=(later, later))  # a new version even within the clock's granularity
    code, body = _ask(service)
    assert (code, body["cached"]) == (200, False)


def test_a_changed_grant_is_answered_by_the_full_path(service: Service) -> None:
    _shown_from_memory(service)
    service.ledger.grant("alice", "people", veil.Budget(epsilon=1))  # a top-up
    code, body = _ask(service)  # the same measurement: still a cache hit, via the session
    assert (code, body["cached"]) == (200, True)
    assert (
        Fraction(body["remaining"]["epsilon"])
        == service.ledger.remaining("alice", "people").epsilon
    )


def test_an_answer_is_shown_again_from_a_query_thread_where_reads_are_round_trips(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the ledger is PostgreSQL the event loop reads nothing: the same answer is shown
    again from the query thread, its hit recorded."""
    monkeypatch.setattr(ServiceState, "ledger_reads_are_local", property(lambda _self: False))
    hit = _shown_from_memory(service)
    before = _hits(service)
    code, again = _ask(service)
    assert (code, again) == (200, hit)
    assert _hits(service) == before + 1
    service.client.app.state.veil.principals.revoke("alice")  # type: ignore[attr-defined]
    assert _ask(service)[0] == 401


def _raw(service: Service, who: str = "alice", **kwargs: Any) -> Any:
    # one request id for all (a proxy's): each answer echoes it, so the headers compare whole
    return service.client.post(
        "/v1/query",
        json={"dataset": "people", "sql": SQL, "epsilon": "1/2"},
        headers=service.headers(who) | {"X-Request-ID": "hot-route-test"},
        **kwargs,
    )


def test_the_hot_route_answers_the_full_paths_bytes_and_headers(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept answer shown before FastAPI's routing (veil.service.hotroute) carries the bytes
    and the headers the full path's cache hit carries, the remaining budget read fresh."""
    _shown_from_memory(service)
    hot = _raw(service)
    before = _hits(service)
    # the same request through FastAPI's route alone: the hot route stands aside
    monkeypatch.setattr("veil.service.hotroute.HotQueries._candidate", lambda _s, _scope: False)
    routed = _raw(service)
    assert _hits(service) == before + 1
    assert hot.status_code == routed.status_code == 200
    assert hot.content == routed.content
    assert sorted(hot.headers.items()) == sorted(routed.headers.items())


def test_refusals_on_the_hot_route_are_the_full_paths(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revoked key, a grant withdrawn: the problem documents (bodies and headers) of the
    hot route are those FastAPI's route gives."""
    _shown_from_memory(service)
    state = service.client.app.state.veil  # type: ignore[attr-defined]
    state.principals.revoke("alice")
    hot = _raw(service)
    monkeypatch.setattr("veil.service.hotroute.HotQueries._candidate", lambda _s, _scope: False)
    routed = _raw(service)
    assert hot.status_code == routed.status_code == 401
    assert hot.content == routed.content
    assert sorted(hot.headers.items()) == sorted(routed.headers.items())


def test_a_request_the_hot_route_hands_on_is_counted_once_by_the_rate_limit(
    make_service: Any,
) -> None:
    """When the kept answer is gone (the data changed) the hot route hands the checked
    request to FastAPI's route, which does not check the key (nor take a token) again: with a
    limit of N per minute exactly N requests pass."""
    from veil.service.config import ServiceLimits

    service = make_service(ServiceLimits(rate_limit=6))
    _shown_from_memory(service)  # requests 1 and 2; the answer is kept
    path = service.dir / "people.parquet"
    for i in range(3):  # requests 3, 5, 6: the kept answer's data changed, handed on
        write_people(path, rows=201 + i)
        later = time.time_ns() + (i + 2) * 2_000_000_000
        os.utime(path, ns=(later, later))
        r = _raw(service)
        assert (r.status_code, r.json()["cached"]) == (200, False)
        if i == 0:  # request 4: the old version's answer is still kept, so handed on too
            assert _raw(service).json()["cached"] is True
    # six requests taken (one token each, though four went through both routes)
    r = _raw(service)
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1


def test_bodies_the_hot_route_does_not_take_go_to_fastapi(service: Service) -> None:
    """A query string (``?async=true``), another content type: FastAPI's route answers."""
    _shown_from_memory(service)
    r = service.client.post(
        "/v1/query?async=true",
        json={"dataset": "people", "sql": SQL, "epsilon": "1/2"},
        headers=service.headers("alice"),
    )
    assert r.status_code == 202, r.text
    r = service.client.post(
        "/v1/query",
        content=b'{"dataset": "people", "sql": "x", "epsilon": "1/2"}',
        headers={**service.headers("alice"), "Content-Type": "text/plain"},
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
