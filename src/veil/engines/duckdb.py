"""The embedded engine: DuckDB in-process.

Tables are registered as views, never copied into Python: a Parquet path (or glob) is scanned
lazily by DuckDB at query time; a pandas or Polars DataFrame or an Arrow table is registered
zero-copy; a name of a table already in a given DuckDB connection is used as is.

A file table reads the files its path or glob expands to whose layout is the table's
(:mod:`veil.engines.sources`: a CSV's header, a Parquet footer's columns), and is read again
when they change (a new file of the glob, one rewritten) — each file deciding only its own
rows. Parquet is read totally (:mod:`veil.engines.duckdb_files`, :mod:`veil.engines.footers`):
strings that are not UTF-8 with each invalid byte as ``?``, DECIMALs beyond their precision
clamped, storages DuckDB cannot scan for every value refused from the footer. What the engine
says after registration names tables, never files (``veil.sources`` logs them).

Types are never inferred from private values (the schema is public: DESIGN §1):

* CSV/TSV and JSON-lines files are read line by line by the rules of
  :mod:`veil.engines.lines` — no sniffing, every line decides its own row and no other, and no
  line can make the read fail. CSV columns are text unless declared; JSON files are read only
  through a declaration (their column names would otherwise come from the data).
* pandas ``object`` columns (which DuckDB would type by sampling their values) are read as
  text: each value through ``str``, None/NaN/``pd.NA``/``NaT`` as NULL — a copy of those
  columns only.
* Typed sources — typed pandas columns, Polars, Arrow, DuckDB relations and tables, Parquet —
  carry their own types.

``schema={"people": {"income": "DOUBLE"}}`` declares column types for any source (see
:mod:`veil.engines.declared`): a declared column is read through ``TRY_CAST``, so a value that
does not convert is NULL — never a failure, never a type change.

The exact ``read_csv`` call every text file goes through (``duckdb_files``) reads each
physical line as one VARCHAR and nothing else: ``delim`` is the line break itself (so a line is
never split), ``quote`` and ``escape`` are empty (so a quote never runs on to the next line),
``header=false`` and ``auto_detect=false`` (nothing sniffed), ``strict_mode=false`` with
``ignore_errors=true`` (a line over ``max_line_size`` or not UTF-8 is skipped, alone). Lines end
at LF, CRLF or a lone CR; empty lines come back NULL and are dropped, and so is every line equal
to the header. Each kept line is then cut into its cells once, in a projection of its own
(:func:`veil.engines.lines.line_cells`: a split, or one regular expression for a line with
quotes), and each column takes its cell from that list (:func:`veil.engines.lines.cell`).
This needs DuckDB ≥ 1.3, for its ``LAMBDA x : …`` syntax (and ≥ 2.0 for ``utf8_validation``).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.compile.lower import to_sql
from veil.engines.base import Progress
from veil.engines.declared import (
    Declared,
    SchemaArg,
    match_columns,
    parse_schema,
    try_cast,
    type_sql,
)
from veil.engines.duckdb_files import guarded_items, parquet_scan, text_query
from veil.engines.duckdb_memo import (
    LARGE_SETTING,
    arrow_schema,
    catalog_state,
    lists,
    parsed,
    same_state,
    weak_get,
    written,
)
from veil.engines.duckdb_rows import fetched, readable
from veil.engines.footers import refuse_unreadable_reads
from veil.engines.lines import TextFormat, text_format, text_notes
from veil.engines.progress import watching
from veil.engines.sources import Kept, expand, is_glob, keep
from veil.engines.sources import logger as sources_logger
from veil.errors import InternalError, InvalidArgumentError, SchemaError
from veil.plan.nodes import declare_hint

__all__ = ["DuckDBEngine", "TableSource"]

TableSource = Any
"""A path (str or PathLike) to Parquet, CSV/TSV or JSON lines, a DataFrame (pandas, Polars), an
Arrow table or a DuckDB relation, or the name of a table in the engine's connection."""

_PARQUET = (".parquet", ".pq")
_TEXTS = 64  # statement texts remembered (DuckDBEngine._text)
# DuckDB's note on reading a DB-API result as Arrow (one more copy of the few result rows)
_WIDTHS = (31, 32, 63, 64, 127, 128)  # the bounds of DuckDB's integer types, in bits
_COPY_NOTE = "Arrow output on a DB-API result makes an extra copy"
_REGISTRATIONS = itertools.count()
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _stat(path: str) -> tuple[int, int]:
    """A file's size and modification time; (-1, -1) for one that is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _text_of(value: object, isna: Any, is_scalar: Any) -> str | None:
    """A pandas object cell as text: None/NaN/NA/NaT → NULL, anything else through ``str``."""
    try:
        if value is None or (is_scalar(value) and bool(isna(value))):
            return None
        return str(value)
    except Exception:  # a value whose str() raises is NULL, like any value that is not text
        return None


def _with_non_text(column: exp.Column) -> bool:
    """Whether ``column`` is an operand of a comparison or arithmetic whose other operand is
    not a text literal or NULL (``income > 150``, not ``city = 'Paris'``)."""
    parent = column.parent
    if not isinstance(parent, exp.Binary):
        return False
    other = parent.expression if parent.this is column else parent.this
    return not (isinstance(other, exp.Null) or (isinstance(other, exp.Literal) and other.is_string))


class DuckDBEngine:
    """Runs veil's SQL trees on DuckDB and returns exact aggregates as Arrow.

    ``tables`` maps the names queries use to their sources (see :data:`TableSource`).
    ``connection`` is an existing DuckDB connection to use (default: a private in-memory one).
    ``schema`` declares column types per table, ``{"people": {"income": "DOUBLE"}}`` (see
    :mod:`veil.engines.declared`); an unknown type name is an ``InvalidArgumentError``, a
    declared column the source lacks a ``SchemaError``, both raised here. ``layouts`` gives a
    file table's layout as its owner recorded it (``{"people": "uid,income,city"}``: a CSV's
    header line, or a Parquet footer's columns): a file of it whose layout differs is skipped
    (:mod:`veil.engines.sources`); without one, the files of a table must share their layout.
    """

    dialect = "duckdb"

    def __init__(
        self,
        tables: Mapping[str, TableSource],
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
        schema: SchemaArg = None,
        layouts: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(tables, Mapping) or not tables:
            raise InvalidArgumentError(
                "a session needs at least one table; pass tables={'people': 'people.parquet'}"
            )
        for name in tables:
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"table names must be non-empty strings, got {name!r}")
        declared = parse_schema(schema, tables)
        self._owned = connection is None
        self._con = connection if connection is not None else duckdb.connect()
        self._versions: dict[str, str] = {}
        # file tables: their path or glob, format and declarations, and their layout (the
        # owner's, or the one their files shared at registration)
        self._sources: dict[str, tuple[str, TextFormat | None, Declared]] = {}
        self._layouts: dict[str, str] = dict(layouts or {})
        self._files: dict[str, list[str]] = {}  # the files each file table's view reads
        self._built: dict[str, str] = {}  # the data version each file table's view was built at
        # tables whose columns change only with their data version or the connection's
        # catalog: files read from one exact path (not a glob), see ``_bind_key``
        self._fixed: set[str] = set()
        # the columns DuckDB cannot scan for every value, from the footers of the files read
        self._unreadable: dict[str, dict[str, str]] = {}
        self._digests: dict[str, tuple[object, str]] = {}  # see data_version
        self._texts: dict[int, _Text] = {}  # see _text
        self._schemas: dict[str, pa.Schema] = {}  # fixed by a header and declarations
        # the schemas of file tables, with the file version they were read at
        self._file_schemas: dict[str, tuple[str, pa.Schema]] = {}
        self._notes: dict[str, tuple[str, ...]] = {}
        self._declared: dict[str, dict[str, str]] = {}
        self._private = f"__veil_{os.getpid()}_{next(_REGISTRATIONS)}_"
        for name, source in tables.items():
            self._register(name, source, declared.get(name, {}))

    # -- registration ---------------------------------------------------------------------
    def _register(self, name: str, source: TableSource, declared: Declared) -> None:
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if isinstance(source, str):
            self._register_name(name, source, declared)
            return
        self._refuse_shadow(name, f"a {type(source).__name__}")
        raw = f"{self._private}{len(self._versions)}"
        decimals: dict[str, tuple[int, int]] = {}
        if isinstance(source, duckdb.DuckDBPyRelation):
            target = raw if declared else name
            source.create_view(target, replace=True)  # in the relation's own connection
            try:
                self._con.sql(f"SELECT * FROM {_quote(target)} LIMIT 0")
            except duckdb.CatalogException:
                raise SchemaError(
                    f"table {name!r}: the DuckDB relation belongs to another connection; pass "
                    "that connection too: Session.local(tables=…, connection=con)"
                ) from None
            what = "the DuckDB relation"
        else:
            module = type(source).__module__.split(".")[0]
            if module not in ("pandas", "polars", "pyarrow"):
                raise InvalidArgumentError(
                    f"table {name!r}: cannot read a {type(source).__name__}; pass a CSV/Parquet "
                    "path, a pandas/Polars DataFrame, an Arrow table or a DuckDB relation"
                )
            if module == "pandas":
                source = self._objects_as_text(name, source, declared)
            self._con.register(raw if declared else name, source)
            what = f"the {type(source).__name__}"
            # an Arrow DECIMAL is not checked against its precision (pyarrow builds one from
            # buffers, and reads a Parquet file's as it is): guarded as a Parquet file's are
            decimals = self._decimal_columns(raw if declared else name)
            if decimals and not declared:
                self._con.unregister(name)
                self._con.register(raw, source)
        if declared or decimals:
            self._typed_view(name, exp.Table(this=_ident(raw)), declared, what, decimals)
        self._versions[name] = f"object:{id(source)}:{time.time_ns()}:{next(_REGISTRATIONS)}"

    def _decimal_columns(self, table: str) -> dict[str, tuple[int, int]]:
        """The top-level DECIMAL columns of ``table`` (a zero-row read) → (precision, scale)."""
        described = self._con.sql(f"SELECT * FROM {_quote(table)} LIMIT 0")
        found: dict[str, tuple[int, int]] = {}
        for column, kind in zip(described.columns, described.types, strict=True):
            match = _DECIMAL.fullmatch(str(kind))
            if match is not None:
                found[column] = (int(match[1]), int(match[2]))
        return found

    def _register_name(self, name: str, source: str, declared: Declared) -> None:
        """A file path or glob, or the name of a table of the connection."""
        fmt = text_format(source)
        is_file = (
            fmt is not None
            or source.lower().endswith(_PARQUET)
            or os.path.exists(source)
            or is_glob(source)
        )
        if is_file or name != source:
            self._refuse_shadow(name, repr(source))
        if is_file:
            self._sources[name] = (source, fmt, declared)
            if not is_glob(source):
                self._fixed.add(name)
            self._versions[name] = ""
            self._register_files(name)
            return
        if name != source or declared:
            self._typed_view(name, self._connection_table(name, source), declared, repr(source))
        self._versions[name] = f"table:{source}:{time.time_ns()}:{next(_REGISTRATIONS)}"
        self._check_exists(name)

    def _refuse_shadow(self, name: str, what: str) -> None:
        """Refuse to register ``what`` as ``name`` on the caller's connection where ``name``
        is already a table or view of it: the registration is a temporary view (or DuckDB's
        registration, one too), which would hide that table from every later query on the
        connection, this session's and any other's, for as long as the connection lives —
        a later session registering the table by its own name would read ``what`` instead.
        A connection veil made itself holds nothing of the caller's: not checked."""
        if self._owned:
            return
        row = self._con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE lower(table_name) = lower($1) AND NOT "
            "temporary AND database_name = current_database() AND schema_name = "
            "current_schema() UNION ALL SELECT 1 FROM duckdb_views() WHERE lower(view_name) = "
            "lower($1) AND NOT temporary AND NOT internal AND database_name = "
            "current_database() AND schema_name = current_schema() LIMIT 1",
            [name],
        ).fetchall()
        if row:
            raise SchemaError(
                f"table {name!r}: the DuckDB connection already has a table {name!r}; "
                f"registering {what} under that name would hide it from every later query on "
                f"the connection; register it under another name: "
                f"tables={{'{name}_2': {what if what.startswith(chr(39)) else '…'}}}"
            )

    def _connection_table(self, name: str, source: str) -> exp.Table:
        """The connection's table (or view) ``source``, catalog-qualified when the view that
        declares its types takes the same name."""
        if name != source:
            return exp.Table(this=_ident(source))
        row = self._con.execute(
            "SELECT database_name, schema_name FROM duckdb_tables() WHERE table_name = $1 "
            "AND NOT temporary UNION ALL SELECT database_name, schema_name FROM duckdb_views() "
            "WHERE view_name = $1 AND NOT temporary AND NOT internal LIMIT 1",
            [source],
        ).fetchone()
        if row is None:
            raise SchemaError(
                f"table {name!r}: to declare the types of the connection's table {source!r}, "
                f"register it under another name: tables={{'{source}_typed': {source!r}}}"
            )
        return exp.Table(this=_ident(source), db=_ident(str(row[1])), catalog=_ident(str(row[0])))

    def _objects_as_text(self, name: str, frame: Any, declared: Declared) -> Any:
        """``frame`` with its ``object`` columns as text (a shallow copy; typed columns shared),
        so that DuckDB never types a column by sampling its values."""
        import pandas as pd

        positions = [
            i for i, dtype in enumerate(frame.dtypes) if pd.api.types.is_object_dtype(dtype)
        ]
        if not positions:
            return frame
        text = frame.copy(deep=False)
        for i in positions:
            isna, is_scalar = pd.isna, pd.api.types.is_scalar
            values = [_text_of(v, isna, is_scalar) for v in frame.iloc[:, i]]
            text.isetitem(
                i, pd.Series(pd.array(values, dtype=pd.ArrowDtype(pa.string())), index=frame.index)
            )
        lowered = {c.lower() for c in declared}
        undeclared = [str(frame.columns[i]) for i in positions]
        undeclared = [c for c in undeclared if c.lower() not in lowered]
        if undeclared:
            shown = ", ".join(repr(c) for c in undeclared[:5])
            more = f" and {len(undeclared) - 5} more" if len(undeclared) > 5 else ""
            self._notes[name] = (
                f"table {name!r}: the DataFrame's object columns {shown}{more} are read as "
                f"text (their values' types are not looked at); declare types with "
                f"schema={{{name!r}: {{{undeclared[0]!r}: 'DOUBLE'}}}} or give them a dtype",
            )
        return text

    def _typed_view(
        self,
        name: str,
        raw: exp.Expression,
        declared: Declared,
        what: str,
        decimals: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """View ``name`` over ``raw``: every column as is, declared ones through ``TRY_CAST``
        (nothing declared: ``SELECT *``, which follows the source's columns); the DECIMAL
        columns of ``decimals`` (a Parquet file's, as stored) through their range guard."""
        try:
            described = self._con.sql(exp.select("*").from_(raw).limit(0).sql(dialect=self.dialect))
        except duckdb.CatalogException:
            raise SchemaError(
                f"table {name!r}: {what} is neither a file nor a table of the DuckDB "
                "connection; pass a CSV/Parquet path, a DataFrame or an Arrow table"
            ) from None
        except duckdb.Error as exc:
            raise SchemaError(f"cannot read the schema of table {name!r}: {exc}") from exc
        guarded = guarded_items(described.columns, decimals or {})
        if guarded is not None:  # rows: every column, a DECIMAL beyond its digits clamped
            raw = exp.select(*guarded).from_(raw, copy=False).subquery("__veil_guarded")
        if not declared:
            self._create_view(name, exp.select("*").from_(raw, copy=False), {}, {})
            return
        names, types = described.columns, described.types
        casts = match_columns(name, declared, names, what)
        items: list[exp.Expr] = []
        for column, kind in zip(names, types, strict=True):
            ref = exp.column(_ident(column))
            dtype = casts.get(column)
            text = kind.id == "varchar"
            typed = try_cast(ref, dtype, text=text) if dtype else None
            items.append(exp.alias_(typed, _ident(column), copy=False) if typed else ref)
        query = exp.select(*items, copy=False).from_(raw, copy=False)
        self._create_view(name, query, casts, dict(zip(names, types, strict=True)))

    def _create_view(
        self,
        name: str,
        query: exp.Select,
        casts: Mapping[str, exp.DataType],
        types: Mapping[str, object],
    ) -> None:
        view = exp.Create(
            this=exp.Table(this=_ident(name)),
            kind="VIEW",
            replace=True,
            expression=query,
            properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
        )
        try:
            self._con.execute(view.sql(dialect=self.dialect))
            self._declared[name] = {c: type_sql(t, self.dialect) for c, t in casts.items()}
        except duckdb.Error as exc:
            detail = ", ".join(
                f"{c!r} ({types.get(c, 'text')} → {t.sql(dialect=self.dialect)})"
                for c, t in casts.items()
            )
            raise SchemaError(
                f"table {name!r}: the declared types cannot be applied to {detail or 'it'} "
                f"({exc}); declare a type the column's values can be cast to"
            ) from exc

    def _register_files(self, name: str) -> None:
        """The view of file table ``name`` over the files its source expands to now, those
        whose layout is the table's (:func:`veil.engines.sources.keep`): a CSV/TSV or JSON
        lines read line by line, Parquet read totally (``duckdb_files``)."""
        source, fmt, declared = self._sources[name]
        files = expand(source)
        if not files and (not is_glob(source) or name not in self._layouts):
            raise SchemaError(
                f"table {name!r}: no file at {source!r}; pass an existing CSV or Parquet path"
            )
        # a glob's files are held to the table's layout; one exact file is the table itself
        many = is_glob(source)
        kept = keep(name, files, fmt, self._layouts.get(name) if many else None)
        if many and kept.layout is not None:
            self._layouts[name] = kept.layout  # later files are held to it, and skipped
        if fmt is not None:
            self._register_text(name, kept, fmt, declared, source)
        elif not kept.files:
            raise SchemaError(
                f"table {name!r}: no Parquet file at {source!r} has the table's columns"
            )
        else:
            footer = kept.footer
            self._typed_view(
                name,
                parquet_scan(kept.files),
                declared,
                f"the Parquet file {kept.files[0]!r}",
                {} if footer is None else footer.decimals,
            )
            self._unreadable[name] = {} if footer is None else dict(footer.unreadable)
        self._files[name] = list(kept.files)
        self._built[name] = self.data_version(name)

    def _register_text(
        self, name: str, kept: Kept, fmt: TextFormat, declared: Declared, source: str
    ) -> None:
        """A view reading ``kept.files`` line by line (:mod:`veil.engines.lines`); its schema
        — the header's names and the declared types — is fixed here and cached."""
        where = repr(kept.files[0] if kept.files else source)
        query, casts, columns = text_query(name, kept.files, fmt, declared, kept.layout, where)
        self._create_view(name, query, casts, {})
        self._schemas[name] = self._read_schema(name)
        notes = text_notes(name, fmt, columns, casts)
        if fmt.kind == "json":
            notes = (
                f"table {name!r} is read as JSON lines: one object per line, only the declared "
                "keys; a line that is not a JSON object is skipped (a JSON array or an indented "
                "file reads as no rows)",
            )
        self._notes[name] = notes

    def _refresh(self, table: str) -> None:
        """Build file table ``table``'s view again when its files changed since it was built
        (a file added to its glob, one rewritten): the new files are held to the table's
        layout as the first were, so none changes how the others are read. What cannot be
        read is refused without naming a file (the operator's log names it)."""
        if table not in self._sources or self._built.get(table) == self.data_version(table):
            return
        try:
            self._register_files(table)
        except SchemaError as exc:
            sources_logger.warning("table %r cannot be read again: %s", table, exc)
            raise SchemaError(
                f"table {table!r} cannot be read: none of its files can be read as it was "
                "registered (the operator's log says which)"
            ) from None

    def _refresh_named(self, query: exp.Expression) -> None:
        """:meth:`_refresh` every file table ``query`` names."""
        if self._sources:
            for name in {t.name for t in query.find_all(exp.Table)}:
                if name in self._sources:
                    self._refresh(name)

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
        """The Arrow schema of ``table``. Reads no private value: for a text file it was fixed
        at registration from the header line and the declarations; otherwise it is a zero-row
        query (Parquet metadata, in-memory types)."""
        cached = self._schemas.get(table)
        if cached is not None:
            return cached
        if table not in self._versions and self._versions:
            self._known(table)
        if table in self._files:  # a file's schema changes only with the file (its version)
            self._refresh(table)
            cached = self._schemas.get(table)
            if cached is not None:
                return cached
            version = self.data_version(table)
            seen = self._file_schemas.get(table)
            if seen is not None and seen[0] == version:
                return seen[1]
            schema = self._read_schema(table)
            self._file_schemas[table] = (version, schema)
            return schema
        return self._read_schema(table)

    def _read_schema(self, table: str) -> pa.Schema:
        """The Arrow schema of a zero-row read of ``table``. DuckDB binds the read (its
        columns' names and types, as the catalog says now: ~0.1 ms); running it to make the
        Arrow schema (~0.9 ms) is skipped when this connection made one before for the same
        names and types in the same catalog state (``duckdb_memo.arrow_schema``)."""
        try:
            seen = catalog_state(self._con)
            relation = self._con.sql(f"SELECT * FROM {_quote(table)} LIMIT 0")
            return arrow_schema(self._con, seen, table, relation)
        except duckdb.Error as exc:
            raise SchemaError(
                f"cannot read the schema of table {table!r}: {self._scrub(exc)}"
            ) from exc

    def notes(self, table: str) -> tuple[str, ...]:
        """Sentences for ``explain`` about how ``table`` is read: a CSV's undeclared (text)
        columns and how to declare them, a JSON-lines file's rules, a DataFrame's object
        columns read as text; empty when there is nothing to say."""
        self._known(table)
        return self._notes.get(table, ())

    def declared(self, table: str) -> dict[str, str]:
        """``{column: type}`` declared for ``table`` (DuckDB's spelling); empty when none."""
        self._known(table)
        return dict(self._declared.get(table, {}))

    def data_version(self, table: str) -> str:
        """For files: a digest of the paths its source expands to now (a glob listed again),
        their sizes and modification times; for in-memory objects and connection tables: a
        token of this registration (no cache across sessions)."""
        self._known(table)
        if table not in self._sources:
            return self._versions[table]
        source = self._sources[table][0]
        files = expand(source) if is_glob(source) else [source]
        # every call reads the files' sizes and times afresh; the digest of the same reading
        # (and the same working directory, which relative paths resolve against) is remembered
        seen = (os.getcwd(), tuple(_stat(f) for f in files))
        held = self._digests.get(table)
        if held is not None and held[0] == seen:
            return held[1]
        digest = hashlib.sha256()
        for f, (size, mtime) in zip(files, seen[1], strict=True):
            digest.update(f"{os.path.abspath(f)}\0{size}\0{mtime}\0".encode())
        digest.update(f"{len(files)}".encode())
        version = "files:" + digest.hexdigest()[:32]
        self._digests[table] = (seen, version)
        return version

    def unreadable_columns(self, table: str) -> frozenset[str]:
        """The columns (lower-cased) of ``table``'s Parquet files that DuckDB's reader cannot
        scan for every value (:mod:`veil.engines.footers`: millisecond or INT96 timestamps,
        TIME, JSON, DECIMALs it cannot guard…): from the footers of the files it reads, which
        share the table's layout, so they are decided by that layout alone."""
        self._known(table)
        self._refresh(table)
        return frozenset(self._unreadable.get(table, {}))

    def check(self, query: exp.Expression) -> None:
        """Bind ``query`` without running it (no private value is read): a type or name error
        is a ``SchemaError`` decided by the schema alone, raised before anything is charged."""
        self._bind(query, to_sql(query, self.dialect), None)

    def prepare(self, query: exp.Expression, *, salt: int | None = None) -> _Bound | _Checked:
        """:meth:`check`, keeping the statement to run (``veil.engines.base.Preparing``): DuckDB
        parses and binds the SQL here, and the returned statement only runs it.

        ``salt`` is bound as the statement's parameter ``$salt`` where ``query`` holds the
        placeholder ``salt`` (:func:`veil.compile.templates.template`); DuckDB types a
        parameter from its value as it types the literal, so the statement hashes as the one
        with the literal would. ``query`` is not changed: its text is generated and parsed
        once and remembered with the tree, which a template shares between queries.

        A statement bound before is not bound again when nothing its bind reads has changed
        since (:meth:`_bind_key`: the connection's catalog version, the data version of each
        table it names, the type DuckDB gives the salt): the bind of the same text on the same
        catalog and columns is decided the same way, so the check's outcome is the one
        remembered, and the statement runs in one pass (parse, bind and execute), as a first
        query's bound relation does."""
        text = self._text(query)
        params: dict[str, int] | None = None
        if text.salted:
            if salt is None:
                raise InternalError(
                    "a statement with a salt placeholder was prepared without a salt"
                )
            params = {"salt": salt}
        key = self._bind_key(text, salt)
        if key is not None and text.bound == key:
            rows = text.rows[1] if text.rows is not None and text.rows[0] == key else None
            return _Checked(self, text.parsed, params, text.listed, rows)
        bound = _Bound(self, self._bind(query, text.parsed, params), text.listed)
        text.bound = self._bind_key(text, salt)  # again: binding may register what it read
        bound.remember = text, text.bound
        return bound

    def _bind_key(self, text: _Text, salt: int | None) -> tuple[object, ...] | None:
        """What the bind of ``text`` with ``salt`` depends on besides its text, or None when
        that cannot be told cheaply: the connection's catalog state (``duckdb_memo``'s
        ``catalog_state``: DuckDB counts every statement that may change what a name binds
        to — DDL, SET, registrations — and its relations re-bind by it), the data version of
        each table named (their files' paths, sizes and modification times), and which
        integer types hold the salt (DuckDB types an integer parameter by its value). Only
        tables read from one exact file qualify: a glob may match a new file, and a
        DataFrame's columns can change in place."""
        state = catalog_state(self._con)
        if state is None or not text.tables or not text.tables <= self._fixed:
            return None
        # which of DuckDB's integer types (32 to 128 bits, signed or not) hold the salt
        width = None if salt is None else tuple(-(2**b) <= salt < 2**b for b in _WIDTHS)
        versions = tuple(self.data_version(t) for t in sorted(text.tables))
        return (state, versions, width)

    def _text(self, query: exp.Expression) -> _Text:
        """``query`` as DuckDB parsed its text (the text itself if it did not parse as one
        statement: binding it then raises the parser's error), whether it holds the
        placeholder ``salt`` and the registered tables it names, remembered by the tree itself
        (held here, so its id names no other tree). The text and what the tree names are
        generated once per process, the parse once per connection (``duckdb_memo``): a new
        session on the same connection asks neither again."""
        held = self._texts.get(id(query))
        if held is not None and held.query is query:
            return held
        shared = written(query)
        statement = parsed(self._con, shared)
        named = shared.named
        tables = frozenset(t for t in self._versions if t in named)
        if len(tables) != len(named):  # a name veil did not register: never remembered
            tables = frozenset()
        entry = _Text(query, statement, shared.salted, tables, shared.listed)
        self._texts[id(query)] = entry
        while len(self._texts) > _TEXTS:
            self._texts.pop(next(iter(self._texts)))
        return entry

    def _bind(
        self, query: exp.Expression, statement: Any, params: dict[str, int] | None
    ) -> duckdb.DuckDBPyRelation:
        """Bind ``statement`` (``query``'s text, or DuckDB's parse of it) with ``params``."""
        self._refresh_named(query)
        # a session whose files hold no column DuckDB cannot scan walks no tree here
        unreadable = {t: found for t, found in self._unreadable.items() if found}
        if unreadable:
            named = {t.name.lower() for t in query.find_all(exp.Table)}
            refuse_unreadable_reads(
                query,
                {t.lower(): found for t, found in unreadable.items() if t.lower() in named},
                "DuckDB",
                whole_table=True,
            )
        try:
            return self._con.sql(statement, params=params)
        except duckdb.BinderException as exc:  # binding reads no rows: nothing here is data
            # its first line: the rest lists candidate functions or points into veil's own SQL
            first = self._scrub(exc).split("\n", 1)[0].rstrip(".")
            hint = self._text_hint(query)
            raise SchemaError(f"the query does not fit the table's columns: {first}{hint}") from exc
        except duckdb.Error as exc:
            raise SchemaError(
                f"the query does not fit the table's columns: {self._scrub(exc)}"
            ) from exc

    def _scrub(self, error: BaseException) -> str:
        """``error``'s message with every path of this engine's file tables written ``…``: what
        the engine says after registration names tables, never files (the operator's log,
        ``veil.sources``, gets the message as DuckDB wrote it)."""
        text = str(error)
        paths = {source for source, _, _ in self._sources.values()}
        paths |= {f for files in self._files.values() for f in files}
        paths |= {os.path.abspath(p) for p in paths}
        scrubbed = text
        for path in sorted(paths, key=len, reverse=True):
            scrubbed = scrubbed.replace(path, "…")
        if scrubbed != text:
            sources_logger.warning("a message about a file table, as DuckDB wrote it: %s", text)
        return scrubbed

    def _text_hint(self, query: exp.Expression) -> str:
        """How to declare the type of an undeclared text column that a WHERE of ``query``
        reads (DuckDB's binder refuses ``income > 150`` on text, "an explicit cast is
        required", without saying that a CSV's columns are text unless declared); empty when
        no WHERE reads one. Decided from the tree and the schemas alone."""
        for table in dict.fromkeys(t.name for t in query.find_all(exp.Table)):
            if table not in self._versions:
                continue
            declared = {c.lower() for c in self._declared.get(table, {})}
            text = {
                f.name.lower(): f.name
                for f in self.schema(table)
                if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                if f.name.lower() not in declared
            }
            read = [
                (text[c.name.lower()], c)
                for where in query.find_all(exp.Where)
                for c in where.find_all(exp.Column)
                if c.name.lower() in text
            ]
            if read:  # first a column compared with, or computed with, what is not text
                name = min(read, key=lambda r: not _with_non_text(r[1]))[0]
                return f"; {name!r} is text{declare_hint(name, 'string', table)}"
        return ""

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` and return its result; engine errors become veil errors."""
        self._refresh_named(query)
        return self._run(to_sql(query, self.dialect))

    def execute_with_progress(self, query: exp.Expression, progress: Progress) -> pa.Table:
        """:meth:`execute`, reporting DuckDB's ``query_progress()`` to ``progress`` every
        ~100 ms (see :class:`veil.engines.base.ProgressReporting` for the contract and what the
        fraction reveals). DuckDB tracks progress only with its ``enable_progress_bar`` setting
        on: it is switched on (with its own printing off) for this query and restored after."""
        self._refresh_named(query)
        sql = to_sql(query, self.dialect)
        with (
            self._largelists(lists(query)),
            self._progress_tracked(),
            watching(self._query_progress, progress),
        ):
            return self._run(sql)

    def _query_progress(self) -> float:
        """The running query's fraction done; negative when DuckDB cannot tell."""
        percent: float = self._con.query_progress()
        return percent / 100 if percent >= 0 else -1.0

    @contextmanager
    def _largelists(self, on: bool) -> Iterator[None]:
        """With ``on`` (a statement that returns lists: a fine quantile grid's cells per group,
        ``ARRAY_AGG``), DuckDB's Arrow export with 64-bit offsets for the run, the previous
        setting restored. With 32-bit offsets a result whose lists hold more than 2^31 − 1
        values in all fails after the data was read — an outcome that would depend on the
        number of rows; with 64-bit ones every such result is exported (text keys then come as
        Arrow's large strings, which decode the same).

        The setting and its restoration are two statements that move the catalog version;
        when the versions show that nothing else moved it meanwhile, every setting and name is
        as before, and the version reached counts as the one before (``duckdb_memo``'s
        ``catalog_state``): what is remembered by it (binds, schemas) stays valid, and the
        previous value is known without reading it again."""
        if not on:
            yield
            return
        con = self._con
        version = getattr(con, "_catalog_version", None)
        try:
            start = None if version is None else version()
            state = catalog_state(con)
            known = weak_get(LARGE_SETTING, con)
            if start is not None and known is not None and known[0] == start:
                previous = known[1]  # veil restored it at this very version
            else:
                rows = con.execute("SELECT current_setting('arrow_large_buffer_size')").fetchall()
                previous = bool(rows[0][0]) if rows else False
            con.execute("SET arrow_large_buffer_size = true")
            on_at = None if version is None else version()
        except duckdb.Error:  # e.g. a closed connection: the query reports the error
            yield
            return
        try:
            yield
        finally:
            with suppress(duckdb.Error):  # never hide the query's own outcome
                ran = None if version is None else version()
                con.execute(f"SET arrow_large_buffer_size = {'true' if previous else 'false'}")
                end = None if version is None else version()
                # each SET moves the version by exactly one: deltas of one around each of
                # the two prove that no other statement moved it (any would add its own)
                if (
                    start is not None
                    and on_at == start + 1
                    and ran == on_at
                    and end is not None
                    and end == ran + 1
                ):
                    same_state(con, end, state, previous)

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
        return self._arrow(lambda: self._con.sql(sql).to_arrow_table())

    def _executed(
        self, statement: Any, params: dict[str, int] | None, rows: pa.Schema | None = None
    ) -> pa.Table:
        """``statement`` parsed, bound and run in one pass, its rows as Arrow (with ``rows``,
        the schema of its result, a small result read as Python values: ``duckdb_rows``); the
        connection holds no open result after, whatever happened."""
        try:
            self._con.execute(statement, params)
            if rows is None:
                table = self._read_arrow()
            else:  # a small result as Python rows, without the Arrow read's statement
                table = fetched(self._con, rows, self._read_arrow)
        except BaseException:
            abort = getattr(self._con, "abort", None)
            if abort is not None:
                with suppress(duckdb.Error):  # nothing was open
                    abort()
            raise
        return table

    def _read_arrow(self) -> pa.Table:
        """The open result's rows by DuckDB's Arrow read (a statement over them)."""
        with warnings.catch_warnings():  # the copy is of the few aggregated rows
            warnings.filterwarnings("ignore", message=_COPY_NOTE, category=UserWarning)
            table: pa.Table = self._con.to_arrow_table()
        return table

    def _arrow(self, fetch: Callable[[], pa.Table]) -> pa.Table:
        """``fetch()`` (which runs a statement), engine errors as veil errors."""
        try:
            table: pa.Table = fetch()
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


class _Bound:
    """A statement DuckDB has parsed and bound (see :meth:`DuckDBEngine.prepare`)."""

    def __init__(
        self, engine: DuckDBEngine, relation: duckdb.DuckDBPyRelation, listed: bool = False
    ) -> None:
        self._engine = engine
        self._relation = relation
        self._listed = listed
        # where to remember the result's schema for a small result read as rows
        # (``duckdb_rows``): the statement's text and the key of this bind
        self.remember: tuple[_Text, tuple[object, ...] | None] | None = None

    def run(self, progress: Progress | None) -> pa.Table:
        engine, relation = self._engine, self._relation
        with engine._largelists(self._listed):
            if progress is None:
                table = engine._arrow(relation.to_arrow_table)
            else:
                with engine._progress_tracked(), watching(engine._query_progress, progress):
                    table = engine._arrow(relation.to_arrow_table)
        if self.remember is not None:
            text, key = self.remember
            if key is not None:
                text.rows = key, readable(relation.types, table.schema)
        return table


class _Checked:
    """A statement whose bind succeeded before on the same catalog and columns (see
    :meth:`DuckDBEngine.prepare`): run in one pass."""

    def __init__(
        self,
        engine: DuckDBEngine,
        statement: Any,
        params: dict[str, int] | None,
        listed: bool = False,
        rows: pa.Schema | None = None,
    ):
        self._engine = engine
        self._statement = statement
        self._params = params
        self._listed = listed
        self._rows = rows

    def run(self, progress: Progress | None) -> pa.Table:
        engine = self._engine

        def fetch() -> pa.Table:
            return engine._executed(self._statement, self._params, self._rows)

        with engine._largelists(self._listed):
            if progress is None:
                return engine._arrow(fetch)
            with engine._progress_tracked(), watching(engine._query_progress, progress):
                return engine._arrow(fetch)


class _Text:
    """A tree's text as DuckDB parsed it (see :meth:`DuckDBEngine._text`), and the key of its
    last successful bind (:meth:`DuckDBEngine._bind_key`), None before one."""

    __slots__ = ("bound", "listed", "parsed", "query", "rows", "salted", "tables")

    def __init__(
        self,
        query: exp.Expression,
        parsed: Any,
        salted: bool,
        tables: frozenset[str],
        listed: bool,
    ) -> None:
        self.query, self.parsed, self.salted, self.tables = query, parsed, salted, tables
        self.bound: tuple[object, ...] | None = None
        self.listed = listed
        # the key of the bind whose run gave this schema, and the schema when a small result
        # of the statement reads as Python rows (``duckdb_rows.readable``), else None
        self.rows: tuple[tuple[object, ...], pa.Schema | None] | None = None
