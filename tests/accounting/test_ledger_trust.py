"""A ledger is never silently created nor trusted blindly (issue 34).

- What is not a veil ledger is refused, unless ``Ledger.initialise`` (``veil ledger init``)
  makes a new one where there is nothing to lose (an empty file or database).
- ``verify`` recomputes every grant's and cap's running sums from its live charges; a
  mismatch (a rewritten cell) stops charging.
- ``abandon_stale`` resolves reservations whose worker is gone: still charged, never released.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import pytest

from veil import (
    Budget,
    InvalidArgumentError,
    Ledger,
    LedgerError,
    LedgerUnavailableError,
    ReservationStateError,
)
from veil.accounting.integrity import Mismatch
from veil.accounting.spending import Spent

# -- opening ---------------------------------------------------------------------------------


def test_an_empty_file_is_refused_and_initialise_makes_it_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "restored.db"
    path.touch()  # a copy or restore that failed
    url = f"sqlite:///{path}"
    for create in (True, False):
        with pytest.raises(LedgerError, match=r"is empty \(0 bytes\).*restore the ledger") as info:
            Ledger(url, create=create)
        assert "veil.Ledger.initialise(URL)" in str(info.value)
        assert "veil ledger init --ledger URL" in info.value.for_cli()
    assert path.stat().st_size == 0  # refused: nothing written
    with Ledger.initialise(url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    with Ledger(url, create=False) as ledger:
        assert ledger.remaining("alice", "people") == Budget(epsilon=1)
    with Ledger.initialise(url) as again:  # a ledger already: opened, never emptied
        assert again.remaining("alice", "people") == Budget(epsilon=1)


def test_a_file_that_is_not_sqlite_is_refused_even_by_initialise(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, but someone's notes\n" * 200)
    for open_it in (Ledger, Ledger.initialise):
        with pytest.raises(LedgerError, match="is not a veil ledger: it is not a SQLite database"):
            open_it(f"sqlite:///{path}")
    assert path.read_text().startswith("not a database")


def test_another_applications_sqlite_database_is_refused_even_by_initialise(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    db.close()
    for open_it in (Ledger, Ledger.initialise):
        with pytest.raises(LedgerError, match="it holds the tables orders and none of veil's"):
            open_it(f"sqlite:///{path}")
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert tables == {"orders"}


def test_a_sqlite_database_without_tables_is_made_a_ledger_by_initialise_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "blank.db"
    sqlite3.connect(path).execute("PRAGMA user_version = 1").connection.close()
    with pytest.raises(LedgerError, match=r"an empty SQLite database \(no tables\)"):
        Ledger(f"sqlite:///{path}")
    with Ledger.initialise(f"sqlite:///{path}") as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("DROP TABLE veil_schema_version", "it holds veil_alerts, .* but no schema version"),
        ("DELETE FROM veil_schema_version", "its schema version table is empty"),
    ],
)
def test_a_damaged_ledger_is_refused_and_never_repaired(
    sqlite_url: str, damage: str, says: str
) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.execute(damage)
    db.close()
    for open_it in (Ledger, Ledger.initialise):
        with pytest.raises(LedgerError, match=f"is a damaged veil ledger: {says}.*backup"):
            open_it(sqlite_url)
    with sqlite3.connect(path) as db:  # still as it was found
        assert db.execute("SELECT count(*) FROM veil_budgets").fetchone() == (1,)
    db.close()


@pytest.mark.postgres
def test_a_postgresql_database_is_refused_when_damaged_and_shared_when_foreign(
    pg_url: str,
) -> None:
    from sqlalchemy import create_engine

    foreign = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with foreign.begin() as conn:  # another application's table, in the same database
        conn.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    with Ledger(pg_url) as ledger:  # a PostgreSQL database may hold others' tables
        ledger.grant("alice", "people", Budget(epsilon=1))
    with foreign.begin() as conn:
        conn.exec_driver_sql("DROP TABLE veil_schema_version")
    foreign.dispose()
    with pytest.raises(LedgerError, match="is a damaged veil ledger: it holds veil_alerts"):
        Ledger(pg_url)


def _create_and_grant(url: str, who: str) -> None:
    with Ledger(url) as ledger:
        ledger.grant(who, "people", Budget(epsilon=1))


@pytest.mark.system
def test_processes_creating_one_new_ledger_at_once_all_open_the_one_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_create_and_grant, args=(url, f"a{i}")) for i in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for w in workers:
            w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    with Ledger(url, create=False) as ledger:
        assert ledger.grants() == [(f"a{i}", "people") for i in range(4)]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


_WRITE_ONCE = """
import sys, veil
with veil.Ledger(sys.argv[1]) as ledger:
    ledger.reserve("alice", "people", veil.Budget(epsilon="1/8"), fingerprint="other").commit()
"""


@pytest.mark.system
def test_opening_a_ledger_again_keeps_this_processs_locks_on_it(sqlite_url: str) -> None:
    """Opening a ledger file must not open and close it outside SQLite: closing any descriptor
    of a file drops every POSIX lock the process holds on it, so another process closing its
    connection would take the WAL and its index away from this one's ("disk I/O error"). (The
    other process is a fresh interpreter: a forked one shares this one's SQLite lock table.)"""
    path = Path(sqlite_url.removeprefix("sqlite:///"))
    with Ledger(sqlite_url) as first:
        first.grant("alice", "people", Budget(epsilon=1))
        with Ledger(sqlite_url) as second:  # the same file, opened again in this process
            second.remaining("alice", "people")
            subprocess.run([sys.executable, "-c", _WRITE_ONCE, sqlite_url], check=True,
                           timeout=120)  # fmt: skip
            assert Path(f"{path}-wal").exists()
            assert Path(f"{path}-shm").exists()
            first.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="q").commit()
            second.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="r").commit()
        assert first.check("alice", "people").epsilon == Fraction(3, 8)


def test_a_new_ledger_file_gets_the_mode_sqlite_would_give_it(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        Ledger(f"sqlite:///{tmp_path / 'made.db'}").close()
    finally:
        os.umask(old)
    assert (tmp_path / "made.db").stat().st_mode & 0o777 == 0o644


# -- the running sums against the charges ---------------------------------------------------


def _tamper(url: str, sql: str) -> None:
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    with db:
        db.execute(sql)
    db.close()


def test_a_rewritten_running_sum_stops_charging(sqlite_url: str) -> None:
    """Issue 34: with the sum rewritten, ε = 2 was allowed on a grant of 1."""
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        ledger.reserve("alice", "people", Budget(epsilon=1), fingerprint="all").commit({"n": 7})
        assert ledger.verify() == []
    _tamper(sqlite_url, "UPDATE veil_budgets SET spent_epsilon = '0'")
    with Ledger(sqlite_url) as ledger:
        assert ledger.halted is None
        found = ledger.verify()
        assert found == [Mismatch("alice", "people", Spent(), Spent(epsilon=Fraction(1)))]
        assert "the grant of 'alice' on 'people': its charges sum to ε=1" in str(found[0])
        assert ledger.halted is not None
        assert "restore or correct" in ledger.halted
        with pytest.raises(LedgerUnavailableError, match="charging is stopped") as info:
            ledger.reserve("alice", "people", Budget(epsilon=1), fingerprint="more")
        assert "integrity check" in info.value.public
        assert "sqlite" not in info.value.public
        # what was answered is still shown (free), and nothing more was charged
        again = ledger.cached_answer(
            "alice", "people", fingerprint="all", data_version="", loss=Budget(epsilon=1)
        )
        assert again == {"n": 7}
        charges = [r for r in ledger.history("alice", "people") if r.event == "charge"]
        assert len(charges) == 1
    with Ledger(sqlite_url) as ledger:  # verify(halt=False) only reports
        assert len(ledger.verify(halt=False)) == 1
        assert ledger.halted is None


def test_a_rewritten_cap_is_found_too(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        ledger.grant("bob", "people", Budget(epsilon=1))
        ledger.cap_dataset("people", Budget(epsilon="3/2"))
        ledger.reserve("alice", "people", Budget(epsilon="1/2"), fingerprint="a").commit()
        ledger.reserve("bob", "people", Budget(epsilon="1/2"), fingerprint="b").commit()
        assert ledger.verify() == []
    _tamper(sqlite_url, "UPDATE veil_dataset_caps SET spent_epsilon = '1/2'")
    with Ledger(sqlite_url) as ledger:
        (found,) = ledger.verify()
        assert (found.analyst, found.dataset) == (None, "people")
        assert found.recomputed is not None
        assert found.recomputed.epsilon == 1
        assert str(found).startswith("the cap of dataset 'people'")


def test_the_check_sums_every_kind_as_the_reserves_did(ledger_url: str) -> None:
    """Many charges at a few losses, summed per distinct loss × count: exactly the running
    sums, including pure charges on a ρ grant (ε²/2 each — not (n·ε)²/2) and zCDP charges on
    an (ε, δ) grant; refunded charges are not counted, reserved and abandoned ones are."""
    with Ledger(ledger_url) as ledger:
        ledger.grant("zed", "d", Budget(rho=100))
        ledger.grant("amy", "d", Budget(epsilon=100, delta=Fraction(1, 10**5)))
        for i in range(7):
            ledger.reserve("zed", "d", Budget(epsilon="1/3"), fingerprint=f"z{i}").commit()
            ledger.reserve("zed", "d", Budget(rho="1/7"), fingerprint=f"r{i}").commit()
            ledger.reserve("amy", "d", Budget(rho="1/100"), fingerprint=f"x{i}").commit()
            ledger.reserve("amy", "d", Budget(epsilon="1/9", delta=Fraction(1, 10**7)),
                           fingerprint=f"y{i}").commit()  # fmt: skip
        ledger.reserve("amy", "d", Budget(epsilon=1), fingerprint="gone").refund()
        ledger.reserve("amy", "d", Budget(epsilon=1), fingerprint="open")
        ledger.reserve("zed", "d", Budget(epsilon=1), fingerprint="left")
        assert len(ledger.abandon_stale(1e-6)) == 2
        assert ledger.verify() == []
        assert ledger.check("zed", "d").rho == 7 * Fraction(1, 18) + 1 + Fraction(1, 2)


def test_a_healthy_ledger_keeps_charging_after_its_check(ledger_url: str) -> None:
    with Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        assert ledger.verify() == []
        assert ledger.halted is None
        ledger.reserve("alice", "people", Budget(epsilon="1/2"), fingerprint="q").commit()


# -- reservations whose worker is gone ------------------------------------------------------


def test_stale_reservations_are_abandoned_still_charged_and_never_released(
    ledger_url: str,
) -> None:
    with Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        done = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="done")
        done.commit({"n": 1})
        given = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="given")
        given.refund()
        stale = ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="stale")
        assert ledger.abandon_stale(3600) == []  # not an hour old: left alone
        assert ledger.abandon_stale(1e-6) == [stale.id]
        assert ledger.abandon_stale(1e-6) == []  # once
        fresh = ledger.reserve("alice", "people", Budget(epsilon="1/8"), fingerprint="fresh")
        status = {r.fingerprint: r.status for r in ledger.history("alice", "people")}
        assert status == {None: None, "done": "committed", "given": "refunded",
                          "stale": "abandoned", "fresh": "reserved"}  # fmt: skip
        found = ledger.charge(stale.id)
        assert found is not None
        assert found.detail is not None
        assert "no answer was or will be released" in found.detail
        assert ledger.remaining("alice", "people") == Budget(epsilon="1/2")  # still charged
        assert ledger.check("alice", "people").epsilon == Fraction(1, 2)
        with pytest.raises(ReservationStateError, match="abandoned"):
            stale.commit({"n": 2})
        assert (
            ledger.cached_answer(
                "alice", "people", fingerprint="stale", data_version="", loss=Budget(epsilon="1/4")
            )
            is None
        )
        fresh.commit()


@pytest.mark.parametrize("seconds", [0, -1, True, "60", float("nan")])
def test_the_age_of_a_stale_reservation_must_be_a_positive_number(seconds: object) -> None:
    with (
        Ledger("sqlite://") as ledger,
        pytest.raises(InvalidArgumentError, match="positive number of seconds"),
    ):
        ledger.abandon_stale(seconds)  # type: ignore[arg-type]


def test_charges_a_rewritten_grant_cannot_pay_for_are_a_mismatch(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("zed", "d", Budget(rho=1))
        ledger.reserve("zed", "d", Budget(rho="1/4"), fingerprint="z").commit()
    # a ρ grant rewritten as a pure ε one: its zCDP charge gives no pure guarantee
    _tamper(sqlite_url, "UPDATE veil_budgets SET kind = 'pure', epsilon = '1', rho = NULL")
    with Ledger(sqlite_url) as ledger:
        (found,) = ledger.verify()
        assert found.recomputed is None
        assert "its charges cannot be summed" in str(found)
