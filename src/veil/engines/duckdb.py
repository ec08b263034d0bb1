"""The embedded engine: DuckDB in-process.

Tables are registered as views, never copied into Python: a CSV or Parquet path (or glob) is
scanned lazily by DuckDB at query time; a pandas or Polars DataFrame or an Arrow table is
registered zero-copy; a name of a table already in a given DuckDB connection is used as is.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.compile.lower import to_sql
from veil.engines.base import Progress
from veil.engines.progress import watching
from veil.errors import InternalError, InvalidArgumentError, SchemaError

__all__ = ["DuckDBEngine", "TableSource"]

TableSource = Any
"""A path (str or PathLike) to CSV/Parquet/JSON, a DataFrame (pandas, Polars), an Arrow table or
a DuckDB relation, or the name of a table in the engine's connection."""

_READERS = {
    ".parquet": "read_parquet",
    ".pq": "read_parquet",
    ".csv": "read_csv_auto",
    ".tsv": "read_csv_auto",
    ".txt": "read_csv_auto",
    ".json": "read_json_auto",
    ".jsonl": "read_json_auto",
    ".ndjson": "read_json_auto",
}
_COMPRESSED = (".gz", ".zst", ".bz2")
_REGISTRATIONS = itertools.count()


def _reader(path: str) -> str | None:
    p = path.lower()
    for suffix in _COMPRESSED:
        if p.endswith(suffix):
            p = p[: -len(suffix)]
    for suffix, reader in _READERS.items():
        if p.endswith(suffix):
            return reader
    return None


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


class DuckDBEngine:
    """Runs veil's SQL trees on DuckDB and returns exact aggregates as Arrow.

    ``tables`` maps the names queries use to their sources (see :data:`TableSource`).
    ``connection`` is an existing DuckDB connection to use (default: a private in-memory one).
    """

    dialect = "duckdb"

    def __init__(
        self,
        tables: Mapping[str, TableSource],
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        if not isinstance(tables, Mapping) or not tables:
            raise InvalidArgumentError(
                "a session needs at least one table; pass tables={'people': 'people.parquet'}"
            )
        self._owned = connection is None
        self._con = connection if connection is not None else duckdb.connect()
        self._versions: dict[str, str] = {}
        self._files: dict[str, list[str]] = {}
        for name, source in tables.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"table names must be non-empty strings, got {name!r}")
            self._register(name, source)

    # -- registration ---------------------------------------------------------------------
    def _register(self, name: str, source: TableSource) -> None:
        ident = _quote(name)
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if isinstance(source, str):
            reader = _reader(source)
            is_file = reader is not None or os.path.exists(source) or any(c in source for c in "*?")
            if is_file:
                files = sorted(glob.glob(source)) if any(c in source for c in "*?[") else [source]
                if not files or not all(os.path.exists(f) for f in files):
                    raise SchemaError(
                        f"table {name!r}: no file at {source!r}; pass an existing CSV or "
                        "Parquet path"
                    )
                literal = exp.Literal.string(source).sql(dialect="duckdb")
                fn = reader or "read_parquet"
                self._con.execute(
                    f"CREATE OR REPLACE TEMP VIEW {ident} AS SELECT * FROM {fn}({literal})"
                )
                self._files[name] = files
                self._versions[name] = ""
                return
            if name != source:
                try:
                    self._con.execute(
                        f"CREATE OR REPLACE TEMP VIEW {ident} AS SELECT * FROM {_quote(source)}"
                    )
                except duckdb.CatalogException:
                    raise SchemaError(
                        f"table {name!r}: {source!r} is neither a file nor a table of the DuckDB "
                        "connection; pass a CSV/Parquet path, a DataFrame or an Arrow table"
                    ) from None
            self._versions[name] = f"table:{source}:{time.time_ns()}:{next(_REGISTRATIONS)}"
            self._check_exists(name)
            return
        if isinstance(source, duckdb.DuckDBPyRelation):
            source.create_view(name, replace=True)  # in the relation's own connection
            try:
                self._con.sql(f"SELECT * FROM {ident} LIMIT 0")
            except duckdb.CatalogException:
                raise SchemaError(
                    f"table {name!r}: the DuckDB relation belongs to another connection; pass "
                    "that connection too: Session.local(tables=…, connection=con)"
                ) from None
        else:
            module = type(source).__module__.split(".")[0]
            if module not in ("pandas", "polars", "pyarrow"):
                raise InvalidArgumentError(
                    f"table {name!r}: cannot read a {type(source).__name__}; pass a CSV/Parquet "
                    "path, a pandas/Polars DataFrame, an Arrow table or a DuckDB relation"
                )
            self._con.register(name, source)
        self._versions[name] = f"object:{id(source)}:{time.time_ns()}:{next(_REGISTRATIONS)}"

    def _check_exists(self, name: str) -> None:
        try:
            self.schema(name)
        except SchemaError:
            raise SchemaError(
                f"table {name!r} is neither a file nor a table of the DuckDB connection; pass a "
                "CSV/Parquet path, a DataFrame or an Arrow table"
            ) from None

    # -- the Engine protocol --------------------------------------------------------------
    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self._versions)

    def _known(self, table: str) -> None:
        if table not in self._versions:
            known = ", ".join(sorted(self._versions))
            close = [t for t in self._versions if t.lower() == table.lower()]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SchemaError(f"unknown table {table!r}{hint} (tables: {known})")

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of ``table`` (a zero-row query; reads no values of Parquet files;
        CSV type detection samples the file, as DuckDB does)."""
        if table not in self._versions and self._versions:
            self._known(table)
        try:
            relation = self._con.sql(f"SELECT * FROM {_quote(table)} LIMIT 0")
            schema: pa.Schema = relation.to_arrow_table().schema
        except duckdb.Error as exc:
            raise SchemaError(f"cannot read the schema of table {table!r}: {exc}") from exc
        return schema

    def data_version(self, table: str) -> str:
        """For files: a digest of their paths, sizes and modification times; for in-memory
        objects and connection tables: a token of this registration (no cache across sessions)."""
        self._known(table)
        files = self._files.get(table)
        if files is None:
            return self._versions[table]
        digest = hashlib.sha256()
        for f in files:
            st = Path(f).stat()
            digest.update(f"{os.path.abspath(f)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        return "files:" + digest.hexdigest()[:32]

    def check(self, query: exp.Expression) -> None:
        """Bind ``query`` without running it (no private value is read): a type or name error
        is a ``SchemaError`` decided by the schema alone, raised before anything is charged."""
        try:
            self._con.sql(to_sql(query, self.dialect))
        except duckdb.Error as exc:  # binding reads no rows: nothing here depends on values
            raise SchemaError(f"the query does not fit the table's columns: {exc}") from exc

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` and return its result; engine errors become veil errors."""
        return self._run(to_sql(query, self.dialect))

    def execute_with_progress(self, query: exp.Expression, progress: Progress) -> pa.Table:
        """:meth:`execute`, reporting DuckDB's ``query_progress()`` to ``progress`` every
        ~100 ms (see :class:`veil.engines.base.ProgressReporting` for the contract and what the
        fraction reveals). DuckDB tracks progress only with its ``enable_progress_bar`` setting
        on: it is switched on (with its own printing off) for this query and restored after."""
        sql = to_sql(query, self.dialect)
        with self._progress_tracked(), watching(self._query_progress, progress):
            return self._run(sql)

    def _query_progress(self) -> float:
        """The running query's fraction done; negative when DuckDB cannot tell."""
        percent: float = self._con.query_progress()
        return percent / 100 if percent >= 0 else -1.0

    @contextmanager
    def _progress_tracked(self) -> Iterator[None]:
        """DuckDB's progress tracking on (its printing off), the previous settings restored."""
        names = ("enable_progress_bar", "enable_progress_bar_print")
        try:
            row = self._con.execute(
                "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
            ).fetchone()
            previous = dict(zip(names, row or (False, True), strict=True))
            self._con.execute("SET enable_progress_bar = true")
            self._con.execute("SET enable_progress_bar_print = false")
        except duckdb.Error:  # e.g. a closed connection: no progress; the query reports the error
            yield
            return
        try:
            yield
        finally:
            try:
                for name, value in previous.items():
                    self._con.execute(f"SET {name} = {'true' if value else 'false'}")
            except duckdb.Error:  # never hide the query's own outcome behind a settings error
                pass

    def _run(self, sql: str) -> pa.Table:
        try:
            table: pa.Table = self._con.sql(sql).to_arrow_table()
        except (duckdb.ConversionException, duckdb.InvalidInputException) as exc:
            raise SchemaError(
                f"the data does not fit the query: {exc}; check that aggregated columns hold "
                "numbers (cast or clean them first)"
            ) from exc
        except duckdb.CatalogException as exc:
            raise SchemaError(f"unknown table or column: {exc}") from exc
        except duckdb.OutOfRangeException as exc:
            raise InternalError(f"an exact integer sum overflowed in DuckDB: {exc}") from exc
        except duckdb.Error as exc:
            raise InternalError(f"DuckDB failed to run veil's SQL: {exc}") from exc
        return table

    def close(self) -> None:
        """Close the connection if this engine opened it (a given connection is left open)."""
        if self._owned:
            self._con.close()

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection (for tests and advanced use)."""
        return self._con
