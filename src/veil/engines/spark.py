"""Apache Spark as a veil engine: the same SQL trees, run where the data lives.

:class:`SparkEngine` implements :class:`veil.engines.base.Engine`. The session lowers a plan
to a sqlglot tree (one dialect-neutral lowering module); this engine generates it as Spark SQL,
runs it on the cluster and collects the result through Arrow. The result is the small table
of exact aggregates — one row per group — so only aggregated rows ever reach the driver.

Tables are Spark DataFrames, catalog table names, or Parquet/ORC/CSV/TSV/JSON-lines paths (any
URI Spark can read: ``s3a://…``, ``hdfs://…``). Each is registered under a private temporary view
name and the tree's table references are rewritten to it, so the user's own views are never
replaced.

Types are never inferred from private values (DESIGN §1). DataFrames, catalog tables, Parquet
and ORC carry their own types. A Parquet path is read totally (:mod:`veil.engines.spark_parquet`:
its files held to the table's layout, dates read as stored, DECIMALs guarded, storages Spark
cannot scan for every value refused from the footer), and what the engine says after
registration names tables, never files (``veil.sources`` logs them).

CSV/TSV and JSON-lines files are *not* read with Spark's CSV or JSON sources (``inferSchema``
reads every row; and even with ``multiLine=false`` and ``mode=PERMISSIVE`` the CSV parser fails
the whole query on one line with more than ``maxColumns`` = 20 480 cells): they are read as
text, one row per physical line (Spark's ``text`` source; lines end at LF, CRLF or a lone CR; a
line over 2 MiB is skipped through Hadoop's
``mapreduce.input.linerecordreader.line.maxlength``; empty lines, lines identical to the header
and — on Spark ≥ 4 — lines that are not valid UTF-8 are dropped), and cut into cells by the
rules and regular expressions of :mod:`veil.engines.lines`, the same as DuckDB's: the same file
gives the same rows on both engines. The header is each file's own first line, read through
Hadoop's file system and line reader before any query (not the first row of Spark's scan, which
orders files by size); a directory or glob whose files' first lines differ is refused, as on
DuckDB. Without a declaration every column is text. JSON lines are parsed with ``from_json``
into the declared keys only.

``schema={"people": {"income": "DOUBLE"}}`` declares column types for any source (see
:mod:`veil.engines.declared`): a declared column is read through ``TRY_CAST`` — NULL for a
value that does not convert, whatever the ANSI setting (Spark 4 enables ANSI mode by default,
under which a plain ``CAST`` raises at run time).

pyspark is an optional extra (``pip install 'veil[spark]'``) imported only when an engine is
built; without it :class:`veil.errors.MissingDependencyError` says what to install.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from veil.engines.base import Progress
from veil.engines.declared import Declared, SchemaArg, match_columns, parse_schema, try_cast
from veil.engines.footers import read_footer, refuse_unreadable_reads
from veil.engines.lines import (
    MAX_LINE_BYTES,
    TextFormat,
    cell,
    decode_first_line,
    header_names,
    line_cells,
    require_declared_json,
    text_format,
    text_notes,
)
from veil.engines.progress import watching
from veil.engines.sources import logger as sources_logger
from veil.engines.spark_errors import condition, scrub, translate
from veil.engines.spark_parquet import (
    READ_CONF,
    READ_OPTIONS,
    ParquetRead,
    read_parquet,
    spark_reasons,
    unchecked_reasons,
)
from veil.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    SchemaError,
    UnsupportedQueryError,
    VeilError,
)

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine", "default_spark_session", "is_spark_dataframe", "require_pyspark"]

INSTALL_HINT = "pip install 'veil[spark]'"

_FILE_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".orc": "orc"}
_MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"
_BOM = "\ufeff"
_ENGINE_IDS = itertools.count()
_VERSIONS = itertools.count()
_QUERY_IDS = itertools.count()
_MAX_STATS = 2_000  # input files stat-ed one by one for the data version
# Spark's SQL configuration is per session; the ANSI switch in ``execute`` is guarded per process.
_CONF_LOCK = threading.RLock()


def require_pyspark() -> ModuleType:
    """Import and return ``pyspark.sql``, or raise ``MissingDependencyError`` with the hint."""
    try:
        return importlib.import_module("pyspark.sql")
    except ImportError as exc:
        raise MissingDependencyError(
            f"running veil on Apache Spark needs pyspark, which is not installed ({exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from exc


def default_spark_session() -> SparkSession:
    """``SparkSession.builder.getOrCreate()``: the session ``spark-submit`` configured, a Spark
    Connect session when ``SPARK_REMOTE`` is set (``sc://host:15002``), else ``local[*]``."""
    sql = require_pyspark()
    # a local Spark starts its Python workers with PYSPARK_PYTHON (default: python3, which
    # in a virtual environment cannot import veil): default it to this interpreter
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session: SparkSession = sql.SparkSession.builder.appName("veil").getOrCreate()
    return session


def is_spark_dataframe(obj: object) -> bool:
    """True for a classic or Spark Connect DataFrame, without importing pyspark."""
    cls = type(obj)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


def _looks_like_path(source: str) -> bool:
    return (
        "/" in source
        or "\\" in source
        or "://" in source
        or Path(source).suffix.lower() in _FILE_FORMATS
        or text_format(source, any_compression=True) is not None
        or os.path.exists(source)
    )


def _is_orc(path: str) -> bool:
    """Whether ``path`` is read as ORC (its suffix says so); any other path is Parquet."""
    return _FILE_FORMATS.get(Path(path.rstrip("/")).suffix.lower(), "parquet") == "orc"


def _footer_handle(uri: str) -> object:
    """A local path or a ``(filesystem, path)`` pair pyarrow opens ``uri`` (as Spark lists
    it) with; the uri itself when pyarrow has no file system for it."""
    if uri.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(uri).path)
    try:
        from pyarrow import fs

        return fs.FileSystem.from_uri(uri)
    except (OSError, pa.ArrowException):  # a scheme pyarrow cannot open
        return uri


def _column(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _spark_sql(node: exp.Expr) -> str:
    return node.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)


class SparkEngine:
    """Runs veil's SQL trees on a Spark session and returns exact aggregates as Arrow.

    ``tables`` maps the names used in queries to a Spark ``DataFrame``, a catalog table name,
    or a path (Parquet, ORC, CSV/TSV with a header, JSON lines; a directory is read as
    Parquet unless its name ends in ``.csv``…). ``schema`` declares column types per table
    (``{"people": {"income": "DOUBLE"}}``, see :mod:`veil.engines.declared`); JSON lines need
    it. ``layouts`` gives a file table's layout as its owner recorded it (a CSV/TSV header
    line, or a Parquet footer's columns): a file of its directory or glob whose layout
    differs is skipped (:mod:`veil.engines.sources`); without one, the files must be alike.
    Works with classic Spark and with Spark Connect sessions.
    """

    dialect = "spark"

    def __init__(
        self,
        spark_session: SparkSession,
        tables: Mapping[str, DataFrame | str | os.PathLike[str]],
        *,
        schema: SchemaArg = None,
        layouts: Mapping[str, str] | None = None,
    ) -> None:
        require_pyspark()
        if not tables:
            raise InvalidArgumentError(
                "SparkEngine needs at least one table; pass tables={'people': df_or_path}"
            )
        for name in tables:
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"table names must be non-empty strings, got {name!r}")
        declared = parse_schema(schema, tables)
        self._spark = spark_session
        self._prefix = f"__veil_{os.getpid()}_{next(_ENGINE_IDS)}_"
        self._names: dict[str, str] = {}  # lower-cased → as given
        self._frames: dict[str, DataFrame] = {}
        self._views: dict[str, str] = {}
        self._notes: dict[str, tuple[str, ...]] = {}
        self._declared: dict[str, dict[str, str]] = {}
        # the columns Spark cannot scan for every value, by the footers of the files read
        self._footers: dict[Any, dict[str, str]] = {}
        self._layouts: dict[str, str] = dict(layouts or {})
        self._paths: list[str] = []  # the paths and globs of file tables, for ``_scrub``
        # Parquet paths veil reads itself: the path, its declarations, what was read (with
        # the sizes and times of its files then), rebuilt when they change
        self._parquet: dict[str, tuple[str, Declared, ParquetRead, object]] = {}
        for name, source in tables.items():
            key = name.lower()  # Spark resolves identifiers case-insensitively
            if key in self._frames:
                raise InvalidArgumentError(
                    f"table {name!r} is given twice (Spark names are case-insensitive)"
                )
            frame = self._as_dataframe(name, source, declared.get(name, {}))
            view = f"{self._prefix}{len(self._views)}"
            frame.createOrReplaceTempView(view)
            self._names[key] = name
            self._frames[key] = frame
            self._views[key] = view

    def _as_dataframe(self, name: str, source: object, declared: Declared) -> DataFrame:
        if is_spark_dataframe(source):
            owner = getattr(source, "sparkSession", self._spark)
            if owner is not self._spark:
                raise InvalidArgumentError(
                    f"table {name!r} is a DataFrame of another Spark session; pass the session "
                    "that created it, or a path or table name this session can read"
                )
            return self._typed(name, source, declared, "the DataFrame")  # type: ignore[arg-type, unused-ignore]
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if isinstance(source, str):
            if not _looks_like_path(source):
                return self._typed(name, self._spark.table(source), declared, repr(source))
            self._paths.append(source)
            fmt = text_format(source, any_compression=True)
            if fmt is not None:
                return self._read_text(name, source, fmt, declared)
            if _is_orc(source):
                orc = self._spark.read.options(**READ_OPTIONS).orc(source)
                return self._typed(name, orc, declared, repr(source))
            return self._read_parquet(name, source, declared)
        raise InvalidArgumentError(
            f"table {name!r}: cannot read a {type(source).__name__} on Spark; pass a Spark "
            "DataFrame, a catalog table name or a Parquet/CSV path"
        )

    def _read_parquet(self, name: str, path: str, declared: Declared) -> DataFrame:
        """A Parquet path read totally (:mod:`veil.engines.spark_parquet`): its files held to
        the table's layout, its DECIMALs guarded; the files' sizes and times remembered, so
        that a file rewritten since is read again the same way (:meth:`_refresh`)."""
        read = read_parquet(self._spark, name, path, self._layouts.get(name), _footer_handle)
        if read.layout is not None:
            self._layouts.setdefault(name, read.layout)  # later files are held to it
        frame = self._typed(name, read.frame, declared, repr(path))
        self._parquet[name.lower()] = (path, declared, read, self._file_stats(list(read.listed)))
        return frame

    def _refresh(self, table: str) -> None:
        """Read Parquet table ``table`` again when a file it read changed since (rewritten,
        removed): listed anew and held to its layout as at first, so that no file changes
        how the others are read. What cannot be read is refused naming no file (the
        operator's log, ``veil.sources``, names it)."""
        key = table.lower()
        held = self._parquet.get(key)
        if held is None:
            return
        path, declared, read, stats = held
        now = self._file_stats(list(read.listed))
        if now is not None and now == stats:
            return
        name = self._names.get(key, table)
        try:
            frame = self._read_parquet(name, path, declared)
        except VeilError as exc:
            sources_logger.warning("table %r cannot be read again: %s", name, exc)
            raise SchemaError(
                f"table {name!r} cannot be read: none of its files can be read as it was "
                "registered (the operator's log says which)"
            ) from None
        frame.createOrReplaceTempView(self._views[key])
        self._frames[key] = frame

    def _typed(self, name: str, frame: DataFrame, declared: Declared, what: str) -> DataFrame:
        """``frame`` with its declared columns through ``TRY_CAST`` (others unchanged); a cast
        Spark cannot analyse is a ``SchemaError`` here."""
        if not declared:
            return frame
        columns = list(frame.columns)
        casts = match_columns(name, declared, columns, what)
        types = importlib.import_module("pyspark.sql.types")
        text = (types.StringType, types.VarcharType, types.CharType)
        texts = {f.name for f in frame.schema.fields if isinstance(f.dataType, text)}
        items = [
            _spark_sql(
                exp.alias_(
                    try_cast(_column(c), casts[c], text=c in texts),
                    exp.to_identifier(c, quoted=True),
                )
            )
            if c in casts
            else _spark_sql(_column(c))
            for c in columns
        ]
        return self._analysed(name, frame.selectExpr(*items), casts)

    def _analysed(
        self, name: str, frame: DataFrame, casts: Mapping[str, exp.DataType]
    ) -> DataFrame:
        errors = importlib.import_module("pyspark.errors")
        try:
            frame.schema  # noqa: B018 - forces analysis (lazy on Spark Connect)
        except errors.AnalysisException as exc:
            detail = ", ".join(f"{c!r} → {t.sql(dialect='spark')}" for c, t in casts.items())
            raise SchemaError(
                f"table {name!r}: the declared types cannot be applied ({detail}): {exc}; "
                "declare a type the column's values can be cast to"
            ) from exc
        self._declared[name.lower()] = {c: t.sql(dialect="spark") for c, t in casts.items()}
        return frame

    def _read_text(self, name: str, path: str, fmt: TextFormat, declared: Declared) -> DataFrame:
        """A DataFrame reading ``path`` as text, one row per kept line, cut into the header's
        columns (CSV/TSV) or the declared keys (JSON lines) by :mod:`veil.engines.lines`."""
        functions = importlib.import_module("pyspark.sql.functions")
        value = functions.col("value")
        errors = importlib.import_module("pyspark.errors")
        try:  # lists the files (metadata), reads none
            lines = self._spark.read.option(_MAX_LINE, str(MAX_LINE_BYTES)).text(path)
        except errors.AnalysisException as exc:
            raise SchemaError(
                f"table {name!r}: Spark cannot list {path!r} ({condition(exc) or exc}); pass an "
                "existing CSV path, directory or glob"
            ) from None
        keep = value != functions.lit("")
        if int(self._spark.version.split(".")[0]) >= 4:
            keep = keep & functions.expr("is_valid_utf8(value)")
        if fmt.kind == "json":
            require_declared_json(name, declared)
            columns: tuple[str, ...] = tuple(declared)
            casts = dict(declared)
            types = importlib.import_module("pyspark.sql.types")
            struct = types.StructType([types.StructField(c, types.StringType()) for c in columns])
            keep = keep & functions.expr("json_object_keys(value)").isNotNull()
            parsed = functions.from_json(value, struct)
            raws = [parsed.getField(c).alias(f"__veil_{k}") for k, c in enumerate(columns, 1)]
            inner = lines.where(keep).select(*raws)
            self._notes[name.lower()] = (
                f"table {name!r} is read as JSON lines: one object per line, only the declared "
                "keys; a line that is not a JSON object is skipped (a JSON array or an indented "
                "file reads as no rows)",
            )
        else:
            header, lines = self._header(name, path, lines)
            columns = header_names(name, header, fmt, repr(path))
            casts = match_columns(name, declared, columns, f"the header of {path!r}")
            keep = keep & (value != functions.lit(header))
            keep = keep & (value != functions.lit(_BOM + header))
            split = line_cells(_column("value"), fmt.delimiter, "spark")
            listed = _column("__veil_cells")
            typed = [
                _spark_sql(
                    exp.alias_(
                        cell(listed, k, "spark", casts.get(c)), exp.to_identifier(c, quoted=True)
                    )
                )
                for k, c in enumerate(columns, 1)
            ]
            self._notes[name.lower()] = text_notes(name, fmt, columns, casts)
            # rows: one per kept line, with its cells split once (no quote) or tokenized once
            inner = lines.where(keep).selectExpr(_spark_sql(exp.alias_(split, "__veil_cells")))
            return self._analysed(name, inner.selectExpr(*typed), casts)
        # rows: one per kept line; __veil_k: declared key k as text, then cast
        items = []
        for k, column in enumerate(columns, 1):
            ref: exp.Expression = _column(f"__veil_{k}")
            dtype = casts.get(column)
            value = try_cast(ref, dtype, text=True) if dtype else ref  # JSON: text
            items.append(_spark_sql(exp.alias_(value, exp.to_identifier(column, quoted=True))))
        return self._analysed(name, inner.selectExpr(*items), casts)

    def _header(self, name: str, path: str, lines: DataFrame) -> tuple[str, DataFrame]:
        """The header line of ``lines`` (the text of ``path``) and the lines to read: each
        file's own first line is read apart from Spark's scan (which orders files by size, so
        a query's first row comes from the largest file), so no data row and no file size
        decides it. With the owner's header (``layouts``), a file that starts otherwise is
        skipped (logged on ``veil.sources``); without it, files whose first lines differ are
        refused (a headerless file, another file's columns), without quoting them."""
        files = sorted(lines.inputFiles())  # listed from the file system's metadata
        if not files and name not in self._layouts:
            raise SchemaError(
                f"table {name!r}: no file at {path!r}; pass an existing CSV path, directory or glob"
            )
        layout = self._layouts.get(name)
        if layout is None:
            header = self._first_line(name, files[0])
            for other in files[1:]:
                if self._first_line(name, other) != header:
                    raise SchemaError(
                        f"table {name!r}: {other!r} does not start with the header of "
                        f"{files[0]!r}; the files of one table must have the same first line"
                    )
            return header, lines
        kept = [f for f in files if self._first_line_or_none(name, f) == layout]
        if len(kept) == len(files):
            return layout, lines
        skipped = [f for f in files if f not in kept]
        sources_logger.warning(
            "table %r: skipped %d file(s) whose first line is not the table's header (their "
            "rows are not read): %s",
            name, len(skipped), ", ".join(skipped),
            extra={"veil_table": name, "veil_skipped": tuple(skipped)},
        )  # fmt: skip
        reader = self._spark.read.option(_MAX_LINE, str(MAX_LINE_BYTES))
        if kept:
            return layout, reader.text(kept)
        return layout, self._spark.createDataFrame([], "value STRING")

    def _first_line_or_none(self, name: str, file: str) -> str | None:
        """:meth:`_first_line`, None for a file whose first line cannot be read."""
        try:
            return self._first_line(name, file)
        except SchemaError:
            return None

    def _first_line(self, name: str, file: str) -> str:
        """The first line of one input file, as :func:`veil.engines.lines.read_first_line`
        reads a local one: through Hadoop's file system, decompression codecs and line reader
        (the line breaks of Spark's text source), no further than :data:`MAX_LINE_BYTES`."""
        jvm: Any = getattr(self._spark, "_jvm", None)
        if jvm is None:  # pragma: no cover - Spark Connect: the one file's first line
            rows = self._spark.read.option(_MAX_LINE, str(MAX_LINE_BYTES)).text(file).limit(1)
            first = rows.collect()
            text = "" if not first or first[0][0] is None else str(first[0][0])
            return decode_first_line(text.encode("utf-8", "surrogatepass"), repr(file))
        hadoop = jvm.org.apache.hadoop
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        py4j = importlib.import_module("py4j.protocol")
        stream = None
        try:
            jpath = hadoop.fs.Path(file)
            stream = jpath.getFileSystem(conf).open(jpath)
            codec = hadoop.io.compress.CompressionCodecFactory(conf).getCodec(jpath)
            if codec is not None:
                stream = codec.createInputStream(stream)
            line = hadoop.io.Text()
            # at most one byte past the limit is kept, and about that many read
            hadoop.util.LineReader(stream, conf).readLine(
                line, MAX_LINE_BYTES + 1, MAX_LINE_BYTES + 2
            )
            head = bytes(line.copyBytes())
        except py4j.Py4JJavaError as exc:  # unreadable, or not in the codec its suffix names
            detail = exc.java_exception.toString()
            raise SchemaError(
                f"table {name!r}: cannot read the first line of {file!r}: {detail}"
            ) from None
        finally:
            if stream is not None:
                stream.close()
        return decode_first_line(head, repr(file))

    # -- the Engine protocol -----------------------------------------------------------------

    @property
    def tables(self) -> tuple[str, ...]:
        """The registered table names, as given (Spark resolves them case-insensitively)."""
        return tuple(self._names.values())

    def _frame(self, table: str) -> DataFrame:
        try:
            return self._frames[table.lower()]
        except KeyError:
            known = ", ".join(sorted(self._names.values()))
            raise SchemaError(
                f"unknown table {table!r}; the Spark engine has: {known}. "
                "Register it with tables={...}"
            ) from None

    def notes(self, table: str) -> tuple[str, ...]:
        """Sentences for ``explain`` about how ``table`` is read: a CSV's undeclared (text)
        columns and how to declare them, a JSON-lines file's rules; empty when there is
        nothing to say."""
        self._frame(table)
        return self._notes.get(table.lower(), ())

    def declared(self, table: str) -> dict[str, str]:
        """``{column: type}`` declared for ``table`` (Spark's spelling); empty when none."""
        self._frame(table)
        return dict(self._declared.get(table.lower(), {}))

    def schema(self, table: str) -> pa.Schema:
        """The table's Arrow schema, from Spark's analysed plan (no data is read)."""
        self._frame(table)  # an unknown table: the SchemaError naming the known ones
        self._refresh(table)
        frame = self._frame(table)
        types = importlib.import_module("pyspark.sql.pandas.types")
        # a TIMESTAMP (with local time zone) needs the session's zone to map to Arrow on
        # Spark 4 (which asserts one is given); Spark 3.5 takes no zone and uses UTC
        zone = self._spark.conf.get("spark.sql.session.timeZone", None) or "UTC"
        convert = types.to_arrow_schema
        if "timezone" in inspect.signature(convert).parameters:
            result: pa.Schema = convert(frame.schema, timezone=zone)
        else:  # pragma: no cover - Spark 3.5
            result = convert(frame.schema)
        return result

    def data_version(self, table: str) -> str:
        """A digest of the table's logical plan and of its input files' sizes and times.

        Files on any Hadoop file system are stat-ed through the JVM (classic Spark). When they
        cannot be (Spark Connect, or more than ``_MAX_STATS`` files), the version is a fresh
        token on every call: no cached answer is ever served for data that may have changed —
        the query is simply charged again. A table with no input files (an in-memory
        DataFrame) holds its data in the plan, which the digest covers.
        """
        frame = self._frame(table)
        files = sorted(frame.inputFiles())
        stats = self._file_stats(files)
        if stats is None:
            return f"uncached:{os.getpid()}:{time.time_ns()}:{next(_VERSIONS)}"
        digest = hashlib.sha256(str(frame.semanticHash()).encode())
        for path in files:
            digest.update(f"\0{path}\0{stats[path]}".encode())
        return digest.hexdigest()[:32]

    def _file_stats(self, files: list[str]) -> dict[str, str] | None:
        """``path → "size:mtime"`` (``"gone"`` for a file that is no longer there), or None
        when the files cannot be stat-ed cheaply."""
        if not files:
            return {}
        jvm: Any = getattr(self._spark, "_jvm", None)
        if jvm is None or len(files) > _MAX_STATS:  # Spark Connect has no JVM gateway
            return None
        py4j = importlib.import_module("py4j.protocol")
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        stats: dict[str, str] = {}
        for path in files:
            jpath = jvm.org.apache.hadoop.fs.Path(path)
            try:
                status = jpath.getFileSystem(conf).getFileStatus(jpath)
            except py4j.Py4JJavaError:  # removed since it was listed
                stats[path] = "gone"
                continue
            stats[path] = f"{status.getLen()}:{status.getModificationTime()}"
        return stats

    def unreadable_columns(self, table: str) -> frozenset[str]:
        """The columns (lower-cased) of ``table``'s Parquet files that Spark's reader cannot
        scan for every value (:mod:`veil.engines.footers`: millisecond timestamps, DECIMALs
        of more than 18 digits it cannot read wider…): read from the files' footers (no
        data row), again whenever the files change."""
        return frozenset(self._unreadable(table))

    def _unreadable(self, table: str) -> dict[str, str]:
        """Column (lower-cased) → why Spark cannot scan it, for :meth:`unreadable_columns`."""
        self._refresh(table)
        held = self._parquet.get(table.lower())
        if held is not None:  # read by veil: its files share the footer read then
            footer = held[2].footer
            if footer is None:  # footers out of pyarrow's reach: Spark's schema decides
                return unchecked_reasons(self._frame(table))
            return spark_reasons([footer], widened=True)
        frame = self._frame(table)
        files = sorted(frame.inputFiles())
        stats = self._file_stats(files)
        key = (table.lower(), tuple(files), None if stats is None else tuple(stats.items()))
        if stats is not None and key in self._footers:
            return self._footers[key]
        found = spark_reasons([read_footer(_footer_handle(f)) for f in files], widened=False)
        if stats is not None:
            self._footers[key] = found
        return found

    def sql(self, query: exp.Expression) -> str:
        """The Spark SQL text ``query`` runs as (table names replaced by private views)."""
        ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}

        def rename(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Table) or node.args.get("db") or node.args.get("catalog"):
                return node
            name = node.name.lower()
            if name in ctes:
                return node
            view = self._views.get(name)
            if view is None:
                self._frame(node.name)  # raises the SchemaError naming the known tables
            renamed = node.copy()
            renamed.set("this", exp.to_identifier(view, quoted=True))
            if not renamed.alias:
                renamed.set("alias", exp.TableAlias(this=exp.to_identifier(node.name)))
            return renamed

        tree = query.transform(rename)
        if not isinstance(tree, exp.Query):
            raise UnsupportedQueryError(
                f"the Spark engine runs queries only, not {type(query).__name__} nodes"
            )
        return tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)

    def check(self, query: exp.Expression) -> None:
        """Analyse ``query`` without running it (no private value is read): a type or name
        error is a ``SchemaError`` decided by the schema alone, raised before anything is
        charged."""
        errors = importlib.import_module("pyspark.errors")
        text = self.sql(query)
        tables = {t.name.lower() for t in query.find_all(exp.Table)} & set(self._frames)
        refuse_unreadable_reads(query, {t: self._unreadable(t) for t in tables}, "Spark")
        try:
            with self._query_conf():
                self._spark.sql(text).schema  # noqa: B018 - forces analysis on Connect
        except errors.PySparkException as exc:  # analysis reads no rows: nothing here is data
            raise translate(exc, errors, self._scrub, checking=True) from exc

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` with ANSI mode *off* and collect its (small) result as Arrow.

        ANSI mode is switched off for the duration of the query (the session's setting is
        restored after): under ANSI, Spark raises on a value that an implicit or explicit cast,
        a division or an extraction cannot handle, so whether the query fails would depend on
        private rows (``name = 12`` fails iff some name is not a number). Without it such a
        value gives NULL and the row is left out. A BIGINT sum then wraps instead of raising;
        the session certifies each fixed-point sum from the exact row count (rows·limit < 2^63,
        see ``Dialect.sum_wraps``) and refuses a NULL sum of a non-empty group (DESIGN §2:
        overflow is checked, not assumed).
        """
        return self._run(self.sql(query))

    def _run(self, text: str) -> pa.Table:
        errors = importlib.import_module("pyspark.errors")
        try:
            with self._query_conf():
                return _collect(self._spark.sql(text))
        except errors.PySparkException as exc:
            raise translate(exc, errors, self._scrub) from exc

    def execute_with_progress(self, query: exp.Expression, progress: Progress) -> pa.Table:
        """:meth:`execute`, reporting the share of finished tasks to ``progress`` every ~100 ms.

        The query's jobs run under a job group of their own (the thread's previous group is
        restored after); the fraction is finished / all tasks of the stages Spark has planned
        for them so far, from the SparkContext's status tracker — so it can stall when a later
        stage is planned, never go back. On Spark Connect (no SparkContext) it stays unknown.
        See :class:`veil.engines.base.ProgressReporting` for the contract and what it reveals.
        """
        text = self.sql(query)
        context = self._context()
        if context is None:
            with watching(lambda: None, progress):
                return self._run(text)
        group = f"{self._prefix}q{next(_QUERY_IDS)}"
        key = "spark.jobGroup.id"
        previous = context.getLocalProperty(key)
        context.setLocalProperty(key, group)
        try:
            with watching(functools.partial(_tasks_done, context, group), progress):
                return self._run(text)
        finally:
            context.setLocalProperty(key, previous)  # type: ignore[arg-type, unused-ignore] # None unsets it

    def _context(self) -> SparkContext | None:
        """The SparkContext, or None on Spark Connect (which has none)."""
        if getattr(self._spark, "_jvm", None) is None:
            return None
        context: SparkContext = self._spark.sparkContext
        return context

    @contextmanager
    def _query_conf(self) -> Iterator[None]:
        """ANSI mode off and the Parquet reader's settings of
        :data:`veil.engines.spark_parquet.READ_CONF` (dates read as stored, the vectorized
        reader) for the duration of a query; the session's own settings restored after."""
        wanted = {"spark.sql.ansi.enabled": "false", **READ_CONF}
        with _CONF_LOCK:
            previous = {key: self._spark.conf.get(key, None) for key in wanted}
            for key, value in wanted.items():
                self._spark.conf.set(key, value)
            try:
                yield
            finally:
                for key, was in previous.items():
                    if was is None:
                        self._spark.conf.unset(key)
                    else:
                        self._spark.conf.set(key, was)

    def _scrub(self, text: str) -> str:
        """``text`` with every path of this engine's file tables written ``…``
        (:func:`veil.engines.spark_errors.scrub`)."""
        files: set[str] = set()
        for frame in self._frames.values():
            with suppress(Exception):  # py4j's errors: a frame that cannot list its files
                files |= set(frame.inputFiles())
        return scrub(text, self._paths, files)

    def close(self) -> None:
        """Drop the temporary views this engine registered."""
        for view in self._views.values():
            self._spark.catalog.dropTempView(view)
        self._views.clear()
        self._frames.clear()
        self._names.clear()

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparkEngine(tables={sorted(self._names.values())})"


def _tasks_done(context: SparkContext, group: str) -> float | None:
    """Finished / all tasks of the stages of job group ``group``'s jobs (None: none yet)."""
    tracker = context.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done / total if total else None


def _collect(frame: DataFrame) -> pa.Table:
    """Collect a small DataFrame as Arrow: ``toArrow`` on Spark ≥ 4, else Arrow-backed pandas."""
    to_arrow = getattr(frame, "toArrow", None)
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    spark = frame.sparkSession
    key = "spark.sql.execution.arrow.pyspark.enabled"
    with _CONF_LOCK:
        previous = spark.conf.get(key, None)
        spark.conf.set(key, "true")
        try:
            pdf = frame.toPandas()
        finally:
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
    return pa.Table.from_pandas(pdf, preserve_index=False)
