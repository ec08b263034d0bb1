"""The two reads of every request — the API key, the caller's grant — done raw on SQLite.

Each request reads the principal of its key and its grant's standing (grant, spending, catalog
entry). Through SQLAlchemy each read costs ~0.1 ms of Python (a pooled connection checked out, a
transaction begun and rolled back, the result wrapped) against ~10 µs for SQLite to run it;
for a repeated query answered from the cache the two reads are most of the server's work.

:class:`LocalReads` runs the *same* SQL — the statements of
:meth:`veil.service.principals.Principals.authenticate` and
:meth:`veil.accounting.ledger.Ledger.standing`, compiled once by SQLAlchemy for SQLite — on a
raw ``sqlite3`` connection per thread, in autocommit mode: each read is one statement, hence one
consistent snapshot, and in WAL mode it takes no lock and never waits for a writer (as the
SQLAlchemy read does). The connections are ``query_only``: they cannot write. The rows are
turned into the same objects by the same functions. A failure of the database is a
:class:`~veil.errors.LedgerUnavailableError` (503), as through SQLAlchemy. Only for a ledger in
a SQLite file (an in-memory one is one connection's; PostgreSQL reads are round trips, done in
threads).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import namedtuple
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import Engine, make_url
from sqlalchemy.sql import Select

from veil.accounting.failures import unavailable
from veil.accounting.ledger import STANDING, Standing, standing_of
from veil.service.principals import BY_KEY, Principal, hash_key, live_principal, plausible_key

__all__ = ["LocalReads"]


class _Statement:
    """One SELECT compiled for SQLite: its SQL, the order of its parameters, its row type."""

    def __init__(self, select: Select[Any], engine: Engine) -> None:
        compiled = select.compile(dialect=engine.dialect)
        self.sql = compiled.string
        self.order = tuple(compiled.positiontup or ())
        self.defaults = dict(compiled.params)  # the statement's own values (its LIMIT's)
        self.row: type | None = None

    def one(self, conn: sqlite3.Connection, params: dict[str, Any]) -> Any:
        values = {**self.defaults, **params}
        cursor = conn.execute(self.sql, [values[name] for name in self.order])
        found = cursor.fetchone()
        if found is None:
            return None
        if self.row is None:
            self.row = namedtuple("Row", [c[0] for c in cursor.description])  # type: ignore[misc]
        return self.row(*found)


class LocalReads:
    """The per-request reads of a service whose ledger is the SQLite file of ``engine``."""

    def __init__(self, engine: Engine) -> None:
        if not self.usable(engine):
            raise ValueError("LocalReads reads a SQLite file")
        self._path = str(make_url(engine.url).database)
        self._by_key = _Statement(BY_KEY, engine)
        self._standing = _Statement(STANDING, engine)
        self._local = threading.local()
        # every connection opened, with its thread: one whose thread has ended is closed when
        # the next one is opened (threads come and go: anyio's, for FastAPI's dependencies)
        self._opened: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._lock = threading.Lock()

    @staticmethod
    def usable(engine: Engine) -> bool:
        """Whether ``engine``'s database is a SQLite file."""
        path = make_url(engine.url).database
        return engine.dialect.name == "sqlite" and bool(path) and path != ":memory:"

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._path, timeout=30, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA query_only = 1")
            with self._lock:
                ended = [c for t, c in self._opened if not t.is_alive()]
                self._opened = [(t, c) for t, c in self._opened if t.is_alive()]
                self._opened.append((threading.current_thread(), conn))
            for old in ended:  # no thread can use it any more
                old.close()
            self._local.conn = conn
        return conn

    def _one(self, statement: _Statement, params: dict[str, Any]) -> Any:
        try:
            return statement.one(self._conn(), params)
        except sqlite3.Error as exc:
            raise unavailable(exc, self._path) from exc

    def authenticate(self, key: str) -> Principal | None:
        """As :meth:`veil.service.principals.Principals.authenticate`."""
        if not plausible_key(key):
            return None
        digest = hash_key(key)
        return live_principal(self._one(self._by_key, {"digest": digest}), digest)

    def standing(self, analyst: str, dataset: str) -> Standing | None:
        """As :meth:`veil.accounting.ledger.Ledger.standing`."""
        row = self._one(self._standing, {"analyst": analyst, "dataset": dataset})
        return None if row is None else _standing(row)

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for _, conn in opened:
            conn.close()


@lru_cache(maxsize=1024)
def _standing(row: tuple[Any, ...]) -> Standing:
    """A row's standing, parsed once per row (its exact fractions are text)."""
    return standing_of(row)
