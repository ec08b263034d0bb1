"""Ledger helpers for the tests (import as ``ledger_support``): forked children, lock probes."""

from __future__ import annotations

import sqlite3
import time
import warnings
from typing import Any
from urllib.parse import urlsplit


def start_forked(process: Any) -> None:
    """Start a forked child (``multiprocessing``'s fork context). Safe in these tests: each
    child opens its own Ledger (no shared connections); newer Pythons warn about fork in
    threaded parents, which these are not meant to be, so that warning is not an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        process.start()


# the safety net of assert_unlocked's wait on PostgreSQL (never reached when all is well)
_PG_SAFETY_S = 120


def assert_unlocked(url: str) -> None:
    """Fail unless nothing holds a lock on the ledger at ``url`` — without timing anything.

    SQLite (``sqlite:///PATH``): the write lock is taken at once or not at all (``BEGIN
    IMMEDIATE`` with no busy timeout), so a lock left by a dead process fails here whatever the
    machine's speed. PostgreSQL: a dead client's backend ends on its own, so this waits until no
    other backend holds a lock on a table of the URL's schema (the ``search_path`` in its
    options), failing only if one still does after a generous safety net.
    """
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = parts.path[1:]
        con = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")  # raises "database is locked" while one is held
            con.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            raise AssertionError(f"the ledger {path} is left locked: {exc}") from exc
        finally:
            con.close()
        return
    import psycopg

    query = (
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND l.pid <> pg_backend_pid()"
    )
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as con:
        deadline = time.monotonic() + _PG_SAFETY_S
        while (held := con.execute(query).fetchone()) is not None and held[0] > 0:
            assert time.monotonic() < deadline, f"the ledger's tables are left locked: {url}"
            time.sleep(0.05)
