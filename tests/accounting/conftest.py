"""Fixtures for the ledger tests: SQLite ledgers in a temporary directory and PostgreSQL
ledgers, each in a fresh schema dropped afterwards.

PostgreSQL is reached through ``VEIL_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). When it is unreachable the PostgreSQL tests
skip with the reason, unless ``VEIL_REQUIRE_POSTGRES`` is set (as in CI), when they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import veil

PG_URL = os.environ.get("VEIL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_required() -> bool:
    return os.environ.get("VEIL_REQUIRE_POSTGRES", "") not in ("", "0")


def with_search_path(url: str, schema: str) -> str:
    """The URL with every connection's search_path set to ``schema``."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL ledger URL whose tables live in a fresh schema, dropped after the test."""
    try:
        import psycopg
    except ImportError:
        if postgres_required():
            pytest.fail("VEIL_REQUIRE_POSTGRES is set but psycopg 3 is not installed")
        pytest.skip("SKIPPING PostgreSQL ledger test: psycopg 3 is not installed (veil[postgres])")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = (
            f"PostgreSQL is not reachable at {PG_URL} ({exc}); set VEIL_TEST_POSTGRES_URL "
            "to a server with a database you may create schemas in"
        )
        if postgres_required():
            pytest.fail(f"VEIL_REQUIRE_POSTGRES is set but {message}")
        pytest.skip(f"SKIPPING PostgreSQL ledger test: {message}")
    schema = f"veil_test_{uuid.uuid4().hex[:16]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(PG_URL, schema)
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every storage the ledger supports."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    if request.param == "sqlite-memory":
        return "sqlite://"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[veil.Ledger]:
    with veil.Ledger(ledger_url) as led:
        yield led
