"""Parquet files read from their footers alone: each file's layout, the columns an engine cannot
scan for every value, and the DECIMAL columns whose range the engine must guard.

Whether a query fails is released to the analyst (DESIGN §1), so a reader that can fail on one
value — one person's row — must never run after the charge. A Parquet footer says, without a
data row, how each column is stored, and some storages fail in a reader on some values:

* a ``TIMESTAMP`` in milliseconds (pyarrow writes ``timestamp('s')`` that way too): Spark's and
  DuckDB's readers overflow converting a value beyond ±292,000 years to microseconds;
* ``INT96`` timestamps (Spark's, Hive's and Impala's legacy writers): DuckDB fails on a day or a
  time of day beyond its range;
* ``TIME``: DuckDB fails on a value outside one day;
* ``JSON``: DuckDB parses the text while reading and fails on one that is not JSON;
* a ``DECIMAL`` stored as variable-length bytes, in more bytes than DuckDB's integer of its
  precision holds, or inside a nested value (DuckDB's conversions fail on a value beyond the
  precision, e.g. −2^127 in a DECIMAL(38, s), and only a top-level column can be guarded);
* any other logical type DuckDB reads through a conversion (``INTERVAL``, ``BSON``, geometry,
  variants…): veil reads only the storages it knows to be total.

A query that reads such a column is refused before anything is charged, the same on every
neighbour (:func:`refuse_unreadable_reads`). A top-level DECIMAL column is read through a
range guard instead (a value beyond its precision reads as the nearest end of its range). A
string that is not UTF-8 (Spark, Hive and Java writers do not check) is not a storage
question: DuckDB reads it with ``utf8_validation='replace'`` (each invalid byte as ``?``).

Spark reads some of these storages and fails on others (:attr:`Footer.spark`): its vectorized
reader takes INT96 timestamps (with the rebase mode ``CORRECTED`` a day beyond its range wraps,
never fails), reads a JSON column as plain text, and keeps a DECIMAL of at most 18 digits as a
64-bit integer without checking its precision; but it checks a wider DECIMAL against its
precision on every value it reads. A top-level DECIMAL of 19 to 38 digits stored in at most 15
bytes (at most 35 digits, as writers store them) is read as a DECIMAL(38, s) — every value
such bytes hold fits — and then guarded into its own range (:attr:`Footer.spark_decimals`);
one stored in 16 bytes, as variable-length bytes or inside a nested value is refused.

A file's *layout* (:attr:`Footer.layout`) is the canonical text of its columns' names and
storages: the files of one table are read only when their layout is the table's (see
:mod:`veil.engines.sources`), so one person's file cannot change how the others are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from veil.errors import SchemaError

__all__ = [
    "Footer",
    "millisecond_columns",
    "read_footer",
    "refuse_millisecond_reads",
    "refuse_unreadable_reads",
]

# the keys of a logical type's JSON that describe its values (not how a writer set it)
_LOGICAL_KEYS = (
    "Type",
    "timeUnit",
    "isAdjustedToUTC",
    "precision",
    "scale",
    "bitWidth",
    "isSigned",
)
# logical types every engine reads as they are (a DECIMAL is decided on its own)
_TOTAL_LOGICAL = frozenset({"NONE", "STRING", "ENUM", "INT", "DATE", "UUID", "FLOAT16", "UNKNOWN"})
_DECIMAL_BYTES = ((4, 2), (9, 4), (18, 8), (38, 16))  # DuckDB's integer of each precision

_MILLIS = (
    "is stored as millisecond timestamps, which {engine}'s Parquet reader cannot convert for "
    "every value; rewrite the column as microseconds (e.g. pyarrow cast to timestamp('us'))"
)
_INT96 = (
    "is stored as INT96 timestamps, which {engine}'s Parquet reader cannot convert for every "
    "value (a day or a time of day beyond its range fails); rewrite the column as INT64 "
    "microseconds (pyarrow cast to timestamp('us'); Spark: "
    "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS)"
)
_TIME = (
    "is a Parquet TIME, which {engine}'s Parquet reader fails on for a value outside one day; "
    "rewrite the column as an integer (microseconds since midnight) or as text"
)
_JSON = (
    "is a Parquet JSON column, which {engine}'s Parquet reader parses while reading (failing "
    "on a value that is not JSON); rewrite it as a plain string column"
)
_DECIMAL = (
    "is a DECIMAL stored {how}, which {engine}'s Parquet reader cannot convert for every "
    "value; rewrite it as a top-level DECIMAL of at most 38 digits (pyarrow's decimal128 "
    "writes one)"
)
_SPARK_DECIMAL = (
    "is a DECIMAL of more than 18 digits stored {how}, which {engine}'s Parquet reader checks "
    "against its precision on every value (one value beyond it fails the query); rewrite it "
    "as a top-level DECIMAL of at most 35 digits, or as a DOUBLE"
)
_OTHER = (
    "is stored as a Parquet {what} column, which veil does not read on {engine} (its reader "
    "converts it and could fail on a value); rewrite it as a string or number column"
)


@dataclass(frozen=True)
class Footer:
    """What one Parquet file's footer says (no data row is read).

    ``layout``: the canonical text of its columns — each leaf's path, physical storage and
    logical type; ``unreadable``: top-level column (lower-cased) → why a reader cannot scan it
    for every value (a clause with an ``{engine}`` placeholder); ``decimals``: top-level
    DECIMAL columns, as written, → (precision, scale), read through a range guard;
    ``millis``: top-level columns stored as millisecond timestamps (lower-cased); ``spark``:
    top-level column (lower-cased) → why Spark's reader cannot scan it for every value;
    ``spark_decimals``: top-level DECIMAL columns, as written, → (precision, scale), which
    Spark reads through a range guard (those of more than 18 digits widened to 38 first)."""

    layout: str
    unreadable: Mapping[str, str] = field(default_factory=dict)
    decimals: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    millis: frozenset[str] = frozenset()
    spark: Mapping[str, str] = field(default_factory=dict)
    spark_decimals: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def read_footer(item: object) -> Footer | None:
    """The :class:`Footer` of ``item`` (a local path, or a ``(filesystem, path)`` pair); None
    when it is not a Parquet file pyarrow opens. Reads the footer only."""
    schema = _footer(item)
    if schema is None:
        return None
    leaves: list[list[Any]] = []
    unreadable: dict[str, str] = {}
    decimals: dict[str, tuple[int, int]] = {}
    millis: set[str] = set()
    spark: dict[str, str] = {}
    spark_decimals: dict[str, tuple[int, int]] = {}
    for i in range(len(schema)):
        column = schema.column(i)
        logical = json.loads(column.logical_type.to_json())
        kept = {k: logical[k] for k in _LOGICAL_KEYS if k in logical}
        physical = column.physical_type
        length = column.length if physical == "FIXED_LEN_BYTE_ARRAY" else 0
        leaves.append([column.path, physical, kept, length])
        top = column.path.split(".", 1)[0]
        why = _why(column, physical, str(kept.get("Type", "None")).upper(), length)
        if why == _MILLIS:
            millis.add(top.lower())
        if why is not None:
            unreadable.setdefault(top.lower(), why)
        elif physical != "INT96" and str(kept.get("Type", "")).upper() == "DECIMAL":
            decimals[top] = (int(column.precision), int(column.scale))
        on_spark = _spark_why(column, physical, why, length)
        if on_spark is not None:
            spark.setdefault(top.lower(), on_spark)
        elif str(kept.get("Type", "")).upper() == "DECIMAL" and "." not in column.path:
            spark_decimals[top] = (int(column.precision), int(column.scale))
    layout = json.dumps(leaves, separators=(",", ":"), sort_keys=True)
    return Footer(layout, unreadable, decimals, frozenset(millis), spark, spark_decimals)


def _spark_why(column: Any, physical: str, duckdb_why: str | None, length: int) -> str | None:
    """Why Spark's vectorized reader cannot scan ``column`` for every value (None: it can,
    a DECIMAL guarded), given why DuckDB's cannot (``duckdb_why``)."""
    if duckdb_why in (_INT96, _JSON):
        return None  # INT96 read with the rebase mode CORRECTED; JSON read as text
    logical = str(json.loads(column.logical_type.to_json()).get("Type", "None")).upper()
    if logical == "DECIMAL" or str(column.converted_type) == "DECIMAL":
        if column.precision <= 18:
            return None  # a 64-bit integer, never checked: guarded
        nested = "." in column.path
        if (
            nested
            or physical == "BYTE_ARRAY"
            or (physical == "FIXED_LEN_BYTE_ARRAY" and length > 15)
        ):
            how = "inside a nested value" if nested else f"as {physical}"
            if physical == "FIXED_LEN_BYTE_ARRAY" and not nested:
                how = f"in {length} bytes"
            return _SPARK_DECIMAL.replace("{how}", how)
        return None  # at most 15 bytes: read as DECIMAL(38, s), then guarded
    return duckdb_why


def _why(column: Any, physical: str, logical: str, length: int) -> str | None:
    """Why a reader cannot scan ``column`` for every value (None: it can, a DECIMAL guarded)."""
    converted = str(column.converted_type)
    unit = json.loads(column.logical_type.to_json()).get("timeUnit")
    if converted == "TIMESTAMP_MILLIS" or (logical == "TIMESTAMP" and unit == "milliseconds"):
        return _MILLIS
    if physical == "INT96":
        return _INT96
    if logical == "TIME" or converted in ("TIME_MILLIS", "TIME_MICROS"):
        return _TIME
    if logical == "JSON" or converted == "JSON":
        return _JSON
    if logical == "DECIMAL":
        nested = "." in column.path
        width = next((n for p, n in _DECIMAL_BYTES if column.precision <= p), 0)
        fits = physical in ("INT32", "INT64") or (
            physical == "FIXED_LEN_BYTE_ARRAY" and 0 < length <= width
        )
        if nested or not fits:
            how = "inside a nested value" if nested else f"as {physical}"
            if physical == "FIXED_LEN_BYTE_ARRAY" and not nested:
                how = f"in {length} bytes for {column.precision} digits"
            return _DECIMAL.replace("{how}", how)
        return None
    if logical == "TIMESTAMP":
        return None  # microseconds and nanoseconds: every 64-bit value reads
    if logical not in _TOTAL_LOGICAL or converted in ("INTERVAL", "BSON"):
        what = converted if logical == "NONE" else logical
        return _OTHER.replace("{what}", what)
    return None


def millisecond_columns(files: Iterable[object]) -> frozenset[str]:
    """Top-level column names (lower-cased) stored as millisecond timestamps in any of
    ``files`` (local paths, or ``(filesystem, path)`` pairs); a file that is not Parquet
    adds none. Reads each footer only."""
    found: set[str] = set()
    for item in files:
        footer = read_footer(item)
        if footer is not None:
            found |= footer.millis
    return frozenset(found)


def _footer(item: object) -> Any:
    """The Parquet schema in ``item``'s footer; None when it is not a Parquet file pyarrow
    opens (a CSV, an ORC file, a scheme pyarrow has no file system for)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if isinstance(item, tuple):
            fs, path = item
            with fs.open_input_file(path) as handle:
                return pq.ParquetFile(handle).schema
        return pq.ParquetFile(str(item)).schema
    except (OSError, pa.ArrowException):
        return None


def refuse_millisecond_reads(
    query: exp.Expression,
    columns: Mapping[str, frozenset[str]],
    engine: str,
    *,
    whole_table: bool = False,
) -> None:
    """:func:`refuse_unreadable_reads` for columns stored as millisecond timestamps
    (``columns``: lower-cased table → those columns)."""
    reasons = {t: dict.fromkeys(found, _MILLIS) for t, found in columns.items()}
    refuse_unreadable_reads(query, reasons, engine, whole_table=whole_table)


def refuse_unreadable_reads(
    query: exp.Expression,
    columns: Mapping[str, Mapping[str, str]],
    engine: str,
    *,
    whole_table: bool = False,
) -> None:
    """A ``SchemaError`` when ``query`` reads (names, or selects ``*`` of) a column of
    ``columns`` (lower-cased table → {column: why it cannot be scanned}) — with
    ``whole_table``, when it reads such a table at all (DuckDB fails on veil's queries even
    when they do not name the column). Decided from the tree and the footers alone."""
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    tables = {t.name.lower() for t in query.find_all(exp.Table)} - ctes
    reasons = {c: why for t in tables for c, why in columns.get(t, {}).items()}
    if not reasons:
        return
    named = {c.name.lower() for c in query.find_all(exp.Column) if c.name.lower() in reasons}
    if whole_table:
        named |= set(reasons)
    for select in query.find_all(exp.Select):  # ``*`` straight over such a table reads it all
        stars = any(
            isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
            for e in select.expressions
        )
        if not stars:
            continue
        sources = [select.args.get("from_"), *(select.args.get("joins") or [])]
        for source in sources:
            if isinstance(source, exp.Expression) and isinstance(source.this, exp.Table):
                table = source.this.name.lower()
                if table not in ctes:
                    named |= set(columns.get(table, {}))
    if named:
        by_reason: dict[str, list[str]] = {}
        for column in sorted(named):
            by_reason.setdefault(reasons[column], []).append(repr(column))
        raise SchemaError(
            "; ".join(
                f"column {', '.join(names)} {why.replace('{engine}', engine)}"
                for why, names in by_reason.items()
            )
        )
