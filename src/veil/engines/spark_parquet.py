"""Parquet paths on Spark, read totally: each file held to the table's layout, dates and
timestamps never rebased through a check, wide DECIMALs read where every stored value fits.

Whether a query fails is released to the analyst (DESIGN §1), so nothing one person's file
or row holds may make Spark's scan fail after the charge. Spark's Parquet reader can fail on:

* a file whose columns are stored otherwise than the schema it inferred (``Parquet column
  cannot be converted``), or a file that is not Parquet at all: a Parquet path's files are
  listed (metadata only) and each footer read before Spark is given any, and held to the
  table's *layout* (:attr:`veil.engines.footers.Footer.layout`) exactly as DuckDB holds a
  glob's files (:mod:`veil.engines.sources`): the owner's, recorded in the catalog, or —
  without one — the layout every file shares at registration (files that differ are then
  refused there, naming them: the one registering is the owner). A file whose layout
  differs is skipped and named on the operator's log (``veil.sources``);
* a date before 1582 or a timestamp before 1900 in a file Spark did not write, under the
  rebase mode ``EXCEPTION`` (Spark 3's default, and any session that sets it): every read is
  made with the rebase modes ``CORRECTED`` (:data:`READ_OPTIONS`, and the session settings
  :data:`READ_CONF` for the duration of each query) — values are read as stored, INT96 days
  beyond the range wrap, nothing is checked;
* a DECIMAL of more than 18 digits holding a value beyond its precision (the vectorized
  reader checks each one it reads; the row-based reader checks every DECIMAL, so the
  vectorized one is switched on for each query): such a column stored in at most 15 bytes is
  read as a DECIMAL(38, s), which holds every value those bytes can, and then clamped into
  its own type's range like every other top-level DECIMAL
  (:func:`veil.engines.duckdb_files.decimal_guard`); one stored in more bytes, as
  variable-length bytes or inside a nested value cannot be, and a query reading it is
  refused from the footer, before anything is charged (``Footer.spark``).

Strings that are not UTF-8 are read as Spark reads them (their bytes compared as they are;
the result's keys are decoded with replacement, :mod:`veil.release.exact`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from veil.engines.duckdb_files import decimal_guard
from veil.engines.footers import Footer, read_footer
from veil.engines.sources import logger as sources_logger
from veil.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "READ_CONF",
    "READ_OPTIONS",
    "ParquetRead",
    "read_parquet",
    "spark_reasons",
    "unchecked_reasons",
]

READ_OPTIONS = {"int96RebaseMode": "CORRECTED", "datetimeRebaseMode": "CORRECTED"}
"""The options of every Parquet read veil makes: dates and timestamps read as stored."""

READ_CONF = {
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.enableVectorizedReader": "true",
    "spark.sql.parquet.enableNestedColumnVectorizedReader": "true",
}
"""The session settings each query runs under (restored after): also for a DataFrame or a
catalog table read by its owner, whose own options veil does not see."""


@dataclass(frozen=True)
class ParquetRead:
    """A Parquet path as Spark reads it: the DataFrame, the files it reads (as Spark lists
    them), the footer they share (None when no footer could be read here: a file system
    pyarrow cannot open), and the layout they were held to."""

    frame: DataFrame
    files: tuple[str, ...]
    footer: Footer | None
    layout: str | None
    listed: tuple[str, ...] = field(default=())


def _analysis(spark: SparkSession) -> Any:
    return importlib.import_module("pyspark.errors").AnalysisException


def read_parquet(
    spark: SparkSession,
    name: str,
    path: str,
    layout: str | None,
    handle: Callable[[str], object],
) -> ParquetRead:
    """``path`` (a Parquet file, directory or glob) read as table ``name``: its files
    listed, their footers read (``handle`` turns a listed file into what
    :func:`veil.engines.footers.read_footer` opens), those whose layout is not ``layout``
    skipped (without ``layout``: any that differs refused with a ``SchemaError`` naming the
    files), and the DECIMALs of the footer guarded (see the module docstring)."""
    analysis = _analysis(spark)
    try:  # lists the files (metadata); reads none
        listed = tuple(sorted(spark.read.format("text").load(path).inputFiles()))
    except analysis as exc:
        raise SchemaError(
            f"table {name!r}: Spark cannot list {path!r} ({exc}); pass an existing Parquet "
            "path, directory or glob"
        ) from None
    footers = {f: read_footer(handle(f)) for f in listed}
    # a local path or a (file system, path) pair; a URI itself: pyarrow cannot open it
    openable = [f for f in listed if isinstance(h := handle(f), tuple) or "://" not in str(h)]
    if listed and not openable:  # a file system pyarrow has no client for: read unchecked
        sources_logger.warning(
            "table %r: the Parquet footers of %r cannot be read here; its files are read "
            "without their layout checked",
            name,
            path,
        )
        frame = spark.read.options(**READ_OPTIONS).parquet(path)
        return ParquetRead(frame, listed, None, layout, listed)
    kept, layout = _kept(name, listed, footers, layout)
    if not kept:
        raise SchemaError(f"table {name!r}: no Parquet file at {path!r} has the table's columns")
    reader = spark.read.options(**READ_OPTIONS)
    sources = [path]
    if len(kept) != len(listed):
        sources = list(kept)
        if _is_directory(spark, path):  # its partition columns found as before
            reader = reader.option("basePath", path)
    footer = footers[kept[0]]
    try:
        frame = reader.parquet(*sources)
        if footer is not None and footer.spark_decimals:
            frame = _guarded(reader, sources, frame, footer.spark_decimals)
    except analysis as exc:
        raise SchemaError(f"table {name!r}: Spark cannot read {path!r} ({exc})") from None
    return ParquetRead(frame, tuple(kept), footer, layout, listed)


def _kept(
    name: str,
    files: Sequence[str],
    footers: Mapping[str, Footer | None],
    layout: str | None,
) -> tuple[list[str], str | None]:
    """The files whose footer's layout is ``layout`` (others logged), and the layout; without
    ``layout``, every file's must be the first's, or a ``SchemaError`` names them."""
    if layout is None:
        if not files:
            return [], None
        first = footers[files[0]]
        for other in files:
            found = footers[other]
            if first is None or found is None or found.layout != first.layout:
                culprit = files[0] if first is None else other
                raise SchemaError(
                    f"table {name!r}: {culprit!r} is not a Parquet file with the columns of "
                    f"{files[0]!r}; the files of one table must have the same columns, "
                    "stored alike"
                )
        return list(files), None if first is None else first.layout
    kept = [f for f in files if (found := footers[f]) is not None and found.layout == layout]
    skipped = [f for f in files if f not in kept]
    if skipped:
        sources_logger.warning(
            "table %r: skipped %d file(s) whose columns differ (their rows are not read): %s",
            name,
            len(skipped),
            ", ".join(skipped),
            extra={"veil_table": name, "veil_skipped": tuple(skipped)},
        )
    return kept, layout


def _is_directory(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` names a directory (on any Hadoop file system Spark's JVM reaches)."""
    local = path.removeprefix("file:").removeprefix("//")
    if os.path.isdir(local):
        return True
    jvm: Any = getattr(spark, "_jvm", None)
    if jvm is None or "://" not in path:
        return False
    try:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        jpath = jvm.org.apache.hadoop.fs.Path(path)
        return bool(jpath.getFileSystem(conf).getFileStatus(jpath).isDirectory())
    except Exception:  # py4j's errors: a glob, or a path that is not there
        return False


def _guarded(
    reader: Any,
    sources: Sequence[str],
    frame: DataFrame,
    decimals: Mapping[str, tuple[int, int]],
) -> DataFrame:
    """``frame`` with each DECIMAL of ``decimals`` clamped into its type's range, those of
    more than 18 digits read as DECIMAL(38, s) first (every value their bytes hold fits)."""
    types = importlib.import_module("pyspark.sql.types")
    wide = {c for c, (p, _) in decimals.items() if p > 18}
    if wide:
        fields = [
            types.StructField(f.name, types.DecimalType(38, decimals[f.name][1]), f.nullable)
            if f.name in wide
            else f
            for f in frame.schema.fields
        ]
        frame = reader.schema(types.StructType(fields)).parquet(*sources)
    items = []
    for column in frame.columns:
        ref = exp.column(exp.to_identifier(column, quoted=True))
        if column in decimals:
            precision, scale = decimals[column]
            guard: exp.Expr = decimal_guard(column, precision, scale)
            if column in wide:
                guard = exp.cast(guard, exp.DataType.build(f"DECIMAL({precision}, {scale})"))
            item: exp.Expr = exp.alias_(guard, exp.to_identifier(column, quoted=True))
        else:
            item = ref
        items.append(item.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE))
    return frame.selectExpr(*items)


def unchecked_reasons(frame: DataFrame) -> dict[str, str]:
    """Column (lower-cased) → why Spark cannot read it for every value, for a Parquet path
    whose footers cannot be read here: from the schema Spark read, every top-level DECIMAL
    of more than 18 digits."""
    types = importlib.import_module("pyspark.sql.types")
    return {
        f.name.lower(): _UNWIDENED
        for f in frame.schema.fields
        if isinstance(f.dataType, types.DecimalType) and f.dataType.precision > 18
    }


def spark_reasons(footers: Sequence[Footer | None], widened: bool) -> dict[str, str]:
    """Top-level column (lower-cased) → why Spark cannot read it for every value, from the
    ``footers`` of a table's files; without ``widened`` (a DataFrame or a catalog table,
    whose DECIMALs veil does not read itself), every DECIMAL of more than 18 digits too."""
    found: dict[str, str] = {}
    for footer in footers:
        if footer is None:
            continue
        for column, why in footer.spark.items():
            found.setdefault(column, why)
        if not widened:
            for column, (precision, _) in footer.spark_decimals.items():
                if precision > 18:
                    found.setdefault(column.lower(), _UNWIDENED)
    return found


_UNWIDENED = (
    "is a DECIMAL of more than 18 digits, which {engine}'s Parquet reader checks against its "
    "precision on every value (one value beyond it fails the query); register the table by "
    "its Parquet path (veil then reads it as DECIMAL(38, s)), or rewrite it as a DOUBLE"
)
