"""Parquet columns an engine cannot read for every value, found from the files' footers.

A Parquet ``TIMESTAMP`` stored in milliseconds (pyarrow writes ``timestamp('s')`` that way
too) is converted to microseconds by Spark's and DuckDB's readers, and a value beyond about
±292,000 years overflows there: the query fails while reading, only when such a row exists —
one person's row decides whether it fails. Which columns are stored so is in the footer (the
declared logical type, no data row), so a query that reads one is refused before anything is
charged, the same on every neighbour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlglot import exp

from veil.errors import SchemaError


def millisecond_columns(files: Iterable[object]) -> frozenset[str]:
    """Top-level column names (lower-cased) stored as millisecond timestamps in any of
    ``files`` (local paths, or ``(filesystem, path)`` pairs); a file that is not Parquet
    adds none. Reads each footer only."""
    found: set[str] = set()
    for item in files:
        schema = _footer(item)
        if schema is None:
            continue
        for i in range(len(schema)):
            column = schema.column(i)
            logical = column.logical_type
            millis = column.converted_type == "TIMESTAMP_MILLIS" or (
                logical.type == "TIMESTAMP" and '"timeUnit":"milliseconds"' in logical.to_json()
            )
            if millis:
                found.add(column.path.split(".", 1)[0].lower())
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
    """A ``SchemaError`` when ``query`` reads (names, or selects ``*`` of) a column of
    ``columns`` (lower-cased table → its millisecond columns) — with ``whole_table``, when it
    reads such a table at all (DuckDB fails on veil's queries even when they do not name the
    column). Decided from the tree and the footers' declared types alone."""
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    tables = {t.name.lower() for t in query.find_all(exp.Table)} - ctes
    unreadable = {c for t in tables for c in columns.get(t, frozenset())}
    if not unreadable:
        return
    named = {c.name for c in query.find_all(exp.Column) if c.name.lower() in unreadable}
    if whole_table:
        named |= unreadable
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
                    named |= columns.get(table, frozenset())
    if named:
        which = ", ".join(repr(c) for c in sorted(named))
        raise SchemaError(
            f"column {which} is stored as millisecond timestamps, which {engine}'s Parquet "
            "reader cannot convert for every value; rewrite the column as microseconds (e.g. "
            "pyarrow cast to timestamp('us'))"
        )
