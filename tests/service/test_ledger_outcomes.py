"""What the service answers when its ledger fails or is not to be trusted (issue 34).

- Every failure of the ledger's database is ``unavailable`` (503), its detail free of the
  database's URL or path (the operator's log has them), and nothing was charged.
- A failure after the request's charge was reserved is ``outcome-unknown`` (500), with the
  charge's ``reservation`` and ``fingerprint``; ``GET /v1/charges/{id}`` then says what became
  of it. A committed charge is never answered with a 503.
- A ledger whose running sums fail their check stops charging (503), free.

PostgreSQL's COMMITs are failed for real by a deferred constraint trigger (``08006``: the
connection lost as the server committed, so the outcome is the server's alone to know).
"""

from __future__ import annotations

import logging
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

import veil
from service.server import postgres_ledger
from service_support import SQL, Service, start, write_people
from veil.catalog import Source
from veil.errors import (
    InternalError,
    InvalidArgumentError,
    LedgerUnavailableError,
    ReservationStateError,
    UnsettledChargeError,
)
from veil.service.app import create_app
from veil.service.config import ServiceConfig, ServiceLimits
from veil.service.problems import from_error

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

# -- the problem of each failure ----------------------------------------------------------


def _reservations(n: int, *, refund: bool = False) -> list[Any]:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    made = [
        ledger.reserve("alice", "people", veil.Budget(epsilon="1/8"), fingerprint=f"f{i}")
        for i in range(n)
    ]
    if refund:
        made[-1].refund()
    return made


def test_every_failure_of_the_database_is_unavailable_and_names_no_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[BaseException] = [
        LedgerUnavailableError("the ledger's database at sqlite:////srv/veil/ledger.db failed"),
        sqlite3.OperationalError("database or disk is full"),
        OperationalError("SELECT 1", {}, Exception("connection to 10.0.0.7 refused")),
    ]
    with caplog.at_level(logging.ERROR, logger="veil.service"):
        for failure in failures:
            problem = from_error(failure)
            assert (problem.slug, problem.type.status) == ("unavailable", 503)
            assert "retry later" in problem.detail
            for secret in ("/srv/veil", "10.0.0.7", "sqlite:", "disk is full"):
                assert secret not in problem.detail
    logged = caplog.text
    assert "/srv/veil/ledger.db" in logged  # for the operator
    assert "10.0.0.7" in logged


def test_a_failure_after_a_reservation_is_outcome_unknown_never_retry() -> None:
    unsettled = UnsettledChargeError("lost at commit", reservation=41, fingerprint="fp")
    problem = from_error(unsettled)
    assert (problem.slug, problem.type.status) == ("outcome-unknown", 500)
    assert problem.extensions == {"reservation": 41, "fingerprint": "fp"}
    assert "do not send the request again" in problem.detail
    made = _reservations(2)
    for after in (LedgerUnavailableError("down"), InternalError("a bug"), RuntimeError("?")):
        problem = from_error(after, made)
        assert problem.slug == "outcome-unknown"
        assert problem.extensions == {"reservation": made[-1].id, "fingerprint": "f1"}
    # a user error stays itself (the session refunds before raising one); so does anything
    # after a reservation that was refunded
    assert from_error(InvalidArgumentError("bad"), made).slug == "invalid-argument"
    refunded = _reservations(1, refund=True)
    assert from_error(LedgerUnavailableError("down"), refunded).slug == "unavailable"
    late = ReservationStateError("reservation 3 was resolved as abandoned …")
    assert from_error(late).slug == "query-failed"


# -- PostgreSQL failing its COMMITs under a real service ------------------------------------


def _fail_commits(ledger: veil.Ledger, when: str, on: str) -> None:
    with ledger._engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION veil_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '08006'; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE CONSTRAINT TRIGGER veil_test_fail AFTER {on} ON veil_events DEFERRABLE "
            f"INITIALLY DEFERRED FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION veil_test_fail()"
        )


@pytest.fixture
def pg_service(tmp_path: Path) -> Iterator[Service]:
    with postgres_ledger() as url:
        write_people(tmp_path / "people.parquet")
        app = create_app(ServiceConfig(ledger=url, limits=ServiceLimits()))
        state = app.state.veil
        state.catalog.add_dataset(
            "people",
            source=Source("file", path=str(tmp_path / "people.parquet")),
            privacy_unit="user_id",
            bounds={"income": (0, 10_000)},
            max_epsilon=2,
        )
        keys = {"alice": state.principals.add("alice"), "bob": state.principals.add("bob")}
        state.ledger.grant("alice", "people", veil.Budget(epsilon=5))
        state.ledger.grant("alice", "app", veil.Budget(epsilon=5))
        state.ledger.grant("bob", "people", veil.Budget(epsilon=5))
        with TestClient(app, raise_server_exceptions=False) as client:
            yield Service(client, keys, state.ledger, tmp_path)


def _ask(service: Service, epsilon: str, who: str = "alice") -> Any:
    return service.client.post(
        "/v1/query",
        json={"dataset": "people", "sql": SQL, "epsilon": epsilon},
        headers=service.headers(who),
    )


@pytest.mark.postgres
def test_a_reserve_lost_at_commit_is_outcome_unknown_and_resolvable(pg_service: Service) -> None:
    _fail_commits(pg_service.ledger, "NEW.epsilon = '1/7'", "INSERT")
    lost = _ask(pg_service, "1/7")
    assert lost.status_code == 500
    body = lost.json()
    assert body["type"] == "urn:veil:problem:outcome-unknown"
    assert isinstance(body["reservation"], int)
    assert isinstance(body["fingerprint"], str)
    assert "postgresql" not in lost.text
    assert "127.0.0.1" not in lost.text
    found = pg_service.client.get(
        f"/v1/charges/{body['reservation']}", headers=pg_service.headers("alice")
    )
    assert found.status_code == 404  # resolved: this time it was not kept, nothing charged
    assert pg_service.ledger.remaining("alice", "people") == veil.Budget(epsilon=5)
    assert _ask(pg_service, "1/2").status_code == 200  # other charges go on


@pytest.mark.postgres
def test_a_commit_lost_after_the_engine_read_is_outcome_unknown_and_stays_charged(
    pg_service: Service,
) -> None:
    _fail_commits(pg_service.ledger, "NEW.status = 'committed' AND NEW.epsilon = '1/7'", "UPDATE")
    lost = _ask(pg_service, "1/7")
    assert lost.status_code == 500
    body = lost.json()
    assert body["type"] == "urn:veil:problem:outcome-unknown"
    charge = pg_service.client.get(
        f"/v1/charges/{body['reservation']}", headers=pg_service.headers("alice")
    )
    assert charge.status_code == 200
    assert (charge.json()["status"], charge.json()["fingerprint"]) == (
        "reserved",
        body["fingerprint"],
    )
    assert charge.json()["dataset"] == "people"
    assert pg_service.ledger.remaining("alice", "people") == veil.Budget(epsilon=5 - Fraction(1, 7))
    # another analyst's charge answers exactly as one that does not exist
    theirs = pg_service.client.get(
        f"/v1/charges/{body['reservation']}", headers=pg_service.headers("bob")
    )
    assert theirs.status_code == 404
    assert theirs.json()["detail"] == "no such charge of yours"
    # a mechanism whose commit is lost: outcome-unknown too, its noisy values never shown
    noisy = pg_service.client.post(
        "/v1/mechanisms/laplace",
        json={"dataset": "app", "values": [3], "sensitivity": 1, "epsilon": "1/7"},
        headers=pg_service.headers("alice"),
    )
    assert noisy.status_code == 500
    assert noisy.json()["type"] == "urn:veil:problem:outcome-unknown"
    assert "values" not in noisy.json()


@pytest.mark.postgres
def test_a_database_error_below_veils_own_is_answered_and_the_connection_kept(
    pg_service: Service,
) -> None:
    """The principals' reads raise SQLAlchemy's own errors: answered 503 by a handler of their
    own. (The catch-all handler answers too, then re-raises, and the server drops the
    connection: the fault suite saw every such 503 followed by a reset.)"""
    with pg_service.ledger._engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE veil_principals CASCADE")
    strict = TestClient(pg_service.client.app, raise_server_exceptions=True)
    r = strict.get("/v1/budget", headers=pg_service.headers("alice"))
    assert r.status_code == 503
    assert r.json()["type"] == "urn:veil:problem:unavailable"
    assert "veil_principals" not in r.text


# -- a ledger that fails its check ----------------------------------------------------------


def test_a_ledger_whose_sums_were_rewritten_stops_charging_when_the_service_opens_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with start_and_close(tmp_path) as service:  # a first run charges ε = 1/2, answered
        first = _ask(service, "1/2")
        assert first.status_code == 200
        keys = service.keys
    db = sqlite3.connect(tmp_path / "ledger.db")
    with db:
        db.execute("UPDATE veil_budgets SET spent_epsilon = '0' WHERE analyst = 'alice'")
    db.close()
    with (
        caplog.at_level(logging.CRITICAL, logger="veil.ledger"),
        reopened(tmp_path, keys) as service,
    ):
        refused = _ask(service, "1")
        assert refused.status_code == 503
        assert refused.json()["type"] == "urn:veil:problem:unavailable"
        assert "charging is stopped" in refused.json()["detail"]
        assert "ledger.db" not in refused.text
        again = _ask(service, "1/2")  # the answer already released: shown again, free
        assert again.status_code == 200
        assert again.json()["cached"] is True
        charges = [r for r in service.ledger.history("alice", "people") if r.event == "charge"]
        assert len(charges) == 1  # nothing more was charged
    assert "charging stopped: the grant of 'alice' on 'people'" in caplog.text


def test_the_check_runs_again_while_the_service_serves(tmp_path: Path) -> None:
    limits = ServiceLimits(ledger_check_s=3600)
    with start_and_close(tmp_path, limits) as service:
        assert _ask(service, "1/2").status_code == 200
        db = sqlite3.connect(tmp_path / "ledger.db")
        with db:
            db.execute("UPDATE veil_budgets SET spent_epsilon = '0' WHERE analyst = 'alice'")
        db.close()
        upkeep = service.client.app.state.veil_upkeep
        upkeep.run_once()  # what the period's thread does
        assert _ask(service, "1").status_code == 503


def test_reservations_left_open_are_abandoned_by_the_service(tmp_path: Path) -> None:
    limits = ServiceLimits(reservation_ttl_s=1e-6, ledger_check_s=3600)
    with start_and_close(tmp_path, limits) as service:
        orphan = service.ledger.reserve(
            "alice", "people", veil.Budget(epsilon="1/4"), fingerprint="crashed"
        )
        service.client.app.state.veil_upkeep.run_once()
        found = service.client.get(f"/v1/charges/{orphan.id}", headers=service.headers("alice"))
        assert found.json()["status"] == "abandoned"
        assert "no answer was or will be released" in found.json()["detail"]


# -- the history a page at a time -----------------------------------------------------------


def test_the_history_is_paged_newest_first(service: Service) -> None:
    for i in range(5):
        assert _ask(service, f"1/{10 + i}").status_code == 200
    walked: list[int] = []
    params: dict[str, Any] = {"dataset": "people", "limit": 2}
    while True:
        page = service.client.get("/v1/history", params=params, headers=service.headers("alice"))
        assert page.status_code == 200
        body = page.json()
        assert len(body["history"]) <= 2
        walked += [e["id"] for e in body["history"]]
        if body["next"] is None:
            break
        params["before"] = body["next"]
    every = [r.id for r in reversed(service.ledger.history("alice", "people"))]
    assert walked == every
    for bad in ({"limit": 0}, {"limit": 1001}, {"before": "x"}, {"before": "-3"}):
        refused = service.client.get(
            "/v1/history", params={"dataset": "people", **bad}, headers=service.headers("alice")
        )
        assert refused.status_code == 422


@contextmanager
def start_and_close(tmp: Path, limits: ServiceLimits | None = None) -> Iterator[Service]:
    """A new service over a SQLite ledger in ``tmp`` (service_support.start), closed on exit."""
    running = start(tmp, limits)
    try:
        yield next(running)
    finally:
        for _ in running:
            pass


@contextmanager
def reopened(tmp: Path, keys: dict[str, str]) -> Iterator[Service]:
    """The service again over the ledger a :func:`start_and_close` left in ``tmp``."""
    app = create_app(ServiceConfig(ledger=f"sqlite:///{tmp / 'ledger.db'}"))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Service(client, keys, app.state.veil.ledger, tmp)
