"""Administration of the ledger: grants, thresholds, URLs, consistency checks."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from fractions import Fraction
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from ledger_support import start_forked
from veil import Budget, InvalidArgumentError, Ledger, LedgerError, LedgerUnavailableError
from veil.accounting import Alert

_fork = mp.get_context("fork")


def test_a_zcdp_grant_tops_up_and_new_thresholds_replace_the_old(ledger: Ledger) -> None:
    seen: list[Alert] = []
    ledger.on_alert(seen.append)
    ledger.grant("alice", "people", Budget(rho=0.5))
    assert ledger.grant("alice", "people", Budget(rho=0.5), alert_thresholds=[0.9]) == Budget(rho=1)
    ledger.reserve("alice", "people", Budget(rho=0.85), fingerprint="q")
    assert seen == []
    ledger.reserve("alice", "people", Budget(rho=0.05), fingerprint="q")
    assert [a.threshold for a in seen] == [Fraction(9, 10)]


def test_names_and_arguments_are_checked(ledger: Ledger) -> None:
    with pytest.raises(InvalidArgumentError, match="analyst must be at most 200 characters"):
        ledger.grant("a" * 201, "people", Budget(epsilon=1))
    with pytest.raises(InvalidArgumentError, match="alert_thresholds must be a list"):
        ledger.grant("alice", "people", Budget(epsilon=1), alert_thresholds="50%")  # type: ignore[arg-type]
    ledger.grant("alice", "people", Budget(epsilon=1))
    with pytest.raises(InvalidArgumentError, match="data_version must be a string, got 3"):
        ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint="q", data_version=3)  # type: ignore[arg-type]


def test_reprs_name_the_ledger_and_the_reservation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Ledger(url) as ledger:
        assert repr(ledger) == f"Ledger({url!r})"
        ledger.grant("alice", "people", Budget(epsilon=1))
        r = ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q")
        assert repr(r) == (
            f"Reservation(id={r.id}, analyst='alice', dataset='people', "
            "loss=Budget(epsilon=0.5), status='reserved')"
        )


def test_a_postgresql_password_never_appears_in_messages() -> None:
    with pytest.raises(LedgerUnavailableError) as info:
        Ledger("postgresql://user:s3cret@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret" not in str(info.value)
    assert "***" in str(info.value)


def test_the_postgres_scheme_alias_is_accepted(pg_url: str) -> None:
    alias = pg_url.replace("postgresql://", "postgres://", 1)
    with Ledger(alias) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        assert ledger.remaining("alice", "people") == Budget(epsilon=1)


def test_only_the_default_sqlite_driver_is_used() -> None:
    with pytest.raises(LedgerError, match="use the default SQLite driver"):
        Ledger("sqlite+pysqlcipher:///x.db")


def test_check_finds_running_sums_that_disagree_with_the_records(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q").commit()
        assert ledger.check("alice", "people").epsilon == Fraction(1, 2)
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with db:
        db.execute("UPDATE veil_budgets SET spent_epsilon = '1/4'")  # tampered with
    db.close()
    with Ledger(sqlite_url) as ledger, pytest.raises(LedgerError, match="ledger inconsistency"):
        ledger.check("alice", "people")


def test_the_csv_export_can_be_written_to_a_file(ledger: Ledger, tmp_path: Path) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    text = ledger.export_csv(tmp_path / "audit.csv")
    assert (tmp_path / "audit.csv").read_text() == text
    assert text.splitlines()[0].startswith("id,at,analyst,dataset,event,status")


def _grant_once(url: str, start: Any, out: Connection) -> None:
    try:
        with Ledger(url) as ledger:
            start.wait(timeout=60)
            ledger.grant("alice", "people", Budget(epsilon="1/8"))
        out.send("ok")
    except Exception as exc:  # reported to the parent
        out.send(repr(exc))


@pytest.mark.system
@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_processes_granting_one_new_budget_at_once_all_count(
    storage: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue("sqlite_url" if storage == "sqlite" else "pg_url")
    Ledger(url).close()  # the schema exists; the grant row does not
    start = _fork.Barrier(6)
    pipes = [_fork.Pipe(duplex=False) for _ in range(6)]
    procs = [_fork.Process(target=_grant_once, args=(url, start, w)) for _, w in pipes]
    for p in procs:
        start_forked(p)
    results = [r.recv() for r, _ in pipes]
    for p in procs:
        p.join(timeout=60)
    assert results == ["ok"] * 6
    with Ledger(url) as ledger:
        assert ledger.granted("alice", "people") == Budget(epsilon=Fraction(6, 8))
        assert [h.event for h in ledger.history("alice", "people")] == ["grant"] * 6
