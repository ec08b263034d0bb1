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
