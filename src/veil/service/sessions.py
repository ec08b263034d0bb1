"""The dashboard's login sessions, shared by every worker process through the ledger database.

Logging in with an API key (``POST /dashboard/login``) opens a session: a random 256-bit token
(``veil.random.token(32)``) goes to the browser in a cookie, and the table
``veil_dashboard_sessions`` keeps only its SHA-256, the principal's name, the id of the key row
it was opened with (in ``veil_principals``) and an expiry. A request's cookie is hashed and
looked up; the stored hash is then compared with :func:`hmac.compare_digest`. A session is live
while it has not expired, has not been closed (logout) and the key it was opened with is still
live: rotating or revoking the key ends every session opened with it, on every worker, at once.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    text,
)

from veil.accounting.store import READ_ONLY, principals
from veil.random import token
from veil.service.principals import Principal, Principals, Role, hash_key

__all__ = ["SESSION_TTL_S", "SessionStore"]

SESSION_TTL_S = 8 * 3600.0
"""How long a dashboard session lasts after the login (a working day), unless ended sooner."""

_MAX_TOKEN_CHARS = 100

_metadata = MetaData()

sessions = Table(
    "veil_dashboard_sessions",
    _metadata,
    Column("token_hash", String(64), primary_key=True),  # SHA-256 of the cookie's token
    Column("principal", String(200), nullable=False),
    Column("key_id", Integer, nullable=False),  # veil_principals.id of the key logged in with
    Column("created_at", Text, nullable=False),
    Column("expires_at", Text, nullable=False),
)


@dataclass(frozen=True)
class Login:
    """Who a live session belongs to, and when it ends."""

    principal: Principal
    expires_at: datetime


def _now() -> datetime:
    return datetime.now(UTC)


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


class SessionStore:
    """The sessions table of the ledger database that ``principals`` live in (created if
    missing, once, however many workers start together)."""

    def __init__(self, principals: Principals, *, ttl_s: float = SESSION_TTL_S) -> None:
        self._principals = principals
        self._engine: Engine = principals.engine
        self.ttl_s = ttl_s
        with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # serialise concurrent first-time setups (DDL is transactional in PostgreSQL)
                conn.execute(text("SELECT pg_advisory_xact_lock(726570)"))
            _metadata.create_all(conn, checkfirst=True)

    def open(self, key: str) -> tuple[str, Login] | None:
        """A new session for the live principal whose key is ``key``: its token (for the
        cookie only, never stored) and who it is; None for a key that is unknown, revoked,
        rotated or malformed (all alike)."""
        who = self._principals.authenticate(key)
        if who is None:
            return None
        digest = hash_key(key)
        secret = token(32)
        now = _now()
        expires = now + timedelta(seconds=self.ttl_s)
        with self._engine.begin() as conn:
            key_id = conn.execute(
                select(principals.c.id).where(
                    principals.c.key_hash == digest, principals.c.revoked_at.is_(None)
                )
            ).scalar()
            if key_id is None:  # revoked between the two reads
                return None
            conn.execute(delete(sessions).where(sessions.c.expires_at < _stamp(now)))
            conn.execute(
                insert(sessions).values(
                    token_hash=hash_key(secret),
                    principal=who.name,
                    key_id=key_id,
                    created_at=_stamp(now),
                    expires_at=_stamp(expires),
                )
            )
        return secret, Login(who, expires)

    def get(self, secret: str) -> Login | None:
        """Who the session ``secret`` belongs to, or None (unknown, closed, expired, or opened
        with a key that is no longer live)."""
        if not secret or len(secret) > _MAX_TOKEN_CHARS or not secret.isascii():
            return None
        digest = hash_key(secret)
        query = (
            select(
                sessions.c.token_hash,
                sessions.c.expires_at,
                principals.c.name,
                principals.c.role,
                principals.c.created_at,
            )
            .join(principals, principals.c.id == sessions.c.key_id)
            .where(sessions.c.token_hash == digest, principals.c.revoked_at.is_(None))
            .limit(1)
        )
        with self._engine.connect() as conn:
            conn.info[READ_ONLY] = True  # a lock-free snapshot read (no BEGIN IMMEDIATE)
            try:
                r = conn.execute(query).first()
                conn.rollback()
            finally:
                conn.info.pop(READ_ONLY, None)
        if r is None or not hmac.compare_digest(str(r.token_hash), digest):
            return None
        expires = datetime.fromisoformat(r.expires_at)
        if expires <= _now():
            return None
        role: Role = "admin" if r.role == "admin" else "analyst"
        who = Principal(name=r.name, role=role, created_at=datetime.fromisoformat(r.created_at))
        return Login(who, expires)

    def close(self, secret: str) -> None:
        """End the session ``secret`` (logout); nothing happens for an unknown one."""
        if not secret or len(secret) > _MAX_TOKEN_CHARS:
            return
        with self._engine.begin() as conn:
            conn.execute(delete(sessions).where(sessions.c.token_hash == hash_key(secret)))
