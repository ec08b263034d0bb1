"""The service's identities: admins and analysts, each with one API key.

A key is a random 256-bit token (``veil.random.token(32)``, from the operating system's
CSPRNG), shown once when it is created or rotated and stored only as its SHA-256 in the ledger
database (table ``veil_principals``), so a copy of the database yields no usable key. A request
is authenticated by hashing the bearer token and looking the hash up; the stored hash is then
compared with :func:`hmac.compare_digest`. A name keeps its history of keys: rotating revokes
the live key and adds a new one; revoking leaves the name without a live key. No key is ever
logged, and no error message quotes one.

The table lives in the ledger's own database, so several service processes (and ``veil admin``
on the same database) see the same identities. An in-memory ledger cannot be shared between
processes and is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from veil.accounting.records import now
from veil.accounting.store import READ_ONLY, in_memory, open_ledger, principals
from veil.errors import InvalidArgumentError, LedgerError
from veil.random import token

__all__ = ["ROLES", "Principal", "Principals", "Role", "hash_key"]

Role = Literal["admin", "analyst"]
ROLES: tuple[Role, ...] = ("admin", "analyst")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,199}")
_MAX_KEY_CHARS = 256


def hash_key(key: str) -> str:
    """The SHA-256 of ``key`` in hex: what the table stores."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who made a request: a name and a role (never the key)."""

    name: str
    role: Role
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"a principal's name is 1–200 letters, digits or _.@- (starting with a letter or "
            f"digit), got {name!r}"
        )
    return name


def _check_role(role: object) -> Role:
    if role == "admin":
        return "admin"
    if role == "analyst":
        return "analyst"
    raise InvalidArgumentError(f"role must be 'admin' or 'analyst', got {role!r}")


class Principals:
    """The identities stored in the ledger database at ``url`` (SQLite file or PostgreSQL)."""

    def __init__(self, url: str | os.PathLike[str], *, create: bool = True) -> None:
        if in_memory(url):
            raise LedgerError(
                "the service needs a persistent ledger (a SQLite file or PostgreSQL) that its "
                "processes and `veil admin` share; an in-memory one ('sqlite://') vanishes"
            )
        # what is not a veil ledger is refused, as by veil.Ledger (open_ledger)
        self.engine: Engine = open_ledger(url, create=create)[0]

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Principals:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- administration ---------------------------------------------------------------------

    def add(self, name: str, role: Role = "analyst") -> str:
        """Create ``name`` with ``role``; return its key (shown once, never stored)."""
        _check_name(name)
        role = _check_role(role)
        key = token(32)
        try:
            with self.engine.begin() as conn:
                live = conn.execute(
                    select(principals.c.id).where(
                        principals.c.name == name, principals.c.revoked_at.is_(None)
                    )
                ).first()
                if live is not None:
                    raise InvalidArgumentError(
                        f"{name!r} already has a key; rotate it with `veil admin key rotate "
                        f"{name}` or revoke it first"
                    )
                known = conn.execute(
                    select(principals.c.role).where(principals.c.name == name).limit(1)
                ).scalar()
                if known is not None and known != role:
                    raise InvalidArgumentError(
                        f"{name!r} was a {known}; a name keeps its role (pick another name)"
                    )
                conn.execute(
                    insert(principals).values(
                        name=name, role=role, key_hash=hash_key(key), created_at=now()
                    )
                )
        except (IntegrityError, SQLAlchemyError) as exc:
            raise LedgerError(f"cannot add {name!r}: {type(exc).__name__}") from exc
        return key

    def rotate(self, name: str) -> str:
        """Revoke ``name``'s live key and return a new one (shown once)."""
        _check_name(name)
        key = token(32)
        with self.engine.begin() as conn:
            row = conn.execute(
                select(principals.c.role)
                .where(principals.c.name == name)
                .order_by(principals.c.id.desc())
                .limit(1)
            ).first()
            if row is None:
                raise InvalidArgumentError(
                    f"no principal named {name!r}; add one with `veil admin analyst add {name}`"
                )
            stamp = now()
            conn.execute(
                update(principals)
                .where(principals.c.name == name, principals.c.revoked_at.is_(None))
                .values(revoked_at=stamp)
            )
            conn.execute(
                insert(principals).values(
                    name=name, role=row.role, key_hash=hash_key(key), created_at=stamp
                )
            )
        return key

    def revoke(self, name: str) -> None:
        """Revoke ``name``'s live key (the name keeps its history; add or rotate to return)."""
        _check_name(name)
        with self.engine.begin() as conn:
            done = conn.execute(
                update(principals)
                .where(principals.c.name == name, principals.c.revoked_at.is_(None))
                .values(revoked_at=now())
            )
            if done.rowcount == 0:
                raise InvalidArgumentError(f"{name!r} has no live key to revoke")

    def list(self) -> list[Principal]:
        """Every name with its role and its latest key's dates, by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(principals).order_by(principals.c.id)).all()
        latest: dict[str, Principal] = {}
        for r in rows:
            latest[r.name] = _principal(r.name, r.role, r.created_at, r.revoked_at)
        return [latest[n] for n in sorted(latest)]

    def get(self, name: str) -> Principal | None:
        """The live principal ``name``, or None."""
        with self.engine.connect() as conn:
            r = conn.execute(
                select(principals).where(
                    principals.c.name == name, principals.c.revoked_at.is_(None)
                )
            ).first()
        return None if r is None else _principal(r.name, r.role, r.created_at, r.revoked_at)

    # -- authentication ---------------------------------------------------------------------

    def authenticate(self, key: str) -> Principal | None:
        """The live principal whose key is ``key``, or None (unknown, revoked, malformed)."""
        if not plausible_key(key):
            return None
        digest = hash_key(key)
        with self.engine.connect() as conn:
            conn.info[READ_ONLY] = True  # a lock-free snapshot read (no BEGIN IMMEDIATE)
            try:
                r = conn.execute(BY_KEY, {"digest": digest}).first()
                conn.rollback()
            finally:
                conn.info.pop(READ_ONLY, None)
        return live_principal(r, digest)


def plausible_key(key: str) -> bool:
    """Whether ``key`` could be a key at all (not empty, not over-long, ASCII): others are
    refused without a read."""
    return bool(key) and len(key) <= _MAX_KEY_CHARS and key.isascii()


def live_principal(r: Any, digest: str) -> Principal | None:
    """The principal of the row ``r`` that the lookup of ``digest`` found (None: none found),
    if its key is live; the digests compared in constant time."""
    if r is None or not hmac.compare_digest(str(r.key_hash), digest):
        return None
    if r.revoked_at is not None:
        return None
    return _principal(r.name, r.role, r.created_at, r.revoked_at)


# built once: a statement made per request costs more than the database takes to run it
BY_KEY = select(principals).where(principals.c.key_hash == bindparam("digest")).limit(1)


def _principal(name: str, role: str, created: str, revoked: str | None) -> Principal:
    return Principal(
        name=name,
        role=_check_role(role),
        created_at=datetime.fromisoformat(created),
        revoked_at=None if revoked is None else datetime.fromisoformat(revoked),
    )
