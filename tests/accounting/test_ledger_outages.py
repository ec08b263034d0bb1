"""The ledger's database failing (issue 34): one error for every failure, and a charge whose
fate the database alone knows said so, with the charge's id.

The failures are real: PostgreSQL refuses or loses a COMMIT raised by a deferred constraint
trigger (the error class chosen by the test: ``08006`` a lost connection, ``40001`` a refused
serialisation), and SQLite runs out of pages (``max_page_count``, SQLite's own ``SQLITE_FULL``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import pytest
from sqlalchemy import event

from veil import (
    Budget,
    Ledger,
    LedgerUnavailableError,
    ReservationStateError,
    UnsettledChargeError,
)
from veil.accounting.failures import surely_not_committed
from veil.accounting.grouping import GroupCommit

# -- which failed COMMITs may have committed ------------------------------------------------


def _sqlite_error(setup: str, failing: str) -> sqlite3.Error:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(setup)
    try:
        db.executescript(failing)
    except sqlite3.Error as exc:
        return exc
    finally:
        db.close()
    raise AssertionError("the statement did not fail")


def test_a_full_busy_or_constrained_sqlite_commit_surely_did_not_commit() -> None:
    full = _sqlite_error(
        "PRAGMA max_page_count = 2; CREATE TABLE t (x TEXT);",
        "INSERT INTO t VALUES (zeroblob(100000));",
    )
    assert full.sqlite_errorcode == 13  # type: ignore[attr-defined]
    constrained = _sqlite_error(  # a foreign key checked at COMMIT
        "PRAGMA foreign_keys = ON; CREATE TABLE p (id INTEGER PRIMARY KEY); "
        "CREATE TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        "BEGIN; INSERT INTO c VALUES (5); COMMIT;",
    )
    assert constrained.sqlite_errorcode & 0xFF == 19  # type: ignore[attr-defined]
    assert surely_not_committed(full)
    assert surely_not_committed(constrained)
    io = sqlite3.OperationalError("disk I/O error")  # as SQLite raises a failed sync
    io.sqlite_errorcode = 10 | (4 << 8)  # type: ignore[attr-defined]  # SQLITE_IOERR_FSYNC
    assert not surely_not_committed(io)
    assert not surely_not_committed(ValueError("anything else"))  # unknown: it may have


# -- PostgreSQL: a COMMIT refused or lost ---------------------------------------------------


@contextmanager
def _failing_commits(url: str, when: str, errcode: str, on: str = "INSERT") -> Iterator[None]:
    """A deferred constraint trigger that fails the COMMIT of any transaction whose ``on`` of
    an event row matches ``when`` (a condition on NEW), with SQLSTATE ``errcode``."""
    with Ledger(url) as ledger, ledger._engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION veil_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected failure' USING ERRCODE = TG_ARGV[0]; END $$"
        )
        conn.exec_driver_sql(
            f"CREATE CONSTRAINT TRIGGER veil_test_fail AFTER {on} ON veil_events DEFERRABLE "
            f"INITIALLY DEFERRED FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION "
            f"veil_test_fail('{errcode}')"
        )
    yield


@pytest.mark.postgres
def test_a_reserve_whose_commit_is_lost_is_unsettled_and_names_its_charge(pg_url: str) -> None:
    with Ledger(pg_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    with _failing_commits(pg_url, "NEW.fingerprint = 'doomed'", "08006"), Ledger(pg_url) as ledger:
        with pytest.raises(UnsettledChargeError, match="may or may not have been made") as info:
            ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="doomed")
        error = info.value
        assert isinstance(error.reservation, int)
        assert error.fingerprint == "doomed"
        assert "may stand" in error.public
        assert "postgresql" not in error.public
        # resolvable: this time the database did not keep it, and nothing is spent
        assert ledger.charge(error.reservation) is None
        assert ledger.remaining("alice", "people") == Budget(epsilon=1)
        ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="fine").commit()
        assert ledger.check("alice", "people").epsilon == Fraction(1, 4)


@pytest.mark.postgres
def test_a_commit_the_server_refused_is_unavailable_and_charges_nothing(pg_url: str) -> None:
    with Ledger(pg_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    with _failing_commits(pg_url, "NEW.fingerprint = 'doomed'", "40001"), Ledger(pg_url) as ledger:
        with pytest.raises(LedgerUnavailableError, match="nothing was written") as info:
            ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="doomed")
        assert not isinstance(info.value, UnsettledChargeError)
        assert ledger.remaining("alice", "people") == Budget(epsilon=1)
        assert [r.event for r in ledger.history("alice", "people")] == ["grant"]


@pytest.mark.postgres
@pytest.mark.parametrize(("status", "settle"), [("committed", "commit"), ("refunded", "refund")])
def test_a_commit_or_refund_the_database_loses_leaves_the_charge_standing(
    pg_url: str, status: str, settle: str
) -> None:
    with Ledger(pg_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    when = f"NEW.status = '{status}' AND NEW.fingerprint = 'q'"
    with _failing_commits(pg_url, when, "08006", on="UPDATE"), Ledger(pg_url) as ledger:
        r = ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="q")
        doing = "committing" if settle == "commit" else "refunding"
        with pytest.raises(UnsettledChargeError, match=f"while {doing} reservation") as info:
            getattr(r, settle)()
        assert (info.value.reservation, info.value.fingerprint) == (r.id, "q")
        found = ledger.charge(r.id)
        assert found is not None
        assert found.status == "reserved"
        assert ledger.remaining("alice", "people") == Budget(epsilon="3/4")
        assert ledger.verify() == []


# -- SQLite: out of space --------------------------------------------------------------------


def test_a_full_sqlite_ledger_refuses_charges_and_charges_nothing(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=100))
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()

    def limit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {int(pages) + 2}")

    with Ledger(sqlite_url) as ledger:
        event.listen(ledger._engine, "connect", limit)
        ledger._engine.dispose()  # every connection from now on (the writer's) has the limit
        charged: list[int] = []

        def charge_until_full() -> None:
            for i in range(10_000):
                text = "x" * 2000  # each charge's text takes pages
                r = ledger.reserve(
                    "alice", "people", Budget(epsilon="1/1000"), fingerprint=f"q{i}", query=text
                )
                charged.append(r.id)

        with pytest.raises(LedgerUnavailableError, match="database or disk is full") as info:
            charge_until_full()
        assert not isinstance(info.value, UnsettledChargeError)  # SQLITE_FULL: not committed
        event.remove(ledger._engine, "connect", limit)
        ledger._engine.dispose()
    with Ledger(sqlite_url) as ledger:  # what was charged is exactly what reserve returned
        live = [r.id for r in ledger.history("alice", "people") if r.event == "charge"]
        assert live == charged
        assert ledger.check("alice", "people").epsilon == Fraction(len(charged), 1000)
        assert ledger.verify() == []


# -- group commit: a batch whose COMMIT may have committed is not run again ----------------


class _Unsure(Exception):
    pass


def _batch(error: BaseException | None) -> tuple[list[str], list[object]]:
    """Three operations in one batch of a GroupCommit whose first transaction raises ``error``
    as it commits; which transactions ran the operations, and what each caller got."""
    ran: list[str] = []
    transactions = iter(range(100))

    @contextmanager
    def transaction() -> Iterator[str]:
        name = f"t{next(transactions)}"
        yield name
        if name == "t0" and error is not None:
            raise error

    group = GroupCommit(transaction, (), final=(_Unsure,))
    got: list[object] = [None] * 3

    def call(i: int) -> None:
        try:
            got[i] = group.run(lambda cur: ran.append(f"{cur}:{i}") or i)
        except Exception as exc:
            got[i] = exc

    with group.paused() as queue:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        while len(queue) < 3:
            threading.Event().wait(0.001)
    for t in threads:
        t.join()
    return ran, got


def test_a_batch_whose_commit_may_have_committed_fails_whole_and_runs_nothing_again() -> None:
    ran, got = _batch(_Unsure("the connection was lost during COMMIT"))
    assert sorted(ran) == ["t0:0", "t0:1", "t0:2"]  # once each, in the one batch
    assert all(isinstance(g, _Unsure) for g in got)
    ran, got = _batch(RuntimeError("a statement failed"))  # rolled back: each alone again
    assert sorted(ran)[:3] == ["t0:0", "t0:1", "t0:2"]
    assert len(ran) == 6
    assert sorted(r.split(":")[0] for r in ran[3:]) == ["t1", "t2", "t3"]


# -- the reservations a thread makes ----------------------------------------------------------


def test_tracking_lists_the_reservations_this_thread_makes_in_the_block() -> None:
    with Ledger("sqlite://") as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        other: list[int] = []
        with ledger.tracking() as made:
            first = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="a")
            with ledger.tracking() as inner:
                second = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="b")
            thread = threading.Thread(
                target=lambda: other.append(
                    ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="c").id
                )
            )
            thread.start()
            thread.join()
        after = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="d")
        assert [r.id for r in made] == [first.id, second.id]  # not the other thread's
        assert [r.id for r in inner] == [second.id]
        assert other
        assert other[0] not in {r.id for r in made}
        assert after not in made


# -- a ledger object whose running sums failed their check ----------------------------------


def test_an_abandoned_reservation_cannot_commit_nor_refund(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        r = ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="q")
        assert ledger.abandon_stale(1e-6) == [r.id]
        for settle in (r.commit, r.refund):
            with pytest.raises(ReservationStateError, match="resolved as abandoned"):
                settle()
        assert ledger.remaining("alice", "people") == Budget(epsilon="3/4")


def test_a_reservation_the_ledger_does_not_hold_is_refused_without_naming_the_ledger(
    sqlite_url: str,
) -> None:
    """Its words may reach an analyst (the service answers a ReservationStateError after
    the engine read the data as ``query-failed``, quoting it): no path, no URL."""
    from veil.accounting.reservation import Reservation

    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        stray = Reservation(ledger, 10**6, "alice", "people", Budget(epsilon="1/4"), "q", "")
        for settle in (stray.commit, stray.refund):
            with pytest.raises(ReservationStateError, match="is not in this ledger") as info:
                settle()
            assert "ledger.db" not in str(info.value)
