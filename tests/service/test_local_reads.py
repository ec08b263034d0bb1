"""The service's raw SQLite reads (veil.service.reads) give what the SQLAlchemy reads give."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import veil
from veil.accounting.ledger import Ledger
from veil.errors import LedgerUnavailableError
from veil.service.principals import Principals
from veil.service.reads import LocalReads


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_keys_read_raw_are_the_principals_reads(ledger_url: str) -> None:
    principals = Principals(ledger_url)
    ledger = Ledger(ledger_url)
    reads = LocalReads(principals.engine)
    try:
        alice = principals.add("alice")
        admin = principals.add("root", role="admin")
        bob = principals.add("bob")
        principals.revoke("bob")
        rotated = principals.rotate("alice")
        for key in (alice, admin, bob, rotated, "", "x" * 10_000, "é", "not-a-key", alice[:-1]):
            assert reads.authenticate(key) == principals.authenticate(key), key
        assert reads.authenticate(rotated) is not None
        assert reads.authenticate(bob) is None
        ledger.grant("alice", "people", veil.Budget(epsilon=2))
        for analyst, dataset in (("alice", "people"), ("alice", "other"), ("carol", "people")):
            assert reads.standing(analyst, dataset) == ledger.standing(analyst, dataset)
        charge = ledger.reserve("alice", "people", veil.Budget(epsilon="1/3"), fingerprint="f")
        assert reads.standing("alice", "people") == ledger.standing("alice", "people")
        charge.commit()
        now = reads.standing("alice", "people")
        assert now == ledger.standing("alice", "people")
        assert now is not None
        assert now.remaining.epsilon == veil.Budget(epsilon="5/3").epsilon
    finally:
        reads.close()
        ledger.close()
        principals.close()


def test_the_raw_connections_cannot_write(ledger_url: str) -> None:
    principals = Principals(ledger_url)
    reads = LocalReads(principals.engine)
    try:
        reads.authenticate("x")
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
            reads._conn().execute("DELETE FROM veil_principals")
    finally:
        reads.close()
        principals.close()


def test_a_failing_database_is_unavailable(ledger_url: str, tmp_path: Path) -> None:
    principals = Principals(ledger_url)
    reads = LocalReads(principals.engine)
    try:
        reads.authenticate("x")
        reads._conn().close()  # a connection that can no longer read
        # the service's 503, never a 400 naming the file (issue 34)
        with pytest.raises(LedgerUnavailableError, match=r"the ledger's database at .* failed"):
            reads.standing("alice", "people")
    finally:
        reads.close()
        principals.close()


def test_only_a_sqlite_file() -> None:
    for url in ("sqlite://", "sqlite:///:memory:", "postgresql://user@127.0.0.1:5432/db"):
        engine = create_engine(url)  # nothing connects
        assert not LocalReads.usable(engine)
        with pytest.raises(ValueError, match="SQLite file"):
            LocalReads(engine)


def test_a_connection_of_a_thread_that_ended_is_closed(ledger_url: str) -> None:
    """Threads come and go (anyio's, which run FastAPI's sync dependencies, end when idle):
    each one's connection is closed once it has ended, so a long-running worker does not
    gather connections — and file descriptors — one per thread it ever had (issue 34's soak:
    +6 descriptors a minute before)."""
    import threading

    principals = Principals(ledger_url)
    reads = LocalReads(principals.engine)
    try:
        for _ in range(30):  # one short-lived thread after another
            t = threading.Thread(target=reads.authenticate, args=("x",))
            t.start()
            t.join()
        reads.authenticate("x")  # this thread's: the last one's is closed now
        assert len(reads._opened) == 1
        gone = [c for t, c in reads._opened if t is not threading.current_thread()]
        assert gone == []
    finally:
        reads.close()
        principals.close()
