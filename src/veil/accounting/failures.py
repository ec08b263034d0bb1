"""The ledger's database failing, told apart from everything else (issue 34).

Whatever the database says when it fails — SQLAlchemy's ``OperationalError`` or any
``DBAPIError``, the driver's own errors on the hot path (``sqlite3.OperationalError``: disk
full, I/O error, locked past the busy timeout; ``psycopg.OperationalError``: connection
refused, the server shutting down or restarting) — becomes one error,
:class:`~veil.errors.LedgerUnavailableError`, raised by the ledger: the caller charged nothing
and may retry later. Its message names the database (for whoever runs veil); its ``public``
words do not (the service answers with them).

A write whose COMMIT failed is the one case where the database may have done what it was
asked: a connection lost during COMMIT leaves the transaction committed or not, and only the
database knows. :func:`surely_not_committed` says when a failed COMMIT certainly wrote nothing;
otherwise the write is *unsettled* (:class:`~veil.errors.UnsettledChargeError`).
"""

from __future__ import annotations

from veil.errors import LedgerUnavailableError, UnsettledChargeError

__all__ = ["SQLITE_FULL", "described", "surely_not_committed", "unavailable", "unsettled"]

SQLITE_FULL = 13
"""SQLite's result code for a full disk (or a database at its ``max_page_count``)."""

# SQLite's primary result codes of a COMMIT that certainly did not commit: busy, a constraint,
# a full disk
_REFUSED_SQLITE_COMMITS = frozenset((5, 19, SQLITE_FULL))

# PostgreSQL error classes that the server raises when it refuses a COMMIT it evaluated:
# integrity constraint violation (deferred constraints), transaction rollback (serialisation
# failure, deadlock). Every other failure at COMMIT — no SQLSTATE at all (the connection was
# lost), admin or crash shutdown (57P0x, which may arrive after the commit record is written)
# — may have committed.
_REFUSED_COMMIT_CLASSES = ("23", "40")


def described(exc: BaseException) -> str:
    """``exc`` in a few words: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no detail'}"


def unavailable(exc: BaseException, url: str, *, opening: bool = False) -> LedgerUnavailableError:
    """The error of the database at ``url`` failing with ``exc`` (raise it ``from exc``);
    ``opening``: while the ledger was being opened."""
    if opening:
        return LedgerUnavailableError(
            f"cannot open the ledger at {url} ({described(exc)}); check that its database is "
            "up and the URL is right"
        )
    return LedgerUnavailableError(
        f"the ledger's database at {url} failed ({described(exc)}); nothing was written, "
        "retry when it is back"
    )


def unsettled(exc: BaseException, url: str) -> UnsettledChargeError:
    """The error of a write whose COMMIT failed with ``exc`` and may have been made."""
    return UnsettledChargeError(
        f"the ledger's database at {url} failed while committing ({described(exc)}); the "
        "write may or may not have been made"
    )


def surely_not_committed(exc: BaseException) -> bool:
    """Whether a COMMIT that raised ``exc`` (a driver's error) certainly wrote nothing.

    SQLite: a full disk (``SQLITE_FULL``: the commit frame of a WAL transaction is its last
    write, so a commit that ran out of space did not commit), a lock it could not take
    (``SQLITE_BUSY``) or a constraint checked at commit (``SQLITE_CONSTRAINT``); any other
    error at COMMIT — an I/O error of the sync, above all — may have left it durable.
    PostgreSQL: the server answered with an error of a class it raises only for a COMMIT it
    refused (``_REFUSED_COMMIT_CLASSES``).
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _REFUSED_SQLITE_COMMITS
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in _REFUSED_COMMIT_CLASSES
