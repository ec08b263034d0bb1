"""``Ledger(url, create=False)``: a ledger that does not exist yet is an error, not a new one.

A mistyped path or database must not quietly become a new, empty ledger (with no grants, every
query would be refused — or, worse, someone would grant a fresh budget there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import veil
from veil.errors import LedgerError, LedgerUnavailableError


def test_a_missing_sqlite_file_is_refused_with_the_command_that_creates_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(LedgerError, match=r"no ledger at '.*typo\.db'.*veil budget grant"):
        veil.Ledger(f"sqlite:///{path}", create=False)
    assert not path.exists()


def test_an_existing_sqlite_ledger_opens_without_creating(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as first:
        first.grant("alice", "people", veil.Budget(epsilon=1))
    with veil.Ledger(url, create=False) as again:
        assert again.remaining("alice", "people") == veil.Budget(epsilon=1)


def test_an_in_memory_ledger_always_exists() -> None:
    with veil.Ledger("sqlite://", create=False) as ledger:
        assert not ledger.persistent


@pytest.mark.postgres
def test_a_database_without_veil_tables_is_refused_then_opens_once_created(
    pg_url: str,
) -> None:
    with pytest.raises(LedgerError, match=r"no veil ledger in the database at .*veil budget grant"):
        veil.Ledger(pg_url, create=False)
    with veil.Ledger(pg_url) as created:
        created.grant("alice", "people", veil.Budget(epsilon=2))
    with veil.Ledger(pg_url, create=False) as again:
        assert again.remaining("alice", "people") == veil.Budget(epsilon=2)


def test_an_unreachable_server_is_unavailable_and_hides_the_password() -> None:
    pytest.importorskip("psycopg")
    url = "postgresql://veil:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=5"
    with pytest.raises(
        LedgerUnavailableError, match=r"cannot open the ledger at postgresql"
    ) as info:
        veil.Ledger(url, create=False)
    assert "s3cret-pw" not in str(info.value)
