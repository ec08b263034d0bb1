"""PostgreSQL as a veil engine: the same SQL trees, run inside the database that holds the data.

:class:`PostgresEngine` implements :class:`veil.engines.base.Engine` over SQLAlchemy with the
psycopg 3 driver (``pip install 'veil[postgres]'``). The session lowers a plan with the
``"postgres"`` record of :mod:`veil.compile.dialect`; this engine generates it as PostgreSQL
SQL, runs it and returns the small table of exact aggregates (one row per group) as Arrow. The
bounding, clamping and exact sums run in the server; only aggregated rows leave it.

``tables`` maps the names queries use to tables, views or materialized views of the database
(``{"orders": "shop.orders"}``; an unqualified name follows the connection's ``search_path``).
Each is resolved once, to its object id, from the catalog alone. A query never reads a table
directly: its reference is replaced by a projection of the table (below), so every value veil
sees is of a type it handles totally.

Types come from the catalog, never from values (DESIGN §1):

* ``smallint``, ``integer``, ``bigint``, ``real``, ``double precision``, ``boolean``, ``date``,
  ``timestamp``, ``timestamptz``, ``time``, ``bytea`` are read as they are;
* ``numeric(p, s)`` with p ≤ 38 is a DECIMAL(p, s); a ``numeric`` without precision (or wider)
  is shown as DOUBLE — it is aggregated as the nearest double, and travels as its exact text
  when grouped by. NaN and magnitudes beyond the double range (a NUMERIC can hold 1e400) are
  mapped to NaN and ±inf, and those below it (1e-400) to ±0, before any cast — each value
  becomes the double it rounds to — so no value makes a cast fail;
* text types (``text``, ``varchar``, ``char(n)``, ``citext``…) are read as ``text COLLATE "C"``:
  equality and grouping are byte-wise (a non-deterministic collation could merge two keys and
  release whichever one another row carries; ``char(n)`` loses its padding);
* every other type (``uuid``, ``json``, ``interval``, enums, arrays…) is read as its text, in
  the C collation.

Connection settings fix every text rendering veil relies on: ``TimeZone`` UTC, ``DateStyle``
ISO, ``IntervalStyle`` postgres, ``extra_float_digits`` 1 (shortest exact doubles),
``bytea_output`` hex; and every transaction is read-only.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from veil.engines.declared import SchemaArg
from veil.errors import (
    InternalError,
    InvalidArgumentError,
    MissingDependencyError,
    SchemaError,
    UnsupportedQueryError,
    VeilError,
)

__all__ = ["PostgresEngine"]

INSTALL_HINT = "pip install 'veil[postgres]'"

_sources = logging.getLogger("veil.sources")  # owner-side details: relations, privileges
# the registered relation gone (42P01), or not readable by the user (42501), its schema gone
_OWNER_SIDE = frozenset({"42P01", "42501", "3F000"})

_SETTINGS = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET default_transaction_read_only = on",
)

# rows: one per column of each registered table — its name, type and position (no data row)
_COLUMNS = """
SELECT c.oid, n.nspname, c.relname, c.relkind, a.attname,
       COALESCE(bt.typname, t.typname) AS typname,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END AS typmod,
       COALESCE(bt.typcategory, t.typcategory) AS category
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
WHERE c.oid = pg_catalog.to_regclass(%s)
ORDER BY a.attnum
"""

# rows: the statistics counters PostgreSQL keeps for a table (no data row is read)
_VERSION = """
SELECT c.relfilenode, pg_catalog.pg_relation_size(c.oid),
       s.n_tup_ins, s.n_tup_upd, s.n_tup_del, s.n_live_tup, s.n_dead_tup,
       pg_catalog.pg_postmaster_start_time()::text,
       pg_catalog.pg_stat_get_db_stat_reset_time(d.oid)::text,
       (SELECT system_identifier FROM pg_catalog.pg_control_system())
FROM pg_catalog.pg_class c
LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
JOIN pg_catalog.pg_database d ON d.datname = pg_catalog.current_database()
WHERE c.oid = %s
"""

_AS_IS: dict[str, pa.DataType] = {
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "time": pa.time64("us"),
    "bytea": pa.binary(),
}
_TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "name", "citext", "char"})
_INTEGER_OIDS = frozenset({20, 21, 23, 26})
_NUMERIC_OID = 1700
_TEXT_OIDS = frozenset({25, 1043, 1042, 19})
_BOOL_OID = 16
_BYTEA_OID = 17
_VERSIONS = itertools.count()


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"running veil on PostgreSQL needs psycopg 3, which is not installed ({exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from exc


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


@dataclass(frozen=True)
class _Table:
    """One registered table: its object id, qualified name, kind, Arrow schema, the projection
    every query reads instead of it, and notes for ``explain``."""

    oid: int
    qualified: str
    kind: str
    schema: pa.Schema
    projection: exp.Select
    notes: tuple[str, ...]


def _column(name: str, typname: str, typmod: int, category: str) -> tuple[exp.Expr, pa.DataType]:
    """The projected expression of one column and its Arrow type (see the module docstring)."""
    ref = exp.column(_ident(name))
    if typname == "numeric":
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        if typmod >= 4 and 1 <= precision <= 38 and scale <= precision:
            return ref, pa.decimal128(precision, scale)
        return ref, pa.float64()
    if typname in _AS_IS:
        return ref, _AS_IS[typname]
    # text, and every other type as its text: byte-wise equality and grouping
    text = exp.Cast(this=ref, to=exp.DataType.build("TEXT", dialect="postgres"))
    return exp.Collate(this=text, expression=_ident("C")), pa.string()


class PostgresEngine:
    """Runs veil's SQL trees on PostgreSQL (≥ 13) and returns exact aggregates as Arrow.

    ``url`` is a SQLAlchemy URL (``postgresql://user@host/db``; the psycopg 3 driver is used
    whatever the URL names). ``tables`` maps query names to ``schema.table`` names of the
    database. ``schema`` (declared column types) is refused: PostgreSQL tables carry their
    own types; cast in a view and register the view.
    """

    dialect = "postgres"

    def __init__(
        self,
        url: str,
        tables: Mapping[str, str],
        *,
        schema: SchemaArg = None,
    ) -> None:
        _require_psycopg()
        import sqlalchemy as sa

        if not isinstance(tables, Mapping) or not tables:
            raise InvalidArgumentError(
                "a PostgreSQL session needs at least one table; pass "
                "tables={'orders': 'shop.orders'}"
            )
        for name, source in tables.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"table names must be non-empty strings, got {name!r}")
            if not isinstance(source, str) or not source:
                raise InvalidArgumentError(
                    f"table {name!r}: a PostgreSQL table is named by a string "
                    f"('schema.table'), got {source!r}"
                )
        if schema:
            raise InvalidArgumentError(
                "PostgreSQL tables carry their own types: schema= declarations are not "
                "accepted; cast the columns in a view (CREATE VIEW … AS SELECT CAST(…)) and "
                "register the view"
            )
        try:
            parsed = sa.engine.make_url(url)
        except (sa.exc.ArgumentError, TypeError) as exc:
            raise InvalidArgumentError(
                f"not a PostgreSQL URL: {url!r}; pass postgresql://user@host:5432/database"
            ) from exc
        if parsed.get_backend_name() not in ("postgresql", "postgres"):
            raise InvalidArgumentError(
                f"not a PostgreSQL URL: {parsed.render_as_string(hide_password=True)!r}; pass "
                "postgresql://user@host:5432/database"
            )
        self._url = parsed.set(drivername="postgresql+psycopg")
        self._engine = sa.create_engine(self._url, poolclass=sa.pool.NullPool)
        try:
            self._raw: Any = self._engine.raw_connection()
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            where = self._url.render_as_string(hide_password=True)
            raise InvalidArgumentError(
                f"cannot connect to PostgreSQL at {where}: {getattr(exc, 'orig', None) or exc}"
            ) from None
        self._closed = False
        self._tables: dict[str, _Table] = {}
        try:
            with self._cursor() as cur:
                for statement in _SETTINGS:
                    cur.execute(statement)
            self._raw.commit()
            for name, source in tables.items():
                self._tables[name] = self._register(name, source)
        except BaseException:
            self.close()
            raise

    # -- registration ---------------------------------------------------------------------
    def _cursor(self) -> Any:
        if self._closed:
            raise SchemaError("this PostgreSQL engine is closed; open a new session")
        return self._raw.cursor()

    def _catalog(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """Rows of a catalog query, in a read-only transaction rolled back after."""
        import psycopg

        try:
            with self._cursor() as cur:
                cur.execute(sql, params)
                rows: list[tuple[Any, ...]] = cur.fetchall()
        except psycopg.Error as exc:
            self._raw.rollback()
            raise SchemaError(f"cannot read PostgreSQL's catalog: {exc}") from exc
        self._raw.rollback()
        return rows

    def _register(self, name: str, source: str) -> _Table:
        try:
            parsed = exp.to_table(source, dialect="postgres")
        except SqlglotError:
            parsed = None
        if parsed is None or parsed.args.get("catalog") is not None:
            raise SchemaError(
                f"table {name!r}: {source!r} is not a table name; pass 'schema.table' "
                '(quote names with capitals: \'"Shop"."Orders"\')'
            )
        regclass = parsed.sql(dialect="postgres")
        rows = self._catalog(_COLUMNS, (regclass,))
        if not rows:
            raise SchemaError(
                f"table {name!r}: PostgreSQL has no table or view {source!r} that this user "
                "can see; pass tables={'orders': 'shop.orders'} with an existing name"
            )
        oid, namespace, relname, kind = rows[0][0], rows[0][1], rows[0][2], rows[0][3]
        if kind not in ("r", "p", "v", "m", "f"):
            raise SchemaError(f"table {name!r}: {source!r} is not a table or a view")
        items: list[exp.Expr] = []
        fields: list[pa.Field] = []
        wide: list[str] = []
        texts: list[str] = []
        for _, _, _, _, column, typname, typmod, category in rows:
            expr, arrow = _column(column, typname, typmod, category)
            items.append(exp.alias_(expr, _ident(column)))
            fields.append(pa.field(column, arrow))
            if typname == "numeric" and arrow == pa.float64():
                wide.append(column)
            if typname not in _TEXT_TYPES and arrow == pa.string():
                texts.append(f"{column} ({typname})")
        table = exp.Table(this=_ident(relname), db=_ident(namespace))
        projection = exp.select(*items).from_(table)
        notes: list[str] = []
        if wide:
            notes.append(
                f"table {name!r}: NUMERIC columns without a precision ({', '.join(wide)}) are "
                "aggregated as the nearest double"
            )
        if texts:
            notes.append(
                f"table {name!r}: columns of other types are read as their text: "
                + ", ".join(texts)
            )
        return _Table(
            oid=int(oid),
            qualified=f"{namespace}.{relname}",
            kind=str(kind),
            schema=pa.schema(fields),
            projection=projection,
            notes=tuple(notes),
        )

    # -- the Engine protocol --------------------------------------------------------------
    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self._tables)

    def _table(self, table: str) -> _Table:
        try:
            return self._tables[table]
        except KeyError:
            known = ", ".join(sorted(self._tables))
            close = [t for t in self._tables if t.lower() == table.lower()]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SchemaError(f"unknown table {table!r}{hint} (tables: {known})") from None

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of ``table``, read from the catalog at registration (no row)."""
        return self._table(table).schema

    def notes(self, table: str) -> tuple[str, ...]:
        """Sentences for ``explain``: NUMERIC columns aggregated as doubles, columns of other
        types read as text; empty when there is nothing to say."""
        return self._table(table).notes

    def data_version(self, table: str) -> str:
        """A digest of what PostgreSQL's catalog and statistics say about the table, read
        without a data row: its storage file and size, its cumulative counts of inserted,
        updated and deleted rows, the server's identity and start time and the statistics'
        reset time, and the columns veil reads.

        Limits: the counters are updated when a writing transaction's statistics are flushed
        (PostgreSQL 15: within about a second of its commit, and lost on a crash or a reset —
        which the start and reset times cover), so an answer cached just before a change may
        be served for up to a second after it; ``track_counts`` must be on (the default). A
        view, a foreign or a partitioned table has no counters of its own: its version is a
        fresh token on every call, so its answers are never served from the cache — the
        query is charged again.
        """
        info = self._table(table)
        if info.kind not in ("r", "m"):
            return f"uncached:{os.getpid()}:{time.time_ns()}:{next(_VERSIONS)}"
        rows = self._catalog(_VERSION, (info.oid,))
        if not rows or rows[0][2] is None:  # no counters (track_counts off): never cached
            return f"uncached:{os.getpid()}:{time.time_ns()}:{next(_VERSIONS)}"
        digest = hashlib.sha256(info.qualified.encode())
        digest.update(str(info.schema).encode())
        digest.update("\0".join(str(v) for v in rows[0]).encode())
        return "postgres:" + digest.hexdigest()[:32]

    def sql(self, query: exp.Expression) -> str:
        """The PostgreSQL text ``query`` runs as: each registered table read through its
        projection (see the module docstring); an unsupported construct raises."""
        ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}

        def rename(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Table) or node.args.get("db") or node.name in ctes:
                return node
            info = self._table(node.name)
            alias = node.alias or node.name
            return info.projection.copy().subquery(_ident(alias))

        tree = query.transform(rename)
        if not isinstance(tree, exp.Query):
            raise UnsupportedQueryError(
                f"the PostgreSQL engine runs queries only, not {type(query).__name__} nodes"
            )
        try:
            return tree.sql(dialect="postgres", unsupported_level=ErrorLevel.RAISE)
        except SqlglotError as exc:
            raise UnsupportedQueryError(f"PostgreSQL cannot express this query: {exc}") from exc

    def check(self, query: exp.Expression) -> None:
        """``EXPLAIN`` the statement: PostgreSQL parses, binds and plans it — folding its
        constants, so a bad literal is found here too — and runs nothing, reading no data
        row. A type or name error is a ``SchemaError`` decided by the schema alone."""
        import psycopg

        text = self.sql(query)
        try:
            with self._cursor() as cur:
                cur.execute("EXPLAIN " + text)
                cur.fetchall()
        except psycopg.Error as exc:
            self._raw.rollback()
            raise _translate(exc, checking=True) from exc
        self._raw.rollback()

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` in a read-only transaction and return its result as Arrow; engine
        errors become veil errors."""
        import psycopg

        text = self.sql(query)
        try:
            with self._cursor() as cur:
                cur.execute(text)
                rows = cur.fetchall()
                description = cur.description
        except psycopg.Error as exc:
            self._raw.rollback()
            raise _translate(exc) from exc
        self._raw.rollback()
        return _arrow(description, rows)

    def close(self) -> None:
        """Close the connection; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            self._raw.close()
        finally:
            self._engine.dispose()

    def __enter__(self) -> PostgresEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresEngine(tables={sorted(self._tables)})"


def _arrow(description: Sequence[Any], rows: list[tuple[Any, ...]]) -> pa.Table:
    """A result as Arrow: integers as int64, NUMERIC (the exact sums) as int64 or, beyond it,
    DECIMAL(38, 0), text as string, booleans as bool, bytea (a binary key) as binary. Any
    other type is a bug (the lowering casts every key of another type to text)."""
    arrays: list[pa.Array] = []
    names: list[str] = []
    for i, column in enumerate(description):
        values = [row[i] for row in rows]
        oid = column.type_code
        if oid in _INTEGER_OIDS:
            array = pa.array(values, pa.int64())
        elif oid == _NUMERIC_OID:
            if any(v is not None and v != v.to_integral_value() for v in values):
                raise InternalError("an exact integer statistic came back with a fraction")
            ints = [None if v is None else int(v) for v in values]
            fits = all(v is None or -(2**63) <= v < 2**63 for v in ints)
            array = pa.array(ints, pa.int64() if fits else pa.decimal128(38, 0))
        elif oid in _TEXT_OIDS:
            array = pa.array(values, pa.string())
        elif oid == _BOOL_OID:
            array = pa.array(values, pa.bool_())
        elif oid == _BYTEA_OID:
            array = pa.array(values, pa.binary())
        else:
            raise InternalError(f"PostgreSQL returned a column of type oid {oid} (this is a bug)")
        arrays.append(array)
        names.append(column.name)
    return pa.Table.from_arrays(arrays, names=names)


def _translate(exc: Exception, *, checking: bool = False) -> VeilError:
    """The veil error for a PostgreSQL error, by its SQLSTATE class, as
    :class:`veil.engines.duckdb.DuckDBEngine` maps DuckDB's: 42 (an unknown table or column,
    a type error) is a ``SchemaError``; 0A (a feature not supported) an
    ``UnsupportedQueryError``; 22 (a value or constant that does not convert) a
    ``SchemaError``; anything else, while checking, a ``SchemaError`` and, while running, an
    ``InternalError`` (the server failed to run veil's SQL). The server's message is kept (the
    session withholds every message of a query that already read data), except where it is
    about the registered relation itself (gone, not readable: 42P01, 42501, 3F000), which
    names the owner's schema: that goes to the operator's log (``veil.sources``)."""
    state = str(getattr(exc, "sqlstate", "") or "")
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if state in _OWNER_SIDE:  # names the owner's relations: for the operator's log only
        _sources.warning("PostgreSQL cannot read a registered table (%s): %s", state, detail)
        return SchemaError(
            "a table of the query cannot be read now: it is not as the data owner registered "
            "it (the operator's log says why); ask the data owner"
        )
    if state.startswith("0A"):
        return UnsupportedQueryError(f"PostgreSQL does not support this query: {detail}")
    if state.startswith("42"):
        return SchemaError(f"the query does not fit the table's columns: {detail}")
    if state.startswith("22"):
        return SchemaError(
            f"a value does not fit the query: {detail}; check the query's literals against "
            "the columns' types"
        )
    if checking:
        return SchemaError(f"PostgreSQL refused the query while planning it: {detail}")
    return InternalError(f"PostgreSQL failed to run veil's SQL: {detail}")
