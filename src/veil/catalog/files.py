"""The local files a catalog source reads: their identity and, for a glob, their layout.

A dataset's name is its unit of accounting (DESIGN §4), so one file must never be registered
under two names: :func:`source_files` is the set of (device, inode) a source expands to now —
a hard link, a second spelling of the path or a glob that matches the file are the same file
— and :meth:`veil.catalog.Catalog.add_dataset` refuses a source whose set meets another
dataset's. A DuckDB database counts as its file and table; remote sources (PostgreSQL, a
Spark catalog table, a path on another file system) have no local files and are compared by
their names (``Source.identity``).

:func:`with_layout` fixes, when a glob is registered, the layout its files share (a CSV
header line, or the columns of a Parquet footer; :mod:`veil.engines.sources`): the engines
then skip any later file whose layout differs, so one person's file never decides how the
others are read. Both read metadata only: file names, (device, inode), a first line, a footer.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from veil.engines.lines import text_format
from veil.engines.sources import expand, file_identity, is_glob, keep
from veil.errors import InvalidArgumentError, SchemaError

if TYPE_CHECKING:
    from veil.catalog import Source

__all__ = ["local_files", "source_files", "with_layout"]

_PARQUET = (".parquet", ".pq")


def _names_files(table: str) -> bool:
    """Whether the DuckDB engine reads ``table`` (a DuckDB source's table) as files."""
    try:
        fmt = text_format(table)
    except SchemaError:
        return True  # a compressed text file: a file all the same
    return (
        fmt is not None
        or table.lower().endswith(_PARQUET)
        or is_glob(table)
        or (os.path.exists(table))
    )


def _spark_files(path: str) -> list[str]:
    """The local files Spark reads for ``path``: a glob's files, a directory's (hidden and
    ``_``-prefixed names left out, as Spark does), or the file; none for a remote path."""
    if path.startswith("file:"):
        path = path.removeprefix("file:").removeprefix("//")
    elif "://" in path:
        return []
    if os.path.isdir(path):
        found = []
        for root, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            found += [os.path.join(root, n) for n in names if not n.startswith(("_", "."))]
        return sorted(found)
    return expand(path)


def local_files(source: Source) -> list[str]:
    """The local data files ``source`` reads now (none for a remote source)."""
    if source.kind == "file" and source.path:
        return expand(source.path)
    if source.kind == "duckdb" and source.table and _names_files(source.table):
        return expand(source.table)
    if source.kind == "spark" and source.path and not source.table:
        return _spark_files(source.path)
    return []


def source_files(source: Source) -> frozenset[object]:
    """What ``source`` reads, as identities: the (device, inode) of each local file, and for
    a DuckDB database's table the database file's (device, inode) with the table's name."""
    found: set[object] = set(file_identity(local_files(source)))
    if source.kind == "duckdb" and source.path and source.table:
        for device, inode in file_identity([source.path]):
            found.add((device, inode, source.table.lower()))
    return frozenset(found)


def _pattern(source: Source) -> str | None:
    """The path or glob whose files are held to a layout (a glob, or a Spark directory)."""
    if source.kind == "file" and source.path and is_glob(source.path):
        return source.path
    if source.kind == "duckdb" and source.table and is_glob(source.table):
        return source.table
    if source.kind == "spark" and source.path and not source.table:
        path = source.path
        if is_glob(path) or os.path.isdir(path.removeprefix("file:").removeprefix("//")):
            return path
    return None


def with_layout(source: Source, previous: Source | None) -> Source:
    """``source`` with its layout: as given; else, for a glob (or a Spark directory) of local
    CSV or Parquet files, the one its files share now — or the one ``previous`` (the entry
    registered before under the same name) recorded for the same source, so that registering
    it again does not depend on the files there now. Files that differ are refused here,
    naming them (the one registering is the data owner)."""
    pattern = _pattern(source)
    if source.layout is not None or pattern is None:
        return source
    if (
        previous is not None
        and previous.layout is not None
        and (
            (previous.kind, previous.path, previous.table, previous.url)
            == (source.kind, source.path, source.table, source.url)
        )
    ):
        return replace(source, layout=previous.layout)
    try:
        fmt = text_format(pattern, any_compression=source.kind == "spark")
    except SchemaError:
        return source  # the engine refuses the format itself
    if fmt is not None and fmt.kind == "json":
        return source  # every line is its own object: no layout
    files = local_files(source)
    if fmt is None and source.kind == "spark" and not files:
        return source  # Parquet on a file system Spark reaches: held to its layout by the engine
    if not files:
        raise InvalidArgumentError(
            f"no file matches {pattern!r}: the layout of a glob's files (its CSV header or its "
            "Parquet columns) is fixed from them when the dataset is registered; add a file "
            "first, or give a CSV's header line as the source's layout"
        )
    try:
        kept = keep(pattern, files, fmt, None)
    except SchemaError as exc:
        fix = (
            "; or give the header line as the source's layout (the files that do not start "
            "with it are then skipped)"
            if fmt is not None
            else ""
        )
        raise SchemaError(f"{exc}{fix}") from None
    return replace(source, layout=kept.layout)
