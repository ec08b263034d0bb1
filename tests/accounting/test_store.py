"""The ledger's storage: versioned schema, migrations, exact numbers, the audit export."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from fractions import Fraction

import pytest
from sqlalchemy import Connection, text

from veil import Budget, Ledger, LedgerError
from veil.accounting import store


def _version(url: str) -> int:
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return int(db.execute("SELECT version FROM veil_schema_version").fetchone()[0])
    finally:
        db.close()


def test_a_new_ledger_records_its_schema_version(sqlite_url: str) -> None:
    Ledger(sqlite_url).close()
    assert _version(sqlite_url) == store.SCHEMA_VERSION


def _schema(conn: Connection) -> list[tuple[str, ...]]:
    rows = conn.exec_driver_sql(
        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
    )
    return [tuple(r) for r in rows]


def test_a_new_in_memory_ledger_has_the_schema_create_all_makes(sqlite_url: str) -> None:
    """An in-memory ledger's tables are created from statements compiled once per process,
    without looking for them first: the same tables, indexes and version as a new file's."""
    with Ledger(sqlite_url) as on_file, on_file._engine.connect() as conn:
        made = _schema(conn)
    for _ in range(2):  # the second from the statements already compiled
        with Ledger("sqlite://") as memory:
            with memory._engine.connect() as conn:
                assert _schema(conn) == made
                version = conn.exec_driver_sql("SELECT version FROM veil_schema_version").all()
                assert [tuple(r) for r in version] == [(store.SCHEMA_VERSION,)]
            memory.grant("alice", "people", Budget(epsilon=1))
            assert memory.remaining("alice", "people") == Budget(epsilon=1)
    assert any(kind == "index" for kind, *_ in made)
    engine, memory = store.open_engine("sqlite://")
    assert memory
    for _ in range(2):  # a database that holds the tables already: looked for, as on a file
        store.prepare_schema(engine, memory=True)
        with engine.connect() as conn:
            assert _schema(conn) == made
            assert conn.exec_driver_sql("SELECT count(*) FROM veil_schema_version").scalar() == 1
    engine.dispose()


def test_a_new_in_memory_ledger_starts_empty_whatever_earlier_ones_wrote() -> None:
    """The schema copied into each new in-memory ledger is a template nothing writes to: what
    one ledger grants, charges and caches is in no later one."""
    with Ledger("sqlite://") as first:
        first.grant("alice", "people", Budget(epsilon=1))
        first.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q").commit({"value": 1})
        with first._engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM veil_answers").scalar() == 1
    with Ledger("sqlite://") as second, second._engine.connect() as conn:
        assert not second.has_grant("alice", "people")
        for table in ("veil_budgets", "veil_events", "veil_answers", "veil_alerts"):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 0
        assert conn.exec_driver_sql("SELECT count(*) FROM veil_schema_version").scalar() == 1


def test_a_new_in_memory_ledger_has_the_current_schema_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The template an in-memory ledger's schema is copied from is the one of the schema
    version in force, not of the version a first ledger of the process was made at."""
    Ledger("sqlite://").close()  # the template of the current version exists
    later = store.SCHEMA_VERSION + 1
    monkeypatch.setattr(store, "SCHEMA_VERSION", later)
    with Ledger("sqlite://") as memory, memory._engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT version FROM veil_schema_version").all()
        assert [tuple(r) for r in version] == [(later,)]


def test_opening_an_older_ledger_runs_the_missing_migrations(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger(sqlite_url) as old:
        old.grant("alice", "people", Budget(epsilon=1))
        old.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q").commit()
    ran: list[int] = []

    def add_note_column(conn: Connection) -> None:
        ran.append(2)
        conn.execute(text("ALTER TABLE veil_budgets ADD COLUMN note TEXT"))

    # a later release: the next schema version, with its migration step
    later = store.SCHEMA_VERSION + 1
    monkeypatch.setattr(store, "SCHEMA_VERSION", later)
    monkeypatch.setitem(store.MIGRATIONS, later, add_note_column)
    with Ledger(sqlite_url) as new:
        assert new.remaining("alice", "people") == Budget(epsilon=0.5)
    assert ran == [2]
    assert _version(sqlite_url) == later
    with Ledger(sqlite_url):
        pass
    assert ran == [2]  # migrations run once


def test_a_ledger_without_a_migration_path_is_refused(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Ledger(sqlite_url).close()
    current = store.SCHEMA_VERSION
    monkeypatch.setattr(store, "SCHEMA_VERSION", current + 2)
    with pytest.raises(LedgerError, match=f"no migration to version {current + 1}"):
        Ledger(sqlite_url)
    assert _version(sqlite_url) == current


def test_a_version_1_ledger_gains_the_query_text_of_its_charges(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as led:
        led.grant("alice", "people", Budget(epsilon=1))
        led.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="old").commit()
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    db.execute("ALTER TABLE veil_events DROP COLUMN query_text")  # as version 1 had it
    db.execute("UPDATE veil_schema_version SET version = 1")
    db.commit()
    db.close()
    with Ledger(sqlite_url) as led:
        led.reserve(
            "alice", "people", Budget(epsilon=0.25), fingerprint="new", query="SELECT 1"
        ).commit()
        charges = [r for r in led.history("alice", "people") if r.event == "charge"]
    assert [(r.fingerprint, r.query) for r in charges] == [("old", None), ("new", "SELECT 1")]
    assert _version(sqlite_url) == store.SCHEMA_VERSION  # migrated through every version


def test_a_version_2_ledger_gains_the_catalog_caps_and_principals(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as led:
        led.grant("alice", "people", Budget(epsilon=1))
        led.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="old").commit()
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    for table in ("veil_datasets", "veil_dataset_caps", "veil_principals"):
        db.execute(f"DROP TABLE {table}")  # as version 2 had it
    db.execute("UPDATE veil_schema_version SET version = 2")
    db.commit()
    db.close()
    with Ledger(sqlite_url) as led:
        led.cap_dataset("people", Budget(epsilon=1))  # counts the old charge
        assert led.dataset_cap("people") == (Budget(epsilon=1), Budget(epsilon="0.75"))
        led.put_dataset("people", "{}")
        assert led.get_dataset("people") == "{}"
    assert _version(sqlite_url) == store.SCHEMA_VERSION  # and on through every later version


def test_losses_are_stored_as_exact_fractions_never_floats(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon="1/3", delta=1e-7))
    ledger.reserve("alice", "people", Budget(epsilon="1/7"), fingerprint="q").commit()
    data = json.loads(ledger.export_json())
    budget = data["budgets"][0]
    assert (budget["epsilon"], budget["delta"], budget["spent_epsilon"]) == (
        "1/3",
        "1/10000000",
        "1/7",
    )
    charge = data["events"][1]
    assert charge["epsilon"] == "1/7"
    assert ledger.remaining("alice", "people").eps == Fraction(1, 3) - Fraction(1, 7)


def test_the_csv_export_has_every_event_of_every_budget(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.grant("bob", "trips", Budget(rho=1))
    ledger.reserve("alice", "people", Budget(epsilon=0.6), fingerprint="q").commit({"x": 1})
    ledger.reserve("bob", "trips", Budget(rho=0.1), fingerprint="r").refund()
    ledger.cached_answer(
        "alice", "people", fingerprint="q", data_version="", loss=Budget(epsilon=0.6)
    )
    rows = list(csv.DictReader(io.StringIO(ledger.export_csv())))
    assert [(r["analyst"], r["event"], r["status"]) for r in rows] == [
        ("alice", "grant", ""),
        ("bob", "grant", ""),
        ("alice", "charge", "committed"),
        ("alice", "alert", ""),
        ("bob", "charge", "refunded"),
        ("alice", "cache_hit", ""),
    ]
    assert rows[2]["epsilon"] == "3/5"
    assert rows[4]["rho"] == "1/10"
    history = ledger.history("alice", "people") + ledger.history("bob", "trips")
    assert sorted(int(r["id"]) for r in rows) == sorted(h.id for h in history)
