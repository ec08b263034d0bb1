"""One PostgreSQL schema per test run for the engine tests (import as ``postgres_support``).

The server is ``VEIL_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
shared with other runs: every table goes into a schema with a unique name, created on first
use and dropped when the interpreter exits. When the server is unreachable the calling test
skips, unless ``VEIL_REQUIRE_POSTGRES`` is set, when it fails.

:func:`load` writes an Arrow table into the schema with the PostgreSQL types that hold its
values exactly; dates and timestamps travel as their integer days and microseconds and are
converted in SQL, so values beyond Python's years 1–9999 load too.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import uuid
from typing import Any

import pyarrow as pa
import pytest

PG_URL = os.environ.get("VEIL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_TABLES = itertools.count()

# the range of PostgreSQL's date and timestamp, in days and microseconds since 1970-01-01
_MIN_DAY, _MAX_DAY = -2_440_588, 2_147_483_494 - 2_440_588
_MIN_MICROS, _MAX_MICROS = -210_866_803_200_000_000, 9_224_318_015_999_999_999


def _required() -> bool:
    return os.environ.get("VEIL_REQUIRE_POSTGRES", "") not in ("", "0")


@functools.cache
def _admin() -> Any:
    import psycopg

    return psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)


def connection() -> Any:
    """An autocommit psycopg connection to the test server; skips (or fails) without one."""
    try:
        import psycopg
    except ImportError:
        if _required():
            pytest.fail("VEIL_REQUIRE_POSTGRES is set but psycopg 3 is not installed")
        pytest.skip("psycopg 3 is not installed (pip install 'veil[postgres]')")
    try:
        return _admin()
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL is not reachable at {PG_URL} ({exc})"
        if _required():
            pytest.fail(f"VEIL_REQUIRE_POSTGRES is set but {message}")
        pytest.skip(f"SKIPPING PostgreSQL engine test: {message}; set VEIL_TEST_POSTGRES_URL")


@functools.cache
def schema() -> str:
    """The schema of this run (created once, dropped at exit)."""
    con = connection()
    name = f"veil_engine_{uuid.uuid4().hex[:12]}"
    con.execute(f'CREATE SCHEMA "{name}"')

    def drop() -> None:
        with contextlib.suppress(Exception):  # the server went away: nothing left to drop
            _admin().execute(f'DROP SCHEMA "{name}" CASCADE')
        _admin().close()

    atexit.register(drop)
    return name


def _pg_type(t: pa.DataType) -> tuple[str, str] | None:
    """(the staging column's type, the final column's SQL of ``{c}``), None if unsupported."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return "boolean", "{c}"
    if pa.types.is_uint64(t):
        return "numeric(20, 0)", "{c}"
    if pa.types.is_integer(t):
        width = {8: "smallint", 16: "smallint", 32: "integer", 64: "bigint"}[t.bit_width]
        return width, "{c}"
    if pa.types.is_float32(t):
        return "real", "{c}"
    if pa.types.is_float64(t):
        return "double precision", "{c}"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision}, {t.scale})", "{c}"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text", "{c}"
    if pa.types.is_binary(t):
        return "bytea", "{c}"
    if pa.types.is_date32(t):
        return "integer", "DATE '1970-01-01' + {c}"
    if pa.types.is_timestamp(t) and t.unit == "us":
        zone = "timestamptz" if t.tz else "timestamp"
        return "bigint", f"{zone} '1970-01-01 00:00:00+00' + {{c}} * INTERVAL '1 microsecond'"
    return None


def _raw(column: pa.ChunkedArray) -> list[Any]:
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.cast(t.value_type)
    if pa.types.is_date32(column.type):
        return column.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.int64()).to_pylist()
    return column.to_pylist()


def supports(table: pa.Table) -> bool:
    """Whether PostgreSQL holds every value of ``table`` (no NUL in text, dates and
    timestamps within its range, types it has)."""
    for f, column in zip(table.schema, table.columns, strict=True):
        if _pg_type(f.type) is None:
            return False
        values = _raw(column)
        if pa.types.is_date32(f.type) and any(
            v is not None and not _MIN_DAY <= v <= _MAX_DAY for v in values
        ):
            return False
        if pa.types.is_timestamp(f.type) and any(
            v is not None and not _MIN_MICROS <= v <= _MAX_MICROS for v in values
        ):
            return False
        if any(isinstance(v, str) and "\x00" in v for v in values):
            return False
    return True


def load(table: pa.Table, name: str | None = None) -> str:
    """Write ``table`` into this run's schema; returns its qualified name (``schema.t3``)."""
    con = connection()
    qualified = f'"{schema()}"."{name or f"t{next(_TABLES)}"}"'
    staging = f'"{schema()}"."staging_{next(_TABLES)}"'
    types = [_pg_type(f.type) for f in table.schema]
    if any(t is None for t in types):
        raise ValueError(f"PostgreSQL cannot hold {table.schema}")
    columns = ", ".join(
        f'"{f.name}" {t[0]}' for f, t in zip(table.schema, types, strict=True) if t is not None
    )
    con.execute(f"CREATE TABLE {staging} ({columns})")
    rows = list(zip(*(_raw(c) for c in table.columns), strict=True))
    if rows:
        marks = ", ".join(["%s"] * table.num_columns)
        with con.cursor() as cur:
            cur.executemany(f"INSERT INTO {staging} VALUES ({marks})", rows)
    select = ", ".join(
        t[1].format(c=f'"{f.name}"') + f' AS "{f.name}"'
        for f, t in zip(table.schema, types, strict=True)
        if t is not None
    )
    con.execute(f"CREATE TABLE {qualified} AS SELECT {select} FROM {staging}")
    con.execute(f"DROP TABLE {staging}")
    return qualified.replace('"', "")
